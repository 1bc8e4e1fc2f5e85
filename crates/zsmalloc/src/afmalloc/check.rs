//! The identities of a heap, recounted from scratch (`Afmalloc::check_invariants`).

use std::collections::HashSet;

use super::heap::Heap;
use super::slab::{Cache, location, units};
use super::table::Object;

impl Heap {
    /// Checks this heap; the first broken identity as an error.
    pub fn check(&self) -> Result<(), String> {
        // Every chunk in use, by cache, from the slabs' own lists.
        let mut in_use: Vec<HashSet<u32>> = Vec::new();
        for cache in &self.caches {
            in_use.push(check_cache(cache)?);
        }
        // Every live object's chunks are in use, and no two objects share one.
        let mut owned: Vec<HashSet<u32>> = vec![HashSet::new(); self.caches.len()];
        let mut live = 0;
        let mut record_words = 0;
        for entry in 0..self.table.len() {
            let Some(object) = self.table.object(entry) else {
                continue;
            };
            live += 1;
            let size = object.size();
            if !(1..=4096).contains(&size) {
                return Err(format!("entry {entry}: size {size}"));
            }
            let chunks = self.chunks(object);
            match object {
                Object::Single { .. } if !units(size).is_power_of_two() => {
                    return Err(format!("entry {entry}: {size} bytes in one chunk"));
                }
                Object::Record { .. } => {
                    if chunks.as_slice().len() < 2 {
                        return Err(format!("entry {entry}: a record of one chunk"));
                    }
                    record_words += chunks.as_slice().len();
                }
                Object::Single { .. } => {}
            }
            for &(order, loc) in chunks.as_slice() {
                if !in_use[order].contains(&loc) {
                    return Err(format!("entry {entry}: chunk {order}/{loc:#x} not in use"));
                }
                if !owned[order].insert(loc) {
                    return Err(format!("entry {entry}: chunk {order}/{loc:#x} shared"));
                }
            }
        }
        for (order, (owned, in_use)) in owned.iter().zip(&in_use).enumerate() {
            if owned.len() != in_use.len() {
                return Err(format!(
                    "cache {order}: {} chunks in use, {} owned by objects",
                    in_use.len(),
                    owned.len()
                ));
            }
        }
        if live != self.table.live() {
            return Err(format!(
                "table: {live} live entries, counted {}",
                self.table.live()
            ));
        }
        if self.table.free_listed() != self.table.len() - live {
            return Err(format!(
                "table: {} entries, {live} live, {} on the free list",
                self.table.len(),
                self.table.free_listed()
            ));
        }
        if record_words != self.records.live_words() {
            return Err(format!(
                "records: {record_words} words in use, counted {}",
                self.records.live_words()
            ));
        }
        let free_words = self
            .records
            .free_words()
            .ok_or("records: a broken free list")?;
        if record_words + free_words != self.records.len() {
            return Err(format!(
                "records: {record_words} live + {free_words} free words of {}",
                self.records.len()
            ));
        }
        Ok(())
    }
}

/// Checks one cache's slabs and lists; the locations of its chunks in use.
fn check_cache(cache: &Cache) -> Result<HashSet<u32>, String> {
    let order = cache.chunk_size().trailing_zeros() - 3;
    let per_slab = cache.per_slab();
    let partial: HashSet<u32> = cache.partial().iter().copied().collect();
    if partial.len() != cache.partial().len() {
        return Err(format!("cache {order}: a slab listed twice as partial"));
    }
    let mut in_use = HashSet::new();
    let mut live_slabs = 0;
    let mut used = 0;
    for id in 0..cache.ids() {
        let Some(slab) = cache.slab(id) else {
            continue;
        };
        live_slabs += 1;
        used += slab.used();
        if slab.evacuating() {
            return Err(format!("cache {order} slab {id}: left evacuating"));
        }
        if slab.used() == 0 || slab.used() > per_slab || slab.bump() > per_slab {
            return Err(format!(
                "cache {order} slab {id}: {} used, bump {}",
                slab.used(),
                slab.bump()
            ));
        }
        let free = slab
            .free_listed(cache.chunk_size())
            .ok_or_else(|| format!("cache {order} slab {id}: broken free list"))?;
        let free: HashSet<usize> = free.into_iter().collect();
        if slab.bump() - free.len() != slab.used() {
            return Err(format!(
                "cache {order} slab {id}: bump {} with {} free, {} used",
                slab.bump(),
                free.len(),
                slab.used()
            ));
        }
        in_use.extend(
            (0..slab.bump())
                .filter(|i| !free.contains(i))
                .map(|i| location(id as u32, i)),
        );
        let listed = partial.contains(&(id as u32));
        if listed != (slab.used() < per_slab) {
            return Err(format!(
                "cache {order} slab {id}: {} used, partial {listed}",
                slab.used()
            ));
        }
    }
    if live_slabs != cache.live_slabs() || used != cache.used() {
        return Err(format!(
            "cache {order}: {live_slabs} slabs with {used} chunks, counted {} with {}",
            cache.live_slabs(),
            cache.used()
        ));
    }
    let ids: HashSet<u32> = cache.free_ids().iter().copied().collect();
    if ids.len() != cache.free_ids().len()
        || ids.len() + live_slabs != cache.ids()
        || ids.iter().any(|&id| cache.slab(id as usize).is_some())
    {
        return Err(format!(
            "cache {order}: free slab ids disagree with the slabs"
        ));
    }
    Ok(in_use)
}
