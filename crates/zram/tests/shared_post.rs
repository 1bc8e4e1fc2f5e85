//! Post-processing of slots that share one stored object (seed 004: after `fold`, or with
//! inline `dedup`): recompression encodes the object once for all its slots and they stay
//! shared; writeback writes it to the backing store once and the slots share the copy,
//! which goes with the last of them; a slot rewritten or read while its batch is on the
//! way never loses data, and every count stays exact.

mod common;
#[path = "common/post.rs"]
mod post;
#[path = "common/text.rs"]
mod text;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::random;
use post::Stalling;
use zram::backing::{Backing, MemBacking};
use zram::slot::Flags;
use zram::stats::Counters;
use zram::{IdleRequest, PAGE_SIZE, RecompressRequest, WritebackRequest, Zram, ZramConfig};

const PAGES: usize = 64;
/// The pages that hold the shared page.
const SHARED: [usize; 6] = [3, 10, 11, 20, 40, 63];

/// Text that lz4 packs to about half and zstd much further.
fn text(page: usize) -> Vec<u8> {
    text::text_page(
        page,
        &["fold ", "share ", "handle ", "object ", "dedup\n", "copy "],
    )
}

fn config(dedup: bool, batch: u32) -> ZramConfig {
    ZramConfig {
        dedup,
        ..post::config(PAGES, batch)
    }
}

fn put(zram: &Zram, image: &mut [u8], p: usize, data: &[u8]) {
    zram.write((p * PAGE_SIZE) as u64, data).unwrap();
    image[p * PAGE_SIZE..(p + 1) * PAGE_SIZE].copy_from_slice(data);
}

fn discard(zram: &Zram, image: &mut [u8], p: usize) {
    zram.discard((p * PAGE_SIZE) as u64, PAGE_SIZE as u64)
        .unwrap();
    image[p * PAGE_SIZE..(p + 1) * PAGE_SIZE].fill(0);
}

/// A device whose pages [`SHARED`] hold `shared` in one object (stored once by `dedup`,
/// else folded into one by `fold`); with `others`, pages 0..24 else hold distinct text and
/// 24..32 distinct random pages (stored raw). And its image.
fn device(
    backing: Option<Arc<dyn Backing>>,
    shared: &[u8],
    others: bool,
    dedup: bool,
    batch: u32,
) -> (Zram, Vec<u8>) {
    let zram = Zram::with_backing(config(dedup, batch), backing).unwrap();
    let mut image = vec![0u8; PAGES * PAGE_SIZE];
    for p in 0..PAGES {
        if SHARED.contains(&p) {
            put(&zram, &mut image, p, shared);
        } else if others && p < 24 {
            put(&zram, &mut image, p, &text(p));
        } else if others && p < 32 {
            put(
                &zram,
                &mut image,
                p,
                &random(PAGE_SIZE, 2 * p as u64 + 1000),
            );
        }
    }
    if !dedup {
        assert_eq!(zram.pool().share_stats().shared_objects, 0);
        zram.fold().unwrap();
    }
    let s = zram.pool().share_stats();
    assert_eq!(
        (s.shared_objects, s.extra_handles),
        (1, SHARED.len() as u64 - 1),
        "{s:?}"
    );
    assert_eq!(zram.fold_stats().shared_objects, 1);
    (zram, image)
}

/// Slots holding data besides [`SHARED`] with `others`.
const OTHERS: usize = 24 - 4 + 8;

/// Every byte reads back (without recording an access) and the pool is sound.
fn same_bytes(zram: &Zram, image: &[u8]) {
    let mut back = vec![0xEEu8; image.len()];
    zram.inspect(0, &mut back).unwrap();
    for p in 0..PAGES {
        assert!(
            back[p * PAGE_SIZE..(p + 1) * PAGE_SIZE] == image[p * PAGE_SIZE..(p + 1) * PAGE_SIZE],
            "page {p} differs"
        );
    }
    zram.pool().check_invariants().unwrap();
}

/// The counts agree with the slots: `compr_data_size` is the sum of the resident slots'
/// lengths, `bd_count` the written-back slots, and the backing store holds each file copy
/// the slots name once (slots naming one offset agree on its length); no slot is left
/// marked `PP`. Returns the number of copies.
fn check_accounts(zram: &Zram) -> usize {
    let (mut resident, mut wb) = (0, 0);
    let mut copies: HashMap<u64, usize> = HashMap::new();
    for p in 0..PAGES {
        let e = zram.slot(p).unwrap();
        assert!(!e.flags.contains(Flags::PP), "page {p} still marked PP");
        if e.flags.contains(Flags::WB) {
            wb += 1;
            let len = *copies.entry(e.handle).or_insert(e.len);
            assert_eq!(len, e.len, "page {p}");
        } else {
            resident += e.len as u64;
        }
    }
    assert_eq!(zram.mm_stat().compr_data_size, resident);
    assert_eq!(zram.bd_stat().bd_count, wb);
    let live: usize = copies.values().sum();
    if let Some(stats) = zram.backing_stats() {
        assert_eq!(stats.live_bytes, live as u64);
    }
    copies.len()
}

fn every_page() -> WritebackRequest {
    format!("page_indexes=0-{}", PAGES - 1).parse().unwrap()
}

#[test]
fn recompression_encodes_a_shared_object_once_for_all_its_slots() {
    let (zram, mut image) = device(None, &text(1000), true, true, 4);
    let before = zram.mm_stat();
    zram.mark_idle(IdleRequest::All);
    let r = zram.recompress(&RecompressRequest::default()).unwrap();
    let slots = (OTHERS + SHARED.len()) as u64;
    assert_eq!(r.attempts, slots);
    assert_eq!(r.shared, SHARED.len() as u64 - 1, "{r:?}");
    assert_eq!(
        r.codec_runs,
        slots - r.shared,
        "the codec ran once for them"
    );
    assert_eq!(r.recompressed + r.incompressible, slots, "{r:?}");
    assert_eq!(r.incompressible, 8, "the random pages: {r:?}");
    let c = zram.counters();
    assert_eq!(Counters::get(&c.recomp_attempts), slots);
    assert_eq!(Counters::get(&c.recomp_done), r.recompressed);
    let first = zram.slot(SHARED[0]).unwrap();
    for &p in &SHARED {
        let e = zram.slot(p).unwrap();
        assert_eq!((e.prio, e.len), (1, first.len), "page {p}");
        assert!(e.flags.contains(Flags::IDLE), "not an access: page {p}");
    }
    let s = zram.pool().share_stats();
    assert_eq!(
        (s.shared_objects, s.extra_handles),
        (1, SHARED.len() as u64 - 1),
        "still one object: {s:?}"
    );
    let after = zram.mm_stat();
    assert_eq!(
        before.compr_data_size - after.compr_data_size,
        r.saved_bytes,
        "every slot's saving counts"
    );
    check_accounts(&zram);
    same_bytes(&zram, &image);
    assert_eq!(
        zram.recompress(&RecompressRequest::default())
            .unwrap()
            .attempts,
        0
    );

    // The slots let go of the object one by one; it goes with the last.
    put(&zram, &mut image, SHARED[0], &text(2000));
    assert_eq!(zram.pool().share_stats().extra_handles, 4);
    for &p in &SHARED[1..5] {
        discard(&zram, &mut image, p);
        same_bytes(&zram, &image);
    }
    assert_eq!(zram.pool().share_stats().shared_objects, 0);
    discard(&zram, &mut image, SHARED[5]);
    check_accounts(&zram);
    same_bytes(&zram, &image);
}

#[test]
fn a_shared_object_no_algorithm_shrinks_is_tried_once_and_marked_in_every_slot() {
    let (zram, image) = device(None, &random(PAGE_SIZE, 99), true, true, 4);
    let r = zram.recompress(&"type=huge".parse().unwrap()).unwrap();
    let slots = 8 + SHARED.len() as u64;
    assert_eq!((r.attempts, r.incompressible), (slots, slots), "{r:?}");
    assert_eq!((r.recompressed, r.shared), (0, 0));
    assert_eq!(r.codec_runs, 9, "once for the shared page");
    for &p in &SHARED {
        let f = zram.slot(p).unwrap().flags;
        assert!(
            f.contains(Flags::HUGE.with(Flags::INCOMPRESSIBLE)),
            "page {p}"
        );
    }
    let s = zram.pool().share_stats();
    assert_eq!((s.shared_objects, s.extra_handles), (1, 5), "{s:?}");
    check_accounts(&zram);
    same_bytes(&zram, &image);
}

#[test]
fn folded_slots_are_eligible_each_on_its_own_then_written_back_once_per_object() {
    let backing = Arc::new(MemBacking::new());
    let (zram, image) = device(Some(backing.clone()), &text(1000), true, false, 3);
    zram.mark_idle(IdleRequest::All);
    // Two of the sharing slots are read: no longer idle.
    let mut page = vec![0u8; PAGE_SIZE];
    for p in [SHARED[1], SHARED[4]] {
        zram.read((p * PAGE_SIZE) as u64, &mut page).unwrap();
        assert_eq!(page, text(1000));
    }
    let r = zram.recompress(&"type=idle".parse().unwrap()).unwrap();
    assert_eq!(r.shared, 3, "four idle slots, one encoding: {r:?}");
    for (i, &p) in SHARED.iter().enumerate() {
        let e = zram.slot(p).unwrap();
        let hot = i == 1 || i == 4;
        assert_eq!(e.prio, if hot { 0 } else { 1 }, "page {p}");
        assert_eq!(e.flags.contains(Flags::IDLE), !hot, "page {p}");
    }
    let s = zram.pool().share_stats();
    assert_eq!(
        (s.shared_objects, s.extra_handles),
        (2, 1 + 3),
        "the old object for the hot slots, the new one for the idle ones: {s:?}"
    );
    same_bytes(&zram, &image);

    // Writeback takes both objects, each written once for its slots.
    let r = zram.writeback(&every_page()).unwrap();
    let slots = (OTHERS + SHARED.len()) as u64;
    assert_eq!((r.slots, r.pages, r.shared), (slots, slots, 4), "{r:?}");
    assert_eq!(r.shared_pages, 4);
    assert_eq!(backing.len(), OTHERS + 2);
    let stats = backing.stats();
    assert_eq!((stats.bytes_written, stats.live_bytes), (r.bytes, r.bytes));
    let bd = zram.bd_stat();
    assert_eq!((bd.bd_count, bd.bd_writes), (slots, slots - 4));
    assert_eq!(
        Counters::get(&zram.counters().bd_write_bytes),
        r.bytes,
        "bytes really written"
    );
    assert_eq!(zram.pool().share_stats().shared_objects, 0);
    assert_eq!(zram.mm_stat().compr_data_size, 0);
    assert_eq!(check_accounts(&zram), OTHERS + 2);
    same_bytes(&zram, &image);
}

#[test]
fn writeback_writes_a_shared_object_once_and_frees_it_with_its_last_slot() {
    let backing = Arc::new(MemBacking::new());
    // Batches of two: the sharing slots span several.
    let (zram, mut image) = device(Some(backing.clone()), &text(1000), true, true, 2);
    let shared_len = zram.slot(SHARED[0]).unwrap().len as u64;
    let r = zram.writeback(&every_page()).unwrap();
    let slots = (OTHERS + SHARED.len()) as u64;
    assert_eq!((r.slots, r.shared), (slots, 5), "{r:?}");
    assert_eq!(backing.len(), OTHERS + 1, "the shared stream once");
    let stats = backing.stats();
    assert_eq!((stats.bytes_written, stats.live_bytes), (r.bytes, r.bytes));
    assert_eq!(zram.bd_stat().bd_writes, slots - r.shared_pages);
    assert_eq!(r.shared_pages, 5);
    let offset = zram.slot(SHARED[0]).unwrap().handle;
    for &p in &SHARED {
        let e = zram.slot(p).unwrap();
        assert_eq!((e.flags, e.handle), (Flags::WB, offset), "page {p}");
    }
    assert_eq!(zram.pool().share_stats().shared_objects, 0);
    check_accounts(&zram);
    same_bytes(&zram, &image);
    let mut page = vec![0u8; PAGE_SIZE];
    zram.read((SHARED[2] * PAGE_SIZE) as u64, &mut page)
        .unwrap();
    assert_eq!(page, text(1000));

    // Rewriting or discarding all but one slot keeps the copy; the last frees it.
    put(&zram, &mut image, SHARED[0], &text(2000));
    for &p in &SHARED[1..5] {
        discard(&zram, &mut image, p);
        assert_eq!(backing.len(), OTHERS + 1);
        same_bytes(&zram, &image);
    }
    zram.read((SHARED[5] * PAGE_SIZE) as u64, &mut page)
        .unwrap();
    assert_eq!(page, text(1000));
    let live = backing.stats().live_bytes;
    discard(&zram, &mut image, SHARED[5]);
    assert_eq!(backing.len(), OTHERS, "the copy went with its last slot");
    assert_eq!(backing.stats().live_bytes, live - shared_len);
    check_accounts(&zram);
    same_bytes(&zram, &image);
    zram.clear();
    assert!(backing.is_empty());
}

#[test]
fn a_file_holds_a_shared_object_once() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("backing");
    std::fs::File::create(&path).unwrap();
    let zram = Zram::new(ZramConfig {
        backing_dev: Some(path),
        ..config(true, 4)
    })
    .unwrap();
    let mut image = vec![0u8; PAGES * PAGE_SIZE];
    for p in 0..PAGES {
        let data = if SHARED.contains(&p) {
            text(1000)
        } else {
            text(p)
        };
        put(&zram, &mut image, p, &data);
    }
    let shared_len = zram.slot(SHARED[0]).unwrap().len as u64;
    zram.mark_idle(IdleRequest::All);
    let r = zram.writeback(&"idle".parse().unwrap()).unwrap();
    assert_eq!((r.slots, r.shared), (PAGES as u64, 5), "{r:?}");
    let stats = zram.backing_stats().unwrap();
    assert_eq!(stats.live_bytes, r.bytes);
    assert_eq!(stats.bytes_written, r.bytes);
    assert_eq!(check_accounts(&zram), PAGES - 5);
    same_bytes(&zram, &image);
    for &p in &SHARED[..5] {
        discard(&zram, &mut image, p);
    }
    assert_eq!(zram.backing_stats().unwrap().live_bytes, r.bytes);
    same_bytes(&zram, &image);
    discard(&zram, &mut image, SHARED[5]);
    assert_eq!(
        zram.backing_stats().unwrap().live_bytes,
        r.bytes - shared_len
    );
    check_accounts(&zram);
    same_bytes(&zram, &image);
}

/// A device of the shared page alone on `backing`, in batches of `batch`, with
/// `writeback_limit` on at `limit` if given; writes back every page while `meanwhile` acts
/// during the first append. Returns the device, its image after `meanwhile`, and the
/// pass's report.
fn writeback_while(
    backing: &Arc<Stalling>,
    batch: u32,
    limit: Option<u64>,
    meanwhile: impl FnOnce(&Zram, &mut Vec<u8>),
) -> (Arc<Zram>, Vec<u8>, zram::WritebackReport) {
    let (zram, mut image) = device(Some(backing.clone()), &text(1000), false, true, batch);
    if let Some(limit) = limit {
        zram.set_writeback_limit_enable(true);
        zram.set_writeback_limit(limit);
    }
    let zram = Arc::new(zram);
    let z = Arc::clone(&zram);
    let worker = std::thread::spawn(move || z.writeback(&every_page()));
    backing.gate.wait();
    meanwhile(&zram, &mut image);
    backing.gate.wait();
    let report = worker.join().unwrap().unwrap();
    (zram, image, report)
}

#[test]
fn slots_rewritten_or_read_during_the_append_stay_and_the_others_share_the_copy() {
    let backing = Stalling::new();
    // The sharing slots all have one length: taken in index order, four then two.
    let (zram, mut image, r) = writeback_while(&backing, 4, None, |zram, image| {
        for &p in &SHARED[..4] {
            assert!(zram.slot(p).unwrap().flags.contains(Flags::PP));
        }
        put(zram, image, SHARED[0], &text(2000));
        discard(zram, image, SHARED[1]);
        let mut page = vec![0u8; 10];
        zram.read((SHARED[2] * PAGE_SIZE) as u64, &mut page)
            .unwrap();
    });
    assert_eq!((r.slots, r.shared), (3, 2), "{r:?}");
    for &p in &SHARED[3..] {
        assert_eq!(zram.slot(p).unwrap().flags, Flags::WB, "page {p}");
    }
    for &p in &SHARED[..3] {
        assert!(!zram.slot(p).unwrap().flags.contains(Flags::WB), "page {p}");
    }
    assert_eq!(backing.inner.len(), 1);
    assert_eq!(zram.bd_stat().bd_writes, 1);
    assert_eq!(backing.stats().bytes_written, r.bytes);
    assert_eq!(
        zram.pool().share_stats().shared_objects,
        0,
        "page 11 alone names the old object now"
    );
    assert_eq!(check_accounts(&zram), 1);
    same_bytes(&zram, &image);
    for &p in &SHARED[3..5] {
        discard(&zram, &mut image, p);
    }
    assert_eq!(backing.inner.len(), 1);
    same_bytes(&zram, &image);
    put(&zram, &mut image, SHARED[5], &text(3000));
    assert!(backing.inner.is_empty());
    assert_eq!(check_accounts(&zram), 0);
    same_bytes(&zram, &image);
}

#[test]
fn a_copy_whose_first_slots_went_is_kept_for_the_later_ones() {
    let backing = Stalling::new();
    let (zram, mut image, r) = writeback_while(&backing, 2, None, |zram, image| {
        discard(zram, image, SHARED[0]);
        put(zram, image, SHARED[1], &text(2000));
    });
    // The first batch switched no slot; the later ones found the copy still there.
    assert_eq!((r.slots, r.shared), (4, 3), "{r:?}");
    assert_eq!(r.bytes, backing.stats().bytes_written);
    assert_eq!(backing.inner.len(), 1);
    assert_eq!(zram.bd_stat().bd_writes, 1);
    assert_eq!(check_accounts(&zram), 1);
    same_bytes(&zram, &image);
    for &p in &SHARED[2..] {
        discard(&zram, &mut image, p);
    }
    assert!(backing.inner.is_empty());
    assert_eq!(check_accounts(&zram), 0);
    same_bytes(&zram, &image);
}

#[test]
fn a_copy_no_slot_switched_to_is_freed_and_the_budget_given_back() {
    let backing = Stalling::new();
    let (zram, image, r) = writeback_while(&backing, 8, Some(100), |zram, image| {
        assert_eq!(zram.writeback_limit(), 100 - SHARED.len() as u64);
        for (i, &p) in SHARED.iter().enumerate() {
            put(zram, image, p, &text(2000 + i));
        }
    });
    assert_eq!((r.slots, r.bytes, r.shared), (0, 0, 0), "{r:?}");
    assert!(backing.inner.is_empty(), "the copy is freed");
    assert!(backing.stats().bytes_written > 0, "it was written");
    let bd = zram.bd_stat();
    assert_eq!((bd.bd_count, bd.bd_writes), (0, 0));
    assert_eq!(zram.writeback_limit(), 100, "the budget is given back");
    assert_eq!(check_accounts(&zram), 0);
    same_bytes(&zram, &image);
}

#[test]
fn shared_units_of_several_objects_are_post_processed_right() {
    let backing = Arc::new(MemBacking::new());
    let zram = Zram::with_backing(
        ZramConfig {
            unit_size: zram::Size(16 * 1024),
            ..config(true, 2)
        },
        Some(backing.clone()),
    )
    .unwrap();
    let unit: Vec<u8> = (0..4)
        .flat_map(|i| random(PAGE_SIZE / 2, i).repeat(2))
        .collect();
    let mut image = vec![0u8; PAGES * PAGE_SIZE];
    for u in 0..PAGES / 4 {
        let data = if u % 3 == 0 {
            unit.clone()
        } else {
            (0..4).flat_map(|i| text(u * 4 + i)).collect()
        };
        zram.write((u * 4 * PAGE_SIZE) as u64, &data).unwrap();
        image[u * 4 * PAGE_SIZE..(u * 4 + 4) * PAGE_SIZE].copy_from_slice(&data);
    }
    zram.fold().unwrap();
    let before = zram.pool().share_stats();
    let r = zram.recompress(&RecompressRequest::default()).unwrap();
    assert_eq!(r.codec_runs, r.attempts - r.shared, "{r:?}");
    assert!(r.shared <= before.extra_handles, "{r:?} {before:?}");
    same_bytes(&zram, &image);
    let r = zram.writeback(&every_page()).unwrap();
    assert_eq!(r.slots, (PAGES / 4) as u64);
    assert_eq!(backing.stats().bytes_written, r.bytes);
    let (mut resident, mut copies) = (0, HashMap::new());
    for u in 0..PAGES / 4 {
        let e = zram.slot(u).unwrap();
        assert!(e.flags.contains(Flags::WB));
        copies.insert(e.handle, e.len as u64);
        resident += u64::from(!e.flags.contains(Flags::WB));
    }
    assert_eq!(resident, 0);
    assert_eq!(backing.stats().live_bytes, copies.values().sum::<u64>());
    assert_eq!(zram.pool().share_stats().shared_objects, 0);
    assert_eq!(zram.bd_stat().bd_count, PAGES as u64);
    same_bytes(&zram, &image);
    zram.clear();
    assert!(backing.is_empty());
    zram.pool().check_invariants().unwrap();
}

#[test]
fn passes_racing_writes_reads_discards_and_folds_lose_nothing() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 2000;
    /// Rounds of passes the workers wait for at least.
    const PASSES: u64 = 50;
    let backing = Arc::new(MemBacking::new());
    let zram = Arc::new(
        Zram::with_backing(config(true, 3), Some(backing.clone() as Arc<dyn Backing>)).unwrap(),
    );
    // Few contents, so that most slots share an object with slots of other threads.
    let contents: Vec<Vec<u8>> = (0..4)
        .map(|i| text(5000 + i))
        .chain((0..2).map(|i| random(PAGE_SIZE, 77 + 2 * i)))
        .collect();
    let contents = Arc::new(contents);
    let stop = Arc::new(AtomicBool::new(false));
    let passes = Arc::new(AtomicU64::new(0));
    let post = {
        let (zram, stop, passes) = (Arc::clone(&zram), Arc::clone(&stop), Arc::clone(&passes));
        std::thread::spawn(move || {
            // Passes, and slots that took a shared re-encoding or file copy.
            let (mut rounds, mut shared) = (0u64, 0u64);
            while !stop.load(Ordering::SeqCst) {
                zram.mark_idle(IdleRequest::All);
                if let Ok(r) = zram.recompress(&RecompressRequest::default()) {
                    shared += r.shared;
                }
                if let Ok(r) = zram.writeback(&every_page()) {
                    shared += r.shared;
                }
                if rounds.is_multiple_of(3) {
                    zram.fold().unwrap();
                }
                rounds += 1;
                passes.store(rounds, Ordering::SeqCst);
            }
            (rounds, shared)
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (zram, contents) = (Arc::clone(&zram), Arc::clone(&contents));
            let passes = Arc::clone(&passes);
            std::thread::spawn(move || {
                // Thread `t` owns the pages `p % THREADS == t`.
                let mut image = vec![0u8; PAGES * PAGE_SIZE];
                let mut s = t as u64 + 1;
                let mut page = vec![0u8; PAGE_SIZE];
                let mut done = 0;
                while done < ROUNDS || passes.load(Ordering::SeqCst) < PASSES {
                    done += 1;
                    let r = common::xorshift(&mut s);
                    let p = (r as usize % (PAGES / THREADS)) * THREADS + t;
                    let at = p * PAGE_SIZE;
                    match (r >> 32) % 8 {
                        0..=3 => {
                            let data = &contents[(r >> 40) as usize % contents.len()];
                            zram.write(at as u64, data).unwrap();
                            image[at..at + PAGE_SIZE].copy_from_slice(data);
                        }
                        4 => {
                            zram.discard(at as u64, PAGE_SIZE as u64).unwrap();
                            image[at..at + PAGE_SIZE].fill(0);
                        }
                        _ => {
                            zram.read(at as u64, &mut page).unwrap();
                            assert!(page == image[at..at + PAGE_SIZE], "page {p}");
                        }
                    }
                }
                image
            })
        })
        .collect();
    let mut image = vec![0u8; PAGES * PAGE_SIZE];
    for (t, w) in workers.into_iter().enumerate() {
        let mine = w.join().unwrap();
        for p in (t..PAGES).step_by(THREADS) {
            image[p * PAGE_SIZE..(p + 1) * PAGE_SIZE]
                .copy_from_slice(&mine[p * PAGE_SIZE..(p + 1) * PAGE_SIZE]);
        }
    }
    stop.store(true, Ordering::SeqCst);
    let (rounds, shared) = post.join().unwrap();
    println!("{rounds} rounds of passes, {shared} slots took a shared result");
    assert!(rounds > 0 && shared > 0);
    check_accounts(&zram);
    same_bytes(&zram, &image);
    // Once more without anything racing: each object in memory is written once.
    let mut objects = HashMap::new();
    let mut resident = 0;
    for p in 0..PAGES {
        let e = zram.slot(p).unwrap();
        if e.len != 0 && !e.flags.contains(Flags::WB) {
            let id = zram
                .pool()
                .object_id(zram::Handle::from_raw(e.handle))
                .unwrap();
            objects.insert(id, e.len as u64);
            resident += 1;
        }
    }
    let held = backing.len();
    zram.mark_idle(IdleRequest::All);
    let r = zram.writeback(&every_page()).unwrap();
    assert_eq!(r.slots, resident);
    assert_eq!(r.shared, resident - objects.len() as u64, "{r:?}");
    assert_eq!(r.bytes, objects.values().sum::<u64>());
    assert_eq!(backing.len(), held + objects.len());
    check_accounts(&zram);
    same_bytes(&zram, &image);
    zram.clear();
    assert!(backing.is_empty());
    assert_eq!(zram.pool().share_stats().shared_objects, 0);
    zram.pool().check_invariants().unwrap();
}
