//! Every zram feature on every allocator (seed 003's alternatives beside zsmalloc): a
//! device of text, incompressible (huge), same-filled and empty pages reads back what was
//! written, with the kernel's stat rules, through discard, partial writes, `mem_limit`,
//! compaction, writeback to a backing store and back, recompression and units larger than
//! a page; `dedup` and `fold`, which need objects shared by several slots, are refused
//! clearly where the allocator cannot share.

mod common;
#[path = "common/post.rs"]
#[expect(dead_code, reason = "only the settings: no stalling store here")]
mod post;
#[path = "common/text.rs"]
mod text;

use std::sync::Arc;

use common::random;
use zram::backing::{Backing, MemBacking};
use zram::{
    Allocator, Error, IdleRequest, Mode, PAGE_SIZE, RecompressRequest, Size, WritebackRequest,
    Zram, ZramConfig,
};

const PAGES: usize = 96;
const P: u64 = PAGE_SIZE as u64;

/// The post-processing tests' device (lz4, zstd at priority 1, no background
/// compaction) on `allocator`.
fn config(allocator: Allocator) -> ZramConfig {
    let mut c = post::config(PAGES, 4);
    c.pool.allocator = allocator;
    c
}

/// Page `p`'s bytes: text 0..40, incompressible 40..56, same-filled 56..64, nothing after.
fn page(p: usize) -> Option<Vec<u8>> {
    match p {
        0..40 => Some(text::text_page(
            p,
            &["allocator ", "chunk ", "slab ", "buddy ", "zspage\n"],
        )),
        40..56 => Some(random(PAGE_SIZE, p as u64 + 1)),
        56..64 => Some(vec![p as u8; PAGE_SIZE]),
        _ => None,
    }
}

fn fill(zram: &Zram) -> Vec<u8> {
    let mut image = vec![0u8; PAGES * PAGE_SIZE];
    for p in 0..PAGES {
        if let Some(bytes) = page(p) {
            zram.write(p as u64 * P, &bytes).unwrap();
            image[p * PAGE_SIZE..(p + 1) * PAGE_SIZE].copy_from_slice(&bytes);
        }
    }
    image
}

fn same(zram: &Zram, image: &[u8], what: &str) {
    let mut back = vec![0xEEu8; image.len()];
    zram.inspect(0, &mut back).unwrap();
    assert!(
        back == image,
        "{}: {what}: device differs from what was written",
        zram.allocator()
    );
    zram.pool()
        .check_invariants()
        .unwrap_or_else(|e| panic!("{}: {what}: {e}", zram.allocator()));
    let mm = zram.mm_stat();
    assert_eq!(
        mm.mem_used_total,
        zram.pool().total_pages() as u64 * P,
        "{}: {what}: mem_used_total is the allocator's pages",
        zram.allocator()
    );
}

#[test]
fn every_feature_works_on_every_allocator() {
    for allocator in Allocator::ALL {
        let backing: Arc<dyn Backing> = Arc::new(MemBacking::new());
        let zram = Zram::with_backing(config(allocator), Some(Arc::clone(&backing))).unwrap();
        assert_eq!(zram.allocator(), allocator);
        let mut image = fill(&zram);
        same(&zram, &image, "filled");
        let mm = zram.mm_stat();
        assert_eq!(mm.orig_data_size, 64 * P, "{allocator}");
        assert_eq!(mm.same_pages, 8, "{allocator}");
        assert_eq!(
            mm.huge_pages, 16,
            "{allocator}: incompressible pages stored raw"
        );
        assert!(mm.compr_data_size >= 16 * P, "{allocator}");
        assert!(mm.mem_used_total > 0, "{allocator}");
        assert_eq!(
            zram.pool().objects(),
            56,
            "{allocator}: one object per stored page"
        );

        // Partial writes and discards.
        zram.write(3 * P + 100, b"patched").unwrap();
        image[3 * PAGE_SIZE + 100..3 * PAGE_SIZE + 107].copy_from_slice(b"patched");
        zram.discard(10 * P, 4 * P).unwrap();
        image[10 * PAGE_SIZE..14 * PAGE_SIZE].fill(0);
        same(&zram, &image, "patched and discarded");
        assert_eq!(zram.pool().objects(), 52, "{allocator}");

        // Free every other text page, then compact: data intact either way.
        for p in (16..40).step_by(2) {
            zram.discard(p as u64 * P, P).unwrap();
            image[p * PAGE_SIZE..(p + 1) * PAGE_SIZE].fill(0);
        }
        zram.compact();
        same(&zram, &image, "compacted");

        // Writeback of the huge pages, read back from the backing store.
        zram.mark_idle(IdleRequest::All);
        let wb = zram.writeback(&WritebackRequest::mode(Mode::Huge)).unwrap();
        assert_eq!(wb.pages, 16, "{allocator}: huge pages written back");
        assert_eq!(zram.bd_stat().bd_count, 16, "{allocator}");
        assert_eq!(zram.mm_stat().huge_pages, 0, "{allocator}");
        same(&zram, &image, "written back");

        // Recompression with zstd: text pages shrink, data intact.
        let rc = zram.recompress(&RecompressRequest::default()).unwrap();
        assert!(rc.recompressed > 0, "{allocator}: nothing recompressed");
        same(&zram, &image, "recompressed");

        // Rewrite everything, then free it all: nothing left behind.
        image = fill(&zram);
        same(&zram, &image, "rewritten");
        zram.discard(0, (PAGES * PAGE_SIZE) as u64).unwrap();
        zram.compact();
        let mm = zram.mm_stat();
        assert_eq!(mm.orig_data_size, 0, "{allocator}");
        assert_eq!(mm.compr_data_size, 0, "{allocator}");
        assert_eq!(zram.pool().objects(), 0, "{allocator}");
        zram.pool().trim();
        assert_eq!(zram.pool().total_pages(), 0, "{allocator}: pages left");
    }
}

#[test]
fn mem_limit_refuses_alike_and_loses_nothing() {
    for allocator in Allocator::ALL {
        let zram = Zram::new(config(allocator)).unwrap();
        zram.set_mem_limit(8 * P);
        let mut stored = Vec::new();
        let mut refused = 0;
        for p in 0..PAGES {
            let bytes = random(PAGE_SIZE, 1000 + p as u64);
            match zram.write(p as u64 * P, &bytes) {
                Ok(()) => stored.push((p, bytes)),
                Err(e) => {
                    assert!(matches!(e, Error::MemLimit { .. }), "{allocator}: {e}");
                    assert_eq!(e.errno(), libc::ENOSPC);
                    refused += 1;
                }
            }
        }
        assert!(refused > 0, "{allocator}: the limit never bit");
        assert!(
            zram.mm_stat().mem_used_total <= 8 * P,
            "{allocator}: over the limit"
        );
        for (p, bytes) in &stored {
            let mut back = vec![0u8; PAGE_SIZE];
            zram.read(*p as u64 * P, &mut back).unwrap();
            assert!(back == *bytes, "{allocator}: page {p} lost");
        }
        zram.pool().check_invariants().unwrap();
    }
}

#[test]
fn units_larger_than_a_page_work_on_every_allocator() {
    for allocator in Allocator::ALL {
        let mut c = config(allocator);
        c.unit_size = Size(32 * 1024);
        let zram = Zram::new(c).unwrap();
        let image = fill(&zram);
        same(&zram, &image, "units");
        // Incompressible units are chains of whole-page pieces.
        let bytes = random(32 * 1024, 77);
        zram.write(64 * P, &bytes).unwrap();
        let mut back = vec![0u8; bytes.len()];
        zram.read(64 * P, &mut back).unwrap();
        assert!(back == bytes, "{allocator}: raw unit");
        zram.discard(0, (PAGES * PAGE_SIZE) as u64).unwrap();
        assert_eq!(zram.pool().objects(), 0, "{allocator}");
    }
}

#[test]
fn dedup_and_fold_need_an_allocator_that_shares() {
    for allocator in Allocator::ALL {
        let mut c = config(allocator);
        c.dedup = true;
        let made = Zram::new(c);
        let zram = Zram::new(config(allocator)).unwrap();
        fill(&zram);
        if allocator == Allocator::Zsmalloc {
            assert!(made.unwrap().dedup());
            zram.fold().unwrap();
            continue;
        }
        let e = made.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{allocator}: {e}");
        assert!(e.to_string().contains(allocator.name()), "{e}");
        assert_eq!(e.errno(), libc::EINVAL);
        let e = zram.fold().unwrap_err();
        assert_eq!(e.errno(), libc::EOPNOTSUPP, "{allocator}: {e}");
        assert!(e.to_string().contains("folding"), "{e}");
        // Nothing changed.
        assert_eq!(zram.fold_stats().folds, 0);
        zram.pool().check_invariants().unwrap();
    }
}

#[test]
fn more_shards_than_an_allocator_takes_are_refused() {
    for (allocator, max) in [
        (Allocator::Zsmalloc, 16),
        (Allocator::Afmalloc, 1 << 4),
        (Allocator::Malloc, 1 << 4),
    ] {
        let with = |shards| {
            let mut c = config(allocator);
            c.pool.shards = shards;
            Zram::new(c)
        };
        with(max).unwrap_or_else(|e| panic!("{allocator}: {max} shards: {e}"));
        let err = with(max + 1).unwrap_err();
        assert_eq!(err.errno(), libc::EINVAL, "{allocator}: {err}");
        assert!(
            err.to_string().contains(&format!("at most {max}")),
            "{allocator}: {err}"
        );
    }
}
