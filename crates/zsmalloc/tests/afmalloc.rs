//! afmalloc's own behaviour: objects built from power-of-two chunks (one chunk for a
//! power-of-two size, 256 + 128 + 16 for 400 bytes), compaction that frees the pages it
//! said it could while keeping every object and handle, many threads racing with
//! compaction, and the metadata an object costs.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use zsmalloc::{Afmalloc, Allocator, Backend, Error, Handle, PoolConfig};

fn afmalloc(shards: usize) -> Afmalloc {
    Afmalloc::with_config(PoolConfig {
        allocator: Allocator::Afmalloc,
        shards,
        populate: false,
        page_cache_pages: 0,
        ..PoolConfig::default()
    })
    .unwrap()
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

fn assert_reads(a: &dyn Backend, h: Handle, want: &[u8]) {
    let mut got = vec![0u8; want.len()];
    a.read(h, &mut got).unwrap();
    assert!(got == want, "handle {h}: read back different bytes");
}

/// Chunk sizes of the caches, in the order `chunks_in_use` reports them.
fn chunk_size(order: usize) -> usize {
    8 << order
}

#[test]
fn power_of_two_objects_take_one_chunk() {
    let a = afmalloc(1);
    for order in 0..10 {
        let size = chunk_size(order);
        // The size itself, and one that rounds up to it (8-byte granules).
        for len in [size, size - 7.min(size - 1)] {
            let h = a.malloc(len).unwrap();
            let mut want = [0usize; 10];
            want[order] = 1;
            assert_eq!(a.chunks_in_use(), want, "{len} bytes");
            assert_eq!(a.footprint(len).unwrap(), size);
            let data = pattern(len as u64, len);
            a.write(h, &data).unwrap();
            assert_reads(&a, h, &data);
            assert!(matches!(
                a.write(h, &vec![0u8; len + 1]),
                Err(Error::TooLarge { capacity, .. }) if capacity == len
            ));
            a.free(h).unwrap();
            assert_eq!(a.chunks_in_use(), [0; 10]);
        }
    }
    a.check_invariants().unwrap();
    assert_eq!(a.total_pages(), 0);
}

#[test]
fn a_400_byte_object_takes_256_128_and_16_byte_chunks() {
    let a = afmalloc(1);
    assert_eq!(a.footprint(400).unwrap(), 400);
    assert_eq!(a.footprint(393).unwrap(), 400);
    let h = a.malloc(400).unwrap();
    let mut want = [0usize; 10];
    want[1] = 1; // 16
    want[4] = 1; // 128
    want[5] = 1; // 256
    assert_eq!(a.chunks_in_use(), want);
    // Three pages: one slab per chunk size.
    assert_eq!(a.total_pages(), 3);
    let data = pattern(400, 400);
    a.write(h, &data).unwrap();
    assert_reads(&a, h, &data);
    // Prefixes that end inside each chunk read back too.
    for len in [0, 1, 255, 256, 257, 383, 384, 385, 399] {
        assert_reads(&a, h, &data[..len]);
    }
    let mut too_long = [0u8; 401];
    assert!(matches!(
        a.read(h, &mut too_long),
        Err(Error::TooLarge {
            len: 401,
            capacity: 400
        })
    ));
    a.free(h).unwrap();
    assert_eq!(a.total_pages(), 0);
}

#[test]
fn compaction_frees_what_it_promised_and_keeps_every_object() {
    let a = afmalloc(1);
    let mut rng = SmallRng::seed_from_u64(3);
    let mut live: HashMap<u64, Vec<u8>> = HashMap::new();
    for i in 0..20_000u64 {
        let size = match rng.gen_range(0..4) {
            0 => rng.gen_range(1..=200),
            1 => rng.gen_range(200..=1000),
            2 => rng.gen_range(1000..=3000),
            _ => rng.gen_range(3000..=4096),
        };
        let h = a.malloc(size).unwrap();
        let data = pattern(i, size);
        a.write(h, &data).unwrap();
        live.insert(h.to_raw(), data);
    }
    let full = a.total_pages();
    let handles: Vec<u64> = live.keys().copied().collect();
    for raw in handles {
        if rng.gen_range(0..100) < 85 {
            a.free(Handle::from_raw(raw)).unwrap();
            live.remove(&raw);
        }
    }
    a.check_invariants().unwrap();
    let before = a.total_pages();
    let freeable = a.freeable_pages();
    assert!(freeable > 0, "85% freed at random leaves sparse slabs");
    let freed = a.compact();
    println!("{full} pages full, {before} after frees, compaction freed {freed} of {freeable}");
    assert!(freed > 0);
    assert!(freeable >= freed);
    assert_eq!(a.total_pages(), before - freed);
    assert_eq!(a.pages_compacted(), freed as u64);
    assert_eq!(a.freeable_pages(), 0, "one pass empties every sparse slab");
    a.check_invariants().unwrap();
    assert_eq!(a.objects(), live.len());
    for (&raw, data) in &live {
        assert_reads(&a, Handle::from_raw(raw), data);
    }
    // The handles stay usable: rewrite and free through them.
    for (&raw, data) in &live {
        let h = Handle::from_raw(raw);
        let flipped: Vec<u8> = data.iter().map(|b| !b).collect();
        a.write(h, &flipped).unwrap();
        assert_reads(&a, h, &flipped);
        a.free(h).unwrap();
    }
    assert_eq!(a.total_pages(), 0);
    assert_eq!(a.compact(), 0);
    a.check_invariants().unwrap();
}

#[test]
fn threads_racing_with_compaction_always_read_what_they_wrote() {
    let a = Arc::new(afmalloc(2));
    let done = Arc::new(AtomicBool::new(false));
    let compactor = {
        let (a, done) = (Arc::clone(&a), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut passes = 0;
            let mut freed = 0;
            while !done.load(Ordering::Relaxed) && passes < 100_000 {
                freed += a.compact();
                passes += 1;
            }
            freed
        })
    };
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let a = Arc::clone(&a);
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t);
                let mut mine: Vec<(Handle, Vec<u8>)> = Vec::new();
                for i in 0..6000u64 {
                    if mine.len() < 300 && rng.gen_range(0..3) != 0 {
                        let size = rng.gen_range(1..=4096);
                        let h = a.malloc(size).unwrap();
                        let data = pattern(t << 32 | i, size);
                        a.write(h, &data).unwrap();
                        mine.push((h, data));
                    } else if !mine.is_empty() {
                        let (h, data) = mine.swap_remove(rng.gen_range(0..mine.len()));
                        assert_reads(&*a, h, &data);
                        a.free(h).unwrap();
                    }
                    if let Some((h, data)) = mine.get(rng.gen_range(0..mine.len().max(1))) {
                        let mut seen = false;
                        a.read_with(*h, data.len(), &mut |b| seen = b == &data[..])
                            .unwrap();
                        assert!(seen, "thread {t}: {h} read back different bytes");
                    }
                }
                for (h, data) in mine {
                    assert_reads(&*a, h, &data);
                    a.free(h).unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let freed = compactor.join().unwrap();
    println!("compaction freed {freed} pages while the workers ran");
    a.check_invariants().unwrap();
    assert_eq!(a.objects(), 0);
    assert_eq!(a.total_pages(), 0);
}

/// What afmalloc says an object costs: its handle word (8 bytes), and for an object of
/// several chunks a record of 4 bytes per chunk.
fn object_metadata(size: usize) -> usize {
    let chunks = size.div_ceil(8).count_ones() as usize;
    8 + if chunks > 1 { 4 * chunks } else { 0 }
}

/// Bookkeeping per slab (page), and the most spare room the tables may hold: one 4 KiB
/// block per table (handle table, records, ten slab arrays) and the fixed structures.
const SLAB_BYTES: usize = 32;
const SPARE_BYTES: usize = 64 << 10;

#[test]
fn metadata_per_object_is_within_the_stated_bound() {
    let mut rng = SmallRng::seed_from_u64(9);
    let n = 50_000;
    for (what, lo, hi) in [
        ("1-2 KiB", 1024, 2048),
        ("1 KiB", 1024, 1024),
        ("1-4096 B", 1, 4096),
    ] {
        let a = afmalloc(1);
        let mut objects = 0;
        let handles: Vec<Handle> = (0..n)
            .map(|_| {
                let size = rng.gen_range(lo..=hi);
                objects += object_metadata(size);
                a.malloc(size).unwrap()
            })
            .collect();
        let bound = objects + SLAB_BYTES * a.total_pages() + SPARE_BYTES;
        println!(
            "{n} objects of {what}: {} metadata bytes ({} per object; objects' own {}, \
             bound {bound}), {} pages",
            a.metadata_bytes(),
            a.metadata_bytes() / n,
            objects / n,
            a.total_pages()
        );
        assert!(
            a.metadata_bytes() <= bound,
            "{what}: {} > {bound}",
            a.metadata_bytes()
        );
        // Objects' own metadata (handle word and record) is at most 26 bytes on average for
        // 1-2 KiB and 8 for one-chunk objects; everything, slabs included, under 40.
        assert!(
            objects / n <= if lo == hi { 8 } else { 26 },
            "{what}: {}",
            objects / n
        );
        if lo >= 1024 {
            assert!(
                a.metadata_bytes() / n <= 40,
                "{what}: {}",
                a.metadata_bytes() / n
            );
        }
        for h in handles {
            a.free(h).unwrap();
        }
        assert_eq!(a.total_pages(), 0);
    }
}
