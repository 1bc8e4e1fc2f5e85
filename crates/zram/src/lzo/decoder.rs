//! The LZO1X decoder for bitstream versions 0 (`lzo`) and 1 (`lzo-rle`).
//!
//! Representation: `ip` indexes the input, `op` the output; `state` is the number of
//! literals the previous instruction copied (0..=3, or 4 after a run of four or more).
//! Every read and write is bounds-checked against the slices before it happens, so a
//! hostile stream yields a [`DecodeError`] and never a panic.

use super::DecodeError;
use crate::sys;

/// The version marker's first byte, and the shortest stream that may carry one.
const VERSION_MARKER: u8 = 17;
const MIN_VERSIONED_LEN: usize = 5;
/// The word a copy moves at a time when the output has room past its end.
const CHUNK: usize = 8;

/// Decodes one stream of either variant into `dst`, returning the bytes written.
///
/// The whole of `src` must be one stream: input after the end marker is an error, and so
/// is output that does not fit in `dst`. Bytes of `dst` past the returned length may
/// have been overwritten.
pub fn decompress(src: &[u8], dst: &mut [u8]) -> Result<usize, DecodeError> {
    Decoder {
        src,
        dst,
        ip: 0,
        op: 0,
        at: 0,
    }
    .run()
}

struct Decoder<'s, 'd> {
    src: &'s [u8],
    dst: &'d mut [u8],
    /// Next input byte.
    ip: usize,
    /// Next output byte.
    op: usize,
    /// Start of the instruction being decoded (for error reports).
    at: usize,
}

impl Decoder<'_, '_> {
    fn run(mut self) -> Result<usize, DecodeError> {
        let mut rle = false;
        if self.src.len() >= MIN_VERSIONED_LEN && self.src[0] == VERSION_MARKER {
            match self.src[1] {
                0 => {}
                1 => rle = true,
                v => return Err(DecodeError::UnsupportedVersion(v)),
            }
            self.ip = 2;
        }

        let mut state = 0usize;
        if let Some(&first) = self.src.get(self.ip)
            && first > VERSION_MARKER
        {
            self.at = self.ip;
            self.ip += 1;
            let n = usize::from(first - VERSION_MARKER);
            self.literals(n)?;
            state = n.min(4);
        }

        loop {
            state = self.fast(state);
            self.at = self.ip;
            let Some(&inst) = self.src.get(self.ip) else {
                return Err(DecodeError::MissingEndMarker);
            };
            self.ip += 1;
            let inst = usize::from(inst);
            let (distance, len, next);
            match inst {
                0..=15 => match state {
                    0 => {
                        let n = 3 + self.length(inst, 15)?;
                        self.literals(n)?;
                        state = 4;
                        continue;
                    }
                    1..=3 => {
                        let h = usize::from(self.byte()?);
                        distance = (h << 2) + (inst >> 2) + 1;
                        len = 2;
                        next = inst & 3;
                    }
                    _ => {
                        let h = usize::from(self.byte()?);
                        distance = (h << 2) + (inst >> 2) + 2049;
                        len = 3;
                        next = inst & 3;
                    }
                },
                16..=31 => {
                    if rle && inst & 8 != 0 && self.rle_follows() {
                        let s = usize::from(self.src[self.ip] & 3);
                        let x = usize::from(*self.src.get(self.ip + 2).ok_or(self.truncated())?);
                        self.ip += 3;
                        let run = ((x << 3) | (inst & 7)) + 4;
                        let end = self.out_end(run)?;
                        self.dst[self.op..end].fill(0);
                        self.op = end;
                        self.literals(s)?;
                        state = s;
                        continue;
                    }
                    len = 2 + self.length(inst & 7, 7)?;
                    let le = self.le16()?;
                    distance = 16384 + ((inst & 8) << 11) + (le >> 2);
                    if distance == 16384 {
                        return match self.src.len() - self.ip {
                            0 => Ok(self.op),
                            extra => Err(DecodeError::TrailingGarbage { extra }),
                        };
                    }
                    next = le & 3;
                }
                32..=63 => {
                    len = 2 + self.length(inst & 31, 31)?;
                    let le = self.le16()?;
                    distance = (le >> 2) + 1;
                    next = le & 3;
                }
                _ => {
                    let h = usize::from(self.byte()?);
                    distance = (h << 3) + ((inst >> 2) & 7) + 1;
                    len = (inst >> 5) + 1;
                    next = inst & 3;
                }
            }
            self.copy(distance, len)?;
            self.literals(next)?;
            state = next;
        }
    }

    /// Decodes the common instructions with [`sys::lzo::fast`] and returns the state.
    fn fast(&mut self, state: usize) -> usize {
        let run = sys::lzo::fast(self.src, self.dst, self.ip, self.op, state);
        self.ip = run.ip;
        self.op = run.op;
        run.state
    }

    fn truncated(&self) -> DecodeError {
        DecodeError::InputTruncated { at: self.at }
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        let b = *self.src.get(self.ip).ok_or(self.truncated())?;
        self.ip += 1;
        Ok(b)
    }

    fn le16(&mut self) -> Result<usize, DecodeError> {
        let lo = self.byte()?;
        let hi = self.byte()?;
        Ok(usize::from(u16::from_le_bytes([lo, hi])))
    }

    /// Whether the two bytes after a far-copy opcode are the zero-run distance `0x3fff`.
    fn rle_follows(&self) -> bool {
        matches!(self.src.get(self.ip..self.ip + 2), Some(&[lo, 0xff]) if lo & 0xfc == 0xfc)
    }

    /// A length field: `field` itself, or when it is zero, `max` plus the extension bytes.
    fn length(&mut self, field: usize, max: usize) -> Result<usize, DecodeError> {
        if field != 0 {
            return Ok(field);
        }
        let mut n = max;
        loop {
            match self.byte()? {
                0 => n = n.saturating_add(255),
                b => return Ok(n.saturating_add(usize::from(b))),
            }
        }
    }

    /// The output end after writing `n` more bytes, if it fits.
    fn out_end(&self, n: usize) -> Result<usize, DecodeError> {
        match self.op.checked_add(n) {
            Some(end) if end <= self.dst.len() => Ok(end),
            _ => Err(DecodeError::OutputOverrun {
                at: self.at,
                capacity: self.dst.len(),
            }),
        }
    }

    fn literals(&mut self, n: usize) -> Result<(), DecodeError> {
        let (ip, op) = (self.ip, self.op);
        if n <= 16 && ip + 16 <= self.src.len() && op + 16 <= self.dst.len() {
            // Short runs (most of them): one fixed-size copy; the bytes past `op + n` are
            // rewritten later.
            self.dst[op..op + 16].copy_from_slice(&self.src[ip..ip + 16]);
            self.ip = ip + n;
            self.op = op + n;
            return Ok(());
        }
        let src_end = match ip.checked_add(n) {
            Some(end) if end <= self.src.len() => end,
            _ => return Err(self.truncated()),
        };
        let end = self.out_end(n)?;
        self.dst[op..end].copy_from_slice(&self.src[ip..src_end]);
        self.ip = src_end;
        self.op = end;
        Ok(())
    }

    /// Copies `len` bytes from `distance` back; the regions may overlap (a repeating
    /// pattern with period `distance`).
    fn copy(&mut self, distance: usize, len: usize) -> Result<(), DecodeError> {
        if distance > self.op {
            return Err(DecodeError::LookBehind {
                at: self.at,
                distance,
                written: self.op,
            });
        }
        let end = self.out_end(len)?;
        let from = self.op - distance;
        if end + 2 * CHUNK <= self.dst.len() {
            // Room for whole chunks past `end`: copy in chunks of 8 or 16 bytes, each read
            // from bytes already written, overshooting `end` by less than a chunk.
            if distance >= 2 * CHUNK {
                chunks::<{ 2 * CHUNK }>(self.dst, from, self.op, end);
            } else if distance >= CHUNK {
                chunks::<CHUNK>(self.dst, from, self.op, end);
            } else {
                // A pattern shorter than a chunk: its first chunk byte by byte, then whole
                // chunks from the nearest multiple of the period at least a chunk back.
                let head = (self.op + CHUNK).min(end);
                for d in self.op..head {
                    self.dst[d] = self.dst[d - distance];
                }
                if head < end {
                    let period = CHUNK.next_multiple_of(distance);
                    chunks::<CHUNK>(self.dst, head - period, head, end);
                }
            }
        } else if distance >= len {
            self.dst.copy_within(from..from + len, self.op);
        } else {
            // Each pass copies a whole number of periods, doubling what is available.
            let mut done = 0;
            while done < len {
                let n = (len - done).min(distance + done);
                self.dst.copy_within(from..from + n, self.op + done);
                done += n;
            }
        }
        self.op = end;
        Ok(())
    }
}

/// Copies `dst[from..]` to `dst[to..end]` in `N`-byte chunks, up to `N - 1` bytes past `end`
/// (which `dst` must hold); `to - from >= N`, so every chunk is read after it is written.
fn chunks<const N: usize>(dst: &mut [u8], mut from: usize, mut to: usize, end: usize) {
    while to < end {
        let mut w = [0u8; N];
        w.copy_from_slice(&dst[from..from + N]);
        dst[to..to + N].copy_from_slice(&w);
        from += N;
        to += N;
    }
}
