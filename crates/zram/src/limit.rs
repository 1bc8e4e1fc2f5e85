//! A memory limit several devices share: on the pages their pools hold together (a daemon's
//! budget under a memory cgroup, which no one device's `mem_limit` can keep, since it sees
//! only its own pool).
//!
//! A device joins with [`Zram::share_limit`](crate::Zram::share_limit). Its store checks the
//! group after every allocation, as it checks `mem_limit`: the member reports its pool's
//! pages, the group adds the change to the sum of the reports, and an allocation that takes
//! the sum past the limit is freed again and the write fails with `Error::MemLimit`
//! (`ENOSPC`). A member reports only when it allocates, so after another member shrank
//! (frees, compaction, a reset) the sum is too high; before it refuses anything, the group
//! reads every member's pool afresh, so a stale report never refuses an allocation that
//! fits. That read, under the group's lock, happens only near the limit. Every allocation
//! is checked against the sum, also one that a refresh counted before its own report, so
//! that what the pools hold once their writers are done is within the limit, as the
//! kernel's `mem_limit` keeps one pool.

use std::sync::atomic::AtomicI64;
use std::sync::atomic::Ordering::{AcqRel, Acquire};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use zsmalloc::{Backend, PAGE_SIZE};

/// Devices' pools held together to a number of pages.
#[derive(Debug)]
pub struct SharedLimit {
    limit_pages: i64,
    /// The sum of the members' reports, in pages (a change is added after its report, so
    /// it may be off by the changes on their way, and below zero for a moment).
    reported: AtomicI64,
    members: Mutex<Vec<Arc<Member>>>,
}

/// A device in the group: its pool and the pages it last reported.
struct Member {
    pool: Weak<dyn Backend>,
    reported: AtomicI64,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("reported", &self.reported)
            .finish_non_exhaustive()
    }
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
            members: Mutex::new(Vec::new()),
        })
    }

    /// The limit in bytes.
    pub fn limit_bytes(&self) -> u64 {
        self.limit_pages.unsigned_abs() * PAGE_SIZE as u64
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
            let sum = self.reported.fetch_add(delta, AcqRel) + delta;
            if member
                .reported
                .compare_exchange(before, now, AcqRel, Acquire)
                .is_ok()
            {
                return Some(sum);
            }
            self.reported.fetch_sub(delta, AcqRel);
            return None;
        }
        member
            .reported
            .compare_exchange(before, now, AcqRel, Acquire)
            .ok()?;
        Some(self.reported.fetch_add(delta, AcqRel) + delta)
    }

    /// Reads every member's pool afresh into its report; returns the sum of what it read.
    /// A report that an allocation raised meanwhile stays as raised: the pool was read
    /// perhaps before that allocation, and lowering the report would hide it.
    fn refresh(&self) -> i64 {
        let members = self.members.lock();
        let mut sum = 0i64;
        for m in members.iter() {
            let before = m.reported.load(Acquire);
            let now = i64::try_from(pages_of(&m.pool)).unwrap_or(i64::MAX);
            let counted = match self.raise(m, before, now) {
                Some(_) => now,
                None => m.reported.load(Acquire).max(now),
            };
            sum = sum.saturating_add(counted);
        }
        sum
    }
}

impl Membership {
    /// Whether the group lets the member's pool hold `used` pages, read right after an
    /// allocation (when not, the caller frees it again).
    ///
    /// A report only grows here: of two threads of one device, the one whose reading is
    /// older may report last, and must not lower it (only a refresh, which reads the pool
    /// itself, does). A report no smaller than `used` counted this allocation already,
    /// but the sum with it may be past the limit, so it is checked too. The sum grows
    /// before the report does: a thread that finds the report raised finds the sum raised
    /// with it (else a second object in a zspage that a refused first one brought could
    /// pass on the old sum, and stay once the first is freed).
    pub(crate) fn admits(&self, used: u64) -> bool {
        let used = i64::try_from(used).unwrap_or(i64::MAX);
        let sum = loop {
            let before = self.member.reported.load(Acquire);
            if used <= before {
                break self.group.reported.load(Acquire);
            }
            if let Some(sum) = self.group.raise(&self.member, before, used) {
                break sum;
            }
        };
        sum <= self.group.limit_pages || self.group.refresh() <= self.group.limit_pages
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
        let before = self.member.reported.swap(0, AcqRel);
        self.group.reported.fetch_sub(before, AcqRel);
    }
}

/// Pages `pool` holds (none once it is gone).
fn pages_of(pool: &Weak<dyn Backend>) -> u64 {
    pool.upgrade().map_or(0, |p| p.total_pages() as u64)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering::Relaxed;

    use super::*;

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
