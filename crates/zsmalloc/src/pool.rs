//! The pool: size classes of zspages, each class under its own lock.
//!
//! Lock order (never taken the other way round):
//!
//! 1. a class lock (`SizeClass::inner`) — protects the class's zspage metas, fullness lists
//!    and handle table. At most one class lock is held at a time.
//! 2. zspage locks (`ZsPage::mem`) — protect object memory. Readers and writers of object
//!    bytes acquire a zspage lock *while holding* the class lock, then release the class
//!    lock and do the copy under the zspage lock alone. Only compaction holds two zspage
//!    locks (source and destination, both exclusive) and it does so under the class lock,
//!    so no one can wait for a class lock while holding a zspage lock.
//! 3. the page source lock (`sys::PageSource`) — a leaf, never held while taking another.
//!
//! A caller of [`Pool::with_object`] holds a zspage lock while its closure runs: the
//! closure must not call back into the pool, or it may deadlock on that lock.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crossbeam_utils::CachePadded;

use crate::class::{ClassGeometry, ClassTable, MAX_ALLOC_SIZE, MAX_CHAIN_SIZE, MIN_CHAIN_SIZE};
use crate::error::{Error, Result};
use crate::handle::{Handle, HandleTable, Location};
use crate::stats::{ClassStats, PoolStats};
use crate::sync::{AtomicU64, AtomicUsize, Mutex};
use crate::sys::PageSource;
use crate::zspage::{
    GROUP_EMPTY, GROUP_FULL, NR_GROUPS, ZsPage, ZsPageMeta, fullness_group, header,
    is_allocated, set_header,
};

/// How a pool is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// Most pages one zspage may have (the kernel's `CONFIG_ZSMALLOC_CHAIN_SIZE`), 1..=16.
    pub chain_size: usize,
    /// Fault every new zspage in at once so that process RSS equals the pages held.
    pub populate: bool,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            chain_size: crate::class::DEFAULT_CHAIN_SIZE,
            populate: true,
        }
    }
}

/// A zsmalloc pool.
#[derive(Debug)]
pub struct Pool {
    table: ClassTable,
    classes: Vec<CachePadded<SizeClass>>,
    source: Arc<PageSource>,
    pages_allocated: CachePadded<AtomicUsize>,
    pages_compacted: AtomicU64,
}

#[derive(Debug)]
struct SizeClass {
    geom: ClassGeometry,
    inner: Mutex<ClassInner>,
}

#[derive(Debug)]
struct ClassInner {
    /// Zspage metas by id; `None` marks a free id.
    zspages: Vec<Option<ZsPageMeta>>,
    free_ids: Vec<u32>,
    /// Fullness lists of zspage ids (the newest at the end).
    groups: [Vec<u32>; NR_GROUPS],
    handles: HandleTable,
    zspage_count: usize,
}

impl ClassInner {
    fn new() -> Self {
        Self {
            zspages: Vec::new(),
            free_ids: Vec::new(),
            groups: Default::default(),
            handles: HandleTable::new(),
            zspage_count: 0,
        }
    }

    fn meta(&self, id: u32) -> &ZsPageMeta {
        self.zspages[id as usize]
            .as_ref()
            .unwrap_or_else(|| unreachable!("live location names a free zspage id {id}"))
    }

    fn meta_mut(&mut self, id: u32) -> &mut ZsPageMeta {
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
    fn fix_group(&mut self, id: u32, objs: usize) {
        let m = self.meta(id);
        let group = fullness_group(m.inuse as usize, objs);
        if group != m.group {
            self.list_remove(id);
            self.list_insert(id, group);
        }
    }

    fn add_zspage(&mut self, meta: ZsPageMeta) -> u32 {
        self.zspage_count += 1;
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

    /// Unlinks an empty zspage; the caller drops the returned page (after unlocking).
    fn remove_zspage(&mut self, id: u32) -> Arc<ZsPage> {
        self.list_remove(id);
        self.zspage_count -= 1;
        self.free_ids.push(id);
        match self.zspages[id as usize].take() {
            Some(meta) => meta.page,
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
        let table = ClassTable::new(config.chain_size);
        let classes = table
            .classes()
            .iter()
            .map(|&geom| {
                CachePadded::new(SizeClass {
                    geom,
                    inner: Mutex::new(ClassInner::new()),
                })
            })
            .collect();
        Ok(Self {
            table,
            classes,
            source: PageSource::new(config.populate),
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

    fn class_of(&self, handle: Handle) -> Result<(&SizeClass, usize, u64, u32)> {
        let (pos, generation, slot) = handle.decode().ok_or(Error::StaleHandle(handle))?;
        let class = self.classes.get(pos).ok_or(Error::StaleHandle(handle))?;
        Ok((class, pos, generation, slot))
    }

    /// Allocates an object of `size` bytes (1..=4096) and returns its handle. The object's
    /// contents are unspecified until written.
    pub fn malloc(&self, size: usize) -> Result<Handle> {
        check_size(size)?;
        let pos = self.table.position_for(size);
        let class = &self.classes[pos];
        let geom = class.geom;
        let huge = geom.is_huge();
        let mut inner = class.inner.lock();
        let id = match inner.fullest_with_room(None) {
            Some(id) => id,
            None => {
                // Get the pages without holding the class lock, as the kernel does.
                drop(inner);
                let run = self.source.alloc(geom.pages_per_zspage)?;
                self.pages_allocated
                    .fetch_add(geom.pages_per_zspage, Ordering::Relaxed);
                inner = class.inner.lock();
                inner.add_zspage(ZsPageMeta::new(run))
            }
        };
        let page = Arc::clone(&inner.meta(id).page);
        let mut mem = page.mem.write();
        let meta = inner.meta_mut(id);
        let obj = meta.take_free(mem.bytes(), geom.size, huge);
        let loc = Location { zspage: id, obj };
        let (slot, generation) = match inner.handles.alloc(loc) {
            Ok(sg) => sg,
            Err(e) => {
                inner.meta_mut(id).put_free(mem.bytes_mut(), geom.size, huge, obj);
                return Err(e);
            }
        };
        let handle = Handle::encode(pos, generation, slot);
        if huge {
            inner.meta_mut(id).huge_slot = slot;
        } else {
            set_header(mem.bytes_mut(), geom.size, obj as usize, handle.to_raw());
        }
        drop(mem);
        inner.fix_group(id, geom.objs_per_zspage);
        Ok(handle)
    }

    /// Stores `data` at the start of the object (`zs_obj_write`).
    pub fn write(&self, handle: Handle, data: &[u8]) -> Result<()> {
        let (class, _, generation, slot) = self.class_of(handle)?;
        let geom = class.geom;
        if data.len() > geom.capacity() {
            return Err(Error::TooLarge {
                len: data.len(),
                capacity: geom.capacity(),
            });
        }
        let page;
        let mut mem;
        let off;
        {
            let inner = class.inner.lock();
            let loc = inner.handles.get(handle, slot, generation)?;
            page = Arc::clone(&inner.meta(loc.zspage).page);
            mem = page.mem.write();
            off = data_offset(&geom, loc.obj);
        }
        mem.bytes_mut()[off..off + data.len()].copy_from_slice(data);
        Ok(())
    }

    /// Lends the object's first `len` bytes to `f` (`zs_obj_read_begin`/`_end`). Zspages are
    /// virtually contiguous here, so every object is borrowed in place, never copied.
    ///
    /// `f` runs under the zspage lock: it must not call back into the pool.
    pub fn with_object<R>(&self, handle: Handle, len: usize, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let (class, _, generation, slot) = self.class_of(handle)?;
        let geom = class.geom;
        if len > geom.capacity() {
            return Err(Error::TooLarge {
                len,
                capacity: geom.capacity(),
            });
        }
        let page;
        let mem;
        let off;
        {
            let inner = class.inner.lock();
            let loc = inner.handles.get(handle, slot, generation)?;
            page = Arc::clone(&inner.meta(loc.zspage).page);
            mem = page.mem.read();
            off = data_offset(&geom, loc.obj);
        }
        Ok(f(&mem.bytes()[off..off + len]))
    }

    /// Copies the object's first `buf.len()` bytes into `buf`.
    pub fn read(&self, handle: Handle, buf: &mut [u8]) -> Result<()> {
        self.with_object(handle, buf.len(), |bytes| buf.copy_from_slice(bytes))
    }

    /// Bytes of caller data the object behind `handle` can hold.
    pub fn capacity(&self, handle: Handle) -> Result<usize> {
        let (class, _, generation, slot) = self.class_of(handle)?;
        class.inner.lock().handles.get(handle, slot, generation)?;
        Ok(class.geom.capacity())
    }

    /// Frees the object; the handle becomes stale. A zspage left empty goes back to the OS.
    pub fn free(&self, handle: Handle) -> Result<()> {
        let (class, _, generation, slot) = self.class_of(handle)?;
        let geom = class.geom;
        let released = {
            let mut inner = class.inner.lock();
            let loc = inner.handles.free(handle, slot, generation)?;
            let meta = inner.meta_mut(loc.zspage);
            if meta.inuse == 1 {
                meta.inuse = 0;
                Some(inner.remove_zspage(loc.zspage))
            } else {
                let page = Arc::clone(&meta.page);
                let mut mem = page.mem.write();
                meta.put_free(mem.bytes_mut(), geom.size, geom.is_huge(), loc.obj);
                drop(mem);
                inner.fix_group(loc.zspage, geom.objs_per_zspage);
                None
            }
        };
        if let Some(page) = released {
            self.pages_allocated
                .fetch_sub(geom.pages_per_zspage, Ordering::Relaxed);
            drop(page);
        }
        Ok(())
    }

    /// Compacts every class, from the largest down, moving objects out of the emptiest
    /// zspages into the fullest ones; returns the pages given back to the OS.
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
        let allocated = inner.zspage_count * geom.objs_per_zspage;
        (allocated - inner.obj_used()) / geom.objs_per_zspage * geom.pages_per_zspage
    }

    fn compact_class(&self, pos: usize) -> usize {
        let class = &self.classes[pos];
        let geom = class.geom;
        let mut freed = 0;
        loop {
            let released = {
                let mut inner = class.inner.lock();
                if Self::freeable(&geom, &inner) == 0 {
                    break;
                }
                let Some(dst) = inner.fullest_with_room(None) else {
                    break;
                };
                let Some(src) = inner.emptiest(Some(dst)) else {
                    break;
                };
                migrate(&mut inner, &geom, src, dst);
                inner.fix_group(dst, geom.objs_per_zspage);
                if inner.meta(src).inuse == 0 {
                    Some(inner.remove_zspage(src))
                } else {
                    inner.fix_group(src, geom.objs_per_zspage);
                    None
                }
            };
            if let Some(page) = released {
                self.pages_allocated
                    .fetch_sub(geom.pages_per_zspage, Ordering::Relaxed);
                drop(page);
                freed += geom.pages_per_zspage;
            }
        }
        freed
    }

    /// Pages compaction could free right now, over all classes.
    pub fn freeable_pages(&self) -> usize {
        self.classes
            .iter()
            .map(|c| Self::freeable(&c.geom, &c.inner.lock()))
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
                inner.zspages.capacity() * std::mem::size_of::<Option<ZsPageMeta>>()
                    + inner.zspage_count * (std::mem::size_of::<ZsPage>() + 16)
                    + inner.free_ids.capacity() * 4
                    + inner.groups.iter().map(|g| g.capacity() * 4).sum::<usize>()
                    + inner.handles.metadata_bytes()
            })
            .sum();
        per_class + self.classes.len() * std::mem::size_of::<CachePadded<SizeClass>>()
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
        }
    }

    /// One row per distinct class, as the kernel's `classes` debugfs file.
    pub fn class_stats(&self) -> Vec<ClassStats> {
        self.classes
            .iter()
            .map(|c| {
                let inner = c.inner.lock();
                let g = c.geom;
                let (mut almost_full, mut almost_empty) = (0, 0);
                for meta in inner.zspages.iter().flatten() {
                    let inuse = meta.inuse as usize;
                    if inuse == 0 || inuse == g.objs_per_zspage {
                        continue;
                    }
                    // The classic 3/4 threshold the kernel printed these columns with.
                    if inuse <= 3 * g.objs_per_zspage / 4 {
                        almost_empty += 1;
                    } else {
                        almost_full += 1;
                    }
                }
                ClassStats {
                    index: g.index,
                    size: g.size,
                    almost_full,
                    almost_empty,
                    obj_allocated: inner.zspage_count * g.objs_per_zspage,
                    obj_used: inner.obj_used(),
                    pages_used: inner.zspage_count * g.pages_per_zspage,
                    pages_per_zspage: g.pages_per_zspage,
                    freeable: Self::freeable(&g, &inner),
                }
            })
            .collect()
    }

    /// Checks the pool's identities; returns a description of the first one broken.
    ///
    /// Per zspage: `inuse + free + never-used == objs_per_zspage`, its fullness group and
    /// list position are right, every allocated object's header names a live handle that
    /// points back at it. Per class: live handles == objects in use. Per pool: pages in
    /// zspages == `total_pages()` == pages the page source has handed out.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut pages = 0;
        for class in &self.classes {
            let g = class.geom;
            let huge = g.is_huge();
            let inner = class.inner.lock();
            let mut inuse_sum = 0;
            let mut count = 0;
            for (id, meta) in inner.zspages.iter().enumerate() {
                let Some(meta) = meta else { continue };
                count += 1;
                let id = id as u32;
                let mem = meta.page.mem.read();
                let bytes = mem.bytes();
                if mem.pages() != g.pages_per_zspage {
                    return Err(format!("class {}: zspage {id} has {} pages", g.index, mem.pages()));
                }
                let free = meta
                    .free_list_len(bytes, g.size, huge, g.objs_per_zspage)
                    .ok_or_else(|| format!("class {}: zspage {id}: broken free list", g.index))?;
                let never = g.objs_per_zspage - meta.fresh as usize;
                if meta.inuse as usize + free + never != g.objs_per_zspage {
                    return Err(format!(
                        "class {}: zspage {id}: inuse {} + free {free} + never used {never} != {}",
                        g.index, meta.inuse, g.objs_per_zspage
                    ));
                }
                if meta.inuse == 0 {
                    return Err(format!("class {}: empty zspage {id} kept", g.index));
                }
                let want = fullness_group(meta.inuse as usize, g.objs_per_zspage);
                if meta.group != want
                    || inner.groups[meta.group as usize].get(meta.list_pos as usize) != Some(&id)
                {
                    return Err(format!("class {}: zspage {id} misfiled in fullness lists", g.index));
                }
                let mut allocated = 0;
                if huge {
                    allocated = meta.inuse as usize;
                } else {
                    for obj in 0..meta.fresh as usize {
                        let word = header(bytes, g.size, obj);
                        if is_allocated(word) {
                            allocated += 1;
                            let h = Handle::from_raw(word);
                            let (_, generation, slot) = h.decode().ok_or("bad header")?;
                            let loc = inner
                                .handles
                                .get(h, slot, generation)
                                .map_err(|e| format!("class {}: {e}", g.index))?;
                            if loc != (Location { zspage: id, obj: obj as u16 }) {
                                return Err(format!("class {}: handle {h} points elsewhere", g.index));
                            }
                        }
                    }
                }
                if allocated != meta.inuse as usize {
                    return Err(format!(
                        "class {}: zspage {id}: {allocated} headers but inuse {}",
                        g.index, meta.inuse
                    ));
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
            for (slot, generation, loc) in inner.handles.iter_live() {
                let meta = inner.zspages.get(loc.zspage as usize).and_then(Option::as_ref);
                let Some(meta) = meta else {
                    return Err(format!("class {}: handle slot {slot} names a free zspage", g.index));
                };
                if huge && meta.huge_slot != slot {
                    return Err(format!("class {}: huge slot {slot}/{generation} mismatch", g.index));
                }
            }
            pages += count * g.pages_per_zspage;
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

/// Moves objects from `src` into `dst` until `src` is empty or `dst` is full, re-pointing
/// their handles (the kernel's `migrate_zspage`).
fn migrate(inner: &mut ClassInner, geom: &ClassGeometry, src: u32, dst: u32) {
    let huge = geom.is_huge();
    let src_page = Arc::clone(&inner.meta(src).page);
    let dst_page = Arc::clone(&inner.meta(dst).page);
    let mut src_mem = src_page.mem.write();
    let mut dst_mem = dst_page.mem.write();
    let fresh = inner.meta(src).fresh as usize;
    for obj in 0..fresh {
        if inner.meta(src).inuse == 0 || inner.meta(dst).inuse as usize == geom.objs_per_zspage {
            break;
        }
        let slot = if huge {
            if inner.meta(src).free_head == obj as u16 {
                continue;
            }
            inner.meta(src).huge_slot
        } else {
            let word = header(src_mem.bytes(), geom.size, obj);
            if !is_allocated(word) {
                continue;
            }
            (word & 0xFFFF_FFFF) as u32
        };
        let new_obj = inner
            .meta_mut(dst)
            .take_free(dst_mem.bytes(), geom.size, huge);
        let from = obj * geom.size;
        let to = new_obj as usize * geom.size;
        dst_mem.bytes_mut()[to..to + geom.size]
            .copy_from_slice(&src_mem.bytes()[from..from + geom.size]);
        if huge {
            inner.meta_mut(dst).huge_slot = slot;
        }
        inner.handles.relocate(
            slot,
            Location {
                zspage: dst,
                obj: new_obj,
            },
        );
        inner
            .meta_mut(src)
            .put_free(src_mem.bytes_mut(), geom.size, huge, obj as u16);
    }
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
    let header = if geom.is_huge() { 0 } else { crate::class::HANDLE_SIZE };
    obj as usize * geom.size + header
}
