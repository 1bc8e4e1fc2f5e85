//! Model test of the device, for every unit size: random writes (whole and partial slots,
//! unaligned, spanning slots), reads, discards, write-zeroes, compactions, flushes and
//! clears against a plain `Vec<u8>` image of the device. Pages (4 KiB units, the kernel's
//! model) run every algorithm, each on a different pool shape (chain sizes 1 to 16, both
//! zspage rules, both object layouts); 8, 32 and 128 KiB units run lz4 and zstd on a device
//! two units and three pages long, so the last unit is short. After every step the whole
//! device reads back as the model, the pool's invariants hold, every slot is stored as the
//! kernel's rules say (same-filled → `SAME` with the word; otherwise a stream shorter than
//! the raw threshold, or the raw slot flagged `HUGE`), the pool holds exactly the objects the
//! slots' chains need, requests past the end fail and change nothing, and the `mm_stat`
//! identities hold against the slot table.
//!
//! The post-processing steps run in the same sequences: idle markings (all, or by age with
//! the device's clock moved on), writebacks of every kind to an in-memory backing store
//! (some made to fail: nothing may change then), and recompressions with a secondary
//! algorithm. They change no byte; the checks also hold the written-back slots against
//! `bd_stat` and the backing store's live bytes.
//!
//! Folding and deduplication (seed 004) run in them too: fills come from a few seeds often,
//! so many pages are duplicates; half the pool shapes store with inline `dedup` on, and
//! `fold` steps come among the others. The checks then count what the slots really use:
//! every distinct object of the slots' chains once, each named by exactly as many of the
//! slots' pieces as the pool says it has references, and each file copy once.

mod common;

use common::{random, xorshift};
use proptest::prelude::*;
use std::sync::Arc;
use zram::links;
use zram::slot::{Flags, SlotEntry};

use zram::backing::{Backing, MemBacking};
use zram::{
    Algorithm, Error, Geometry, Header, Mode, PAGE_SIZE, PoolConfig, RecompAlgorithm,
    RecompressRequest, Size, WritebackRequest, Zram, ZramConfig,
};

#[derive(Debug, Clone, Copy)]
enum Fill {
    Zero,
    /// A repeated word aligned to the device offset: whole units come out same-filled.
    Word(u64),
    /// Incompressible.
    Random(u64),
    /// Compresses well.
    Text(u64),
}

#[derive(Debug, Clone)]
enum Op {
    Write(u64, usize, Fill),
    Read(u64, usize),
    Discard(u64, u64),
    WriteZeroes(u64, u64),
    /// Every request kind reaching past the end: each must fail and change nothing.
    OutOfRange(u64, usize),
    Compact,
    Flush,
    Clear,
    /// `idle all`, or `idle AGE` after the clock moved on by `skew` seconds.
    Idle(Option<u32>, u64),
    /// A writeback of one kind; `fail` makes the backing store refuse it.
    Writeback(Wb, bool),
    /// A recompression of one kind, with a threshold.
    Recompress(Option<Mode>, usize),
    /// Folds identical objects.
    Fold,
}

#[derive(Debug, Clone, Copy)]
enum Wb {
    Mode(Mode),
    Pages(u64, u64),
}

fn bytes(fill: Fill, offset: u64, len: usize) -> Vec<u8> {
    match fill {
        Fill::Zero => vec![0; len],
        Fill::Word(w) => {
            let b = w.to_ne_bytes();
            (0..len).map(|i| b[(offset as usize + i) % 8]).collect()
        }
        Fill::Random(seed) => random(len, seed),
        Fill::Text(seed) => {
            const WORDS: [&str; 8] = [
                "unit ", "stream ", "chain ", "piece ", "zstd ", "lz4 ", "page ", "link\n",
            ];
            let mut s = seed | 1;
            let mut out = Vec::with_capacity(len + 16);
            while out.len() < len {
                out.extend_from_slice(WORDS[(xorshift(&mut s) % 8) as usize].as_bytes());
                if xorshift(&mut s).is_multiple_of(5) {
                    out.push(xorshift(&mut s) as u8);
                }
            }
            out.truncate(len);
            out
        }
    }
}

fn fill() -> impl Strategy<Value = Fill> {
    prop_oneof![
        2 => Just(Fill::Zero),
        2 => prop_oneof![Just(u64::MAX), any::<u64>()].prop_map(Fill::Word),
        3 => seed().prop_map(Fill::Random),
        4 => seed().prop_map(Fill::Text),
    ]
}

/// A fill's seed: one of a few most of the time, so that pages repeat.
fn seed() -> impl Strategy<Value = u64> {
    prop_oneof![3 => 0u64..4, 1 => any::<u64>()]
}

/// Device geometry for one unit size.
#[derive(Debug, Clone, Copy)]
struct Shape {
    unit: usize,
    disksize: usize,
}

impl Shape {
    /// Pages: 16 of them; larger units: two and a short one of three pages.
    fn new(unit: usize) -> Self {
        let disksize = if unit == PAGE_SIZE {
            16 * PAGE_SIZE
        } else {
            2 * unit + 3 * PAGE_SIZE
        };
        Self { unit, disksize }
    }

    fn units(&self) -> usize {
        self.disksize.div_ceil(self.unit)
    }

    fn unit_range(&self, u: usize) -> std::ops::Range<usize> {
        u * self.unit..((u + 1) * self.unit).min(self.disksize)
    }
}

/// An offset: unit-aligned, page-aligned or anywhere.
fn offset(s: Shape) -> impl Strategy<Value = u64> {
    prop_oneof![
        (0..s.units()).prop_map(move |u| (u * s.unit) as u64),
        (0..s.disksize / PAGE_SIZE).prop_map(|p| (p * PAGE_SIZE) as u64),
        (0..s.disksize).prop_map(|o| o as u64),
    ]
}

/// A length: whole units, whole pages, anything up to a unit and a half, or a few bytes.
fn length(s: Shape) -> impl Strategy<Value = usize> {
    prop_oneof![
        (1usize..=2).prop_map(move |n| n * s.unit),
        (1usize..=4).prop_map(|n| n * PAGE_SIZE),
        1usize..=s.unit * 3 / 2,
        1usize..=16,
    ]
}

fn op(s: Shape) -> impl Strategy<Value = Op> {
    let clamp = move |o: u64, l: usize| l.min(s.disksize - o as usize);
    prop_oneof![
        10 => (offset(s), length(s), fill()).prop_map(move |(o, l, f)| Op::Write(o, clamp(o, l), f)),
        3 => (offset(s), length(s)).prop_map(move |(o, l)| Op::Read(o, clamp(o, l))),
        2 => (offset(s), length(s)).prop_map(move |(o, l)| Op::Discard(o, clamp(o, l) as u64)),
        2 => (offset(s), length(s)).prop_map(move |(o, l)| Op::WriteZeroes(o, clamp(o, l) as u64)),
        1 => (0..s.disksize as u64 + 8, 1usize..=s.unit)
            .prop_map(move |(o, l)| Op::OutOfRange(o, l.max((s.disksize + 1).saturating_sub(o as usize)))),
        1 => Just(Op::Compact),
        1 => Just(Op::Flush),
        1 => Just(Op::Clear),
        2 => (prop::option::of(0u32..20), 0u64..20).prop_map(|(a, k)| Op::Idle(a, k)),
        3 => (wb(s), prop::bool::weighted(0.2)).prop_map(|(w, f)| Op::Writeback(w, f)),
        2 => (prop::option::of(mode()), prop_oneof![Just(0usize), 0usize..3000])
            .prop_map(|(m, t)| Op::Recompress(m, t)),
        2 => Just(Op::Fold),
    ]
}

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![Just(Mode::Idle), Just(Mode::Huge), Just(Mode::HugeIdle)]
}

fn wb(s: Shape) -> impl Strategy<Value = Wb> {
    let pages = (s.disksize / PAGE_SIZE) as u64;
    prop_oneof![
        prop_oneof![mode(), Just(Mode::Incompressible)].prop_map(Wb::Mode),
        (0..pages, 0..pages).prop_map(|(a, b)| Wb::Pages(a.min(b), a.max(b))),
    ]
}

/// Each algorithm runs on a different pool shape: chain sizes 1 to 16, both zspage rules,
/// both object layouts, inline dedup on or off.
fn device(algorithm: Algorithm, s: Shape, backing: Arc<MemBacking>) -> Zram {
    let (chain_size, geometry, shards, header) = match algorithm {
        Algorithm::Lz4 => (4, Geometry::Seed, 1, Header::Handle),
        Algorithm::Zstd => (8, Geometry::MinWaste, 2, Header::Omitted),
        Algorithm::Lzo => (1, Geometry::Seed, 0, Header::Omitted),
        _ => (16, Geometry::MinWaste, 3, Header::Handle),
    };
    let secondary = if algorithm == Algorithm::Zstd {
        Algorithm::LzoRle
    } else {
        Algorithm::Zstd
    };
    let config = ZramConfig {
        disksize: s.disksize as u64,
        algorithm,
        unit_size: Size(s.unit as u64),
        recomp_algorithm: vec![RecompAlgorithm {
            priority: 1,
            algorithm: secondary,
            params: zram::AlgorithmParams::default(),
        }],
        pool: PoolConfig {
            chain_size,
            geometry,
            header,
            shards,
            ..PoolConfig::default()
        },
        auto_compact: None,
        writeback_batch_size: 3,
        dedup: matches!(algorithm, Algorithm::Lz4 | Algorithm::Zstd),
        ..ZramConfig::default()
    };
    Zram::with_backing(config, Some(backing as Arc<dyn Backing>)).expect("device")
}

fn same_word(bytes: &[u8]) -> Option<u64> {
    let first = u64::from_ne_bytes(bytes[..8].try_into().unwrap());
    bytes
        .chunks_exact(8)
        .all(|w| u64::from_ne_bytes(w.try_into().unwrap()) == first)
        .then_some(first)
}

fn check(
    zram: &Zram,
    backing: &MemBacking,
    s: Shape,
    model: &[u8],
    step: &str,
) -> Result<(), TestCaseError> {
    let mut image = vec![0xA5u8; s.disksize];
    // Not an access: idle marks must survive the check for later steps to use them.
    zram.inspect(0, &mut image).expect("read whole device");
    for u in 0..s.units() {
        let r = s.unit_range(u);
        prop_assert!(image[r.clone()] == model[r], "{step}: unit {u} differs");
    }
    if let Err(e) = zram.pool().check_invariants() {
        return Err(TestCaseError::fail(format!("{step}: invariants: {e}")));
    }

    let hcs = zram.huge_class_size();
    let (mut stored, mut same, mut huge, mut lens) = (0u64, 0u64, 0u64, 0u64);
    let mut wb_pages = 0u64;
    // Distinct file copies (offset -> length) and distinct objects (object id -> (bytes,
    // pieces of the slots naming it, a handle to ask the pool with)).
    let mut copies = std::collections::HashMap::new();
    let mut objects = std::collections::HashMap::new();
    for u in 0..s.units() {
        let e = zram.slot(u).expect("unit in range");
        let r = s.unit_range(u);
        let ulen = r.len();
        let pages = (ulen / PAGE_SIZE) as u64;
        match same_word(&model[r]) {
            // Never written, discarded or zeroed units hold nothing; written zero units
            // hold the word 0.
            Some(0) if e == SlotEntry::default() => {}
            Some(w) => {
                prop_assert!(e.flags.contains(Flags::SAME), "{step}: unit {u}: {e:?}");
                prop_assert_eq!(e.handle, w, "{}: unit {} fill word", step, u);
                prop_assert_eq!(e.len, 0, "{}: unit {}", step, u);
            }
            None if e.flags.contains(Flags::WB) => {
                prop_assert!(e.len > 0 && e.len <= ulen, "{step}: unit {u}: {e:?}");
                prop_assert_eq!(e.flags, Flags::WB, "{}: unit {} {:?}", step, u, e);
                wb_pages += pages;
                let known = copies.insert(e.handle, e.len);
                prop_assert!(known.is_none_or(|l| l == e.len), "{step}: unit {u}: copy");
            }
            None => {
                prop_assert!(!e.flags.contains(Flags::SAME), "{step}: unit {u}: {e:?}");
                prop_assert!(!e.flags.contains(Flags::PP), "{step}: unit {u}: {e:?}");
                prop_assert!(e.len > 0, "{step}: unit {u}: {e:?}");
                let raw = e.flags.contains(Flags::HUGE);
                prop_assert_eq!(raw, e.len == ulen, "{}: unit {} {:?}", step, u, e);
                prop_assert!(
                    raw || e.len < ulen - PAGE_SIZE + hcs,
                    "{step}: unit {u}: {e:?}"
                );
            }
        }
        if e.is_allocated() {
            stored += pages;
        }
        if e.flags.contains(Flags::WB) {
            continue;
        }
        if e.len > 0 {
            let head = zram::Handle::from_raw(e.handle);
            let chain = zram::pieces(zram.pool(), head, e.len).expect("chain");
            prop_assert_eq!(chain.len(), links(e.len) + 1, "{}: unit {}", step, u);
            for (i, (piece, bytes)) in chain.into_iter().enumerate() {
                let id = zram.pool().object_id(piece).expect("live piece");
                let seen = objects.contains_key(&id);
                objects.entry(id).or_insert((bytes, 0u32, piece)).1 += 1;
                // The rest of a chain behind a shared head belongs to that head: the slots
                // sharing it name it once, through the head.
                if i == 0 && seen {
                    break;
                }
            }
        }
        same += pages * u64::from(e.flags.contains(Flags::SAME));
        huge += pages * u64::from(e.flags.contains(Flags::HUGE));
        lens += e.len as u64;
    }
    // Every object has exactly as many references as the slots' chains name it.
    for (id, (_, named, piece)) in &objects {
        let refs = zram.pool().refs(*piece).expect("live piece");
        prop_assert_eq!(refs, *named, "{}: object {:#x}", step, id);
    }
    let wb_bytes: u64 = copies.values().map(|&l| l as u64).sum();
    let object_bytes: u64 = objects.values().map(|o| o.0 as u64).sum();
    prop_assert_eq!(zram.bd_stat().bd_count, wb_pages, "{}: bd_count", step);
    prop_assert_eq!(backing.stats().live_bytes, wb_bytes, "{}: backing", step);
    prop_assert_eq!(zram.slot(s.units()), None, "{}", step);
    prop_assert_eq!(zram.pool().objects(), objects.len(), "{}: objects", step);

    let m = zram.mm_stat();
    prop_assert_eq!(m.orig_data_size, stored * PAGE_SIZE as u64, "{}", step);
    prop_assert_eq!(m.same_pages, same, "{}", step);
    prop_assert_eq!(m.huge_pages, huge, "{}", step);
    prop_assert_eq!(m.compr_data_size, lens, "{}", step);
    prop_assert!(m.huge_pages_since >= m.huge_pages, "{step}: {m:?}");
    prop_assert_eq!(
        m.mem_used_total,
        (zram.pool().total_pages() * PAGE_SIZE) as u64,
        "{}",
        step
    );
    prop_assert!(m.mem_used_max >= m.mem_used_total, "{step}: {m:?}");
    // Every stored object needs at least its bytes of zspage memory; shared ones once.
    prop_assert!(m.mem_used_total >= object_bytes, "{step}: {m:?}");
    Ok(())
}

fn run(algorithm: Algorithm, s: Shape, ops: &[Op]) -> Result<(), TestCaseError> {
    let backing = Arc::new(MemBacking::new());
    let zram = device(algorithm, s, Arc::clone(&backing));
    let mut model = vec![0u8; s.disksize];
    check(&zram, &backing, s, &model, "start")?;
    for (i, op) in ops.iter().enumerate() {
        let step = format!("{algorithm} unit {} step {i} {op:?}", s.unit);
        match *op {
            Op::Write(off, len, f) => {
                let data = bytes(f, off, len);
                zram.write(off, &data).expect("write");
                model[off as usize..off as usize + len].copy_from_slice(&data);
            }
            Op::Read(off, len) => {
                let mut buf = vec![0x5Au8; len];
                zram.read(off, &mut buf).expect("read");
                prop_assert!(buf == model[off as usize..off as usize + len], "{step}");
            }
            Op::Discard(off, len) => {
                zram.discard(off, len).expect("discard");
                // The whole pages inside the range read back as zeroes; the edges keep
                // their data, as with pages.
                let first = (off as usize).div_ceil(PAGE_SIZE);
                let end = (off as usize + len as usize) / PAGE_SIZE;
                for p in first..end {
                    model[p * PAGE_SIZE..(p + 1) * PAGE_SIZE].fill(0);
                }
            }
            Op::WriteZeroes(off, len) => {
                zram.write_zeroes(off, len).expect("write_zeroes");
                model[off as usize..(off + len) as usize].fill(0);
            }
            Op::OutOfRange(off, len) => {
                let before = zram.mm_stat();
                let failed = zram.io_stat();
                let mut buf = vec![0u8; len];
                let is_oor = |r: zram::Result<()>| matches!(r, Err(Error::OutOfRange { .. }));
                prop_assert!(is_oor(zram.read(off, &mut buf)), "{step}: read");
                prop_assert!(is_oor(zram.write(off, &vec![0xEE; len])), "{step}: write");
                prop_assert!(is_oor(zram.discard(off, len as u64)), "{step}: discard");
                prop_assert!(is_oor(zram.write_zeroes(off, len as u64)), "{step}: zeroes");
                prop_assert!(is_oor(zram.write(u64::MAX, &[1])), "{step}: overflow");
                prop_assert_eq!(
                    zram.mm_stat().without_background(),
                    before.without_background(),
                    "{}",
                    step
                );
                prop_assert_eq!(zram.io_stat(), failed, "{}", step);
            }
            Op::Compact => {
                zram.compact();
            }
            Op::Flush => zram.flush().expect("flush"),
            Op::Clear => {
                zram.clear();
                model.fill(0);
                let m = zram.mm_stat();
                prop_assert_eq!(m.orig_data_size, 0, "{}", step);
                prop_assert_eq!(m.mem_used_total, 0, "{}", step);
                prop_assert_eq!(m.huge_pages_since, 0, "{}", step);
                for u in 0..s.units() {
                    prop_assert_eq!(zram.slot(u), Some(SlotEntry::default()), "{}", step);
                }
            }
            Op::Idle(age, skew) => {
                zram.skew_clock(skew);
                let req = age.map_or(zram::IdleRequest::All, zram::IdleRequest::Age);
                zram.mark_idle(req);
                for u in 0..s.units() {
                    let e = zram.slot(u).unwrap();
                    let resident = e.len > 0 && !e.flags.contains(Flags::WB);
                    if age.is_none() && resident {
                        prop_assert!(e.flags.contains(Flags::IDLE), "{step}: unit {u}: {e:?}");
                    }
                    if !resident {
                        prop_assert!(!e.flags.contains(Flags::IDLE), "{step}: unit {u}: {e:?}");
                    }
                }
            }
            Op::Writeback(w, fail) => {
                let req = match w {
                    Wb::Mode(m) => WritebackRequest::mode(m),
                    Wb::Pages(a, b) => format!("page_indexes={a}-{b}").parse().unwrap(),
                };
                let slots: Vec<_> = (0..s.units()).map(|u| zram.slot(u)).collect();
                let bd = zram.bd_stat();
                backing.fail_appends(fail);
                let r = zram.writeback(&req);
                backing.fail_appends(false);
                match r {
                    Ok(report) => {
                        // A copy that several slots share is written (and counted) once.
                        prop_assert_eq!(
                            zram.bd_stat().bd_writes,
                            bd.bd_writes + report.pages - report.shared_pages,
                            "{}",
                            step
                        );
                    }
                    Err(e) => {
                        prop_assert!(fail, "{step}: {e}");
                        prop_assert_eq!(e.errno(), libc::EIO, "{}", step);
                        // The failed batch changed nothing, earlier batches may have landed.
                        for (u, before) in slots.iter().enumerate() {
                            let now = zram.slot(u);
                            prop_assert!(
                                now == *before || now.unwrap().flags.contains(Flags::WB),
                                "{step}: unit {u}"
                            );
                        }
                    }
                }
            }
            Op::Recompress(mode, threshold) => {
                let req = RecompressRequest {
                    mode,
                    threshold,
                    ..RecompressRequest::default()
                };
                let r = zram.recompress(&req).expect("recompress");
                // A shared object is encoded once for the slots naming it.
                prop_assert!(r.shared <= r.recompressed, "{step}: {r:?}");
                prop_assert!(r.codec_runs + r.shared <= r.attempts, "{step}: {r:?}");
            }
            Op::Fold => {
                let before = zram.mm_stat();
                let report = zram.fold().unwrap();
                let after = zram.mm_stat();
                prop_assert_eq!(
                    after.pages_folded,
                    before.pages_folded + report.pages_freed,
                    "{}",
                    step
                );
                prop_assert!(after.mem_used_total <= before.mem_used_total, "{step}");
            }
        }
        check(&zram, &backing, s, &model, &step)?;
    }
    Ok(())
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        max_shrink_iters: 1000,
        ..ProptestConfig::default()
    }
}

const K: usize = 1024;

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn lz4_pages_match_the_model(ops in prop::collection::vec(op(Shape::new(PAGE_SIZE)), 1..80)) {
        run(Algorithm::Lz4, Shape::new(PAGE_SIZE), &ops)?;
    }

    #[test]
    fn zstd_pages_match_the_model(ops in prop::collection::vec(op(Shape::new(PAGE_SIZE)), 1..80)) {
        run(Algorithm::Zstd, Shape::new(PAGE_SIZE), &ops)?;
    }

    #[test]
    fn lzo_pages_match_the_model(ops in prop::collection::vec(op(Shape::new(PAGE_SIZE)), 1..80)) {
        run(Algorithm::Lzo, Shape::new(PAGE_SIZE), &ops)?;
    }

    #[test]
    fn lzo_rle_pages_match_the_model(ops in prop::collection::vec(op(Shape::new(PAGE_SIZE)), 1..80)) {
        run(Algorithm::LzoRle, Shape::new(PAGE_SIZE), &ops)?;
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn lz4_8k_units_match_the_model(ops in prop::collection::vec(op(Shape::new(8 * K)), 1..60)) {
        run(Algorithm::Lz4, Shape::new(8 * K), &ops)?;
    }

    #[test]
    fn zstd_8k_units_match_the_model(ops in prop::collection::vec(op(Shape::new(8 * K)), 1..60)) {
        run(Algorithm::Zstd, Shape::new(8 * K), &ops)?;
    }
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn lz4_32k_units_match_the_model(ops in prop::collection::vec(op(Shape::new(32 * K)), 1..60)) {
        run(Algorithm::Lz4, Shape::new(32 * K), &ops)?;
    }

    #[test]
    fn zstd_32k_units_match_the_model(ops in prop::collection::vec(op(Shape::new(32 * K)), 1..60)) {
        run(Algorithm::Zstd, Shape::new(32 * K), &ops)?;
    }
}

proptest! {
    #![proptest_config(config(48))]

    #[test]
    fn lz4_128k_units_match_the_model(ops in prop::collection::vec(op(Shape::new(128 * K)), 1..60)) {
        run(Algorithm::Lz4, Shape::new(128 * K), &ops)?;
    }

    #[test]
    fn zstd_128k_units_match_the_model(ops in prop::collection::vec(op(Shape::new(128 * K)), 1..60)) {
        run(Algorithm::Zstd, Shape::new(128 * K), &ops)?;
    }
}

/// A fixed sequence through every storage kind of one slot and every edge (partial write
/// into an empty slot, raw → compressed → same-filled → freed, chains of several pieces,
/// discard and write-zeroes of part of a slot, the short last unit), for every unit size
/// and algorithm (the random runs may not hit all of these in a small case count).
#[test]
fn one_slot_through_every_storage_kind() {
    for unit in [PAGE_SIZE, 8 * K, 32 * K, 64 * K, 128 * K] {
        let s = Shape::new(unit);
        let u = unit as u64;
        let last = (2 * unit) as u64;
        let seq = [
            Op::Write(100, 7, Fill::Random(3)),
            Op::Write(0, unit, Fill::Text(7)),
            Op::Write(0, unit, Fill::Random(9)),
            Op::Write(0, unit / 2, Fill::Zero),
            Op::Write(0, unit, Fill::Word(0xDEAD_BEEF_0000_0001)),
            Op::Write(0, unit, Fill::Zero),
            Op::Write(u - 3, 9, Fill::Text(5)),
            Op::Discard(1, u * 2),
            Op::Discard(0, u * 2),
            Op::Write(0, 2 * unit + 3 * PAGE_SIZE, Fill::Random(11)),
            Op::WriteZeroes(10, u + 17),
            Op::Discard(u + PAGE_SIZE as u64, PAGE_SIZE as u64 * 2 + 1),
            Op::Write(last, 3 * PAGE_SIZE, Fill::Text(12)),
            Op::Read(last + 5, 100),
            Op::WriteZeroes(last, 3 * PAGE_SIZE as u64),
            Op::Compact,
            Op::Flush,
            Op::Clear,
            Op::Write(0, unit, Fill::Word(u64::MAX)),
            Op::Read(3, unit - 6),
        ];
        for algorithm in Algorithm::ALL {
            if let Err(e) = run(algorithm, s, &seq) {
                panic!("{algorithm} unit {unit}: {e}");
            }
        }
    }
}
