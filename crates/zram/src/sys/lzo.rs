//! The LZO decoder's fast loop: the common instructions decoded with unchecked reads and
//! copies (the checked decoder, `lzo::decoder`, measured 13–15% slower on them with every
//! read and copy bounds-checked).
//!
//! # Safety
//!
//! [`fast`] is safe to call with any slices and positions: before each instruction it
//! checks that at least [`FAST_IN`] input bytes and [`FAST_OUT`] output bytes remain, and
//! the instructions it decodes never read or write beyond those (each arm's comment
//! says how far it goes); a copy's source is checked to lie inside what was written. So
//! every pointer below stays inside its slice, and `src` (shared) and `dst` (exclusive)
//! cannot overlap.

use std::ptr::copy_nonoverlapping;

/// Input the loop needs left before an instruction: the opcode and a literal run of up to
/// 18 bytes copied as 32 (a copy reads at most 3 bytes of instruction and 4 of literals).
const FAST_IN: usize = 1 + 32;
/// Output the loop needs left: a copy of up to 33 bytes in 16-byte chunks writes at most
/// 15 bytes past its end (a literal run writes 32, a copy's literals 4 after its end).
const FAST_OUT: usize = 33 + 15;

/// Where [`fast`] stopped: the next instruction's input position, the output position and
/// the decoder's state (the literal count of the last instruction, 4 after a run).
pub(crate) struct Run {
    pub ip: usize,
    pub op: usize,
    pub state: usize,
}

/// Decodes instructions from `src[ip..]` into `dst[op..]` while both have room for the
/// longest one it handles, and stops before any other: extended lengths, far copies (zero
/// runs and the end marker among them), copies of a period under 8 bytes or reaching
/// before the output's start. Those, and every error, are the checked decoder's.
/// `ip <= src.len()` and `op <= dst.len()` are not required: out of range, nothing runs.
pub(crate) fn fast(
    src: &[u8],
    dst: &mut [u8],
    mut ip: usize,
    mut op: usize,
    mut state: usize,
) -> Run {
    let (sp, slen) = (src.as_ptr(), src.len());
    let (dp, dlen) = (dst.as_mut_ptr(), dst.len());
    // The last positions an instruction may start at.
    let (Some(ip_last), Some(op_last)) = (slen.checked_sub(FAST_IN), dlen.checked_sub(FAST_OUT))
    else {
        return Run { ip, op, state };
    };
    while ip <= ip_last && op <= op_last {
        // SAFETY: `ip + FAST_IN <= slen`, and each arm reads at most `FAST_IN` bytes from
        // `ip` (said per arm).
        let inst = usize::from(unsafe { *sp.add(ip) });
        let (distance, len, next, width);
        if inst >= 64 {
            // Near copy, 2 bytes: 3..=8 bytes from up to 2 KiB back.
            // SAFETY: `ip + 1 < ip + FAST_IN`.
            let h = usize::from(unsafe { *sp.add(ip + 1) });
            distance = (h << 3) + ((inst >> 2) & 7) + 1;
            len = (inst >> 5) + 1;
            next = inst & 3;
            width = 2;
        } else if inst >= 32 && inst & 31 != 0 {
            // Mid copy without extension, 3 bytes: 3..=33 bytes from up to 16 KiB back.
            // SAFETY: `ip + 2 < ip + FAST_IN`.
            let le = usize::from(unsafe { u16::from_le_bytes([*sp.add(ip + 1), *sp.add(ip + 2)]) });
            distance = (le >> 2) + 1;
            len = 2 + (inst & 31);
            next = le & 3;
            width = 3;
        } else if inst < 16 && state == 0 && inst != 0 {
            // Literal run without extension: 4..=18 bytes after the opcode, copied as 32.
            // SAFETY: reads `ip + 1 .. ip + 33` (`FAST_IN`), writes `op .. op + 32`
            // (< `FAST_OUT`); distinct slices.
            unsafe { copy_nonoverlapping(sp.add(ip + 1), dp.add(op), 32) };
            let n = inst + 3;
            ip += 1 + n;
            op += n;
            state = 4;
            continue;
        } else if inst < 16 && state != 0 {
            // Short copy, 2 bytes: 2 bytes after 1..=3 literals, else 3 bytes.
            // SAFETY: `ip + 1 < ip + FAST_IN`.
            let h = usize::from(unsafe { *sp.add(ip + 1) });
            let (base, n) = if state == 4 { (2049, 3) } else { (1, 2) };
            distance = (h << 2) + (inst >> 2) + base;
            len = n;
            next = inst & 3;
            width = 2;
        } else {
            break;
        }
        if distance > op || distance < 8 {
            break;
        }
        let end = op + len;
        // SAFETY: `distance <= op`, so the copy reads from `dst[op - distance..]`, at
        // or after the slice's start; chunks are written up to 15 bytes past
        // `end <= op + 33`, inside `FAST_OUT`. A chunk's bytes are read after they are
        // written (`distance >= chunk`), which is what makes overlapping copies repeat.
        unsafe {
            let (from, to, stop) = (dp.add(op - distance), dp.add(op), dp.add(end));
            if distance >= 16 {
                chunks::<16>(from, to, stop);
            } else {
                chunks::<8>(from, to, stop);
            }
        }
        ip += width;
        // The copy's 0..=3 literals, copied as 4.
        // SAFETY: reads `ip .. ip + 4` (at most the instruction's start + 7), writes
        // `end .. end + 4` (at most `op + 37`).
        unsafe { copy_nonoverlapping(sp.add(ip), dp.add(end), 4) };
        ip += next;
        op = end + next;
        state = next;
    }
    Run { ip, op, state }
}

/// Copies `N`-byte chunks from `from` to `to` until `to` reaches `stop` (writing up to
/// `N - 1` bytes past it).
///
/// # Safety
///
/// Both ranges, up to `stop` plus `N - 1` bytes, lie in one live allocation that the
/// caller may write; `to - from >= N`, so no chunk overlaps the one it is copied to.
unsafe fn chunks<const N: usize>(mut from: *mut u8, mut to: *mut u8, stop: *mut u8) {
    loop {
        // SAFETY: the caller's contract: in bounds, and `N` apart.
        unsafe {
            copy_nonoverlapping(from, to, N);
            from = from.add(N);
            to = to.add(N);
        }
        if to >= stop {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::lzo::{Variant, compress, decompress};

    /// Text with copies of every near and mid kind, literal runs and (in version 1) zero
    /// runs; small enough for Miri, which checks the pointer arithmetic above.
    fn sample() -> Vec<u8> {
        let mut s = Vec::new();
        for i in 0..24usize {
            s.extend_from_slice(b"zram: compressed RAM, ");
            s.extend((0..i % 7).map(|j| (i * 31 + j * 7) as u8));
            s.resize(s.len() + i % 5, 0);
            s.extend_from_slice(&b"abcdefgh"[..i % 8]);
        }
        s
    }

    #[test]
    fn the_fast_loop_decodes_what_the_encoder_wrote_and_survives_every_corruption() {
        let src = sample();
        for v in [Variant::Lzo, Variant::LzoRle] {
            let mut c = Vec::new();
            compress(v, &src, &mut c);
            let mut out = vec![0u8; src.len()];
            assert_eq!(decompress(&c, &mut out), Ok(src.len()), "{v:?}");
            assert_eq!(out, src);
            // Each byte flipped, decoded into the exact size and into a short buffer:
            // an error or some output, never a read or write out of bounds.
            for at in 0..c.len() {
                for flip in [0xff, 0x40, 0x01] {
                    let mut bad = c.clone();
                    bad[at] ^= flip;
                    let _ = decompress(&bad, &mut out);
                    let _ = decompress(&bad, &mut out[..src.len() / 2]);
                }
            }
        }
    }
}
