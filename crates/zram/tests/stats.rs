//! Stat arithmetic after known writes: `mm_stat`, `io_stat` and `debug_stat` move exactly as
//! the kernel's do for same-filled, incompressible and compressible pages, overwrites,
//! discards, write-zeroes, a `mem_limit` refusal, compaction and reset; and the text formats
//! are the kernel's.

mod common;

use common::{random, xorshift};
use zram::slot::Flags;
use zram::stats::MmStat;
use zram::{Algorithm, AlgorithmParams, Error, PAGE_SIZE, Zram, ZramConfig};

const PAGES: usize = 1024;
const P: u64 = PAGE_SIZE as u64;

fn device() -> Zram {
    Zram::new(ZramConfig {
        disksize: (PAGES * PAGE_SIZE) as u64,
        algorithm: Algorithm::Lz4,
        params: AlgorithmParams::default(),
        auto_compact: None,
        ..ZramConfig::default()
    })
    .expect("device")
}

fn random_page(seed: u64) -> Vec<u8> {
    random(PAGE_SIZE, seed.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// Compressible text; `seed` varies the words and how much random noise is mixed in, so
/// pages land in different size classes.
fn text_page(seed: u64) -> Vec<u8> {
    const WORDS: [&str; 6] = ["alpha ", "beta ", "gamma\n", "delta ", "zram ", "page "];
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let noise = (seed % 5) as usize * 100;
    let mut out = Vec::with_capacity(PAGE_SIZE + 8);
    for _ in 0..noise {
        out.push(xorshift(&mut s) as u8);
    }
    while out.len() < PAGE_SIZE {
        out.extend_from_slice(WORDS[(xorshift(&mut s) % 6) as usize].as_bytes());
    }
    out.truncate(PAGE_SIZE);
    out
}

fn slot_len_sum(zram: &Zram) -> u64 {
    (0..PAGES).map(|i| zram.slot(i).unwrap().len as u64).sum()
}

fn nine(m: &MmStat) -> [u64; 9] {
    [
        m.orig_data_size,
        m.compr_data_size,
        m.mem_used_total,
        m.mem_limit,
        m.mem_used_max,
        m.same_pages,
        m.pages_compacted,
        m.huge_pages,
        m.huge_pages_since,
    ]
}

fn check_format(m: &MmStat) {
    let line = m.format();
    assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
    let numbers: Vec<u64> = line
        .split_whitespace()
        .map(|f| f.parse().expect("a number"))
        .collect();
    assert_eq!(numbers.len(), 12, "{line:?}");
    assert_eq!(numbers[..9], nine(m), "kernel order: {line:?}");
    assert_eq!(numbers, m.fields(), "{line:?}");
    // The kernel prints every field as `%8llu`, separated by one space.
    let expected: Vec<String> = m.fields().iter().map(|v| format!("{v:8}")).collect();
    assert_eq!(line, format!("{}\n", expected.join(" ")));
}

fn check_pool(zram: &Zram) {
    zram.pool().check_invariants().expect("pool invariants");
    let m = zram.mm_stat();
    assert_eq!(m.compr_data_size, slot_len_sum(zram));
    assert_eq!(m.mem_used_total, zram.pool().total_pages() as u64 * P);
    assert!(m.mem_used_max >= m.mem_used_total);
    check_format(&m);
}

#[test]
fn a_fresh_device_reports_nothing_stored() {
    let zram = device();
    let m = zram.mm_stat();
    assert_eq!(nine(&m), [0; 9]);
    assert_eq!(m.pages_folded, 0);
    assert!(m.metadata_bytes > 0, "the slot table costs memory: {m:?}");
    assert_eq!(zram.io_stat().format(), "       0        0 0        0\n");
    assert_eq!(zram.debug_stat(), "version: 1\n0        0\n");
    assert_eq!(zram.requests(), (0, 0));
    check_format(&m);
}

#[test]
fn same_filled_pages_cost_no_memory() {
    let zram = device();
    zram.write(0, &vec![0u8; 10 * PAGE_SIZE]).unwrap();
    let m = zram.mm_stat();
    assert_eq!(m.same_pages, 10);
    assert_eq!(m.orig_data_size, 10 * P);
    assert_eq!(
        (m.compr_data_size, m.mem_used_total, m.huge_pages),
        (0, 0, 0)
    );

    zram.write(10 * P, &vec![0xFFu8; 5 * PAGE_SIZE]).unwrap();
    let word: Vec<u8> = 0x0123_4567_89AB_CDEFu64.to_ne_bytes().repeat(PAGE_SIZE / 8);
    zram.write(15 * P, &word).unwrap();
    let m = zram.mm_stat();
    assert_eq!((m.same_pages, m.orig_data_size), (16, 16 * P));
    assert_eq!(
        (m.compr_data_size, m.mem_used_total, m.mem_used_max),
        (0, 0, 0)
    );
    let e = zram.slot(15).unwrap();
    assert!(e.flags.contains(Flags::SAME));
    assert_eq!(e.handle, 0x0123_4567_89AB_CDEF);

    // A one-byte zero write into an empty slot stores a zero page (read-modify-write).
    zram.write(20 * P + 3, &[0]).unwrap();
    assert_eq!(zram.mm_stat().same_pages, 17);
    // Breaking the fill turns it into a compressed object.
    zram.write(20 * P + 3, &[1]).unwrap();
    let m = zram.mm_stat();
    assert_eq!(m.same_pages, 16);
    assert_eq!(m.orig_data_size, 17 * P);
    assert!(m.compr_data_size > 0 && m.compr_data_size < P);
    assert_eq!(zram.requests(), (0, 5));
    check_pool(&zram);
}

#[test]
fn incompressible_pages_are_huge_and_cost_a_page_each() {
    let zram = device();
    let k = 7;
    for i in 0..k {
        zram.write((100 + i) * P, &random_page(i)).unwrap();
    }
    let m = zram.mm_stat();
    assert_eq!((m.huge_pages, m.huge_pages_since), (k, k));
    assert_eq!(m.compr_data_size, k * P);
    assert_eq!(m.orig_data_size, k * P);
    // The huge class holds one object per one-page zspage.
    assert_eq!(m.mem_used_total, k * P);
    assert_eq!(m.mem_used_max, k * P);
    for i in 0..k as usize {
        let e = zram.slot(100 + i).unwrap();
        assert!(e.flags.contains(Flags::HUGE) && e.len == PAGE_SIZE, "{e:?}");
    }

    // Overwriting a huge page with text: huge_pages drops, huge_pages_since does not.
    let text = text_page(1);
    zram.write(100 * P, &text).unwrap();
    let len = zram.slot(100).unwrap().len as u64;
    let m = zram.mm_stat();
    assert_eq!((m.huge_pages, m.huge_pages_since), (k - 1, k));
    assert_eq!(m.compr_data_size, (k - 1) * P + len);
    assert_eq!(m.orig_data_size, k * P);
    let mut back = vec![0u8; PAGE_SIZE];
    zram.read(100 * P, &mut back).unwrap();
    assert_eq!(back, text);
    check_pool(&zram);
}

#[test]
fn compressible_pages_take_less_than_they_hold() {
    let zram = device();
    let n = 512u64;
    for i in 0..n {
        zram.write((200 + i) * P, &text_page(i)).unwrap();
    }
    let m = zram.mm_stat();
    assert_eq!(m.orig_data_size, n * P);
    assert_eq!((m.same_pages, m.huge_pages), (0, 0));
    assert!(m.compr_data_size < m.orig_data_size / 2, "{m:?}");
    assert!(m.mem_used_total < m.orig_data_size, "{m:?}");
    assert!(m.mem_used_total >= m.compr_data_size, "{m:?}");
    let huge_class = zram.huge_class_size();
    for i in 0..n as usize {
        let e = zram.slot(200 + i).unwrap();
        assert!(
            e.len > 0 && e.len < huge_class && e.flags.bits() == 0,
            "{e:?}"
        );
    }
    check_pool(&zram);
}

#[test]
fn overwrites_discards_and_write_zeroes_reduce_the_counts() {
    let zram = device();
    zram.write(0, &vec![0u8; 10 * PAGE_SIZE]).unwrap();
    for i in 0..4 {
        zram.write((10 + i) * P, &random_page(i)).unwrap();
    }
    for i in 0..20 {
        zram.write((20 + i) * P, &text_page(i)).unwrap();
    }
    let before = zram.mm_stat();
    assert_eq!(before.orig_data_size, 34 * P);
    assert_eq!((before.same_pages, before.huge_pages), (10, 4));

    // An overwrite of a zero page with random data.
    zram.write(0, &random_page(99)).unwrap();
    let m = zram.mm_stat();
    assert_eq!((m.same_pages, m.huge_pages, m.huge_pages_since), (9, 5, 5));
    assert_eq!(m.orig_data_size, 34 * P);
    assert_eq!(m.compr_data_size, before.compr_data_size + P);

    // Discard of whole pages 1..6: five same-filled slots freed, five notify_free.
    zram.discard(P, 5 * P).unwrap();
    let m = zram.mm_stat();
    assert_eq!((m.same_pages, m.orig_data_size), (4, 29 * P));
    assert_eq!(zram.io_stat().notify_free, 5);
    // A discard with no whole page inside frees nothing and counts nothing.
    zram.discard(10 * P + 1, P).unwrap();
    zram.discard(20 * P + 100, 200).unwrap();
    assert_eq!(zram.mm_stat().without_background(), m.without_background());
    assert_eq!(zram.io_stat().notify_free, 5);
    // Discarding already-empty slots counts them again, as the kernel does.
    zram.discard(P, 5 * P).unwrap();
    assert_eq!(zram.mm_stat().without_background(), m.without_background());
    assert_eq!(zram.io_stat().notify_free, 10);

    // Discard of huge pages 10..12 (unaligned range covering them whole).
    zram.discard(10 * P - 5, 2 * P + 10).unwrap();
    let m = zram.mm_stat();
    assert_eq!((m.huge_pages, m.huge_pages_since), (3, 5));
    assert_eq!(m.compr_data_size, slot_len_sum(&zram));
    assert_eq!(m.orig_data_size, 27 * P);
    assert_eq!(zram.io_stat().notify_free, 12);

    // write_zeroes frees whole text pages 20..24 and rewrites the partial page 24.
    let len_24 = zram.slot(24).unwrap().len;
    let freed: u64 = (20..24).map(|i| zram.slot(i).unwrap().len as u64).sum();
    zram.write_zeroes(20 * P, 4 * P + 10).unwrap();
    let m2 = zram.mm_stat();
    assert_eq!(m2.orig_data_size, 23 * P);
    // The kernel serves write-zeroes by its discard path: whole pages count in notify_free
    // (checked on kernel 6.18 with `blkdiscard -z`), the rewritten partial page does not.
    assert_eq!(zram.io_stat().notify_free, 16);
    let len_24_after = zram.slot(24).unwrap().len;
    assert_ne!(len_24_after, 0);
    assert_eq!(
        m2.compr_data_size,
        m.compr_data_size - freed - len_24 as u64 + len_24_after as u64
    );
    let mut head = [0xFFu8; 10];
    zram.read(24 * P, &mut head).unwrap();
    assert_eq!(head, [0; 10]);
    // mem_used_max keeps the peak.
    assert!(m2.mem_used_max >= before.mem_used_total);
    check_pool(&zram);
}

#[test]
fn mem_used_max_keeps_the_peak_until_reset() {
    let zram = device();
    for i in 0..32 {
        zram.write(i * P, &random_page(i)).unwrap();
    }
    let peak = zram.mm_stat().mem_used_total;
    assert_eq!(peak, 32 * P);
    zram.discard(0, 24 * P).unwrap();
    let m = zram.mm_stat();
    assert_eq!(m.mem_used_total, 8 * P);
    assert_eq!(m.mem_used_max, peak);
    zram.reset_mem_used_max();
    assert_eq!(zram.mm_stat().mem_used_max, 8 * P);
}

#[test]
fn a_mem_limit_refusal_counts_as_a_failed_write() {
    let zram = device();
    zram.write(0, &random_page(1)).unwrap();
    zram.set_mem_limit(P);
    assert_eq!(zram.mm_stat().mem_limit, P);
    match zram.write(P, &random_page(2)) {
        Err(Error::MemLimit { limit }) => assert_eq!(limit, P),
        other => panic!("expected MemLimit, got {other:?}"),
    }
    let io = zram.io_stat();
    assert_eq!((io.failed_reads, io.failed_writes), (0, 1));
    assert_eq!(io.format(), "       0        1 0        0\n");
    let m = zram.mm_stat();
    assert_eq!((m.orig_data_size, m.compr_data_size), (P, P));
    assert_eq!(m.mem_used_total, P);
    assert_eq!(zram.slot(1).unwrap(), Default::default());
    // Same-filled pages need no memory and still go through.
    zram.write(2 * P, &vec![7u8; PAGE_SIZE]).unwrap();
    assert_eq!(zram.io_stat().failed_writes, 1);
    zram.set_mem_limit(0);
    zram.write(P, &random_page(2)).unwrap();
    assert_eq!(zram.mm_stat().mem_limit, 0);
    assert_eq!(zram.requests(), (0, 4));
    check_pool(&zram);
}

#[test]
fn compaction_is_counted_in_pages_compacted() {
    let zram = device();
    for i in 0..512u64 {
        zram.write(i * P, &text_page(i)).unwrap();
    }
    // Free three of every four pages: many zspages end up mostly empty.
    for i in (0..512u64).filter(|i| i % 4 != 0) {
        zram.discard(i * P, P).unwrap();
    }
    let before = zram.mm_stat();
    assert!(zram.pool().freeable_pages() > 0);
    let freed = zram.compact() as u64;
    assert!(freed > 0);
    let m = zram.mm_stat();
    assert_eq!(m.pages_compacted, freed);
    assert_eq!(m.mem_used_total, before.mem_used_total - freed * P);
    assert_eq!(m.compr_data_size, before.compr_data_size);
    assert_eq!(m.mem_used_max, before.mem_used_max);
    for i in (0..512u64).step_by(4) {
        let mut back = vec![0u8; PAGE_SIZE];
        zram.read(i * P, &mut back).unwrap();
        assert!(back == text_page(i), "page {i}");
    }
    check_pool(&zram);
}

#[test]
fn reset_zeroes_everything() {
    let zram = device();
    zram.write(0, &vec![0u8; 3 * PAGE_SIZE]).unwrap();
    for i in 0..400u64 {
        zram.write((10 + i) * P, &text_page(i)).unwrap();
    }
    for i in 0..40u64 {
        zram.write((500 + i) * P, &random_page(i)).unwrap();
    }
    for i in (0..400u64).filter(|i| i % 4 != 0) {
        zram.discard((10 + i) * P, P).unwrap();
    }
    zram.compact();
    zram.set_mem_limit(P);
    assert!(zram.write(600 * P, &random_page(7)).is_err());
    let mut buf = vec![0u8; 100];
    zram.read(3, &mut buf).unwrap();
    let m = zram.mm_stat();
    assert!(m.orig_data_size > 0 && m.huge_pages > 0 && m.same_pages > 0);
    assert!(m.pages_compacted > 0, "{m:?}");

    zram.set_mem_limit(0);
    zram.clear();
    let m = zram.mm_stat();
    assert_eq!(nine(&m), [0; 9], "{m:?}");
    assert_eq!(zram.io_stat(), Default::default());
    assert_eq!(zram.io_stat().format(), "       0        0 0        0\n");
    assert_eq!(zram.debug_stat(), "version: 1\n0        0\n");
    assert_eq!(zram.requests(), (0, 0));
    for i in 0..PAGES {
        assert_eq!(zram.slot(i).unwrap(), Default::default(), "slot {i}");
    }
    zram.read(0, &mut buf).unwrap();
    assert_eq!(buf, vec![0; 100]);
    check_pool(&zram);

    // The device works as new afterwards.
    zram.write(0, &random_page(3)).unwrap();
    let m = zram.mm_stat();
    assert_eq!(
        (m.huge_pages, m.huge_pages_since, m.mem_used_total),
        (1, 1, P)
    );
}
