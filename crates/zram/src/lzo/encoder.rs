//! The LZO1X encoder: a greedy, single-probe hash-table match finder.
//!
//! At each position the next four bytes are hashed into a table of the last position
//! that hashed there. If that position holds the same four bytes (and is near enough),
//! the match is extended forward as far as it goes and emitted; the search resumes after
//! it. Otherwise the position is skipped, with a stride that grows with the number of
//! literals pending since the last match, so incompressible data is crossed quickly.
//! For `lzo-rle`, four zero bytes start a zero run instead, emitted as run instructions.
//!
//! Representation: the table holds `base + (pos - origin)`, so entries below `base` are
//! stale (from an earlier call) and the table is cleared only when `base` would wrap,
//! not on every page. A stale entry reads as position 0, like a zeroed table. That is
//! for long inputs; inputs of up to [`SMALL_INPUT`] bytes (pages, and units up to 32 KiB)
//! are searched as the kernel's LZO1X-1 searches a page, with a table of `u16` positions
//! (16 KiB, the kernel's `lzo_dict_t`) cleared per input: no key arithmetic and no
//! distance check per probe, which made page compression 7-10% faster than with the
//! position-keyed `u32` table (`cargo bench -p zram --bench lzo`).

use super::{Variant, worst_case_compressed_len};

/// log2 of the number of hash-table entries, 2^13 like the kernel's LZO1X-1. The table
/// (16 KiB of `u16` for pages, 32 KiB of `u32` for long inputs) then stays in a core's
/// first-level cache beside the page; 2^15 entries found a few more matches (0.1-0.2%
/// smaller output) but made every probe a second-level cache miss, which cost more time
/// than anything else in the encoder.
const HASH_BITS: u32 = 13;
const TABLE_LEN: usize = 1 << HASH_BITS;
/// Positions within this many bytes of the end never start a match (the tail goes out
/// as literals), as in the kernel's LZO1X-1.
const TAIL: usize = 20;
/// The skip stride after a miss is `1 + pending_literals >> SKIP_SHIFT`.
const SKIP_SHIFT: u32 = 5;
/// The first position that may start a match or a zero run. The stream thus always
/// opens with a literal run of at least four bytes, which version 1 can write as an
/// ordinary instruction; five rather than four is what the kernel's encoder does.
const START: usize = 5;
/// Bytes the emitter may write past the end of the output it keeps: literal runs of up
/// to this many bytes go out as one fixed-size copy.
const SLACK: usize = 16;
/// The longest zero run one run instruction writes.
const RLE_MAX: usize = 2051;
/// Furthest copy distances: M2 (two-byte), M3 and M4 instructions.
const M2_MAX_DISTANCE: usize = 2048;
const M3_MAX_DISTANCE: usize = 16384;
const M4_MAX_DISTANCE_V0: usize = 0xbfff;
/// In version 1, distance `0xbfff` is the zero-run marker.
const M4_MAX_DISTANCE_V1: usize = 0xbffe;
/// Search positions handled with one table keying; the table is cleared between such
/// segments, which only matters for inputs of more than 1 GiB.
const SEGMENT: usize = 1 << 30;
/// The longest input searched with [`search_small`]: every distance in it fits the
/// shortest far-copy limit ([`M4_MAX_DISTANCE_V1`]) and every position a `u16`.
const SMALL_INPUT: usize = M4_MAX_DISTANCE_V1;

/// A hash table keyed by position: entries below `base` are stale.
#[derive(Clone)]
struct Table {
    slots: Box<[u32; TABLE_LEN]>,
    base: u32,
}

impl Table {
    fn new() -> Self {
        Self {
            slots: Box::new([0; TABLE_LEN]),
            base: 1,
        }
    }

    /// Reserves keys for `span` positions, clearing the table if they would wrap; returns
    /// the first key.
    fn reserve(&mut self, span: usize) -> u32 {
        let span = u32::try_from(span).unwrap_or(u32::MAX);
        if self
            .base
            .checked_add(span)
            .is_none_or(|top| top == u32::MAX)
        {
            self.slots.fill(0);
            self.base = 1;
        }
        let base = self.base;
        self.base += span;
        base
    }
}

/// A reusable LZO1X compressor: owns the hash tables, so compressing a page allocates
/// nothing beyond growing `dst` (and the long inputs' table, at the first of them).
#[derive(Clone)]
pub struct Compressor {
    variant: Variant,
    /// For inputs of up to [`SMALL_INPUT`] bytes: positions, cleared per input.
    small: Box<[u16; TABLE_LEN]>,
    /// For longer inputs.
    large: Option<Table>,
}

impl std::fmt::Debug for Compressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compressor")
            .field("variant", &self.variant)
            .finish_non_exhaustive()
    }
}

impl Compressor {
    /// A compressor for `variant` with an empty hash table.
    pub fn new(variant: Variant) -> Self {
        Self {
            variant,
            small: Box::new([0; TABLE_LEN]),
            large: None,
        }
    }

    /// The variant this compressor writes.
    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// Compresses `src` into `dst`, which is cleared first.
    pub fn compress(&mut self, src: &[u8], dst: &mut Vec<u8>) {
        dst.clear();
        // Zeroed room for the worst case; the emitter writes by index and the output is
        // cut to what it wrote.
        dst.resize(worst_case_compressed_len(src.len()) + SLACK, 0);
        let rle = self.variant == Variant::LzoRle;
        let mut out = Emitter {
            out: &mut dst[..],
            pos: 0,
            state_at: None,
            rle,
        };
        if rle {
            out.put(&[17, 1]);
        }
        let mut lit = 0;
        let limit = src.len().saturating_sub(TAIL);
        let mut ip = START;
        if src.len() <= SMALL_INPUT {
            // A page, the usual input, gets a copy of the search that knows its length.
            if let Ok(page) = <&[u8; crate::PAGE_SIZE]>::try_from(src) {
                lit = search_small(&mut self.small, page, lit, &mut out);
            } else if ip < limit {
                lit = search_small(&mut self.small, src, lit, &mut out);
            }
        } else {
            let table = self.large.get_or_insert_with(Table::new);
            while ip < limit {
                let seg_end = limit.min(ip.saturating_add(SEGMENT));
                (ip, lit) = search(table, src, ip, seg_end, lit, &mut out);
            }
        }
        out.literals(src, lit, src.len(), true);
        out.put(&[0x11, 0, 0]);
        let len = out.pos;
        dst.truncate(len);
    }
}

/// [`search`] for an input of at most [`SMALL_INPUT`] bytes, as the kernel's LZO1X-1 does
/// a page: the table holds plain positions and is cleared first (16 KiB), a zero entry
/// offers position 0, and no distance can pass the far-copy limit. Returns where the
/// pending literals start. Its loop is [`search`]'s with another probe, kept apart on
/// purpose: one loop generic over the table's probe compressed pages 5% slower (`cargo
/// bench -p zram --bench lzo`); what a hit or a zero run emits is shared ([`Emitter`]).
/// It is inlined into both of its calls, so that a page's copy knows the input's length:
/// 1% faster in criterion, 5-8% in the device's write path (`docs/benchmarks.md`).
/// `src` is longer than `START + TAIL` bytes.
#[inline(always)]
fn search_small(
    table: &mut [u16; TABLE_LEN],
    src: &[u8],
    mut lit: usize,
    out: &mut Emitter<'_>,
) -> usize {
    table.fill(0);
    let match_end = src.len() - TAIL;
    let mut ip = START;
    while ip < match_end {
        let seq = read32(src, ip);
        if out.rle && seq == 0 {
            ip = out.zero_run_at(src, lit, ip, match_end);
            lit = ip;
            continue;
        }
        let slot = &mut table[hash(seq)];
        let cand = usize::from(*slot);
        *slot = ip as u16;
        if read32(src, cand) == seq {
            ip = out.match_at(src, lit, ip, cand, match_end);
            lit = ip;
            continue;
        }
        ip += 1 + ((ip - lit) >> SKIP_SHIFT);
    }
    lit
}

/// Finds and emits matches starting in `ip..seg_end`, with `table`; returns where the
/// search stopped (at or after `seg_end`) and where the pending literals now start (`lit`
/// on entry).
fn search(
    table: &mut Table,
    src: &[u8],
    mut ip: usize,
    seg_end: usize,
    mut lit: usize,
    out: &mut Emitter<'_>,
) -> (usize, usize) {
    let origin = ip;
    let base = table.reserve(seg_end - origin);
    let slots = &mut table.slots;
    let match_end = src.len() - TAIL;
    let max_distance = if out.rle {
        M4_MAX_DISTANCE_V1
    } else {
        M4_MAX_DISTANCE_V0
    };

    while ip < seg_end {
        let seq = read32(src, ip);
        if out.rle && seq == 0 {
            ip = out.zero_run_at(src, lit, ip, match_end);
            lit = ip;
            continue;
        }
        let slot = &mut slots[hash(seq)];
        let entry = *slot;
        *slot = base + (ip - origin) as u32;
        // An empty slot offers the start of the input, as a zeroed table would.
        let cand = if entry >= base {
            origin + (entry - base) as usize
        } else {
            0
        };
        let distance = ip - cand;
        if distance <= max_distance && read32(src, cand) == seq {
            ip = out.match_at(src, lit, ip, cand, match_end);
            lit = ip;
            continue;
        }
        ip += 1 + ((ip - lit) >> SKIP_SHIFT);
    }
    (ip, lit)
}

/// Shortens a version-1 far copy that a decoder could mistake for a zero run.
fn avoid_rle_ambiguity(distance: usize, len: usize) -> usize {
    if distance & 0x803f == 0x803f && (261..=264).contains(&len) {
        260
    } else {
        len
    }
}

fn hash(seq: u32) -> usize {
    (seq.wrapping_mul(0x9e37_79b1) >> (32 - HASH_BITS)) as usize & (TABLE_LEN - 1)
}

fn read64(src: &[u8], i: usize) -> u64 {
    word(&src[i..i + 8])
}

fn read32(src: &[u8], i: usize) -> u32 {
    let b = &src[i..i + 4];
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// The length of the match of `ip` against `cand` (`cand < ip`, their first four bytes
/// known equal): `4 + common_prefix(src, cand + 4, ip + 4, match_end)`, with the first word
/// of that compared here. Most matches end within it, and then the loop is never entered;
/// together with inlining the emitter, that made page compression 4-5% faster (`cargo bench
/// -p zram --bench lzo`). `ip` is below `src.len() - TAIL`, so the word is inside `src`.
#[inline(always)]
fn match_len(src: &[u8], cand: usize, ip: usize, match_end: usize) -> usize {
    if ip + 4 >= match_end {
        // `common_prefix` compares nothing that starts at or past `match_end`.
        return 4 + common_prefix(src, cand + 4, ip + 4, match_end);
    }
    let d = read64(src, cand + 4) ^ read64(src, ip + 4);
    if d != 0 {
        4 + (d.trailing_zeros() / 8) as usize
    } else {
        12 + common_prefix(src, cand + 12, ip + 12, match_end)
    }
}

/// How many bytes from `a` and from `b` (`a < b`) agree, comparing eight bytes at a time
/// while the comparison starts before `end` (so the result may pass `end` by up to seven).
#[inline(always)]
fn common_prefix(src: &[u8], a: usize, b: usize, end: usize) -> usize {
    let words = end.saturating_sub(b).div_ceil(8) * 8;
    if b + words <= src.len() {
        // The usual case (the tail keeps seven bytes past `end`): whole words, with the
        // bounds checked once.
        let x = src[a..a + words].chunks_exact(8);
        let y = src[b..b + words].chunks_exact(8);
        for (i, (p, q)) in x.zip(y).enumerate() {
            let d = word(p) ^ word(q);
            if d != 0 {
                return i * 8 + (d.trailing_zeros() / 8) as usize;
            }
        }
        return words;
    }
    let mut n = 0;
    while b + n < end.min(src.len()) && src[a + n] == src[b + n] {
        n += 1;
    }
    n
}

/// An eight-byte chunk as a little-endian word.
fn word(p: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(p);
    u64::from_le_bytes(b)
}

/// How many bytes of `src[at..end]` from its start are zero.
fn zero_run(src: &[u8], at: usize, end: usize) -> usize {
    let s = &src[at..end.max(at)];
    let mut words = s.chunks_exact(8);
    for (i, p) in words.by_ref().enumerate() {
        let x = word(p);
        if x != 0 {
            return i * 8 + (x.trailing_zeros() / 8) as usize;
        }
    }
    s.len() / 8 * 8 + words.remainder().iter().take_while(|&&b| b == 0).count()
}

/// Writes instructions into a buffer at least [`SLACK`] bytes longer than the worst case,
/// remembering where the last one keeps its literal count `S`.
struct Emitter<'a> {
    out: &'a mut [u8],
    /// Bytes written.
    pos: usize,
    /// Index of the byte whose low two bits hold the previous instruction's `S`; `None`
    /// before the first instruction, where the first-byte literal encoding applies.
    state_at: Option<usize>,
    rle: bool,
}

impl Emitter<'_> {
    fn push(&mut self, b: u8) {
        self.out[self.pos] = b;
        self.pos += 1;
    }

    fn put(&mut self, bytes: &[u8]) {
        self.out[self.pos..self.pos + bytes.len()].copy_from_slice(bytes);
        self.pos += bytes.len();
    }

    /// Emits the literal run `src[from..to]`; `last` when no instruction but the end
    /// marker follows.
    #[inline(always)]
    fn literals(&mut self, src: &[u8], from: usize, to: usize, last: bool) {
        let n = to - from;
        if n == 0 {
            return;
        }
        match self.state_at {
            Some(at) if n <= 3 => self.out[at] |= n as u8,
            // The first-byte form; in version 1 only when nothing else can say it, so that
            // the byte after the version marker is never read as a literal count.
            None if n <= 3 || (n <= 238 && last && !self.rle) => self.push(17 + n as u8),
            _ if n <= 18 => self.push((n - 3) as u8),
            _ => {
                self.push(0);
                self.extension(n - 18);
            }
        }
        if n <= SLACK && from + SLACK <= src.len() {
            // One fixed-size copy; the bytes past the run are overwritten next (the output
            // has `SLACK` bytes of room past its worst case).
            self.out[self.pos..self.pos + SLACK].copy_from_slice(&src[from..from + SLACK]);
            self.pos += n;
        } else {
            self.put(&src[from..to]);
        }
    }

    /// Emits the literals pending since `lit` and the zero run that starts at `ip` (its
    /// first four bytes known zero); returns where the search goes on.
    #[inline(always)]
    fn zero_run_at(&mut self, src: &[u8], lit: usize, ip: usize, match_end: usize) -> usize {
        let run = 4 + zero_run(src, ip + 4, match_end);
        self.literals(src, lit, ip, false);
        self.zero_run(run);
        ip + run
    }

    /// Emits the literals pending since `lit` and the match of `ip` against `cand` (their
    /// first four bytes known equal), extended as far as it goes; returns where the search
    /// goes on.
    #[inline(always)]
    fn match_at(
        &mut self,
        src: &[u8],
        lit: usize,
        ip: usize,
        cand: usize,
        match_end: usize,
    ) -> usize {
        let distance = ip - cand;
        let mut len = match_len(src, cand, ip, match_end);
        if self.rle && distance > M3_MAX_DISTANCE {
            len = avoid_rle_ambiguity(distance, len);
        }
        self.literals(src, lit, ip, false);
        self.copy(distance, len);
        ip + len
    }

    /// The bytes of an extended length field whose remainder is `r` (>= 1).
    fn extension(&mut self, mut r: usize) {
        while r > 255 {
            self.push(0);
            r -= 255;
        }
        self.push(r as u8);
    }

    /// Emits a copy of `len` (>= 4) bytes from `distance` back, with `S = 0`.
    #[inline(always)]
    fn copy(&mut self, distance: usize, len: usize) {
        if len <= 8 && distance <= M2_MAX_DISTANCE {
            let d = distance - 1;
            self.state_at = Some(self.pos);
            self.put(&[(((len - 1) << 5) | ((d & 7) << 2)) as u8, (d >> 3) as u8]);
            return;
        }
        let d = if distance <= M3_MAX_DISTANCE {
            if len <= 33 {
                self.push(0x20 | (len - 2) as u8);
            } else {
                self.push(0x20);
                self.extension(len - 33);
            }
            distance - 1
        } else {
            let d = distance - 16384;
            let op = 0x10 | ((d >> 11) & 8) as u8;
            if len <= 9 {
                self.push(op | (len - 2) as u8);
            } else {
                self.push(op);
                self.extension(len - 9);
            }
            d & 0x3fff
        };
        self.state_at = Some(self.pos);
        self.put(&[(d << 2) as u8, (d >> 6) as u8]);
    }

    /// Emits run instructions for `run` (>= 4) zero bytes.
    fn zero_run(&mut self, mut run: usize) {
        while run > 0 {
            let n = match run {
                ..=RLE_MAX => run,
                _ if run - RLE_MAX >= 4 => RLE_MAX,
                _ => run - 4,
            };
            let v = n - 4;
            self.state_at = Some(self.pos + 1);
            self.put(&[0x18 | (v & 7) as u8, 0xfc, 0xff, (v >> 3) as u8]);
            run -= n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn match_len_is_the_loop_s_answer() {
        // Runs of repeats of every length near the word boundaries, at every distance up to
        // 40, and matches running into the tail.
        let mut x = 0x9e37_79b9u32;
        let mut src = Vec::new();
        for run in 0..40 {
            let start = src.len();
            for _ in 0..32 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                src.push(x as u8);
            }
            let copy = src[start..start + 4 + run % 24].to_vec();
            src.extend_from_slice(&copy);
        }
        let match_end = src.len() - TAIL;
        let mut checked = 0;
        for ip in 1..match_end {
            for cand in ip.saturating_sub(40)..ip {
                if read32(&src, cand) == read32(&src, ip) {
                    let want = 4 + common_prefix(&src, cand + 4, ip + 4, match_end);
                    assert_eq!(match_len(&src, cand, ip, match_end), want, "{cand} {ip}");
                    checked += 1;
                }
            }
        }
        assert!(checked > 100, "{checked} matches checked");
    }

    #[test]
    fn reserved_far_copy_lengths_are_shortened_in_version_1() {
        assert_eq!(avoid_rle_ambiguity(0x803f, 262), 260);
        assert_eq!(avoid_rle_ambiguity(0xbfbf, 264), 260);
        assert_eq!(avoid_rle_ambiguity(0x803f, 265), 265);
        assert_eq!(avoid_rle_ambiguity(0x803e, 262), 262);
        assert_eq!(avoid_rle_ambiguity(0x403f, 262), 262);

        // A 262-byte block repeated 0x803f bytes later comes out as a 260-byte far copy:
        // opcode 0x18 (H = 1, extended length), 260 - 9 = 251, distance bits 0x3f. (Here
        // three literals follow it, so the unshortened copy would start `18 fd ff`, which a
        // version-1 decoder reads as a zero run.)
        let mut x = 0x1234_5678u32;
        let block: Vec<u8> = (0..262)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8 | 1
            })
            .collect();
        let mut src = b"!!!!!".to_vec();
        src.extend_from_slice(&block);
        src.push(1);
        src.resize(START + 0x803f, 0);
        src.extend_from_slice(&block);
        src.extend_from_slice(&[2; 40]);
        let mut c = Vec::new();
        Compressor::new(Variant::LzoRle).compress(&src, &mut c);
        let far_copy = |c: &[u8], ext: u8| {
            c.windows(4)
                .any(|w| w[..2] == [0x18, ext] && w[2] & 0xfc == 0xfc && w[3] == 0)
        };
        assert!(far_copy(&c, 251), "{c:?}");
        Compressor::new(Variant::Lzo).compress(&src, &mut c);
        assert!(far_copy(&c, 253), "{c:?}");
    }
}
