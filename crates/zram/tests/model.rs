//! Model test: random sequences of writes (whole and partial pages, unaligned, spanning
//! pages), reads, discards, write-zeroes, compactions and resets against a plain `Vec<u8>`
//! image of the device, for every algorithm. After every step the whole device reads back as
//! the model, `check_invariants()` holds, every slot is stored the way the kernel's rules say
//! (same-filled → `SAME` with the word, incompressible → `HUGE` raw 4096 bytes, otherwise a
//! compressed object shorter than `huge_class_size`), and the `mm_stat` identities hold
//! against the slot table.

use proptest::prelude::*;
use zram::slot::{Flags, SlotEntry};
use zram::{Algorithm, AlgorithmParams, Error, PAGE_SIZE, Zram, ZramConfig};
use zsmalloc::Geometry;
use zsmalloc::class::Header;

const PAGES: usize = 16;
const DISKSIZE: usize = PAGES * PAGE_SIZE;

/// What the bytes of a write look like.
#[derive(Debug, Clone, Copy)]
enum Fill {
    /// All zero.
    Zero,
    /// A repeated 8-byte word, aligned to the device offset: whole pages come out
    /// same-filled.
    Word(u64),
    /// Pseudo-random bytes: incompressible.
    Random(u64),
    /// Words from a small vocabulary: compresses well.
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
    Reset,
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// The bytes a write of `len` at `offset` carries.
fn bytes(fill: Fill, offset: u64, len: usize) -> Vec<u8> {
    match fill {
        Fill::Zero => vec![0; len],
        Fill::Word(w) => {
            let b = w.to_ne_bytes();
            (0..len).map(|i| b[(offset as usize + i) % 8]).collect()
        }
        Fill::Random(seed) => {
            let mut s = seed | 1;
            (0..len).map(|_| xorshift(&mut s) as u8).collect()
        }
        Fill::Text(seed) => {
            const WORDS: [&str; 8] = [
                "zram ",
                "stores ",
                "pages ",
                "compressed ",
                "in ",
                "memory; ",
                "zsmalloc ",
                "packs\n",
            ];
            let mut s = seed | 1;
            let mut out = Vec::with_capacity(len + 16);
            while out.len() < len {
                out.extend_from_slice(WORDS[(xorshift(&mut s) % 8) as usize].as_bytes());
            }
            out.truncate(len);
            out
        }
    }
}

fn fill() -> impl Strategy<Value = Fill> {
    prop_oneof![
        2 => Just(Fill::Zero),
        2 => prop_oneof![Just(u64::MAX), Just(0x0101_0101_0101_0101), any::<u64>()]
            .prop_map(Fill::Word),
        3 => any::<u64>().prop_map(Fill::Random),
        3 => any::<u64>().prop_map(Fill::Text),
    ]
}

/// An offset: page-aligned half of the time.
fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        (0..PAGES).prop_map(|p| (p * PAGE_SIZE) as u64),
        (0..DISKSIZE).prop_map(|o| o as u64),
    ]
}

/// A length: whole pages, or anything up to three pages.
fn length() -> impl Strategy<Value = usize> {
    prop_oneof![
        (1usize..=4).prop_map(|n| n * PAGE_SIZE),
        1usize..=3 * PAGE_SIZE,
        1usize..=16,
    ]
}

/// Clamps a request to the device.
fn clamp(offset: u64, len: usize) -> usize {
    len.min(DISKSIZE - offset as usize)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (offset(), length(), fill()).prop_map(|(o, l, f)| Op::Write(o, clamp(o, l), f)),
        3 => (offset(), length()).prop_map(|(o, l)| Op::Read(o, clamp(o, l))),
        2 => (offset(), length()).prop_map(|(o, l)| Op::Discard(o, clamp(o, l) as u64)),
        2 => (offset(), length()).prop_map(|(o, l)| Op::WriteZeroes(o, clamp(o, l) as u64)),
        1 => (0..DISKSIZE as u64 + 8, 1usize..=2 * PAGE_SIZE)
            .prop_map(|(o, l)| Op::OutOfRange(o, l.max((DISKSIZE + 1).saturating_sub(o as usize)))),
        1 => Just(Op::Compact),
        1 => Just(Op::Flush),
        1 => Just(Op::Reset),
    ]
}

/// Each algorithm runs on a different pool shape: chain sizes 1 to 16, both zspage rules,
/// both object layouts.
fn device(algorithm: Algorithm) -> Zram {
    let (chain_size, geometry, shards, header) = match algorithm {
        Algorithm::Lz4 => (4, Geometry::Seed, 1, Header::Handle),
        Algorithm::Zstd => (8, Geometry::MinWaste, 2, Header::Omitted),
        Algorithm::Lzo => (1, Geometry::Seed, 0, Header::Omitted),
        _ => (16, Geometry::MinWaste, 3, Header::Handle),
    };
    Zram::new(ZramConfig {
        disksize: DISKSIZE as u64,
        algorithm,
        params: AlgorithmParams::default(),
        chain_size,
        geometry,
        header,
        mem_limit: 0,
        shards,
        auto_compact: None,
        unit_size: PAGE_SIZE,
    })
    .expect("device")
}

/// The model's view of a page: its fill word if same-filled.
fn same_word(page: &[u8]) -> Option<u64> {
    let first = u64::from_ne_bytes(page[..8].try_into().unwrap());
    page.chunks_exact(8)
        .all(|w| u64::from_ne_bytes(w.try_into().unwrap()) == first)
        .then_some(first)
}

fn check(zram: &Zram, model: &[u8], step: &str) -> Result<(), TestCaseError> {
    let mut image = vec![0xA5u8; DISKSIZE];
    zram.read(0, &mut image).expect("read whole device");
    for p in 0..PAGES {
        let r = p * PAGE_SIZE..(p + 1) * PAGE_SIZE;
        prop_assert!(image[r.clone()] == model[r], "{step}: page {p} differs");
    }
    if let Err(e) = zram.pool().check_invariants() {
        return Err(TestCaseError::fail(format!("{step}: invariants: {e}")));
    }

    let huge_class = zram.huge_class_size();
    let (mut allocated, mut same, mut huge, mut lens) = (0u64, 0u64, 0u64, 0u64);
    for p in 0..PAGES {
        let e = zram.slot(p).expect("slot in range");
        let page = &model[p * PAGE_SIZE..(p + 1) * PAGE_SIZE];
        match same_word(page) {
            // Never written, discarded or zeroed pages hold nothing; written zero pages
            // hold the word 0.
            Some(0) if e == SlotEntry::default() => {}
            Some(w) => {
                prop_assert!(e.flags.contains(Flags::SAME), "{step}: page {p}: {e:?}");
                prop_assert_eq!(e.handle, w, "{}: page {} fill word", step, p);
                prop_assert_eq!(e.len, 0, "{}: page {}", step, p);
            }
            None => {
                prop_assert!(!e.flags.contains(Flags::SAME), "{step}: page {p}: {e:?}");
                prop_assert!(e.len > 0, "{step}: page {p}: {e:?}");
                let is_huge = e.flags.contains(Flags::HUGE);
                prop_assert_eq!(is_huge, e.len == PAGE_SIZE, "{}: page {} {:?}", step, p, e);
                prop_assert!(is_huge || e.len < huge_class, "{step}: page {p}: {e:?}");
            }
        }
        allocated += u64::from(e.is_allocated());
        same += u64::from(e.flags.contains(Flags::SAME));
        huge += u64::from(e.flags.contains(Flags::HUGE));
        lens += e.len as u64;
    }

    let m = zram.mm_stat();
    prop_assert_eq!(m.orig_data_size, allocated * PAGE_SIZE as u64, "{}", step);
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
    // Every stored object needs at least its bytes of zspage memory.
    prop_assert!(m.mem_used_total >= m.compr_data_size, "{step}: {m:?}");
    Ok(())
}

fn run(algorithm: Algorithm, ops: &[Op]) -> Result<(), TestCaseError> {
    let zram = device(algorithm);
    let mut model = vec![0u8; DISKSIZE];
    check(&zram, &model, "start")?;
    for (i, op) in ops.iter().enumerate() {
        let step = format!("{algorithm} step {i} {op:?}");
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
                // Only whole pages inside the range are freed; the edges keep their data.
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
                prop_assert!(
                    is_oor(zram.write(u64::MAX, &[1])),
                    "{step}: overflowing offset"
                );
                prop_assert_eq!(zram.mm_stat(), before, "{}", step);
                prop_assert_eq!(zram.io_stat(), failed, "{}", step);
            }
            Op::Compact => {
                zram.compact();
            }
            Op::Flush => zram.flush().expect("flush"),
            Op::Reset => {
                zram.reset();
                model.fill(0);
                let m = zram.mm_stat();
                prop_assert_eq!(m.orig_data_size, 0, "{}", step);
                prop_assert_eq!(m.mem_used_total, 0, "{}", step);
                prop_assert_eq!(m.huge_pages_since, 0, "{}", step);
                for p in 0..PAGES {
                    prop_assert_eq!(zram.slot(p), Some(SlotEntry::default()), "{}", step);
                }
            }
        }
        check(&zram, &model, &step)?;
    }
    Ok(())
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        max_shrink_iters: 2000,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn lz4_matches_the_model(ops in prop::collection::vec(op(), 1..80)) {
        run(Algorithm::Lz4, &ops)?;
    }

    #[test]
    fn zstd_matches_the_model(ops in prop::collection::vec(op(), 1..80)) {
        run(Algorithm::Zstd, &ops)?;
    }

    #[test]
    fn lzo_matches_the_model(ops in prop::collection::vec(op(), 1..80)) {
        run(Algorithm::Lzo, &ops)?;
    }

    #[test]
    fn lzo_rle_matches_the_model(ops in prop::collection::vec(op(), 1..80)) {
        run(Algorithm::LzoRle, &ops)?;
    }
}

/// A fixed sequence that visits every storage kind on one page and checks each transition
/// (the random runs may not hit all of them in a small case count).
#[test]
fn one_page_through_every_storage_kind() {
    for algorithm in Algorithm::ALL {
        let seq = [
            Op::Write(0, PAGE_SIZE, Fill::Text(7)),
            Op::Write(0, PAGE_SIZE, Fill::Random(9)),
            Op::Write(0, PAGE_SIZE, Fill::Word(0xDEAD_BEEF_0000_0001)),
            Op::Write(0, PAGE_SIZE, Fill::Zero),
            Op::Write(100, 7, Fill::Random(3)),
            Op::Write(PAGE_SIZE as u64 - 3, 9, Fill::Text(5)),
            Op::Discard(1, PAGE_SIZE as u64 * 2),
            Op::Discard(0, PAGE_SIZE as u64 * 2),
            Op::Write(0, 3 * PAGE_SIZE, Fill::Random(11)),
            Op::WriteZeroes(10, PAGE_SIZE as u64 * 2),
            Op::Compact,
            Op::Reset,
            Op::Write(0, PAGE_SIZE, Fill::Word(u64::MAX)),
        ];
        if let Err(e) = run(algorithm, &seq) {
            panic!("{algorithm}: {e}");
        }
    }
}
