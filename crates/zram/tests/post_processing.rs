//! Idle tracking, writeback and recompression end to end on the library: each rule of the
//! kernel's (and each beyond it) with the figures it must move, on an in-memory backing
//! store that can be made to fail or to stall.

mod common;
#[path = "common/post.rs"]
mod post;
#[path = "common/text.rs"]
mod text;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use common::random;
use post::Stalling;
use zram::backing::{Backing, MemBacking};
use zram::slot::Flags;
use zram::{IdleRequest, Mode, PAGE_SIZE, RecompressRequest, WritebackRequest, Zram, ZramConfig};

const PAGES: usize = 64;

/// Text that lz4 packs to about half and zstd much further.
fn text(page: usize) -> Vec<u8> {
    text::text_page(
        page,
        &[
            "idle ",
            "writeback ",
            "zspage ",
            "slot ",
            "handle\n",
            "class ",
        ],
    )
}

fn config() -> ZramConfig {
    post::config(PAGES, 4)
}

/// A device of text pages 0..32, random (huge) pages 32..48, same-filled 48..56, empty rest.
fn filled(backing: Option<Arc<dyn Backing>>) -> (Zram, Vec<u8>) {
    let zram = Zram::with_backing(config(), backing).unwrap();
    let mut image = vec![0u8; PAGES * PAGE_SIZE];
    for p in 0..56 {
        let page = match p {
            0..32 => text(p),
            32..48 => random(PAGE_SIZE, p as u64),
            _ => vec![p as u8; PAGE_SIZE],
        };
        zram.write((p * PAGE_SIZE) as u64, &page).unwrap();
        image[p * PAGE_SIZE..(p + 1) * PAGE_SIZE].copy_from_slice(&page);
    }
    (zram, image)
}

fn same_bytes(zram: &Zram, image: &[u8]) {
    let mut back = vec![0xEEu8; image.len()];
    zram.inspect(0, &mut back).unwrap();
    assert!(back == image, "device differs from what was written");
    zram.pool().check_invariants().unwrap();
}

fn flags(zram: &Zram, p: usize) -> Flags {
    zram.slot(p).unwrap().flags
}

#[test]
fn a_huge_mem_limit_reads_back_saturated_not_wrapped() {
    let zram = Zram::new(config()).unwrap();
    zram.set_mem_limit(u64::MAX);
    assert_eq!(zram.mm_stat().mem_limit, u64::MAX);
    zram.write(0, &text(0)).unwrap();
    assert_eq!(
        "99999999999".parse::<IdleRequest>().unwrap(),
        IdleRequest::Age(u32::MAX),
        "ages past the clock's range are taken and mark nothing"
    );
    assert_eq!(zram.mark_idle("99999999999".parse().unwrap()), 0);
}

#[test]
fn idle_marks_by_age_skip_same_and_clear_on_access() {
    let (zram, image) = filled(None);
    assert_eq!(
        zram.mark_idle("100".parse().unwrap()),
        0,
        "nothing is 100 s old yet"
    );
    zram.skew_clock(50);
    zram.write(0, &text(0)).unwrap();
    zram.skew_clock(60);
    // Page 0 was written 60 s ago, the others 110 s ago.
    assert_eq!(zram.mark_idle(IdleRequest::Age(100)), 47);
    assert!(!flags(&zram, 0).contains(Flags::IDLE));
    assert!(flags(&zram, 1).contains(Flags::IDLE));
    assert!(
        !flags(&zram, 50).contains(Flags::IDLE),
        "same-filled slots are skipped"
    );
    assert_eq!(zram.mark_idle(IdleRequest::All), 1, "only page 0 was left");
    let mut buf = vec![0u8; 100];
    zram.read(PAGE_SIZE as u64 + 7, &mut buf).unwrap();
    assert!(
        !flags(&zram, 1).contains(Flags::IDLE),
        "a read is an access"
    );
    zram.inspect(2 * PAGE_SIZE as u64, &mut buf).unwrap();
    assert!(flags(&zram, 2).contains(Flags::IDLE), "inspection is not");
    let text = zram.format_block_state();
    let flags_of = |index: usize| {
        let prefix = format!("{index} ");
        text.lines()
            .find(|l| l.trim_start().starts_with(&prefix))
            .unwrap()
    };
    for (index, marks) in [
        (1, " ......"),
        (2, " ...i.."),
        (33, " ..hi.."),
        (50, " s....."),
    ] {
        let line = flags_of(index);
        assert!(line.ends_with(marks), "{line}");
    }
    assert_eq!(text.lines().count(), 56, "one line per slot holding data");
    same_bytes(&zram, &image);
}

#[test]
fn writeback_moves_idle_slots_and_counts_pages() {
    let backing = Arc::new(MemBacking::new());
    let (zram, image) = filled(Some(backing.clone()));
    let before = zram.mm_stat();
    assert!(matches!(
        zram.writeback(&WritebackRequest::mode(Mode::Idle)),
        Ok(r) if r.slots == 0
    ));
    zram.mark_idle(IdleRequest::All);
    let r = zram.writeback(&"huge_idle".parse().unwrap()).unwrap();
    assert_eq!(r.pages, 16, "the random pages are huge");
    let r2 = zram.writeback(&"idle".parse().unwrap()).unwrap();
    assert_eq!(r2.pages, 32);
    let bd = zram.bd_stat();
    assert_eq!((bd.bd_count, bd.bd_writes, bd.bd_reads), (48, 48, 0));
    assert_eq!(bd.format(), "      48        0       48\n");
    let after = zram.mm_stat();
    assert_eq!(
        after.orig_data_size, before.orig_data_size,
        "written-back data stays stored"
    );
    assert_eq!(after.huge_pages, 0);
    assert_eq!(after.compr_data_size, 0);
    assert!(
        after.mem_used_total < before.mem_used_total / 4,
        "{after:?}"
    );
    assert_eq!(backing.stats().live_bytes, r.bytes + r2.bytes);
    assert!(
        r2.bytes < 32 * PAGE_SIZE as u64 / 2,
        "compressed objects, not pages: {r2:?}"
    );
    assert!(flags(&zram, 3) == Flags::WB);
    let mut page = vec![0u8; PAGE_SIZE];
    zram.read(3 * PAGE_SIZE as u64, &mut page).unwrap();
    assert_eq!(page, text(3));
    zram.read(40 * PAGE_SIZE as u64, &mut page).unwrap();
    assert_eq!(zram.bd_stat().bd_reads, 2);
    same_bytes(&zram, &image);
    // Overwriting, discarding and clearing free the file copies.
    zram.write(3 * PAGE_SIZE as u64, &text(99)).unwrap();
    zram.discard(40 * PAGE_SIZE as u64, PAGE_SIZE as u64)
        .unwrap();
    assert_eq!(zram.bd_stat().bd_count, 46);
    zram.clear();
    assert_eq!(backing.stats().live_bytes, 0);
}

#[test]
fn on_backing_names_ranges_with_written_back_slots() {
    let page = PAGE_SIZE as u64;
    let (none, _) = filled(None);
    assert!(!none.on_backing(0, 64 * page), "no backing device");
    let (zram, _) = filled(Some(Arc::new(MemBacking::new())));
    // The huge pages 32..48 go to the backing device.
    zram.writeback(&"huge".parse().unwrap()).unwrap();
    assert!(zram.on_backing(40 * page, page));
    assert!(zram.on_backing(40 * page + 100, 1), "a byte of the page");
    assert!(zram.on_backing(31 * page, 2 * page), "a range into it");
    assert!(
        zram.on_backing(47 * page + page - 1, 2),
        "a range out of it"
    );
    assert!(!zram.on_backing(0, 32 * page), "the text in memory");
    assert!(
        !zram.on_backing(48 * page, 16 * page),
        "same-filled and empty"
    );
    assert!(!zram.on_backing(40 * page, 0), "nothing");
    assert!(!zram.on_backing(64 * page, page), "past the end");
    assert!(
        zram.on_backing(40 * page, u64::MAX),
        "a length that overflows"
    );
    assert!(!zram.on_backing(u64::MAX, u64::MAX));
    // Rewritten, the page is in memory again.
    zram.write(40 * page, &text(40)).unwrap();
    assert!(!zram.on_backing(40 * page, page));
    assert!(zram.on_backing(41 * page, page));
}

#[test]
fn on_backing_counts_in_units() {
    let unit = 16 * 1024u64;
    let mut config = config();
    config.unit_size = zram::Size(unit);
    let zram = Zram::with_backing(config, Some(Arc::new(MemBacking::new()))).unwrap();
    let data: Vec<u8> = (0..4).flat_map(text).collect();
    for u in 0..4 {
        zram.write(u * unit, &data).unwrap();
    }
    // Page 4, in slot 1: bytes 16-32 KiB.
    zram.writeback(&"page_index=4".parse().unwrap()).unwrap();
    assert!(flags(&zram, 1) == Flags::WB);
    assert!(zram.on_backing(unit + 5000, 1), "a byte inside the unit");
    assert!(zram.on_backing(unit - 1, 2), "a range into it");
    assert!(zram.on_backing(2 * unit - 1, 2), "a range out of it");
    assert!(!zram.on_backing(0, unit), "the unit before");
    assert!(!zram.on_backing(2 * unit, 2 * unit), "the units after");
}

#[test]
fn page_indexes_and_the_limit_follow_the_kernel() {
    let backing = Arc::new(MemBacking::new());
    let (zram, image) = filled(Some(backing));
    let r = zram
        .writeback(
            &"page_index=5 page_indexes=10-12 page_index=50"
                .parse()
                .unwrap(),
        )
        .unwrap();
    assert_eq!(r.pages, 4, "same-filled page 50 is never written back");
    for p in [5, 10, 11, 12] {
        assert_eq!(flags(&zram, p), Flags::WB, "page {p}");
    }
    // Past the device's 64 pages: ERANGE, as the kernel's since 6.16.
    assert_eq!(
        zram.writeback(&"page_indexes=60-64".parse().unwrap())
            .unwrap_err()
            .errno(),
        libc::ERANGE
    );
    zram.set_writeback_limit_enable(true);
    zram.set_writeback_limit(3);
    let err = zram.writeback(&"type=huge".parse().unwrap()).unwrap_err();
    assert_eq!(
        err.errno(),
        libc::EIO,
        "a spent limit stops writeback with EIO"
    );
    assert_eq!(zram.bd_stat().bd_count, 7);
    assert_eq!(zram.writeback_limit(), 0);
    zram.set_writeback_limit_enable(false);
    assert_eq!(zram.writeback(&"huge".parse().unwrap()).unwrap().pages, 13);
    same_bytes(&zram, &image);
    let none = Zram::new(config()).unwrap();
    assert_eq!(
        none.writeback(&"huge".parse().unwrap())
            .unwrap_err()
            .errno(),
        libc::ENODEV
    );
}

#[test]
fn a_failing_backing_store_loses_nothing() {
    let backing = Arc::new(MemBacking::new());
    let (zram, image) = filled(Some(backing.clone()));
    backing.fail_appends(true);
    let before: Vec<_> = (0..PAGES).map(|p| zram.slot(p)).collect();
    let err = zram.writeback(&"huge".parse().unwrap()).unwrap_err();
    assert_eq!(err.errno(), libc::EIO);
    assert_eq!(zram.counters().wb_failed.load(Ordering::Relaxed), 1);
    let after: Vec<_> = (0..PAGES).map(|p| zram.slot(p)).collect();
    assert_eq!(before, after, "no slot changed");
    same_bytes(&zram, &image);
    backing.fail_appends(false);
    zram.writeback(&"huge".parse().unwrap()).unwrap();
    backing.fail_reads(true);
    let mut page = vec![0u8; PAGE_SIZE];
    assert_eq!(
        zram.read(33 * PAGE_SIZE as u64, &mut page)
            .unwrap_err()
            .errno(),
        libc::EIO
    );
    assert_eq!(zram.io_stat().failed_reads, 1);
    backing.fail_reads(false);
    same_bytes(&zram, &image);
}

#[test]
fn a_full_backing_store_stops_writeback_with_enospc_and_keeps_what_landed() {
    // Room for about ten compressed text pages.
    let backing = Arc::new(MemBacking::with_limit(10 * 2000));
    let (zram, image) = filled(Some(backing.clone()));
    zram.mark_idle(IdleRequest::All);
    let err = zram
        .writeback(&"type=idle page_indexes=0-31".parse().unwrap())
        .unwrap_err();
    assert_eq!(err.errno(), libc::ENOSPC, "{err}");
    let bd = zram.bd_stat().bd_count;
    assert!(
        bd > 0 && bd < 32,
        "whole batches landed before the file filled: {bd}"
    );
    assert_eq!(
        backing.stats().live_bytes,
        (0..32)
            .filter_map(|p| zram.slot(p))
            .filter(|e| e.flags.contains(Flags::WB))
            .map(|e| e.len as u64)
            .sum::<u64>()
    );
    assert!((0..PAGES).all(|p| !flags(&zram, p).contains(Flags::PP)));
    same_bytes(&zram, &image);
}

#[test]
fn recompression_keeps_only_smaller_classes_and_marks_the_rest() {
    let (zram, image) = filled(None);
    let before = zram.mm_stat();
    zram.mark_idle(IdleRequest::All);
    let r = zram.recompress(&"type=idle".parse().unwrap()).unwrap();
    assert_eq!(r.attempts, 48, "text and huge pages, not same-filled ones");
    assert!(r.recompressed >= 28, "zstd beats lz4 on text: {r:?}");
    assert_eq!(r.incompressible, 48 - r.recompressed);
    for p in 32..48 {
        assert!(
            flags(&zram, p).contains(Flags::INCOMPRESSIBLE),
            "random page {p}"
        );
        assert!(flags(&zram, p).contains(Flags::HUGE));
    }
    let e = zram.slot(0).unwrap();
    assert_eq!(e.prio, 1);
    assert!(
        e.flags.contains(Flags::IDLE),
        "recompression is not an access"
    );
    let after = zram.mm_stat();
    assert!(after.compr_data_size < before.compr_data_size, "{after:?}");
    assert_eq!(
        before.compr_data_size - after.compr_data_size,
        r.saved_bytes
    );
    same_bytes(&zram, &image);
    // Nothing is left to try: incompressible and priority-1 slots are skipped.
    assert_eq!(
        zram.recompress(&RecompressRequest::default())
            .unwrap()
            .attempts,
        0
    );
    // A rewrite goes back to the primary algorithm.
    zram.write(0, &text(0)).unwrap();
    assert_eq!(zram.slot(0).unwrap().prio, 0);
    assert_eq!(
        zram.recompress(&"max_pages=1".parse().unwrap())
            .unwrap()
            .attempts,
        1
    );
    for bad in ["priority=2", "algo=lz4", "threshold=5000"] {
        assert_eq!(
            zram.recompress(&bad.parse().unwrap()).unwrap_err().errno(),
            libc::EINVAL,
            "{bad}"
        );
    }
    let plain = Zram::new(ZramConfig {
        recomp_algorithm: vec![],
        ..config()
    })
    .unwrap();
    assert_eq!(
        plain
            .recompress(&RecompressRequest::default())
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
}

#[test]
fn writes_during_writeback_win_and_recompression_waits_its_turn() {
    let backing = Stalling::new();
    let (zram, mut image) = filled(Some(backing.clone()));
    let zram = Arc::new(zram);
    let z = Arc::clone(&zram);
    let worker = std::thread::spawn(move || z.writeback(&"page_indexes=0-3".parse().unwrap()));
    backing.gate.wait();
    // The batch of pages 0..4 is on its way to the file.
    assert!(flags(&zram, 1).contains(Flags::PP));
    assert_eq!(
        zram.recompress(&RecompressRequest::default())
            .unwrap_err()
            .errno(),
        libc::EAGAIN
    );
    zram.write(PAGE_SIZE as u64, &text(77)).unwrap();
    image[PAGE_SIZE..2 * PAGE_SIZE].copy_from_slice(&text(77));
    let mut buf = vec![0u8; 10];
    zram.read(2 * PAGE_SIZE as u64, &mut buf).unwrap();
    backing.gate.wait();
    let r = worker.join().unwrap().unwrap();
    assert_eq!(
        r.pages, 2,
        "page 1 was rewritten, page 2 read: pages 0 and 3 go"
    );
    assert_eq!(
        flags(&zram, 1),
        Flags::default(),
        "the rewrite stays in memory"
    );
    assert_eq!(
        flags(&zram, 2),
        Flags::default(),
        "a read calls the writeback off"
    );
    assert_eq!(flags(&zram, 3), Flags::WB);
    assert_eq!(
        backing.stats().live_bytes,
        zram.slot(0).unwrap().len as u64 + zram.slot(3).unwrap().len as u64
    );
    same_bytes(&zram, &image);
}

#[test]
fn a_policy_round_recompresses_then_writes_back_cold_slots_within_its_budget() {
    let backing = Arc::new(MemBacking::new());
    let (zram, image) = filled(Some(backing));
    let mut policy: zram::Policy =
        "recompress_age=600 writeback_age=3600 writeback_round=40K min_age=60"
            .parse()
            .unwrap();
    zram.set_policy(policy.clone()).unwrap();
    let st = zram.run_policy_round();
    assert_eq!(
        (st.recompressed, st.written_back_pages),
        (0, 0),
        "nothing is old yet: {st:?}"
    );
    zram.skew_clock(1000);
    zram.write(0, &text(0)).unwrap();
    let st = zram.run_policy_round();
    assert!(st.recompressed >= 28, "{st:?}");
    assert_eq!(zram.slot(0).unwrap().prio, 0, "page 0 was just written");
    assert_eq!(st.written_back_pages, 0, "nothing is an hour old: {st:?}");
    zram.skew_clock(3000);
    let st = zram.run_policy_round();
    // 40K = 10 pages a round, huge idle ones first.
    assert_eq!(st.written_back_pages, 10, "{st:?}");
    assert_eq!(
        (32..48).filter(|&p| flags(&zram, p) == Flags::WB).count(),
        10
    );
    assert!(
        st.last_round.contains("wrote back 10 pages"),
        "{}",
        st.last_round
    );
    // Above the watermark only: a high one stops writeback.
    policy.apply("writeback_watermark=1G").unwrap();
    zram.set_policy(policy.clone()).unwrap();
    assert_eq!(zram.run_policy_round().written_back_pages, 10);
    // Under pressure (at mem_limit) the age shrinks to min_age: page 0, 3000 s old, goes;
    // page 1, just written, stays.
    zram.write(PAGE_SIZE as u64, &text(1)).unwrap();
    zram.set_mem_limit(zram.mm_stat().mem_used_total);
    policy
        .apply("writeback_watermark=0 writeback_round=1M writeback_age=100000")
        .unwrap();
    zram.set_policy(policy.clone()).unwrap();
    let st = zram.run_policy_round();
    assert_eq!(st.last_ages.1, Some(60), "{st:?}");
    assert!(flags(&zram, 0) == Flags::WB);
    assert!(!flags(&zram, 1).contains(Flags::WB), "accessed just now");
    same_bytes(&zram, &image_with(&image, 1, &text(1)));
    // A policy naming what the device lacks is refused.
    let plain = Zram::new(config()).unwrap();
    assert_eq!(
        plain
            .set_policy("writeback_age=5".parse().unwrap())
            .unwrap_err()
            .errno(),
        libc::ENODEV
    );
    assert_eq!(
        plain
            .set_policy("recompress_age=5 recompress_priority=2".parse().unwrap())
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
}

fn image_with(image: &[u8], page: usize, data: &[u8]) -> Vec<u8> {
    let mut out = image.to_vec();
    out[page * PAGE_SIZE..(page + 1) * PAGE_SIZE].copy_from_slice(data);
    out
}
