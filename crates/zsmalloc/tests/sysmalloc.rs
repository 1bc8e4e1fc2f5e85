//! The malloc baseline: objects of exactly their size, chunks counted as malloc rounds
//! them, stale handles refused across entry reuse, `compact` as `malloc_trim`; and threads
//! racing on one pool.

#[path = "common/churn.rs"]
mod churn;

use zsmalloc::{Backend, Error, MALLOC_CHUNK_HEADER, PAGE_SIZE, PoolConfig, SysMalloc};

fn sysmalloc(shards: usize) -> SysMalloc {
    SysMalloc::with_config(PoolConfig {
        shards,
        ..PoolConfig::default()
    })
    .unwrap()
}

#[test]
fn objects_hold_exactly_their_size_and_are_counted_as_chunks() {
    let m = sysmalloc(1);
    // glibc's chunks: size + 8 rounded up to 16, at least 32.
    assert_eq!(MALLOC_CHUNK_HEADER, 8);
    assert_eq!(m.footprint(1).unwrap(), 32);
    assert_eq!(m.footprint(24).unwrap(), 32);
    assert_eq!(m.footprint(25).unwrap(), 48);
    assert_eq!(m.footprint(4096).unwrap(), 4112);

    let sizes = [1usize, 100, 1000, 2100, 4096];
    let handles: Vec<_> = sizes.iter().map(|&s| m.malloc(s).unwrap()).collect();
    for (&h, &s) in handles.iter().zip(&sizes) {
        m.write(h, &vec![s as u8; s]).unwrap();
        assert!(matches!(
            m.write(h, &vec![0u8; s + 1]),
            Err(Error::TooLarge { .. })
        ));
    }
    assert_eq!(m.objects(), sizes.len());
    let footprints: usize = sizes.iter().map(|&s| m.footprint(s).unwrap()).sum();
    assert!(m.total_pages() * PAGE_SIZE >= footprints);
    assert!(m.total_pages() <= footprints.div_ceil(PAGE_SIZE) + 1);
    assert_eq!(
        m.compact(),
        0,
        "malloc_trim does not say how much it gave back"
    );
    for (&h, &s) in handles.iter().zip(&sizes) {
        let mut out = vec![0u8; s];
        m.read(h, &mut out).unwrap();
        assert!(
            out.iter().all(|&x| x == s as u8),
            "object of {s} bytes changed"
        );
        m.free(h).unwrap();
    }
    assert_eq!(m.total_pages(), 0);
    assert_eq!(m.objects(), 0);
    m.check_invariants().unwrap();
}

#[test]
fn a_freed_handle_stays_refused_when_its_entry_is_reused() {
    let m = sysmalloc(1);
    let a = m.malloc(10).unwrap();
    m.free(a).unwrap();
    let b = m.malloc(10).unwrap();
    assert_ne!(a, b);
    m.write(b, b"0123456789").unwrap();
    assert!(matches!(m.write(a, b"x"), Err(Error::StaleHandle(_))));
    assert!(matches!(m.free(a), Err(Error::StaleHandle(_))));
    let mut out = [0u8; 10];
    m.read(b, &mut out).unwrap();
    assert_eq!(&out, b"0123456789");
    m.free(b).unwrap();
    m.check_invariants().unwrap();
}

#[test]
fn threads_racing_keep_every_object_intact() {
    let m = sysmalloc(4);
    churn::churn(&m, 4, 2000, true);
    assert!(m.metadata_bytes() > 0);
}
