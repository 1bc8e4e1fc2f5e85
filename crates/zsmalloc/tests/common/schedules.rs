//! What the shuttle tests share: the bytes a thread writes, checking them through any
//! allocator, counting the schedules, and the end of a compaction race.

use std::sync::atomic::{AtomicUsize, Ordering};

use zsmalloc::{Backend, Handle};

/// The `len` bytes a thread writes to `h`: a pattern seeded by the handle and `tag`.
pub fn fill(h: Handle, tag: u8, len: usize) -> Vec<u8> {
    let seed = h.to_raw() as u8 ^ tag;
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

/// `h` in `b` reads back `want`.
pub fn check(b: &dyn Backend, h: Handle, want: &[u8]) {
    let mut got = vec![0u8; want.len()];
    b.read(h, &mut got).unwrap();
    assert!(got == want, "handle {h}: read back different bytes");
}

/// Counts one explored schedule in `runs`, and in `hits` if the racing operation had work
/// to do (`hit`): plain std atomics, outside the model.
pub fn tally(hit: bool, runs: &AtomicUsize, hits: &AtomicUsize) {
    runs.fetch_add(1, Ordering::Relaxed);
    if hit {
        hits.fetch_add(1, Ordering::Relaxed);
    }
}

/// The end of a race with compaction, which freed `freed` pages: `b` holds exactly the
/// `live` objects, intact; compacting again leaves nothing freeable and they stay intact;
/// freeing them all leaves `b` holding no page.
pub fn settle(b: &dyn Backend, live: Vec<(Handle, Vec<u8>)>, freed: usize) {
    b.check_invariants().unwrap();
    assert_eq!(b.objects(), live.len());
    assert_eq!(b.pages_compacted(), freed as u64);
    for (h, data) in &live {
        check(b, *h, data);
    }
    b.compact();
    assert_eq!(b.freeable_pages(), 0);
    for (h, data) in live {
        check(b, h, &data);
        b.free(h).unwrap();
    }
    b.check_invariants().unwrap();
    assert_eq!(b.total_pages(), 0);
}
