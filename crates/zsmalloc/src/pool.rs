//! The pool: size classes of zspages, each class under its own lock.
//!
//! Lock order (never taken the other way round):
//!
//! 1. a class lock (`SizeClass::inner`) — protects everything of one class shard: its
//!    zspages (their memory and bookkeeping), fullness lists and handle table. At most one
//!    class lock is held at a time. Object copies (at most 4 KiB) happen under it;
//!    compaction takes it per source zspage and lets go in between.
//! 2. the page source lock (`sys::PageSource`) — a leaf, never held while taking another.
//!    Zspage pages are obtained and given back without the class lock held.
//!
//! Beyond the kernel, each size class can be split into `shards` (up to one per CPU, at
//! most 16), each with its own lock, zspages and handles; an object stays in its shard for
//! life (its handle names it). A class starts on its first shard; the first time a `malloc`
//! finds that shard's lock held by another thread, the class becomes *sharded* and from
//! then on each thread allocates in its own shard (threads are spread over shards in order
//! of first use). Threads contending for a class thus stop sharing a lock, a cache line or
//! a zspage, which is what lets the pool scale; classes nobody contends for stay on one
//! shard and pack exactly as the kernel's. The cost is at most one partly used zspage per
//! sharded class per extra shard.
//!
//! The kernel also has a per-zspage lock so that a mapped object can be read without the
//! class lock; here an object is only borrowed for the span of a closure
//! ([`Pool::with_object`]), under the class lock, which that closure therefore must not
//! re-enter (it would deadlock). Callers who decompress should copy out with
//! [`Pool::read`] when other threads use the same class heavily.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::sys::PageRun;

use crossbeam_utils::CachePadded;

use crate::class::{ClassGeometry, ClassTable, MAX_ALLOC_SIZE, MAX_CHAIN_SIZE, MIN_CHAIN_SIZE};
use crate::config::PoolConfig;
use crate::error::{Error, Result};
use crate::handle::{Handle, HandleTable, Location};

/// Most shards per size class.
const MAX_SHARDS: usize = 16;
use crate::stats::{ClassStats, PoolStats};
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Mutex, MutexGuard};
use crate::sys::PageSource;
use crate::zspage::{
    GROUP_EMPTY, GROUP_FULL, NR_GROUPS, ZsPage, fullness_group, header, set_header,
};

/// A zsmalloc pool.
#[derive(Debug)]
pub struct Pool {
    table: ClassTable,
    /// `shards` consecutive entries per distinct class, in ascending class order.
    classes: Vec<CachePadded<SizeClass>>,
    shards: usize,
    /// Per distinct class: have threads contended for it (so `malloc` spreads over shards)?
    sharded: Vec<AtomicBool>,
    source: Arc<PageSource>,
    pages_allocated: CachePadded<AtomicUsize>,
    pages_compacted: AtomicU64,
}

/// One shard of one size class.
#[derive(Debug)]
struct SizeClass {
    geom: ClassGeometry,
    inner: Mutex<ClassInner>,
}

#[derive(Debug)]
struct ClassInner {
    /// Zspages by id; `None` marks a free id.
    zspages: Vec<Option<ZsPage>>,
    free_ids: Vec<u32>,
    /// Fullness lists of zspage ids (the newest at the end).
    groups: [Vec<u32>; NR_GROUPS],
    handles: HandleTable,
    zspage_count: usize,
    /// Objects all the zspages hold, and their pages (short zspages hold fewer).
    capacity: usize,
    pages: usize,
    /// Bumped by every malloc and free: compaction keeps its object index across lock
    /// holds while nothing else changed the class.
    epoch: u64,
}

impl ClassInner {
    fn new() -> Self {
        Self {
            zspages: Vec::new(),
            free_ids: Vec::new(),
            groups: Default::default(),
            handles: HandleTable::new(),
            zspage_count: 0,
            capacity: 0,
            pages: 0,
            epoch: 0,
        }
    }

    fn meta(&self, id: u32) -> &ZsPage {
        self.zspages[id as usize]
            .as_ref()
            .unwrap_or_else(|| unreachable!("live location names a free zspage id {id}"))
    }

    fn meta_mut(&mut self, id: u32) -> &mut ZsPage {
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

    /// Moves a zspage to the group its in-use count calls for.
    fn fix_group(&mut self, id: u32) {
        let m = self.meta(id);
        let group = fullness_group(m.inuse as usize, m.objs as usize);
        if group != m.group {
            self.list_remove(id);
            self.list_insert(id, group);
        }
    }

    fn add_zspage(&mut self, meta: ZsPage) -> u32 {
        self.zspage_count += 1;
        self.capacity += meta.objs as usize;
        self.pages += meta.run.pages();
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.zspages[id as usize] = Some(meta);
                id
            }
            None => {
                self.zspages.push(Some(meta));
                (self.zspages.len() - 1) as u32
            }
        };
        self.list_insert(id, GROUP_EMPTY);
        id
    }

    /// Unlinks an empty zspage; the caller drops the returned pages (after unlocking).
    fn remove_zspage(&mut self, id: u32) -> PageRun {
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
    fn fullest_with_room(&self, except: Option<u32>) -> Option<u32> {
        (GROUP_EMPTY..GROUP_FULL)
            .rev()
            .find_map(|g| self.pick(g, except))
    }

    /// The emptiest non-empty, non-full zspage, excluding `except`.
    fn emptiest(&self, except: Option<u32>) -> Option<u32> {
        (GROUP_EMPTY + 1..GROUP_FULL).find_map(|g| self.pick(g, except))
    }

    fn pick(&self, group: u8, except: Option<u32>) -> Option<u32> {
        self.groups[group as usize]
            .iter()
            .rev()
            .copied()
            .find(|&id| Some(id) != except)
    }

    fn obj_used(&self) -> usize {
        self.handles.live()
    }
}

impl Pool {
    /// A pool whose zspages have at most `chain_size` pages (the kernel's default is 8).
    pub fn new(chain_size: usize) -> Result<Self> {
        Self::with_config(PoolConfig {
            chain_size,
            ..PoolConfig::default()
        })
    }

    /// A pool with explicit configuration.
    pub fn with_config(config: PoolConfig) -> Result<Self> {
        if !(MIN_CHAIN_SIZE..=MAX_CHAIN_SIZE).contains(&config.chain_size) {
            return Err(Error::InvalidChainSize(config.chain_size));
        }
        let table = ClassTable::with_layout(config.chain_size, config.geometry, config.header);
        let shards = match config.shards {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            n => n,
        }
        .clamp(1, MAX_SHARDS);
        let sharded = (0..table.classes().len())
            .map(|_| AtomicBool::new(false))
            .collect();
        let classes = table
            .classes()
            .iter()
            .flat_map(|&geom| std::iter::repeat_n(geom, shards))
            .map(|geom| {
                CachePadded::new(SizeClass {
                    geom,
                    inner: Mutex::new(ClassInner::new()),
                })
            })
            .collect();
        Ok(Self {
            table,
            classes,
            shards,
            sharded,
            source: PageSource::new(config.populate, config.page_cache_pages),
            pages_allocated: CachePadded::new(AtomicUsize::new(0)),
            pages_compacted: AtomicU64::new(0),
        })
    }

    /// The class table (geometry of every distinct class).
    pub fn classes(&self) -> &ClassTable {
        &self.table
    }

    /// The chain size the pool was built with.
    pub fn chain_size(&self) -> usize {
        self.table.chain_size()
    }

    /// Smallest size that `malloc` serves from the huge class (the kernel's
    /// `zs_huge_class_size`): zram stores pages that compress to this or more uncompressed.
    pub fn huge_class_size(&self) -> usize {
        self.table.huge_class_size()
    }

    /// The class an object of `size` bytes lands in (`zs_lookup_class_index`).
    pub fn lookup_class(&self, size: usize) -> Result<&ClassGeometry> {
        check_size(size)?;
        Ok(self.table.class_for(size))
    }

    /// Picks and locks the shard a `malloc` in class `class_pos` uses: the first shard until
    /// another thread is found holding its lock, then the calling thread's own shard. So a
    /// class that only one thread at a time uses keeps to one shard and packs exactly as the
    /// kernel's, and only classes that threads really contend for pay for extra shards.
    fn lock_for_malloc(&self, class_pos: usize) -> (usize, MutexGuard<'_, ClassInner>) {
        let first = class_pos * self.shards;
        if self.shards > 1 && !self.sharded[class_pos].load(Ordering::Relaxed) {
            if let Some(guard) = self.classes[first].inner.try_lock() {
                return (first, guard);
            }
            self.sharded[class_pos].store(true, Ordering::Relaxed);
        }
        let pos = first + crate::sys::thread_slot() % self.shards;
        (pos, self.classes[pos].inner.lock())
    }

    fn class_of(&self, handle: Handle) -> Result<(&SizeClass, usize, u64, u32)> {
        let (pos, generation, entry) = handle.decode().ok_or(Error::StaleHandle(handle))?;
        let class = self.classes.get(pos).ok_or(Error::StaleHandle(handle))?;
        Ok((class, pos, generation, entry))
    }

    /// Allocates an object of `size` bytes (1..=4096) and returns its handle. The object's
    /// contents are unspecified until written.
    pub fn malloc(&self, size: usize) -> Result<Handle> {
        check_size(size)?;
        let class_pos = self.table.position_for(size);
        let (pos, mut inner) = self.lock_for_malloc(class_pos);
        let class = &self.classes[pos];
        let geom = class.geom;
        let huge = geom.is_huge();
        let id = match inner.fullest_with_room(None) {
            Some(id) => id,
            None => {
                // Get the pages without holding the class lock, as the kernel does.
                drop(inner);
                let run = self.source.alloc(geom.pages_per_zspage)?;
                self.pages_allocated
                    .fetch_add(geom.pages_per_zspage, Ordering::Relaxed);
                inner = class.inner.lock();
                inner.add_zspage(ZsPage::new(run, geom.objs_per_zspage))
            }
        };
        let obj = inner.meta_mut(id).take_free(geom.size, huge);
        let loc = Location { zspage: id, obj };
        let Some((entry, generation)) = inner.handles.alloc(loc) else {
            inner.meta_mut(id).put_free(geom.size, huge, obj);
            // A zspage made for this object alone must not stay behind empty.
            if inner.meta(id).inuse == 0 {
                let run = inner.remove_zspage(id);
                drop(inner);
                self.release(run);
            }
            return Err(Error::TooManyObjects);
        };
        inner.epoch += 1;
        let handle = Handle::encode(pos, generation, entry);
        let meta = inner.meta_mut(id);
        if geom.header > 0 {
            set_header(
                meta.run.bytes_mut(),
                geom.size,
                obj as usize,
                handle.to_raw(),
            );
        }
        inner.fix_group(id);
        Ok(handle)
    }

    /// Stores `data` at the start of the object (`zs_obj_write`).
    pub fn write(&self, handle: Handle, data: &[u8]) -> Result<()> {
        let (class, _, generation, entry) = self.class_of(handle)?;
        let geom = class.geom;
        if data.len() > geom.capacity() {
            return Err(Error::TooLarge {
                len: data.len(),
                capacity: geom.capacity(),
            });
        }
        let mut inner = class.inner.lock();
        let loc = inner
            .handles
            .get(entry, generation)
            .ok_or(Error::StaleHandle(handle))?;
        let off = data_offset(&geom, loc.obj);
        inner.meta_mut(loc.zspage).run.bytes_mut()[off..off + data.len()].copy_from_slice(data);
        Ok(())
    }

    /// Lends the object's first `len` bytes to `f` (`zs_obj_read_begin`/`_end`). Zspages are
    /// virtually contiguous here, so every object is borrowed in place, never copied.
    ///
    /// `f` runs under the class lock: it must not call back into the pool.
    pub fn with_object<R>(
        &self,
        handle: Handle,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let (class, _, generation, entry) = self.class_of(handle)?;
        let geom = class.geom;
        if len > geom.capacity() {
            return Err(Error::TooLarge {
                len,
                capacity: geom.capacity(),
            });
        }
        let inner = class.inner.lock();
        let loc = inner
            .handles
            .get(entry, generation)
            .ok_or(Error::StaleHandle(handle))?;
        let off = data_offset(&geom, loc.obj);
        Ok(f(&inner.meta(loc.zspage).run.bytes()[off..off + len]))
    }

    /// Copies the object's first `buf.len()` bytes into `buf`.
    pub fn read(&self, handle: Handle, buf: &mut [u8]) -> Result<()> {
        self.with_object(handle, buf.len(), |bytes| buf.copy_from_slice(bytes))
    }

    /// Bytes of caller data the object behind `handle` can hold.
    pub fn capacity(&self, handle: Handle) -> Result<usize> {
        let (class, _, generation, entry) = self.class_of(handle)?;
        class
            .inner
            .lock()
            .handles
            .get(entry, generation)
            .ok_or(Error::StaleHandle(handle))?;
        Ok(class.geom.capacity())
    }

    /// Frees the object; the handle becomes stale. A zspage left empty goes back to the OS.
    pub fn free(&self, handle: Handle) -> Result<()> {
        let (class, _, generation, entry) = self.class_of(handle)?;
        let geom = class.geom;
        let released = {
            let mut inner = class.inner.lock();
            let loc = inner
                .handles
                .free(entry, generation)
                .ok_or(Error::StaleHandle(handle))?;
            inner.epoch += 1;
            let meta = inner.meta_mut(loc.zspage);
            if meta.inuse == 1 {
                meta.inuse = 0;
                Some(inner.remove_zspage(loc.zspage))
            } else {
                meta.put_free(geom.size, geom.is_huge(), loc.obj);
                inner.fix_group(loc.zspage);
                None
            }
        };
        if let Some(run) = released {
            self.release(run);
        }
        Ok(())
    }

    /// Gives a removed zspage's pages back (call without the class lock); returns how many.
    fn release(&self, run: PageRun) -> usize {
        let pages = run.pages();
        self.pages_allocated.fetch_sub(pages, Ordering::Relaxed);
        drop(run);
        pages
    }

    /// Compacts every class, from the largest down, moving objects out of the emptiest
    /// zspages into the fullest ones, then moving each partly used zspage that would fit in
    /// fewer pages into a short zspage; returns the pages given back to the OS.
    pub fn compact(&self) -> usize {
        let freed: usize = (0..self.classes.len())
            .rev()
            .map(|pos| self.compact_class(pos))
            .sum();
        self.pages_compacted
            .fetch_add(freed as u64, Ordering::Relaxed);
        freed
    }

    /// Pages compaction could free in one class position (the kernel's `zs_can_compact`).
    fn freeable(geom: &ClassGeometry, inner: &ClassInner) -> usize {
        (inner.capacity - inner.obj_used()) / geom.objs_per_zspage * geom.pages_per_zspage
    }

    fn compact_class(&self, pos: usize) -> usize {
        let class = &self.classes[pos];
        let geom = class.geom;
        let mut freed = 0;
        // Each step empties a zspage or fills one; bound the steps so that threads freeing
        // into this class all the while cannot keep compaction going forever.
        let mut steps = 2 * class.inner.lock().zspage_count + 1;
        let mut released = Vec::new();
        let mut done = false;
        // The object index: one pass over the handle table, kept across lock holds while
        // no malloc or free changed the class (`epoch`).
        let mut index: Option<(u64, ObjectIndex)> = None;
        while !done {
            {
                let mut inner = class.inner.lock();
                if index
                    .as_ref()
                    .is_some_and(|(epoch, _)| *epoch != inner.epoch)
                {
                    index = None;
                }
                // Steps per hold of the class lock: enough that a rebuilt index (a pass
                // over the handle table) costs at most ~1024 entries per step.
                let batch = COMPACT_BATCH.max(inner.handles.entries() / 1024);
                for _ in 0..batch {
                    // Beyond the kernel, which stops once no whole zspage can be freed: go
                    // on until one partly used zspage is left, which `shorten_partial` fits.
                    let picked = inner
                        .fullest_with_room(None)
                        .and_then(|dst| Some((inner.emptiest(Some(dst))?, dst)));
                    let Some((src, dst)) = picked.filter(|_| steps > 0) else {
                        done = true;
                        break;
                    };
                    steps -= 1;
                    let (_, index) =
                        index.get_or_insert_with(|| (inner.epoch, ObjectIndex::of(&inner)));
                    migrate(&mut inner, &geom, src, dst, index);
                    inner.fix_group(dst);
                    if inner.meta(src).inuse == 0 {
                        released.push(inner.remove_zspage(src));
                    } else {
                        inner.fix_group(src);
                    }
                }
            }
            // Give the pages back without the class lock held.
            for run in released.drain(..) {
                freed += self.release(run);
            }
        }
        freed + self.shorten_partial(pos)
    }

    /// Beyond the kernel: once a class cannot free a whole zspage any more, each of its
    /// partly used zspages that would fit in fewer pages is moved into a *short* zspage of
    /// just enough pages, and its pages are freed. The kernel leaves these partly used
    /// zspages as they are — up to `chain_size - 1` pages of each class held for nothing.
    /// Returns the pages freed.
    fn shorten_partial(&self, pos: usize) -> usize {
        let class = &self.classes[pos];
        let geom = class.geom;
        if geom.pages_per_zspage == 1 {
            return 0;
        }
        let candidates: Vec<u32> = {
            let inner = class.inner.lock();
            (GROUP_EMPTY + 1..GROUP_FULL)
                .flat_map(|g| inner.groups[g as usize].iter().copied())
                .collect()
        };
        let mut freed: isize = 0;
        for src in candidates {
            let wanted = {
                let inner = class.inner.lock();
                match inner.zspages.get(src as usize).and_then(Option::as_ref) {
                    Some(m) if m.shortenable(geom.size) > 0 => {
                        m.run.pages() - m.shortenable(geom.size)
                    }
                    _ => continue,
                }
            };
            // Get the pages without the class lock, as malloc does; then check again.
            let Ok(run) = self.source.alloc(wanted) else {
                break;
            };
            self.pages_allocated.fetch_add(wanted, Ordering::Relaxed);
            let objs = wanted * crate::sys::PAGE_SIZE / geom.size;
            let released = {
                let mut inner = class.inner.lock();
                match inner.zspages.get(src as usize).and_then(Option::as_ref) {
                    Some(m)
                        if m.inuse > 0 && m.inuse as usize <= objs && wanted < m.run.pages() =>
                    {
                        let dst = inner.add_zspage(ZsPage::new(run, objs));
                        let mut index = ObjectIndex::of(&inner);
                        migrate(&mut inner, &geom, src, dst, &mut index);
                        inner.fix_group(dst);
                        // Everything fits, so `src` is empty now.
                        debug_assert_eq!(inner.meta(src).inuse, 0);
                        if inner.meta(src).inuse == 0 {
                            Some(inner.remove_zspage(src))
                        } else {
                            inner.fix_group(src);
                            None
                        }
                    }
                    _ => Some(run),
                }
            };
            let given_back = released.map_or(0, |run| self.release(run));
            freed += given_back as isize - wanted as isize;
        }
        freed.max(0) as usize
    }

    /// Pages compaction could free right now, over all classes.
    pub fn freeable_pages(&self) -> usize {
        self.classes
            .iter()
            .map(|c| Self::freeable(&c.geom, &c.inner.lock()))
            .sum()
    }

    /// Pages that shortening partly used zspages (see `compact`) could give back right now.
    pub fn shortenable_pages(&self) -> usize {
        self.classes
            .iter()
            .map(|c| Self::shortenable(&c.geom, &c.inner.lock()))
            .sum()
    }

    /// Pages `compact` could give back right now, about: per class shard, the larger of
    /// what the kernel's compaction frees and what shortening would (both count the same
    /// free room, so their sum would count it twice).
    pub fn compactable_pages(&self) -> usize {
        self.classes
            .iter()
            .map(|c| {
                let inner = c.inner.lock();
                Self::freeable(&c.geom, &inner).max(Self::shortenable(&c.geom, &inner))
            })
            .sum()
    }

    fn shortenable(geom: &ClassGeometry, inner: &ClassInner) -> usize {
        inner
            .zspages
            .iter()
            .flatten()
            .map(|m| m.shortenable(geom.size))
            .sum()
    }

    /// Pages held by zspages (the kernel's `zs_get_total_pages`).
    pub fn total_pages(&self) -> usize {
        self.pages_allocated.load(Ordering::Relaxed)
    }

    /// Bytes of bookkeeping held outside the zspages: zspage metas, fullness lists, handle
    /// tables and class structures.
    pub fn metadata_bytes(&self) -> usize {
        let per_class: usize = self
            .classes
            .iter()
            .map(|c| {
                let inner = c.inner.lock();
                inner.zspages.capacity() * std::mem::size_of::<Option<ZsPage>>()
                    + inner.free_ids.capacity() * 4
                    + inner.groups.iter().map(|g| g.capacity() * 4).sum::<usize>()
                    + inner.handles.metadata_bytes()
            })
            .sum();
        per_class + self.classes.len() * std::mem::size_of::<CachePadded<SizeClass>>()
    }

    /// Pages freed by compaction since the pool was made.
    pub fn pages_compacted(&self) -> u64 {
        self.pages_compacted.load(Ordering::Relaxed)
    }

    /// Pages of freed zspages kept resident for reuse (not in `total_pages`).
    pub fn cached_pages(&self) -> usize {
        self.source.cached_pages()
    }

    /// Gives cached free pages back to the OS; returns how many.
    pub fn trim(&self) -> usize {
        self.source.trim()
    }

    /// Pool-wide counters.
    pub fn stats(&self) -> PoolStats {
        let class_stats = self.class_stats();
        PoolStats {
            pages_allocated: self.total_pages(),
            pages_compacted: self.pages_compacted.load(Ordering::Relaxed),
            obj_used: class_stats.iter().map(|c| c.obj_used).sum(),
            obj_allocated: class_stats.iter().map(|c| c.obj_allocated).sum(),
            metadata_bytes: self.metadata_bytes(),
            cached_pages: self.source.cached_pages(),
            pages_released: self.source.pages_released(),
        }
    }

    /// One row per distinct class, as the kernel's `classes` debugfs file.
    pub fn class_stats(&self) -> Vec<ClassStats> {
        self.classes
            .chunks(self.shards)
            .map(|shards| {
                let g = shards[0].geom;
                let mut row = ClassStats {
                    index: g.index,
                    size: g.size,
                    pages_per_zspage: g.pages_per_zspage,
                    ..ClassStats::default()
                };
                for c in shards {
                    let inner = c.inner.lock();
                    for meta in inner.zspages.iter().flatten() {
                        let inuse = meta.inuse as usize;
                        let objs = meta.objs as usize;
                        if inuse == 0 || inuse == objs {
                            continue;
                        }
                        // The classic 3/4 threshold the kernel printed these columns with.
                        if inuse <= 3 * objs / 4 {
                            row.almost_empty += 1;
                        } else {
                            row.almost_full += 1;
                        }
                    }
                    row.obj_allocated += inner.capacity;
                    row.obj_used += inner.obj_used();
                    row.pages_used += inner.pages;
                    row.freeable += Self::freeable(&g, &inner);
                }
                row
            })
            .collect()
    }

    /// Checks the pool's identities; returns a description of the first one broken.
    ///
    /// Per zspage: `inuse + free + never-used == objs` (its own), its fullness group and
    /// list position are right, every allocated object's header names a live handle that
    /// points back at it. Per class: live handles == objects in use. Per pool: pages in
    /// zspages == `total_pages()` == pages the page source has handed out.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut pages = 0;
        for class in &self.classes {
            let g = class.geom;
            let huge = g.is_huge();
            let inner = class.inner.lock();
            // (zspage, object) -> handle entry, from the handle table; each place owned once.
            let mut owner = std::collections::BTreeMap::new();
            for (entry, _, loc) in inner.handles.iter_live() {
                let live = inner
                    .zspages
                    .get(loc.zspage as usize)
                    .is_some_and(Option::is_some);
                if !live {
                    return Err(format!(
                        "class {}: handle entry {entry} names a free zspage",
                        g.index
                    ));
                }
                if owner.insert((loc.zspage, loc.obj), entry).is_some() {
                    return Err(format!(
                        "class {}: two handles name zspage {} object {}",
                        g.index, loc.zspage, loc.obj
                    ));
                }
            }
            let mut inuse_sum = 0;
            let mut count = 0;
            let (mut capacity, mut zspage_pages) = (0, 0);
            for (id, meta) in inner.zspages.iter().enumerate() {
                let Some(meta) = meta else { continue };
                count += 1;
                let id = id as u32;
                let bytes = meta.run.bytes();
                let objs = meta.objs as usize;
                if meta.run.pages() > g.pages_per_zspage
                    || objs != meta.run.pages() * crate::sys::PAGE_SIZE / g.size
                {
                    return Err(format!(
                        "class {}: zspage {id} has {} pages and {objs} objects",
                        g.index,
                        meta.run.pages()
                    ));
                }
                capacity += objs;
                zspage_pages += meta.run.pages();
                let free = meta
                    .free_list(g.size, huge, objs)
                    .ok_or_else(|| format!("class {}: zspage {id}: broken free list", g.index))?;
                if let Some(obj) = free.iter().find(|&&o| owner.contains_key(&(id, o))) {
                    return Err(format!(
                        "class {}: zspage {id}: object {obj} both free and owned",
                        g.index
                    ));
                }
                let free = free.len();
                let never = objs - meta.fresh as usize;
                if meta.inuse as usize + free + never != objs {
                    return Err(format!(
                        "class {}: zspage {id}: inuse {} + free {free} + never used {never} != {objs}",
                        g.index, meta.inuse
                    ));
                }
                if meta.inuse == 0 {
                    return Err(format!("class {}: empty zspage {id} kept", g.index));
                }
                let want = fullness_group(meta.inuse as usize, objs);
                if meta.group != want
                    || inner.groups[meta.group as usize].get(meta.list_pos as usize) != Some(&id)
                {
                    return Err(format!(
                        "class {}: zspage {id} misfiled in fullness lists",
                        g.index
                    ));
                }
                let owned: Vec<(u16, u32)> = owner
                    .range((id, 0)..=(id, u16::MAX))
                    .map(|(&(_, obj), &entry)| (obj, entry))
                    .collect();
                if owned.len() != meta.inuse as usize {
                    return Err(format!(
                        "class {}: zspage {id}: {} handles point in but inuse {}",
                        g.index,
                        owned.len(),
                        meta.inuse
                    ));
                }
                for (obj, entry) in owned {
                    if obj >= meta.fresh {
                        return Err(format!(
                            "class {}: zspage {id}: handle entry {entry} names never-used object {obj}",
                            g.index
                        ));
                    }
                    if g.header > 0 {
                        let h = Handle::from_raw(header(bytes, g.size, obj as usize));
                        match h.decode() {
                            Some((_, _, s)) if s == entry => {}
                            _ => {
                                return Err(format!(
                                    "class {}: zspage {id}: object {obj} header {h} is not its handle (entry {entry})",
                                    g.index
                                ));
                            }
                        }
                    }
                }
                inuse_sum += meta.inuse as usize;
            }
            let listed: usize = inner.groups.iter().map(Vec::len).sum();
            if count != inner.zspage_count || listed != count {
                return Err(format!("class {}: zspage count mismatch", g.index));
            }
            if inuse_sum != inner.handles.live() {
                return Err(format!(
                    "class {}: {} live handles but {inuse_sum} objects in use",
                    g.index,
                    inner.handles.live()
                ));
            }
            if capacity != inner.capacity || zspage_pages != inner.pages {
                return Err(format!(
                    "class {}: capacity or page count mismatch",
                    g.index
                ));
            }
            pages += zspage_pages;
        }
        if pages != self.total_pages() || pages != self.source.pages_live() {
            return Err(format!(
                "pages in zspages {pages}, total_pages {}, page source {}",
                self.total_pages(),
                self.source.pages_live()
            ));
        }
        Ok(())
    }
}

/// Steps of compaction per hold of a class lock.
const COMPACT_BATCH: usize = 32;

/// The objects of each zspage of a class shard, as lists of handle entries threaded through
/// `next`, from one pass over its handle table: objects need not carry their handle
/// (`Header::Omitted`), and one pass serves many migrations. Kept right by [`migrate`] while
/// the class lock is held.
struct ObjectIndex {
    /// Per zspage id: its first entry, or `NIL`.
    first: Vec<u32>,
    /// Per handle entry: the next entry of the same zspage, or `NIL`.
    next: Vec<u32>,
}

const NIL: u32 = u32::MAX;

impl ObjectIndex {
    fn of(inner: &ClassInner) -> Self {
        let mut index = Self {
            first: vec![NIL; inner.zspages.len()],
            next: vec![NIL; inner.handles.entries()],
        };
        for (entry, _, loc) in inner.handles.iter_live() {
            index.push(loc.zspage, entry);
        }
        index
    }

    fn push(&mut self, zspage: u32, entry: u32) {
        self.next[entry as usize] = self.first[zspage as usize];
        self.first[zspage as usize] = entry;
    }
}

/// Moves objects from `src` into `dst` until `src` is empty or `dst` is full, re-pointing
/// their handles (the kernel's `migrate_zspage`). An in-object header moves with the
/// object's bytes and stays right, since the handle does not change.
fn migrate(
    inner: &mut ClassInner,
    geom: &ClassGeometry,
    src_id: u32,
    dst_id: u32,
    index: &mut ObjectIndex,
) {
    let huge = geom.is_huge();
    let size = geom.size;
    let mut cur = std::mem::replace(&mut index.first[src_id as usize], NIL);
    // Take both zspages out of the class to borrow them side by side; put them back after.
    let mut src = take(inner, src_id);
    let mut dst = take(inner, dst_id);
    while cur != NIL {
        let entry = cur;
        cur = index.next[entry as usize];
        if dst.inuse == dst.objs {
            index.push(src_id, entry);
            continue;
        }
        let obj = inner.handles.location(entry).obj;
        let new_obj = dst.take_free(size, huge);
        let (from, to) = (obj as usize * size, new_obj as usize * size);
        dst.run.bytes_mut()[to..to + size].copy_from_slice(&src.run.bytes()[from..from + size]);
        inner.handles.relocate(
            entry,
            Location {
                zspage: dst_id,
                obj: new_obj,
            },
        );
        src.put_free(size, huge, obj);
        index.push(dst_id, entry);
    }
    inner.zspages[src_id as usize] = Some(src);
    inner.zspages[dst_id as usize] = Some(dst);
}

fn take(inner: &mut ClassInner, id: u32) -> ZsPage {
    inner.zspages[id as usize]
        .take()
        .unwrap_or_else(|| unreachable!("compacting free zspage id {id}"))
}

fn check_size(size: usize) -> Result<()> {
    if size == 0 || size > MAX_ALLOC_SIZE {
        Err(Error::InvalidSize(size))
    } else {
        Ok(())
    }
}

/// Byte offset of an object's caller data inside its zspage.
fn data_offset(geom: &ClassGeometry, obj: u16) -> usize {
    obj as usize * geom.size + geom.header
}
