//! The identities of a heap, recounted from scratch (`Afmalloc::check_invariants`).
//!
//! The recount uses bitmaps (a bit per chunk place, a bit per slab id), not hash sets, so
//! that checking a large heap takes little memory and leaves little behind in the process's
//! heap (the RSS tests check a full allocator).

use super::heap::Heap;
use super::slab::{Cache, location, split, units};
use super::table::Object;

/// A fixed set of small integers.
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Self {
        Self(vec![0; n.div_ceil(64)])
    }

    /// Sets bit `i`; whether it was clear.
    fn insert(&mut self, i: usize) -> bool {
        let (word, bit) = (i / 64, 1u64 << (i % 64));
        let was_clear = self.0[word] & bit == 0;
        self.0[word] |= bit;
        was_clear
    }

    fn contains(&self, i: usize) -> bool {
        self.0.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }
}

/// A chunk place's bit: slab id × chunks per slab + chunk index.
fn place(cache: &Cache, loc: u32) -> usize {
    let (id, index) = split(loc);
    id * cache.per_slab() + index
}

impl Heap {
    /// Checks this heap; the first broken identity as an error.
    pub fn check(&self) -> Result<(), String> {
        // Every chunk in use, by cache, from the slabs' own lists.
        let mut in_use = Vec::new();
        for cache in &self.caches {
            in_use.push(check_cache(cache)?);
        }
        // Every live object's chunks are in use, and no two objects share one.
        let mut owned: Vec<(Bits, usize)> = self
            .caches
            .iter()
            .map(|c| (Bits::new(c.ids() * c.per_slab()), 0))
            .collect();
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
                let cache = &self.caches[order];
                let (id, index) = split(loc);
                if id >= cache.ids() || index >= cache.per_slab() {
                    return Err(format!(
                        "entry {entry}: chunk {order}/{loc:#x} out of range"
                    ));
                }
                let at = place(cache, loc);
                if !in_use[order].contains(at) {
                    return Err(format!("entry {entry}: chunk {order}/{loc:#x} not in use"));
                }
                if !owned[order].0.insert(at) {
                    return Err(format!("entry {entry}: chunk {order}/{loc:#x} shared"));
                }
                owned[order].1 += 1;
            }
        }
        for (order, (cache, &(_, owned))) in self.caches.iter().zip(&owned).enumerate() {
            if owned != cache.used() {
                return Err(format!(
                    "cache {order}: {} chunks in use, {owned} owned by objects",
                    cache.used()
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
        self.table.check_trim()?;
        if !self.records.is_tight() {
            return Err("records: blocks disagree with the store's length".into());
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

/// Checks one cache's slabs and lists; the places of its chunks in use (as many as its
/// `used` count, which this checks).
fn check_cache(cache: &Cache) -> Result<Bits, String> {
    let order = cache.chunk_size().trailing_zeros() - 3;
    let per_slab = cache.per_slab();
    let mut partial = Bits::new(cache.ids());
    for &id in cache.partial() {
        if id as usize >= cache.ids() || !partial.insert(id as usize) {
            return Err(format!(
                "cache {order}: partial slab {id} bad or listed twice"
            ));
        }
    }
    let mut in_use = Bits::new(cache.ids() * per_slab);
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
        let mut free = Bits::new(per_slab);
        let mut n_free = 0;
        for i in slab
            .free_listed(cache.chunk_size())
            .ok_or_else(|| format!("cache {order} slab {id}: broken free list"))?
        {
            if !free.insert(i) {
                return Err(format!("cache {order} slab {id}: chunk {i} freed twice"));
            }
            n_free += 1;
        }
        if slab.bump() - n_free != slab.used() {
            return Err(format!(
                "cache {order} slab {id}: bump {} with {n_free} free, {} used",
                slab.bump(),
                slab.used()
            ));
        }
        for i in (0..slab.bump()).filter(|&i| !free.contains(i)) {
            in_use.insert(place(cache, location(id as u32, i)));
        }
        let listed = partial.contains(id);
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
    if !cache.is_tight() {
        return Err(format!("cache {order}: slab blocks disagree with its ids"));
    }
    let mut ids = Bits::new(cache.ids());
    for &id in cache.free_ids() {
        if id as usize >= cache.ids()
            || !ids.insert(id as usize)
            || cache.slab(id as usize).is_some()
        {
            return Err(format!(
                "cache {order}: free slab id {id} bad, listed twice or in use"
            ));
        }
    }
    if cache.free_ids().len() + live_slabs != cache.ids() {
        return Err(format!(
            "cache {order}: free slab ids disagree with the slabs"
        ));
    }
    Ok(in_use)
}
