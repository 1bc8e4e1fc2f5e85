//! Invariants: the identities of a pool, checked by [`Pool::check_invariants`], which tests
//! call after every operation.
//!
//! Per zspage: `objs == pages * 4096 / size` with `pages <= pages_per_zspage`; `inuse +
//! free-list length + never-used == objs`; it is filed in the fullness group its in-use
//! count calls for, at the list position it records; no empty zspage is kept; exactly
//! `inuse` live handles point into it, each at a used object not on the free list, and with
//! the kernel's layout (`Header::Handle`) that object's header names that handle. Per
//! class shard: every live handle names a live zspage and no place is named twice; live
//! handles == objects in use; zspage count, object capacity and pages agree with the
//! zspages and the lists. Per pool: pages in zspages == `total_pages()` == pages the page
//! source has handed out.
//!
//! Shared objects: only located entries (direct handles' and anchors') count as objects and
//! own places, and with the kernel's layout a shared object's header names its anchor;
//! every alias names a shard of its own class and a live anchor there (its own shard's or
//! another's); an entry is an anchor exactly when it has a reference count, which equals
//! the number of aliases naming it from every shard and is at least 1 (exactly 1 for a
//! moved object's anchor, `merge.rs`); every content-index
//! value is a live located entry of its shard flagged `INDEXED`, and written, whose
//! capacity bytes hash to its key now, and every `INDEXED` entry is one.
//!
//! The aliases of every shard are counted first (one shard lock at a time), then each
//! shard is checked under its lock; so the pool must be still while it is checked (an
//! operation between the two passes may change what they see).

use std::collections::BTreeMap;

use crate::class::ClassGeometry;
use crate::handle::{AnchorRef, Flags, Handle};
use crate::pool::Pool;
use crate::shard::ShardInner;
use crate::sharing::content_hash;
use crate::sys::PAGE_SIZE;
use crate::zspage::{fullness_group, header};

impl Pool {
    /// Checks the pool's identities; returns a description of the first one broken.
    ///
    /// Per zspage: `inuse + free + never-used == objs` (its own), its fullness group and
    /// list position are right, every allocated object's header names the live located
    /// entry (direct handle or anchor) that points back at it. Per class: located entries
    /// == objects in use; aliases, reference counts and the content index agree (see the
    /// module docs). Per pool: pages in zspages == `total_pages()` == pages the page source
    /// has handed out.
    pub fn check_invariants(&self) -> Result<(), String> {
        // The aliases naming each anchor, from every shard.
        let mut aliases: BTreeMap<AnchorRef, u32> = BTreeMap::new();
        for (pos, shard) in self.shards.iter().enumerate() {
            let inner = shard.inner.lock();
            for (entry, anchor) in inner.handles.iter_aliases() {
                let class = self.shards.class_of(pos);
                if self.shards.get(anchor.shard).is_none()
                    || self.shards.class_of(anchor.shard) != class
                {
                    return Err(format!(
                        "class {}: alias {entry} of shard {pos} names shard {}, not of its class",
                        shard.geom.index, anchor.shard
                    ));
                }
                *aliases.entry(anchor).or_insert(0) += 1;
            }
        }
        let mut pages = 0;
        for (pos, shard) in self.shards.iter().enumerate() {
            let g = shard.geom;
            let huge = g.is_huge();
            let inner = shard.inner.lock();
            check_sharing(&g, pos, &inner, &aliases)?;
            // (zspage, object) -> handle entry, from the handle table; each place owned once.
            let mut owner = BTreeMap::new();
            for (entry, _, loc, _) in inner.handles.iter_located() {
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
                    || objs != meta.run.pages() * PAGE_SIZE / g.size
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
                    .free_list(g.size, huge)
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
                    let want = Handle::encode(pos, inner.handles.generation(entry), entry);
                    let h = Handle::from_raw(header(bytes, g.size, obj as usize));
                    if g.header > 0 && h != want {
                        return Err(format!(
                            "class {}: zspage {id}: object {obj} header {h} is not its handle {want}",
                            g.index
                        ));
                    }
                }
                inuse_sum += meta.inuse as usize;
            }
            let listed: usize = inner.groups.iter().map(Vec::len).sum();
            if count != inner.zspage_count || listed != count {
                return Err(format!("class {}: zspage count mismatch", g.index));
            }
            if inuse_sum != inner.handles.located() {
                return Err(format!(
                    "class {}: {} located entries but {inuse_sum} objects in use",
                    g.index,
                    inner.handles.located()
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

/// The shared objects and the content index of one class shard (at `pos`), given the
/// aliases naming each anchor from every shard (see the module docs).
fn check_sharing(
    g: &ClassGeometry,
    pos: usize,
    inner: &ShardInner,
    aliases: &BTreeMap<AnchorRef, u32>,
) -> Result<(), String> {
    let class = g.index;
    let sharing = &inner.sharing;
    let (mut indexed, mut flagged) = (0, 0);
    for (entry, _, loc, flags) in inner.handles.iter_located() {
        flagged += usize::from(flags.has(Flags::ANCHOR));
        if flags.has(Flags::ANCHOR) != sharing.anchors.contains_key(&entry) {
            return Err(format!(
                "class {class}: entry {entry}: anchor flag and reference counts disagree"
            ));
        }
        if flags.has(Flags::INDEXED) {
            indexed += 1;
            let hash = content_hash(inner.object(g, loc));
            if sharing.index.get(&hash) != Some(&entry) || !flags.has(Flags::WRITTEN) {
                return Err(format!(
                    "class {class}: indexed entry {entry} is not the index's entry for its bytes"
                ));
            }
        }
    }
    if indexed != sharing.index.len() {
        return Err(format!(
            "class {class}: {} index entries but {indexed} entries flagged indexed",
            sharing.index.len()
        ));
    }
    let own_aliases = inner.handles.iter_aliases().count();
    if inner.handles.live() != inner.handles.located() + own_aliases {
        return Err(format!("class {class}: live entry count mismatch"));
    }
    let here = AnchorRef {
        shard: pos,
        entry: 0,
    }..=AnchorRef {
        shard: pos,
        entry: u32::MAX,
    };
    for (anchor, _) in aliases.range(here) {
        if !sharing.anchors.contains_key(&anchor.entry) {
            return Err(format!(
                "class {class}: an alias names entry {} of shard {pos}, not a live anchor",
                anchor.entry
            ));
        }
    }
    for (&anchor, count) in &sharing.anchors {
        let named = AnchorRef {
            shard: pos,
            entry: anchor,
        };
        let naming = aliases.get(&named).copied().unwrap_or(0);
        if count.moved && count.refs != 1 {
            return Err(format!(
                "class {class}: moved anchor {anchor} of shard {pos} counts {} references",
                count.refs
            ));
        }
        if count.refs != naming || naming == 0 {
            return Err(format!(
                "class {class}: anchor {anchor} of shard {pos} counts {} references but {naming} \
                 aliases name it",
                count.refs
            ));
        }
    }
    // Every anchor counted is a live located entry flagged as one (checked above from the
    // entries' side; the counts' side: as many anchors flagged as counted).
    if flagged != sharing.anchors.len() {
        return Err(format!(
            "class {class}: {} reference counts but {flagged} anchors",
            sharing.anchors.len()
        ));
    }
    Ok(())
}
