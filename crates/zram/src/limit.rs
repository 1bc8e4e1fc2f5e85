//! A memory limit several devices share: on the pages their pools hold together (a daemon's
//! budget under a memory cgroup, which no one device's `mem_limit` can keep, since it sees
//! only its own pool).
//!
//! A device joins with [`Zram::share_limit`](crate::Zram::share_limit). Its store checks the
//! group after every allocation, as it checks `mem_limit`: a member whose pool grew past its
//! last report reports the new size, the group adds the change to the sum of the reports,
//! and an allocation whose check finds the sum past the limit is freed again and the write
//! fails with `Error::MemLimit` (`ENOSPC`). A member reports only when its pool grows past
//! its report, so after a member shrank (frees, compaction, a reset) the sum is too high;
//! before it refuses anything, the group reads every member's pool afresh (a *refresh*,
//! under the group's lock, only near the limit), so a stale report never refuses an
//! allocation that fits.
//!
//! What the pools hold once their writers are done is within the limit, as the kernel's
//! `mem_limit` keeps one pool, because every allocation is checked against a sum that
//! counts it:
//! - the sum rises before a report does, so a thread that finds its pool within its
//!   member's report finds the sum with it;
//! - an allocation never lowers a report: of two threads of one device, the one whose
//!   reading is older may report last;
//! - a refresh (under the group's lock) lowers a report only where no allocation raised it
//!   meanwhile;
//! - a check trusts the sum only when no refresh ran during it: a refresh may have read a
//!   pool before an allocation, counted it low and lowered its report, so that a sum read
//!   meanwhile misses a page. Such a check waits for the refresh and makes one of its own
//!   instead. The refreshes' count, odd while one runs, tells; a fence on each side makes
//!   sure that a refresh the check does not see begin reads the pool after the allocation.
//!
//! A device that joins holds what its pool holds, even past the limit; the group then
//! refuses the others' growth until the pools shrink. A refusal can also come from another
//! thread's raise that is itself refused a moment later, as two writers racing under the
//! kernel's `mem_limit` can refuse each other.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicI64, AtomicU64, fence};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use zsmalloc::{Backend, PAGE_SIZE};

/// Devices' pools held together to a number of pages.
#[derive(Debug)]
pub struct SharedLimit {
    limit_pages: i64,
    /// The sum of the members' reports, in pages: raised before a report rises, lowered
    /// after one falls, so never below theirs.
    reported: AtomicI64,
    /// Refreshes begun and ended: odd while one runs.
    refreshes: AtomicU64,
    members: Mutex<Vec<Arc<Member>>>,
}

/// A device in the group: its pool and the pages it last reported.
#[derive(Debug)]
struct Member {
    pool: Weak<dyn Backend>,
    reported: AtomicI64,
}

/// A device's place in a group; it leaves (and its pages leave the sum) when dropped.
#[derive(Debug)]
pub(crate) struct Membership {
    group: Arc<SharedLimit>,
    member: Arc<Member>,
}

impl SharedLimit {
    /// A group whose pools may hold `bytes` together (rounded up to whole pages; at least
    /// one page).
    pub fn new(bytes: u64) -> Arc<Self> {
        let pages = bytes.div_ceil(PAGE_SIZE as u64).max(1);
        Arc::new(Self {
            limit_pages: i64::try_from(pages).unwrap_or(i64::MAX),
            reported: AtomicI64::new(0),
            refreshes: AtomicU64::new(0),
            members: Mutex::new(Vec::new()),
        })
    }

    /// The limit in bytes.
    pub fn limit_bytes(&self) -> u64 {
        self.limit_pages
            .unsigned_abs()
            .saturating_mul(PAGE_SIZE as u64)
    }

    /// Pages the members' pools hold now.
    pub fn used_pages(&self) -> u64 {
        let members = self.members.lock();
        members.iter().map(|m| pages_of(&m.pool)).sum()
    }

    /// Devices in the group.
    pub fn members(&self) -> usize {
        self.members.lock().len()
    }

    pub(crate) fn join(self: &Arc<Self>, pool: &Arc<dyn Backend>) -> Membership {
        let member = Arc::new(Member {
            pool: Arc::downgrade(pool),
            reported: AtomicI64::new(0),
        });
        self.members.lock().push(Arc::clone(&member));
        let membership = Membership {
            group: Arc::clone(self),
            member,
        };
        // A device joins with what its pool holds already.
        membership.admits(pages_of(&membership.member.pool));
        membership
    }

    /// Moves `member`'s report from `before` to `now`, the sum first when it grows and
    /// last when it shrinks, so that the sum is never below the reports' for a thread that
    /// sees the new report. Returns the sum after the change, or `None` when the report
    /// was no longer `before` (nothing changed then).
    fn raise(&self, member: &Member, before: i64, now: i64) -> Option<i64> {
        let delta = now - before;
        if delta > 0 {
            let sum = self.reported.fetch_add(delta, SeqCst) + delta;
            if member
                .reported
                .compare_exchange(before, now, SeqCst, SeqCst)
                .is_ok()
            {
                return Some(sum);
            }
            self.reported.fetch_sub(delta, SeqCst);
            return None;
        }
        member
            .reported
            .compare_exchange(before, now, SeqCst, SeqCst)
            .ok()?;
        Some(self.reported.fetch_add(delta, SeqCst) + delta)
    }

    /// Reads every member's pool afresh into its report; returns the sum of what it
    /// counted. A report that an allocation raised meanwhile stays as raised: the pool was
    /// read perhaps before that allocation, and lowering the report would hide it. (Each
    /// report is read before its pool: a pool read after an allocation raised the report
    /// sees that allocation.)
    fn refresh(&self) -> i64 {
        let members = self.members.lock();
        self.refreshes.fetch_add(1, SeqCst);
        // Against the fence in `admits`: an allocation that did not see this refresh begin
        // is seen by the pool reads below.
        fence(SeqCst);
        let mut sum = 0i64;
        for m in members.iter() {
            let before = m.reported.load(SeqCst);
            let now = i64::try_from(pages_of(&m.pool)).unwrap_or(i64::MAX);
            let counted = match self.raise(m, before, now) {
                Some(_) => now,
                None => m.reported.load(SeqCst).max(now),
            };
            sum = sum.saturating_add(counted);
        }
        self.refreshes.fetch_add(1, SeqCst);
        sum
    }
}

impl Membership {
    /// Whether the group lets the member's pool hold `used` pages, read right after an
    /// allocation (when not, the caller frees it again): the rules are in the module's
    /// documentation.
    pub(crate) fn admits(&self, used: u64) -> bool {
        let group = &self.group;
        let used = i64::try_from(used).unwrap_or(i64::MAX);
        loop {
            // Against the fence in `refresh`: a refresh this check does not see begin reads
            // the pool after this allocation.
            fence(SeqCst);
            let begun = group.refreshes.load(SeqCst);
            let before = self.member.reported.load(SeqCst);
            let sum = if used > before {
                match group.raise(&self.member, before, used) {
                    Some(sum) => sum,
                    None => continue,
                }
            } else {
                // The report counts this allocation already.
                group.reported.load(SeqCst)
            };
            // A refresh that runs or ran meanwhile may have read a pool before an
            // allocation it then left uncounted: only the sum of a quiet moment decides.
            let quiet = begun.is_multiple_of(2) && group.refreshes.load(SeqCst) == begun;
            if quiet && sum <= group.limit_pages {
                return true;
            }
            break;
        }
        group.refresh() <= group.limit_pages
    }

    /// The group's limit in bytes when it refuses `used` pages ([`Membership::admits`]).
    pub(crate) fn refuses(&self, used: u64) -> Option<u64> {
        (!self.admits(used)).then(|| self.group.limit_bytes())
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        let mut members = self.group.members.lock();
        members.retain(|m| !Arc::ptr_eq(m, &self.member));
        let before = self.member.reported.swap(0, SeqCst);
        self.group.reported.fetch_sub(before, SeqCst);
    }
}

/// Pages `pool` holds (none once it is gone).
fn pages_of(pool: &Weak<dyn Backend>) -> u64 {
    pool.upgrade().map_or(0, |p| p.total_pages() as u64)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::mpsc;
    use std::time::Duration;

    use zsmalloc::{Allocator, Handle};

    use super::*;

    /// A pool that only counts pages. Reading the count can run a hook once, right after
    /// the read, as if another thread ran just then.
    #[derive(Default)]
    struct Counted {
        pages: AtomicUsize,
        hook: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    }

    impl std::fmt::Debug for Counted {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Counted({:?})", self.pages)
        }
    }

    impl Backend for Counted {
        fn total_pages(&self) -> usize {
            let pages = self.pages.load(SeqCst);
            let hook = self.hook.lock().take();
            if let Some(hook) = hook {
                hook();
            }
            pages
        }
        fn allocator(&self) -> Allocator {
            Allocator::Malloc
        }
        fn malloc(&self, _: usize) -> zsmalloc::Result<Handle> {
            unreachable!("the group only reads the count")
        }
        fn write(&self, _: Handle, _: &[u8]) -> zsmalloc::Result<()> {
            unreachable!()
        }
        fn read_with(&self, _: Handle, _: usize, _: &mut dyn FnMut(&[u8])) -> zsmalloc::Result<()> {
            unreachable!()
        }
        fn free(&self, _: Handle) -> zsmalloc::Result<()> {
            unreachable!()
        }
        fn compact(&self) -> usize {
            0
        }
        fn freeable_pages(&self) -> usize {
            0
        }
        fn huge_class_size(&self) -> usize {
            PAGE_SIZE
        }
        fn metadata_bytes(&self) -> usize {
            0
        }
        fn pages_compacted(&self) -> u64 {
            0
        }
        fn objects(&self) -> usize {
            0
        }
        fn footprint(&self, _: usize) -> zsmalloc::Result<usize> {
            unreachable!()
        }
        fn check_invariants(&self) -> std::result::Result<(), String> {
            Ok(())
        }
    }

    /// A member whose pool held `pages` at its last allocation and none now.
    fn stale(group: &Arc<SharedLimit>, pool: &Arc<Counted>, pages: usize) -> Membership {
        let shared: Arc<dyn Backend> = pool.clone();
        let member = group.join(&shared);
        pool.pages.store(pages, SeqCst);
        assert!(member.admits(pages as u64));
        pool.pages.store(0, SeqCst);
        member
    }

    /// A refresh reads the pools of c (which reported 50 pages and holds none), a (30 and
    /// none) and b (20): right after it read a's pool, a's writer makes a hold `added`
    /// pages and checks. The pools must then be held to the limit as if the refresh had
    /// read a's pool after the writer: b can add only what is left.
    fn refresh_meets_an_allocation(added: usize) {
        let group = SharedLimit::new(100 * PAGE_SIZE as u64);
        let [a, b, c] = <[Arc<Counted>; 3]>::default();
        let _mc = stale(&group, &c, 50);
        let ma = Arc::new(stale(&group, &a, 30));
        let shared_b: Arc<dyn Backend> = b.clone();
        let mb = group.join(&shared_b);
        b.pages.store(20, SeqCst);
        assert!(mb.admits(20));
        let (result_tx, result) = mpsc::channel();
        let (done_tx, done) = mpsc::channel();
        let writer: Arc<Mutex<Option<std::thread::JoinHandle<()>>>> = Arc::default();
        *a.hook.lock() = Some(Box::new({
            let (a, ma, writer) = (Arc::clone(&a), Arc::clone(&ma), Arc::clone(&writer));
            move || {
                *writer.lock() = Some(std::thread::spawn(move || {
                    a.pages.store(added, SeqCst);
                    result_tx.send(ma.admits(added as u64)).unwrap();
                    let _ = done_tx.send(());
                }));
                // Let it finish, unless it waits for this refresh to end.
                let _ = done.recv_timeout(Duration::from_millis(300));
            }
        }));
        b.pages.store(21, SeqCst);
        assert!(
            mb.admits(21),
            "the sum of the reports passed 100: a refresh admits 21"
        );
        assert!(result.recv().unwrap(), "{added} + 21 pages fit");
        writer.lock().take().unwrap().join().unwrap();
        // b grows as far as the group lets it.
        let mut held = 21;
        loop {
            b.pages.store(held + 1, SeqCst);
            if !mb.admits(held as u64 + 1) {
                b.pages.store(held, SeqCst);
                break;
            }
            held += 1;
        }
        let total = a.pages.load(SeqCst) + held;
        assert_eq!(total, 100, "a holds {added} pages, b {held}");
    }

    fn pool() -> Arc<dyn Backend> {
        zsmalloc::open(zsmalloc::PoolConfig::default()).unwrap()
    }

    /// Allocates objects of a page's worth in `pool` until it holds at least `pages`.
    fn grow(pool: &Arc<dyn Backend>, pages: usize) -> Vec<zsmalloc::Handle> {
        let mut handles = Vec::new();
        while pool.total_pages() < pages {
            handles.push(pool.malloc(PAGE_SIZE).unwrap());
        }
        handles
    }

    /// Runs `f` on a thread of its own and waits for it up to 300 ms (it may wait for the
    /// refresh the caller is in); the thread goes into `threads`.
    fn meanwhile(
        threads: &Mutex<Vec<std::thread::JoinHandle<()>>>,
        f: impl FnOnce() + Send + 'static,
    ) {
        let (done_tx, done) = mpsc::channel();
        threads.lock().push(std::thread::spawn(move || {
            f();
            let _ = done_tx.send(());
        }));
        let _ = done.recv_timeout(Duration::from_millis(300));
    }

    #[test]
    fn a_raise_during_a_refresh_is_counted() {
        let group = SharedLimit::new(100 * PAGE_SIZE as u64);
        let [k, i, c] = <[Arc<Counted>; 3]>::default();
        let join = |pool: &Arc<Counted>, pages: usize| {
            let shared: Arc<dyn Backend> = pool.clone();
            let member = Arc::new(group.join(&shared));
            pool.pages.store(pages, SeqCst);
            assert!(member.admits(pages as u64));
            member
        };
        // k holds 48 pages, i 50 (it reported 52), c none: the reports sum to 100.
        let mk = join(&k, 48);
        let mi = join(&i, 52);
        i.pages.store(50, SeqCst);
        let mc = join(&c, 0);
        let threads: Arc<Mutex<Vec<std::thread::JoinHandle<()>>>> = Arc::default();
        let admitted: Arc<Mutex<Vec<(char, bool)>>> = Arc::default();
        // The first refresh (c's) reads i's pool (50); then i's writer adds a page, within
        // its report, and must refresh after it. That second refresh reads k's pool (48),
        // then i's: then k's writer adds a page, past its report (48).
        // A writer that adds a page to `pool` and checks, taking the page back if refused.
        let writer = |name: char, pool: &Arc<Counted>, member: Arc<Membership>| {
            let (pool, admitted) = (Arc::clone(pool), Arc::clone(&admitted));
            move || {
                let pages = pool.pages.fetch_add(1, SeqCst) + 1;
                let ok = member.admits(pages as u64);
                if !ok {
                    pool.pages.fetch_sub(1, SeqCst);
                }
                admitted.lock().push((name, ok));
            }
        };
        let (write_i, write_k) = (writer('i', &i, mi), writer('k', &k, mk));
        *i.hook.lock() = Some(Box::new({
            let (i, threads) = (Arc::clone(&i), Arc::clone(&threads));
            move || {
                let second = {
                    let threads = Arc::clone(&threads);
                    move || meanwhile(&threads, write_k)
                };
                *i.hook.lock() = Some(Box::new(second));
                meanwhile(&threads, write_i);
            }
        }));
        c.pages.store(1, SeqCst);
        assert!(mc.admits(1), "48 + 50 + 1 pages fit");
        // The threads end (each refreshes at most once more).
        loop {
            let thread = threads.lock().pop();
            match thread {
                Some(t) => t.join().unwrap(),
                None => break,
            }
        }
        let total: usize = [&k, &i, &c].iter().map(|p| p.pages.load(SeqCst)).sum();
        assert!(
            total <= 100,
            "the pools hold {total} pages: {:?}",
            admitted.lock()
        );
        assert_eq!(admitted.lock().len(), 2);
    }

    #[test]
    fn an_allocation_within_its_report_while_a_refresh_reads_its_pool_is_counted() {
        // The writer's report (30) covers its page: it waits for the refresh to end.
        refresh_meets_an_allocation(1);
    }

    #[test]
    fn an_allocation_past_its_report_while_a_refresh_reads_its_pool_is_counted() {
        // The writer raises its report: the refresh must not lower it to what it read.
        refresh_meets_an_allocation(31);
    }

    #[test]
    fn the_sum_of_the_pools_is_held_to_the_limit() {
        let group = SharedLimit::new(100 * PAGE_SIZE as u64);
        let (a, b) = (pool(), pool());
        let ma = group.join(&a);
        let mb = group.join(&b);
        assert_eq!(group.members(), 2);
        let held = grow(&a, 60);
        assert!(ma.admits(a.total_pages() as u64));
        grow(&b, 40);
        assert!(mb.admits(b.total_pages() as u64), "100 pages fit");
        let over = grow(&b, 41);
        assert!(!mb.admits(b.total_pages() as u64), "101 do not");
        assert_eq!(group.used_pages(), 101);
        for h in over {
            b.free(h).unwrap();
        }
        // `a` shrinks without reporting: the stale sum does not refuse `b`.
        for h in held {
            a.free(h).unwrap();
        }
        assert_eq!(a.total_pages(), 0);
        grow(&b, 90);
        assert!(mb.admits(b.total_pages() as u64));
        // A pool that did not grow is let, whatever the sum.
        assert!(ma.admits(0));
        drop(mb);
        assert_eq!(group.members(), 1);
        assert_eq!(group.used_pages(), 0);
        assert_eq!(group.reported.load(Relaxed), 0, "the leaver's pages left");
    }

    #[test]
    fn a_device_joins_with_what_it_holds() {
        let group = SharedLimit::new(10 * PAGE_SIZE as u64);
        let a = pool();
        let _held = grow(&a, 12);
        let ma = group.join(&a);
        assert_eq!(group.reported.load(Relaxed), a.total_pages() as i64);
        let b = pool();
        let mb = group.join(&b);
        let _one = grow(&b, 1);
        assert!(!mb.admits(b.total_pages() as u64));
        drop(ma);
        let _more = grow(&b, b.total_pages() + 1);
        assert!(mb.admits(b.total_pages() as u64), "the leaver's pages left");
        assert_eq!(group.limit_bytes(), 10 * PAGE_SIZE as u64);
    }
}
