//! Class shards: the state of one shard of one size class (the kernel's `struct size_class`),
//! its fullness lists, and which shard a `malloc` uses.
//!
//! Representation. A [`ClassShard`] is a class's geometry and a lock over its
//! [`ShardInner`]: zspages by id (a free id holds `None` and is reused), one list of zspage
//! ids per fullness group (each zspage records its group and its position in that list, so
//! it moves between lists in O(1)), the shard's handle table, its shared objects' reference
//! counts and content index ([`Sharing`]), and counters. Everything of the shard is guarded
//! by that one lock.
//!
//! Invariants (checked by `Pool::check_invariants`): every live zspage is in exactly the
//! list of the group its in-use count calls for, at the position it records; no empty
//! zspage is kept; `zspage_count`, `capacity` and `pages` are the sums over live zspages.
//!
//! Beyond the kernel, each size class can be split into up to [`MAX_SHARDS_PER_CLASS`]
//! shards (all 16 by default), each with its own lock, zspages and handle table; an object
//! stays in its shard until a merge moves it to the home shard (its anchor, or its one
//! handle, names it; handles to a shared or merged object may live in other shards of its
//! class: `share.rs`, `merge.rs`). A class starts on its first shard; the first time a
//! `malloc` finds that shard's lock held by another thread (not for upkeep:
//! [`ShardLock::lock_for_upkeep`]), the class becomes *sharded* and from then on each
//! thread allocates in its own shard (threads are numbered in order of first use). Threads
//! contending for a class thus stop sharing a lock, a cache line or a zspage, which is what
//! lets the pool scale; with a shard per thread rather than per CPU, this holds also when
//! threads outnumber CPUs, where threads sharing a lock would wait, spinning and then
//! asleep, for a holder the scheduler preempted. A shard's state is made only when a thread
//! first changes it, so shards no thread uses cost 128 bytes each on x86-64 (a lock and the
//! class geometry); classes nobody contends for stay on one shard and pack exactly as the
//! kernel's. The cost, at most one partly used zspage per sharded class per extra shard,
//! lasts until the next compaction: `Pool::compact` (the device's `compact`, and its
//! automatic compaction once the pool stops growing or a writer ends) merges the others'
//! partly used zspages into the class's first shard, the *home* shard, and marks the class
//! unsharded again (`merge.rs`). A merged object leaves its entry behind as an alias of an
//! anchor in the home shard, so its handle still names the shard it was made in.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crossbeam_utils::CachePadded;

use crate::class::{ClassGeometry, ClassTable, NUM_CLASSES};
use crate::config::Locking;
use crate::handle::{AnchorRef, Flags, HandleTable, Location, MAX_CLASS_SHARDS, MAX_ZSPAGES, Slot};
use crate::sharing::Sharing;
use crate::sync::{AtomicBool, AtomicUsize, Mutex, MutexGuard};
use crate::sys::PageRun;
use crate::zspage::{GROUP_EMPTY, GROUP_FULL, NR_GROUPS, ZsPage, fullness_group};

/// Tries of a home shard's lock before a `malloc` shards its class (`lock_for_malloc`).
const TRIES: usize = 4;

/// Most shards per size class.
pub(crate) const MAX_SHARDS_PER_CLASS: usize = 16;
// Every class shard of a pool has a position a handle can name.
const _: () = assert!(NUM_CLASSES * MAX_SHARDS_PER_CLASS <= MAX_CLASS_SHARDS);

/// One shard of one size class.
#[derive(Debug)]
pub(crate) struct ClassShard {
    pub geom: ClassGeometry,
    /// The class-shard lock (with the pool lock before it, in pool locking).
    pub inner: ShardLock,
}

/// A class shard's lock: its own mutex and, with [`Locking::Pool`], the pool's one lock,
/// which every shard of the pool shares and which is taken first. Pool locking has one
/// shard per class, so no operation holds two class-shard locks (only merging does, of one
/// class's shards): the pool lock is the only one ever contended, the seed's consolidation.
///
/// A shard's state is made the first time a holder changes it; until then it holds no
/// memory beyond this lock and reads as empty: statistics, compaction and merging pass it.
#[derive(Debug)]
pub(crate) struct ShardLock {
    pool: Option<Arc<CachePadded<Mutex<()>>>>,
    shard: Mutex<Option<Box<ShardInner>>>,
    /// Set, under the lock, when the state is made; never cleared.
    made: AtomicBool,
    /// Upkeep (statistics, compaction, merging, folding) holding or about to take the lock.
    upkeep: AtomicUsize,
}

/// A held class-shard lock (and the pool lock, if it has one); gives access to what the
/// lock protects.
#[derive(Debug)]
pub(crate) struct ShardGuard<'a> {
    // Dropped in this order: the shard's own mutex first, then the pool's.
    shard: MutexGuard<'a, Option<Box<ShardInner>>>,
    /// The lock's `made` flag.
    made: &'a AtomicBool,
    _pool: Option<MutexGuard<'a, ()>>,
}

/// A shard lock held for upkeep ([`ShardLock::lock_for_upkeep`]). Fields drop in order:
/// the lock is let go first, then the upkeep count goes down.
#[derive(Debug)]
pub(crate) struct UpkeepGuard<'a> {
    guard: ShardGuard<'a>,
    _count: UpkeepCount<'a>,
}

/// One count of a shard lock's `upkeep`, from its making to its drop.
#[derive(Debug)]
struct UpkeepCount<'a>(&'a AtomicUsize);

impl Drop for UpkeepCount<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::ops::Deref for UpkeepGuard<'_> {
    type Target = ShardInner;

    fn deref(&self) -> &ShardInner {
        &self.guard
    }
}

impl std::ops::DerefMut for UpkeepGuard<'_> {
    fn deref_mut(&mut self) -> &mut ShardInner {
        &mut self.guard
    }
}

impl ShardLock {
    fn new(pool: Option<Arc<CachePadded<Mutex<()>>>>) -> Self {
        Self {
            pool,
            shard: Mutex::new(None),
            made: AtomicBool::new(false),
            upkeep: AtomicUsize::new(0),
        }
    }

    /// Takes the lock for upkeep (statistics, compaction, merging, folding): a `malloc`
    /// that finds it so held waits for it rather than shard the class, so that the
    /// automatic compaction's looks do not split a class one thread stores in.
    pub fn lock_for_upkeep(&self) -> UpkeepGuard<'_> {
        // Counted before the lock is taken and after it is let go, so that a `malloc` that
        // finds it held for upkeep sees the count.
        self.upkeep.fetch_add(1, Ordering::Relaxed);
        let count = UpkeepCount(&self.upkeep);
        UpkeepGuard {
            guard: self.lock(),
            _count: count,
        }
    }

    /// Is the lock held (or about to be taken) for upkeep? A hint.
    #[inline]
    fn in_upkeep(&self) -> bool {
        self.upkeep.load(Ordering::Relaxed) > 0
    }

    /// Has a holder changed this shard yet (so that its state holds memory)? A hint.
    #[inline]
    pub fn is_made(&self) -> bool {
        self.made.load(Ordering::Relaxed)
    }

    /// Takes the lock (the pool lock first, if there is one).
    #[inline]
    pub fn lock(&self) -> ShardGuard<'_> {
        // Spin a while before sleeping: holds are short (compaction and merging let go
        // every few microseconds), while a sleeping waiter's wake-up takes 50–150 µs on an
        // idle virtual CPU (the uswap fault bench: reads waiting on a shard lock were
        // 1–2% of faults at 100–250 µs; with the spin, 0.2% at ~60 µs).
        if let Some(guard) = crate::sync::spin(|| self.try_lock()) {
            return guard;
        }
        let pool = self.pool.as_ref().map(|p| p.lock());
        ShardGuard {
            shard: self.shard.lock(),
            made: &self.made,
            _pool: pool,
        }
    }

    /// Takes the lock if nobody holds it (nor the pool lock, if there is one).
    #[inline]
    pub fn try_lock(&self) -> Option<ShardGuard<'_>> {
        let pool = match &self.pool {
            Some(p) => Some(p.try_lock()?),
            None => None,
        };
        Some(ShardGuard {
            shard: self.shard.try_lock()?,
            made: &self.made,
            _pool: pool,
        })
    }
}

impl std::ops::Deref for ShardGuard<'_> {
    type Target = ShardInner;

    #[inline]
    fn deref(&self) -> &ShardInner {
        match self.shard.as_deref() {
            Some(made) => made,
            None => unmade(),
        }
    }
}

impl std::ops::DerefMut for ShardGuard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut ShardInner {
        let made = self.made;
        self.shard.get_or_insert_with(|| {
            made.store(true, Ordering::Relaxed);
            Box::new(ShardInner::new())
        })
    }
}

/// What a shard whose state is not made yet reads as: no zspages, no handles.
#[cold]
fn unmade() -> &'static ShardInner {
    static UNMADE: std::sync::LazyLock<ShardInner> = std::sync::LazyLock::new(ShardInner::new);
    &UNMADE
}

/// What the class-shard lock protects.
#[derive(Debug)]
pub(crate) struct ShardInner {
    /// Zspages by id; `None` marks a free id.
    pub zspages: Vec<Option<ZsPage>>,
    pub free_ids: Vec<u32>,
    /// Fullness lists of zspage ids (the newest at the end).
    pub groups: [Vec<u32>; NR_GROUPS],
    pub handles: HandleTable,
    /// Anchors' reference counts and the content index.
    pub sharing: Sharing,
    pub zspage_count: usize,
    /// Objects all the zspages hold, and their pages (short zspages hold fewer).
    pub capacity: usize,
    pub pages: usize,
}

impl ShardInner {
    fn new() -> Self {
        Self {
            zspages: Vec::new(),
            free_ids: Vec::new(),
            groups: Default::default(),
            handles: HandleTable::new(),
            sharing: Sharing::default(),
            zspage_count: 0,
            capacity: 0,
            pages: 0,
        }
    }

    #[inline]
    pub fn meta(&self, id: u32) -> &ZsPage {
        self.zspages[id as usize]
            .as_ref()
            .unwrap_or_else(|| unreachable!("live location names a free zspage id {id}"))
    }

    #[inline]
    pub fn meta_mut(&mut self, id: u32) -> &mut ZsPage {
        self.zspages[id as usize]
            .as_mut()
            .unwrap_or_else(|| unreachable!("live location names a free zspage id {id}"))
    }

    fn list_insert(&mut self, id: u32, group: u8) {
        let list = &mut self.groups[group as usize];
        let pos = list.len() as u32;
        list.push(id);
        let meta = self.meta_mut(id);
        meta.group = group;
        meta.list_pos = pos;
    }

    fn list_remove(&mut self, id: u32) {
        let (group, pos) = {
            let m = self.meta(id);
            (m.group as usize, m.list_pos as usize)
        };
        let list = &mut self.groups[group];
        list.swap_remove(pos);
        if let Some(&moved) = list.get(pos) {
            self.meta_mut(moved).list_pos = pos as u32;
        }
    }

    /// Moves a zspage to the group its in-use count calls for (`fix_fullness_group`).
    pub fn fix_group(&mut self, id: u32) {
        let m = self.meta(id);
        let group = fullness_group(m.inuse as usize, m.objs as usize);
        if group != m.group {
            self.list_remove(id);
            self.list_insert(id, group);
        }
    }

    /// Files a new (empty) zspage; returns its id.
    pub fn add_zspage(&mut self, meta: ZsPage) -> u32 {
        self.zspage_count += 1;
        self.capacity += meta.objs as usize;
        self.pages += meta.run.pages();
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.zspages[id as usize] = Some(meta);
                id
            }
            None => {
                // Every kept zspage holds an object, so there are fewer than entries.
                assert!(self.zspages.len() < MAX_ZSPAGES, "zspage ids exhausted");
                self.zspages.push(Some(meta));
                (self.zspages.len() - 1) as u32
            }
        };
        self.list_insert(id, GROUP_EMPTY);
        id
    }

    /// Unlinks an empty zspage; the caller drops the returned pages (after unlocking).
    pub fn remove_zspage(&mut self, id: u32) -> PageRun {
        self.list_remove(id);
        self.zspage_count -= 1;
        self.free_ids.push(id);
        match self.zspages[id as usize].take() {
            Some(meta) => {
                self.capacity -= meta.objs as usize;
                self.pages -= meta.run.pages();
                meta.run
            }
            None => unreachable!("removing free zspage id {id}"),
        }
    }

    /// The fullest zspage with room (groups <100% … empty), excluding `except`.
    #[inline]
    pub fn fullest_with_room(&self, except: Option<u32>) -> Option<u32> {
        (GROUP_EMPTY..GROUP_FULL)
            .rev()
            .find_map(|g| self.pick(g, except))
    }

    /// The emptiest non-empty, non-full zspage, excluding `except`.
    #[inline]
    pub fn emptiest(&self, except: Option<u32>) -> Option<u32> {
        (GROUP_EMPTY + 1..GROUP_FULL).find_map(|g| self.pick(g, except))
    }

    #[inline]
    fn pick(&self, group: u8, except: Option<u32>) -> Option<u32> {
        self.groups[group as usize]
            .iter()
            .rev()
            .copied()
            .find(|&id| Some(id) != except)
    }

    /// Objects in use (located entries: an object several handles name counts once).
    #[inline]
    pub fn obj_used(&self) -> usize {
        self.handles.located()
    }

    /// Where the object a caller's handle (`entry`, `generation`, of this shard, at position
    /// `pos`) names is, as far as this shard knows: `None` when the handle is stale, or
    /// names an anchor (never handed out, so forged).
    #[inline]
    pub fn resolve(&self, pos: usize, entry: u32, generation: u64) -> Option<Resolved> {
        match self.handles.get(entry, generation)? {
            Slot::Located(_, flags) if flags.has(Flags::ANCHOR) => None,
            Slot::Located(loc, flags) => Some(Resolved::Direct(loc, flags)),
            Slot::Alias(anchor) if anchor.shard == pos => Some(Resolved::Alias {
                anchor: anchor.entry,
                loc: self.handles.location(anchor.entry),
            }),
            Slot::Alias(anchor) => Some(Resolved::Remote(anchor)),
        }
    }

    /// Where the object of the anchor `entry` of this shard is, which an alias in another
    /// shard names: `None` if the entry is not a live anchor. That cannot happen while the
    /// alias lives (its reference keeps the anchor), but the alias's lock was let go before
    /// this one was taken, so a caller freeing the handle meanwhile is found out here
    /// rather than trusted.
    #[inline]
    pub fn anchor_location(&self, entry: u32) -> Option<Location> {
        match self.handles.live_slot(entry)? {
            // An entry is an anchor exactly when it has a count (`check_invariants`).
            Slot::Located(loc, flags) if flags.has(Flags::ANCHOR) => Some(loc),
            _ => None,
        }
    }

    /// The capacity bytes of the object at `loc` (after its header, if any).
    #[inline]
    pub fn object(&self, geom: &ClassGeometry, loc: Location) -> &[u8] {
        let off = loc.obj as usize * geom.size + geom.header;
        &self.meta(loc.zspage).run.bytes()[off..off + geom.capacity()]
    }

    /// Stores `data` at the start of the object at `loc` and zero-fills the rest of its
    /// capacity, so equal capacities mean equal reads (what folding and dedup compare).
    #[inline]
    pub fn store_object(&mut self, geom: &ClassGeometry, loc: Location, data: &[u8]) {
        let off = loc.obj as usize * geom.size + geom.header;
        let object = &mut self.meta_mut(loc.zspage).run.bytes_mut()[off..off + geom.capacity()];
        object[..data.len()].copy_from_slice(data);
        object[data.len()..].fill(0);
    }

    /// Gives the object slot at `loc` back to its zspage (whose entry is already gone); a
    /// zspage left empty is unlinked and its pages returned, for the caller to release after
    /// unlocking (`obj_free` and the empty half of `free_zspage`).
    pub fn release_object(&mut self, geom: &ClassGeometry, loc: Location) -> Option<PageRun> {
        let meta = self.meta_mut(loc.zspage);
        if meta.inuse == 1 {
            meta.inuse = 0;
            Some(self.remove_zspage(loc.zspage))
        } else {
            meta.put_free(geom.size, geom.is_huge(), loc.obj);
            self.fix_group(loc.zspage);
            None
        }
    }
}

/// Where a caller's handle leads, as far as its own shard knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// An object only this handle names: its place and flags.
    Direct(Location, Flags),
    /// A shared object whose anchor is in the same shard: its anchor entry and its place.
    Alias { anchor: u32, loc: Location },
    /// A shared object whose anchor is in another shard of the class.
    Remote(AnchorRef),
}

/// The object a caller's handle names, found in the shard that locates it (the handle's
/// own, or its anchor's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// An object only this handle names: the handle's entry and the object's place.
    Direct { entry: u32, loc: Location },
    /// A shared object: its anchor entry and its place.
    Anchor { entry: u32, loc: Location },
}

impl Target {
    /// The object's place.
    #[inline]
    pub fn location(self) -> Location {
        match self {
            Target::Direct { loc, .. } | Target::Anchor { loc, .. } => loc,
        }
    }
}

/// Every class shard of a pool: `per_class` consecutive shards per distinct class, in
/// ascending class order. A shard's position here is what handles name.
#[derive(Debug)]
pub(crate) struct Shards {
    all: Vec<CachePadded<ClassShard>>,
    per_class: usize,
    /// Per distinct class: have threads contended for it (so `malloc` spreads over shards)?
    sharded: Vec<AtomicBool>,
}

impl Shards {
    /// The shards of every class of `table` for `locking`: `per_class` shards
    /// (1..=[`MAX_SHARDS_PER_CLASS`]) per class when sharded, one otherwise; with
    /// [`Locking::Pool`], every shard's lock takes the one pool lock first.
    pub fn new(table: &ClassTable, locking: Locking, per_class: usize) -> Self {
        debug_assert!((1..=MAX_SHARDS_PER_CLASS).contains(&per_class));
        let per_class = match locking {
            Locking::Sharded => per_class,
            Locking::Class | Locking::Pool => 1,
        };
        let pool_lock =
            (locking == Locking::Pool).then(|| Arc::new(CachePadded::new(Mutex::new(()))));
        let all = table
            .classes()
            .iter()
            .flat_map(|&geom| std::iter::repeat_n(geom, per_class))
            .map(|geom| {
                CachePadded::new(ClassShard {
                    geom,
                    inner: ShardLock::new(pool_lock.clone()),
                })
            })
            .collect();
        let sharded = (0..table.classes().len())
            .map(|_| AtomicBool::new(false))
            .collect();
        Self {
            all,
            per_class,
            sharded,
        }
    }

    /// The shard at a position, if there is one (a handle's position may be forged).
    #[inline]
    pub fn get(&self, pos: usize) -> Option<&ClassShard> {
        self.all.get(pos).map(|s| &**s)
    }

    /// Every shard, in position order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &ClassShard> {
        self.all.iter().map(|s| &**s)
    }

    /// Every shard whose state has been made (see [`ShardLock`]), in position order: the
    /// others hold nothing to count, and are passed by without taking their locks.
    pub fn iter_made(&self) -> impl Iterator<Item = &ClassShard> {
        self.iter().filter(|s| s.inner.is_made())
    }

    /// The shards of each distinct class, in ascending class order.
    pub fn by_class(&self) -> impl Iterator<Item = &[CachePadded<ClassShard>]> {
        self.all.chunks(self.per_class)
    }

    /// The shards at the positions `range`.
    #[inline]
    pub fn slice(&self, range: std::ops::Range<usize>) -> &[CachePadded<ClassShard>] {
        &self.all[range]
    }

    /// The positions of the shards of class `class_pos` (its position in the class table).
    #[inline]
    pub fn class_range(&self, class_pos: usize) -> std::ops::Range<usize> {
        class_pos * self.per_class..(class_pos + 1) * self.per_class
    }

    /// The position in the class table of the class of the shard at `pos`.
    #[inline]
    pub fn class_of(&self, pos: usize) -> usize {
        pos / self.per_class
    }

    /// Has any shard of class `class_pos` but the first been used? (Until then the others
    /// are empty.) A hint, read without ordering.
    #[inline]
    pub fn is_sharded(&self, class_pos: usize) -> bool {
        self.per_class > 1 && self.sharded[class_pos].load(Ordering::Relaxed)
    }

    /// Marks class `class_pos` unsharded again (after a merge: `merge.rs`), so `malloc`
    /// uses its first shard until threads contend for it anew.
    pub fn unshard(&self, class_pos: usize) {
        self.sharded[class_pos].store(false, Ordering::Relaxed);
    }

    /// Picks and locks the shard a `malloc` in class `class_pos` uses: the first shard until
    /// another thread is found holding its lock (not for upkeep), then the calling thread's
    /// own shard. So a class that only one thread at a time uses keeps to one shard and
    /// packs exactly as the kernel's, and only classes that threads really contend for pay
    /// for extra shards.
    /// Returns the shard's position, the shard and its lock.
    #[inline]
    pub fn lock_for_malloc(&self, class_pos: usize) -> (usize, &ClassShard, ShardGuard<'_>) {
        let first = class_pos * self.per_class;
        if self.per_class > 1
            && let Some(pinned) = crate::thread::pinned()
        {
            // Tests: as if the class were sharded, on the pinned shard.
            self.sharded[class_pos].store(true, Ordering::Relaxed);
            let pos = first + crate::thread::own_shard(pinned % self.per_class);
            return (pos, &self.all[pos], self.all[pos].inner.lock());
        }
        if self.per_class > 1 && !self.sharded[class_pos].load(Ordering::Relaxed) {
            let home = &self.all[first];
            // Upkeep is counted from before it takes the lock to after it lets go: a failed
            // try with none counted is a thread storing, or upkeep just gone (tried again).
            for _ in 0..TRIES {
                if let Some(guard) = home.inner.try_lock() {
                    return (first, home, guard);
                }
                if home.inner.in_upkeep() {
                    return (first, home, home.inner.lock());
                }
            }
            self.sharded[class_pos].store(true, Ordering::Relaxed);
        }
        let pos = first + crate::thread::own_shard(crate::thread::thread_number() % self.per_class);
        let shard = &self.all[pos];
        (pos, shard, shard.inner.lock())
    }

    /// Bytes of the shard structures themselves (not their states, made or not).
    pub fn struct_bytes(&self) -> usize {
        self.all.len() * std::mem::size_of::<CachePadded<ClassShard>>()
    }

    /// Shards whose state has been made (see [`ShardLock`]).
    pub fn made(&self) -> usize {
        self.iter_made().count()
    }
}
