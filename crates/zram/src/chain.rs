//! Data spread over several objects: a stream longer than one object (a compressed unit
//! larger than a page, see [`crate::config::ZramConfig::unit_size`]) is a *chain* of
//! zsmalloc objects.
//!
//! # Representation
//!
//! A stream of at most 4096 bytes is one object. A longer one is a chain of pieces: each
//! but the last is a 4096-byte object (the huge class: one per page, no waste) holding the
//! 8-byte handle of the next piece, then 4088 stream bytes; the last piece holds the rest
//! (1..=4096 bytes). So a stream of `len` bytes takes `links(len) + 1` objects, and the
//! links cost 8 bytes per 4088 of stream (0.2%), counted in `mem_used_total` like
//! zsmalloc's own object headers, not in per-slot metadata. The slot keeps the first
//! piece's handle and the stream's length; nothing else is needed to walk the chain.
//!
//! Sharing: a whole chain is shared through its head (`Pool::share`: recompression gives
//! slots that held one shared object one new chain); `free` then stops at a head other
//! slots still hold, and the last of them walks on. Pieces holding a link are written with
//! `Pool::write_opaque`, so folding and deduplication never make one serve another chain;
//! a last piece holds stream bytes only and may be folded with any equal object.

use zsmalloc::{Backend, Handle};

use crate::PAGE_SIZE;
use crate::error::Result;

/// Bytes of the next piece's handle at the start of every piece but the last.
const LINK: usize = 8;
/// Stream bytes in a piece that is not the last.
const PIECE_DATA: usize = PAGE_SIZE - LINK;

/// Pieces before the last in the chain of a stream of `len` bytes.
pub fn links(len: usize) -> usize {
    len.saturating_sub(PAGE_SIZE).div_ceil(PIECE_DATA)
}

/// Stream bytes in the last piece of the chain of a stream of `len` bytes.
pub(crate) fn last_piece(len: usize) -> usize {
    len - links(len) * PIECE_DATA
}

/// Allocates (through `alloc`, which may refuse, e.g. at `mem_limit`) and writes the chain
/// of `stream`; returns the first piece's handle. On failure every piece allocated is freed
/// again, so nothing is left behind.
pub(crate) fn write(
    pool: &dyn Backend,
    stream: &[u8],
    mut alloc: impl FnMut(usize) -> Result<Handle>,
) -> Result<Handle> {
    let k = links(stream.len());
    if k == 0 {
        // One object (every page, and small units): no list of pieces to keep.
        let handle = alloc(stream.len())?;
        return match pool.write(handle, stream) {
            Ok(()) => Ok(handle),
            Err(e) => {
                // Just allocated by us and never published: freeing cannot meet a stale handle.
                let _ = pool.free(handle);
                Err(e.into())
            }
        };
    }
    let mut handles: Vec<Handle> = Vec::with_capacity(k + 1);
    let result = (0..=k)
        .try_for_each(|i| {
            let size = if i < k {
                PAGE_SIZE
            } else {
                stream.len() - k * PIECE_DATA
            };
            handles.push(alloc(size)?);
            Ok(())
        })
        .and_then(|()| {
            let mut piece = [0u8; PAGE_SIZE];
            for (i, pair) in handles.windows(2).enumerate() {
                piece[..LINK].copy_from_slice(&pair[1].to_raw().to_le_bytes());
                piece[LINK..].copy_from_slice(&stream[i * PIECE_DATA..(i + 1) * PIECE_DATA]);
                // A piece with a link is never folded: equal bytes would not mean an equal
                // rest of the chain (`free` stops at a shared piece).
                pool.write_opaque(pair[0], &piece)?;
            }
            pool.write(handles[k], &stream[k * PIECE_DATA..])?;
            Ok(handles[0])
        });
    if result.is_err() {
        for h in handles {
            let _ = pool.free(h);
        }
    }
    result
}

/// Gathers the chain starting at `head` into `out` (the stream's length).
pub(crate) fn read(pool: &dyn Backend, head: Handle, out: &mut [u8]) -> Result<()> {
    let mut handle = head;
    let mut done = 0;
    while out.len() - done > PAGE_SIZE {
        let piece = &mut out[done..done + PIECE_DATA];
        pool.read_with(handle, PAGE_SIZE, &mut |bytes| {
            piece.copy_from_slice(&bytes[LINK..]);
            handle = link_of(bytes);
        })?;
        done += PIECE_DATA;
    }
    Ok(pool.read(handle, &mut out[done..])?)
}

/// Frees the chain of a stream of `len` bytes starting at `head`, one handle at a time;
/// returns whether its memory went with it. A piece that other handles still share (after
/// folding or deduplication) stays, and so does everything after it: the rest of the chain
/// belongs to that shared piece, which whoever frees its last handle walks on from.
pub(crate) fn free(pool: &dyn Backend, head: Handle, len: usize) -> bool {
    let mut handle = head;
    for _ in 0..links(len) {
        let next = next_piece(pool, handle);
        // The handle came from this pool and the slot's lock keeps it live: a failure
        // would be a bug in the table, and the object is unreachable either way.
        if !pool.free_shared(handle).unwrap_or(false) {
            return false;
        }
        match next {
            Ok(n) => handle = n,
            Err(_) => return false,
        }
    }
    pool.free_shared(handle).unwrap_or(false)
}

/// The pieces of the chain of a stream of `len` bytes starting at `head`, each with the
/// bytes of the stream it holds plus its link (for checks: which objects a slot uses).
pub fn pieces(pool: &dyn Backend, head: Handle, len: usize) -> Result<Vec<(Handle, usize)>> {
    let k = links(len);
    let mut out = Vec::with_capacity(k + 1);
    let mut handle = head;
    for _ in 0..k {
        out.push((handle, PAGE_SIZE));
        handle = next_piece(pool, handle)?;
    }
    out.push((handle, last_piece(len)));
    Ok(out)
}

/// The handle in the link of the piece `handle` names.
fn next_piece(pool: &dyn Backend, handle: Handle) -> zsmalloc::Result<Handle> {
    let mut next = handle;
    pool.read_with(handle, LINK, &mut |bytes| next = link_of(bytes))?;
    Ok(next)
}

/// The next piece's handle at the start of a piece.
fn link_of(bytes: &[u8]) -> Handle {
    let mut word = [0u8; LINK];
    word.copy_from_slice(&bytes[..LINK]);
    Handle::from_raw(u64::from_le_bytes(word))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_cover_every_stream_length() {
        assert_eq!(links(1), 0);
        assert_eq!(links(PAGE_SIZE), 0);
        assert_eq!(links(PAGE_SIZE + 1), 1);
        assert_eq!(links(PAGE_SIZE + PIECE_DATA), 1);
        assert_eq!(links(PAGE_SIZE + PIECE_DATA + 1), 2);
        for len in (1..=128 * 1024).step_by(97).chain([128 * 1024]) {
            let k = links(len);
            let last = len - k * PIECE_DATA;
            assert!((1..=PAGE_SIZE).contains(&last), "{len}: last piece {last}");
        }
    }

    #[test]
    fn chains_round_trip_and_a_refused_piece_leaves_nothing() {
        let pool = zsmalloc::Pool::new(8).unwrap();
        let stream: Vec<u8> = (0..3 * PAGE_SIZE + 5)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let head = write(&pool, &stream, |n| Ok(pool.malloc(n)?)).unwrap();
        let mut out = vec![0u8; stream.len()];
        read(&pool, head, &mut out).unwrap();
        assert_eq!(out, stream);
        free(&pool, head, stream.len());
        assert_eq!(pool.total_pages(), 0);
        let mut left = 2;
        let refused = write(&pool, &stream, |n| {
            if left == 0 {
                return Err(crate::Error::MemLimit { limit: 0 });
            }
            left -= 1;
            Ok(pool.malloc(n)?)
        });
        assert!(refused.is_err());
        assert_eq!(pool.total_pages(), 0);
    }

    /// A non-last piece of one chain whose bytes (link included) equal the last piece of
    /// another chain (a raw unit's bytes are the guest's) must not be folded with it:
    /// freeing the first chain would stop at that shared piece and leak its tail.
    #[test]
    fn a_folded_middle_piece_does_not_leak_the_rest_of_its_chain() {
        let pool = zsmalloc::Pool::new(8).unwrap();
        // Chain A: three pieces (head, middle, last).
        let a: Vec<u8> = (0..2 * PIECE_DATA + 100)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let head_a = write(&pool, &a, |n| Ok(pool.malloc(n)?)).unwrap();
        let pieces_a = pieces(&pool, head_a, a.len()).unwrap();
        assert_eq!(pieces_a.len(), 3);
        let mut middle = vec![0u8; PAGE_SIZE];
        pool.read(pieces_a[1].0, &mut middle).unwrap();
        // Chain B: two pieces whose last (4096 bytes) equals A's middle piece.
        let mut b: Vec<u8> = (0..PIECE_DATA).map(|i| (i * 13 % 239) as u8).collect();
        b.extend_from_slice(&middle);
        let head_b = write(&pool, &b, |n| Ok(pool.malloc(n)?)).unwrap();
        assert_eq!(pieces(&pool, head_b, b.len()).unwrap().len(), 2);
        // Pieces holding a link stay out of folding: nothing is folded.
        let report = pool.fold();
        assert_eq!(report.objects_folded, 0);
        // Both chains still read back right.
        let mut out = vec![0u8; a.len()];
        read(&pool, head_a, &mut out).unwrap();
        assert_eq!(out, a);
        // Free A first, then B: nothing may be left.
        free(&pool, head_a, a.len());
        free(&pool, head_b, b.len());
        assert_eq!(pool.stats().obj_used, 0, "chain A's tail leaked");
        assert_eq!(pool.total_pages(), 0, "chain A's tail leaked");
    }
}
