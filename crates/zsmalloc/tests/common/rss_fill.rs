//! The shared part of the RSS tests: fill an allocator with objects of mixed sizes, free 90%
//! of them at random, then check and free the survivors. Uses the `rss` module
//! (`common/rss.rs`) that the test file declares beside this one.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use zsmalloc::{Backend, Handle, PAGE_SIZE};

use crate::rss::{MIB, rss};

/// Object sizes as zram sees them: compressed pages, mostly 200..3000 bytes, with a tail of
/// poorly compressible ones up to a whole page.
fn object_size(rng: &mut StdRng) -> usize {
    match rng.gen_range(0..10) {
        0..=5 => rng.gen_range(200..=2000),
        6..=8 => rng.gen_range(2001..=3600),
        _ => rng.gen_range(3601..=4096),
    }
}

/// The bytes object `i` holds: its index, then a byte pattern of its own.
fn fill_object(buf: &mut [u8], i: usize) {
    buf[..8].copy_from_slice(&(i as u64).to_le_bytes());
    buf[8..].fill((i % 251) as u8);
}

/// What `b` reports it holds, in bytes: its pages and its metadata.
pub fn reported(b: &dyn Backend) -> usize {
    b.total_pages() * PAGE_SIZE + b.metadata_bytes()
}

/// The objects [`fill`] stored, and the RSS baseline taken before them.
pub struct Stored {
    /// How many objects were stored.
    pub n: usize,
    /// Their bytes.
    pub stored: usize,
    /// The allocator's pages once they were stored.
    pub full_pages: usize,
    /// The process's RSS before the fill, with the test's own tables already resident.
    base: usize,
    /// Each object's handle, 0 once freed.
    handles: Vec<Handle>,
    sizes: Vec<u16>,
    buf: Vec<u8>,
    rng: StdRng,
    /// Put before every printed line (the allocator's name, or nothing).
    prefix: String,
}

/// Stores about `target` bytes of objects of random sizes (seeded by `seed`) in `b`, after
/// taking the RSS baseline; checks `b`'s invariants and that its pages hold the bytes.
pub fn fill(b: &dyn Backend, target: usize, seed: u64, prefix: &str) -> Stored {
    let mut rng = StdRng::seed_from_u64(seed);
    // Everything the test itself keeps is allocated and touched before the baseline: the
    // handle table (bounded: sizes average over 2 KiB) and one write buffer.
    let max_objects = target / 1500;
    let mut handles = vec![Handle::from_raw(u64::MAX); max_objects];
    let mut sizes = vec![u16::MAX; max_objects];
    let mut buf = vec![0xFFu8; PAGE_SIZE];
    let prefix = prefix.to_string();
    let base = rss();
    println!("{prefix}baseline RSS {:.1} MiB", base as f64 / MIB);

    let (mut stored, mut n) = (0, 0);
    while stored < target {
        let size = object_size(&mut rng);
        let h = b.malloc(size).unwrap();
        fill_object(&mut buf[..size], n);
        b.write(h, &buf[..size]).unwrap();
        handles[n] = h;
        sizes[n] = size as u16;
        stored += size;
        n += 1;
        assert!(n < max_objects);
    }
    b.check_invariants().unwrap();
    let full_pages = b.total_pages();
    println!(
        "{prefix}stored {n} objects, {:.1} MiB in {full_pages} pages, metadata {:.1} MiB",
        stored as f64 / MIB,
        b.metadata_bytes() as f64 / MIB
    );
    assert!(full_pages * PAGE_SIZE >= stored);
    Stored {
        n,
        stored,
        full_pages,
        base,
        handles,
        sizes,
        buf,
        rng,
        prefix,
    }
}

impl Stored {
    /// How much the process's RSS grew over the baseline.
    pub fn grown(&self) -> usize {
        rss().saturating_sub(self.base)
    }

    /// Frees 90% of the objects at random; returns how many are kept.
    pub fn free_90(&mut self, b: &dyn Backend) -> usize {
        let mut kept = 0;
        for h in &mut self.handles[..self.n] {
            if self.rng.gen_range(0..10) == 0 {
                kept += 1;
            } else {
                b.free(*h).unwrap();
                *h = Handle::from_raw(0);
            }
        }
        kept
    }

    /// Checks that every survivor reads back what was written, frees them all, and checks
    /// that `b` holds no page.
    pub fn check_and_free(mut self, b: &dyn Backend) {
        let prefix = &self.prefix;
        for (i, &h) in self.handles[..self.n].iter().enumerate() {
            if h.to_raw() == 0 {
                continue;
            }
            let size = usize::from(self.sizes[i]);
            let buf = &mut self.buf[..size];
            fill_object(buf, i);
            let mut same = false;
            b.read_with(h, size, &mut |o| same = o == &buf[..]).unwrap();
            assert!(same, "{prefix}object {i} changed");
            b.free(h).unwrap();
        }
        assert_eq!(b.total_pages(), 0);
    }
}
