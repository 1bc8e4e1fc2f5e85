//! Every allocator against a plain model: random malloc, write, read, free and compact
//! (sizes 1..=4096 in a workload-like mix), each read checked against what the model says
//! the object holds, the allocator's invariants and its accounting checked after every
//! step; then the errors every allocator gives alike: sizes 0 and 4097, writes past an
//! object, stale and forged handles, a full free; and memory given back when emptied.

use std::collections::HashMap;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use zsmalloc::{Allocator, Backend, Error, Handle, PoolConfig, open};

fn backend(allocator: Allocator) -> std::sync::Arc<dyn Backend> {
    open(PoolConfig {
        allocator,
        chain_size: 4,
        ..PoolConfig::default()
    })
    .unwrap_or_else(|e| panic!("open {allocator}: {e}"))
}

/// A size drawn like zram's objects: mostly 1–3 KiB, some tiny, some whole pages.
fn size(rng: &mut SmallRng) -> usize {
    match rng.gen_range(0..10) {
        0 => rng.gen_range(1..=64),
        1 => 4096,
        2 => rng.gen_range(3000..=4096),
        3 => 1 << rng.gen_range(0..=12),
        _ => rng.gen_range(600..=3000),
    }
}

fn fill(rng: &mut SmallRng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

/// The model: handle → (object size, bytes written).
fn check_all(b: &dyn Backend, model: &HashMap<u64, (usize, Vec<u8>)>, step: usize) {
    for (&raw, (_, data)) in model {
        let mut out = vec![0u8; data.len()];
        b.read(Handle::from_raw(raw), &mut out)
            .unwrap_or_else(|e| panic!("{} step {step}: read {raw:#x}: {e}", b.allocator()));
        assert!(
            out == *data,
            "{} step {step}: object {raw:#x} changed",
            b.allocator()
        );
    }
}

fn run_model(allocator: Allocator, seed: u64, steps: usize) {
    let b = backend(allocator);
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model: HashMap<u64, (usize, Vec<u8>)> = HashMap::new();
    let mut freed: Vec<u64> = Vec::new();
    for step in 0..steps {
        match rng.gen_range(0..100) {
            0..=44 => {
                let len = size(&mut rng);
                let h = b.malloc(len).unwrap();
                assert!(
                    !model.contains_key(&h.to_raw()),
                    "{allocator} step {step}: handle {h} handed out twice"
                );
                let n = rng.gen_range(0..=len);
                let data = fill(&mut rng, n);
                b.write(h, &data).unwrap();
                model.insert(h.to_raw(), (len, data));
            }
            45..=59 if !model.is_empty() => {
                // Rewrite a live object.
                let raw = *model.keys().nth(rng.gen_range(0..model.len())).unwrap();
                let len = model[&raw].0;
                let n = rng.gen_range(1..=len);
                let data = fill(&mut rng, n);
                b.write(Handle::from_raw(raw), &data).unwrap();
                model.insert(raw, (len, data));
            }
            60..=94 if !model.is_empty() => {
                let raw = *model.keys().nth(rng.gen_range(0..model.len())).unwrap();
                b.free(Handle::from_raw(raw)).unwrap();
                model.remove(&raw);
                freed.push(raw);
            }
            95..=99 => {
                b.compact();
                check_all(&*b, &model, step);
            }
            _ => {}
        }
        if let Err(e) = b.check_invariants() {
            panic!("{allocator} step {step}: {e}");
        }
        assert_eq!(b.objects(), model.len(), "{allocator} step {step}: objects");
        let stored: usize = model.values().map(|(len, _)| *len).sum();
        // Every object lives in the memory the allocator reports (malloc's objects in its
        // heap, which it reports in whole pages of what it holds for them).
        assert!(
            b.total_pages() * 4096 + b.metadata_bytes() >= stored,
            "{allocator} step {step}: {} pages + {} metadata bytes hold {stored} bytes",
            b.total_pages(),
            b.metadata_bytes()
        );
    }
    check_all(&*b, &model, steps);
    // A freed handle stays refused while its slot may have been reused: the model's live
    // handles are the only ones that read.
    for raw in freed.iter().filter(|r| !model.contains_key(r)).take(50) {
        assert!(
            matches!(b.free(Handle::from_raw(*raw)), Err(Error::StaleHandle(_))),
            "{allocator}: a stale handle {raw:#x} was freed again"
        );
    }
    for raw in model.keys().copied().collect::<Vec<_>>() {
        b.free(Handle::from_raw(raw)).unwrap();
    }
    b.compact();
    b.trim();
    b.check_invariants().unwrap();
    assert_eq!(
        b.objects(),
        0,
        "{allocator}: objects left after freeing all"
    );
    assert_eq!(
        b.total_pages(),
        0,
        "{allocator}: pages held after freeing all"
    );
}

#[test]
fn every_allocator_matches_the_model() {
    for allocator in Allocator::ALL {
        for seed in 0..4 {
            run_model(allocator, seed, 3000);
        }
    }
}

#[test]
fn bad_sizes_and_handles_are_errors_on_every_allocator() {
    for allocator in Allocator::ALL {
        let b = backend(allocator);
        for bad in [0, 4097, usize::MAX] {
            assert!(
                matches!(b.malloc(bad), Err(Error::InvalidSize(s)) if s == bad),
                "{allocator}: malloc({bad})"
            );
            assert!(b.footprint(bad).is_err(), "{allocator}: footprint({bad})");
        }
        let h = b.malloc(100).unwrap();
        assert!(
            matches!(
                b.write(h, &[1u8; 4096]),
                Err(Error::TooLarge { len: 4096, .. })
            ),
            "{allocator}: a write past the object"
        );
        let mut big = [0u8; 4097];
        assert!(
            b.read(h, &mut big).is_err(),
            "{allocator}: a read past the page"
        );
        b.write(h, &[7u8; 100]).unwrap();
        b.free(h).unwrap();
        for op in 0..3 {
            let r = match op {
                0 => b.free(h),
                1 => b.write(h, b"x"),
                _ => b.read(h, &mut [0u8; 1]),
            };
            assert!(
                matches!(r, Err(Error::StaleHandle(_))),
                "{allocator}: op {op} on a freed handle gave {r:?}"
            );
        }
        for forged in [0u64, 1, u64::MAX, 0xdead_beef_0000_0001] {
            let f = Handle::from_raw(forged);
            assert!(b.free(f).is_err(), "{allocator}: freed forged {forged:#x}");
            assert!(
                b.read(f, &mut [0u8; 8]).is_err(),
                "{allocator}: read forged"
            );
        }
        b.check_invariants().unwrap();
        assert_eq!(b.objects(), 0);
    }
}

#[test]
fn sharing_is_zsmalloc_only_and_refused_clearly_elsewhere() {
    for allocator in Allocator::ALL {
        let b = backend(allocator);
        let h = b.malloc(64).unwrap();
        b.write(h, &[3u8; 64]).unwrap();
        assert_eq!(b.refs(h).unwrap(), 1);
        if b.supports_sharing() {
            assert_eq!(allocator, Allocator::Zsmalloc);
            let s = b.share(h).unwrap();
            assert!(!b.free_shared(s).unwrap());
        } else {
            let e = b.share(h).unwrap_err();
            assert!(matches!(e, Error::Unsupported { .. }), "{allocator}: {e}");
            assert!(e.to_string().contains(allocator.name()), "{e}");
            assert!(b.malloc_dedup(&[3u8; 64]).is_err());
            assert!(b.fold().is_err());
        }
        assert!(b.free_shared(h).unwrap());
        assert_eq!(b.objects(), 0);
    }
}

#[test]
fn footprint_covers_the_size_and_grows_with_it() {
    for allocator in Allocator::ALL {
        let b = backend(allocator);
        let mut last = 0;
        for size in 1..=4096 {
            let f = b.footprint(size).unwrap();
            assert!(f >= size, "{allocator}: footprint({size}) = {f}");
            assert!(f >= last, "{allocator}: footprint shrinks at {size}");
            last = f;
        }
        assert!(b.huge_class_size() <= 4096 && b.huge_class_size() > 0);
    }
}
