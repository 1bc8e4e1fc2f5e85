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

/// Runs `work` while another thread compacts `a` over and over (until `work` returns, at
/// most 100 000 passes); returns the pages compaction freed meanwhile.
fn while_compacting(a: &Arc<Afmalloc>, work: impl FnOnce()) -> usize {
    let done = Arc::new(AtomicBool::new(false));
    let compactor = {
        let (a, done) = (Arc::clone(a), Arc::clone(&done));
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
    work();
    done.store(true, Ordering::Relaxed);
    compactor.join().unwrap()
}

#[test]
fn threads_racing_with_compaction_always_read_what_they_wrote() {
    let a = Arc::new(afmalloc(2));
    let freed = while_compacting(&a, || {
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
    });
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

/// The bytes object `i` of `len` bytes holds.
fn fill_object(buf: &mut [u8], i: usize) {
    for (j, b) in buf.iter_mut().enumerate() {
        *b = (i.wrapping_mul(31) ^ j.wrapping_mul(7)) as u8;
    }
}

fn assert_object(a: &dyn Backend, h: Handle, i: usize, len: usize, buf: &mut [u8]) {
    fill_object(&mut buf[..len], i);
    let mut same = false;
    a.read_with(h, len, &mut |b| same = b == &buf[..len])
        .unwrap();
    assert!(same, "object {i} changed");
}

/// What the live objects of `sizes` (0: freed) need: their own metadata (handle word and
/// record).
fn live_metadata(sizes: &[usize]) -> usize {
    sizes
        .iter()
        .filter(|&&s| s > 0)
        .map(|&s| object_metadata(s))
        .sum()
}

/// The most metadata a compacted allocator may hold: 1.5 × what the live objects need
/// (`live`) and their slabs' bookkeeping, the handle table's free entries below the last
/// live one (`table_holes` bytes), the page source's list of the pages freed since the
/// high-water mark of `full_pages` (8 bytes each, in a `Vec`: up to 16) and the spare
/// room.
fn shrunk_bound(live: usize, table_holes: usize, full_pages: usize, pages: usize) -> usize {
    live * 3 / 2
        + table_holes
        + 3 * SLAB_BYTES * pages / 2
        + 16 * (full_pages - pages)
        + SPARE_BYTES
}

/// Mass frees, then compaction: the record store, the slab array and the handle table's
/// free tail shrink to what the live objects need; objects and handles survive; stale
/// handles are refused, those of trimmed entries too; refilling grows the tables again.
#[test]
fn compaction_shrinks_metadata_to_the_live_objects() {
    let a = afmalloc(1);
    let mut rng = SmallRng::seed_from_u64(21);
    let n = 200_000;
    let mut buf = vec![0u8; 4096];
    let mut sizes = vec![0usize; n];
    let mut handles = Vec::with_capacity(n);
    for (i, size) in sizes.iter_mut().enumerate() {
        *size = rng.gen_range(600..=3000);
        let h = a.malloc(*size).unwrap();
        fill_object(&mut buf[..*size], i);
        a.write(h, &buf[..*size]).unwrap();
        handles.push(h);
    }
    let full = a.metadata_bytes();
    let full_pages = a.total_pages();
    let mut stale = Vec::new();
    for i in 0..n {
        if rng.gen_range(0..10) != 0 {
            a.free(handles[i]).unwrap();
            stale.push(handles[i]);
            sizes[i] = 0;
        }
    }
    let before = a.metadata_bytes();
    let (freeable, compactable) = (a.freeable_pages(), a.compactable_pages());
    assert!(compactable > freeable, "{compactable} <= {freeable}");
    let freed = a.compact();
    a.check_invariants().unwrap();
    let after = a.metadata_bytes();
    let live = live_metadata(&sizes);
    let live_objects = sizes.iter().filter(|&&s| s > 0).count();
    // Live entries cannot move (a handle names its entry), so the free entries between
    // them stay: 8 bytes per freed object below the last live one.
    let table_holes = 8 * (n - live_objects);
    let bound = shrunk_bound(live, table_holes, full_pages, a.total_pages());
    println!(
        "{n} objects of 600-3000 B: metadata {full} B full ({full_pages} pages); 90% freed: \
         {before} B; compacted ({freed} pages freed, {} held): {after} B, bound {bound} \
         (live objects' own {live} B, table holes {table_holes} B)",
        a.total_pages()
    );
    assert!(after <= bound, "{after} > {bound}");
    assert!(after < before / 2, "{after} >= {before} / 2");
    assert_eq!(a.compactable_pages(), 0);
    for (i, &h) in handles.iter().enumerate() {
        if sizes[i] > 0 {
            assert_object(&a, h, i, sizes[i], &mut buf);
        }
    }
    for &h in &stale {
        assert!(matches!(
            a.read(h, &mut buf[..1]),
            Err(Error::StaleHandle(_))
        ));
    }

    // Free the newer half outright: the table's free tail is trimmed too.
    for i in n / 2..n {
        if sizes[i] > 0 {
            a.free(handles[i]).unwrap();
            stale.push(handles[i]);
            sizes[i] = 0;
        }
    }
    a.compact();
    a.check_invariants().unwrap();
    let trimmed = a.metadata_bytes();
    let live = live_metadata(&sizes);
    let live_objects = sizes.iter().filter(|&&s| s > 0).count();
    let table_holes = 8 * (n / 2 - live_objects);
    let bound = shrunk_bound(live, table_holes, full_pages, a.total_pages());
    println!("newer half freed, compacted: {trimmed} B, bound {bound}");
    assert!(trimmed <= bound, "{trimmed} > {bound}");
    for &h in &stale {
        assert!(matches!(
            a.read(h, &mut buf[..1]),
            Err(Error::StaleHandle(_))
        ));
        assert!(matches!(a.free(h), Err(Error::StaleHandle(_))));
    }

    // Refill: the tables grow again; old handles stay valid, stale ones refused.
    let mut more = Vec::new();
    for i in n..n + n / 2 {
        let size = rng.gen_range(600..=3000);
        let h = a.malloc(size).unwrap();
        fill_object(&mut buf[..size], i);
        a.write(h, &buf[..size]).unwrap();
        more.push((h, i, size));
    }
    a.check_invariants().unwrap();
    let refilled = a.metadata_bytes();
    println!("refilled {} objects: {refilled} B", n / 2);
    assert!(refilled > trimmed + n / 2 * 8);
    for &h in &stale {
        assert!(matches!(
            a.read(h, &mut buf[..1]),
            Err(Error::StaleHandle(_))
        ));
    }
    for (i, &h) in handles.iter().enumerate() {
        if sizes[i] > 0 {
            assert_object(&a, h, i, sizes[i], &mut buf);
        }
    }
    for &(h, i, size) in &more {
        assert_object(&a, h, i, size, &mut buf);
    }
    // Churn after the refill, compaction again, then everything goes.
    for &(h, _, _) in more.iter().step_by(2) {
        a.free(h).unwrap();
    }
    a.compact();
    a.check_invariants().unwrap();
    for &(h, i, size) in more.iter().skip(1).step_by(2) {
        assert_object(&a, h, i, size, &mut buf);
        a.free(h).unwrap();
    }
    for (i, &h) in handles.iter().enumerate() {
        if sizes[i] > 0 {
            a.free(h).unwrap();
        }
    }
    a.compact();
    a.check_invariants().unwrap();
    assert_eq!(a.total_pages(), 0);
    println!("all freed, compacted: {} B", a.metadata_bytes());
}

/// Threads filling and mass-freeing while another compacts: compaction's shrinking (slab
/// renumbering, record packing, table trimming) races with their operations under the heap
/// locks, and every object reads back what was written.
#[test]
fn threads_racing_with_shrinking_compaction_read_what_they_wrote() {
    let a = Arc::new(afmalloc(2));
    while_compacting(&a, || {
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let a = Arc::clone(&a);
                std::thread::spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(100 + t);
                    let mut mine: Vec<(Handle, usize, usize)> = Vec::new();
                    let mut buf = vec![0u8; 4096];
                    for round in 0..3usize {
                        for i in 0..8000 {
                            let id = (t as usize) << 40 | round << 20 | i;
                            let size = rng.gen_range(600..=3000);
                            let h = a.malloc(size).unwrap();
                            fill_object(&mut buf[..size], id);
                            a.write(h, &buf[..size]).unwrap();
                            mine.push((h, id, size));
                        }
                        let mut kept = Vec::new();
                        for (h, id, size) in mine {
                            if rng.gen_range(0..10) == 0 {
                                kept.push((h, id, size));
                            } else {
                                a.free(h).unwrap();
                                assert!(matches!(a.free(h), Err(Error::StaleHandle(_))));
                            }
                        }
                        mine = kept;
                        for &(h, id, size) in &mine {
                            assert_object(&*a, h, id, size, &mut buf);
                        }
                    }
                    for (h, id, size) in mine {
                        assert_object(&*a, h, id, size, &mut buf);
                        a.free(h).unwrap();
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
    });
    a.check_invariants().unwrap();
    a.compact();
    a.check_invariants().unwrap();
    assert_eq!(
        (a.objects(), a.total_pages(), a.compactable_pages()),
        (0, 0, 0)
    );
    println!(
        "all freed and compacted: {} metadata bytes",
        a.metadata_bytes()
    );
}
