//! LZO1X, as the kernel's `lzo` and `lzo-rle` zram compressors write and read it.
//!
//! This is a clean-room implementation written from the stream description in the
//! kernel's `Documentation/staging/lzo.rst`; no kernel or liblzo2 code was read or
//! translated. The match finder is our own (see [`Compressor`]).
//!
//! # The stream
//!
//! A stream is a sequence of instructions. Each instruction is an opcode byte whose high
//! bits select its kind, maybe some length-extension bytes, maybe a distance operand, and
//! then 0..=3 literal bytes whose count sits in the low two bits (`S`) of the last byte of
//! the instruction. The decoder remembers that count as its *state* (0, 1..=3, or 4 after
//! a literal run of four or more), and the state changes what opcodes `0..=15` mean.
//!
//! | opcode | meaning | length | distance |
//! |---|---|---|---|
//! | `0000LLLL`, state 0 | literal run | `3 + L` (or extended) | – |
//! | `0000DDSS` + `H`, state 1..=3 | short copy | 2 | `(H << 2) + D + 1` ≤ 1 KiB |
//! | `0000DDSS` + `H`, state 4 | short copy | 3 | `(H << 2) + D + 2049` |
//! | `0001HLLL` + LE16 | far copy ("M4") | `2 + L` (or extended) | `16384 + (H << 14) + (LE16 >> 2)` |
//! | `001LLLLL` + LE16 | mid copy ("M3") | `2 + L` (or extended) | `(LE16 >> 2) + 1` ≤ 16 KiB |
//! | `01LDDDSS` + `H` | near copy ("M2") | `3 + L` | `(H << 3) + D + 1` ≤ 2 KiB |
//! | `1LLDDDSS` + `H` | near copy ("M2") | `5 + L` | `(H << 3) + D + 1` ≤ 2 KiB |
//!
//! A length field of zero means "extended": the field's maximum, plus 255 for every
//! following zero byte, plus the first non-zero byte. A far copy of distance exactly
//! 16384 ends the stream (`0x11 0x00 0x00`).
//!
//! The first byte of a stream is special: `18..=255` copies `byte - 17` literals (the
//! state becomes that count, capped at 4), and `17` in a stream of at least five bytes is
//! a version marker: the next byte is the *bitstream version*.
//!
//! # `lzo-rle` (bitstream version 1)
//!
//! `lzo-rle` streams start with `17, 1` and may encode runs of zero bytes: a far-copy
//! opcode with `H = 1` whose LE16 distance bits are all ones (distance `0xbfff`) is
//! followed by one more byte `X`, and writes `((X << 3) | L) + 4` zeros (4..=2051).
//! To keep that unambiguous, a version-1 encoder never emits a real far copy with distance
//! `0xbfff`, nor one with `distance & 0x803f == 0x803f` and a length in `261..=264`.
//! Plain `lzo` streams (version 0) carry no marker; [`decompress`] reads both.
//!
//! # Where `lzo.rst` leaves a choice
//!
//! - After a version marker the first-byte rule applies again to the byte that follows.
//!   Our version-1 encoder never relies on it (a stream that has any copy opens with a
//!   `0000LLLL` literal run of at least four bytes, read the same either way).
//! - Version bytes other than 0 and 1 are rejected; an explicit version 0 is accepted.
//! - The end marker is any far copy of distance 16384; input after it is an error, as is
//!   input that ends without one.
//!
//! # Sizes like the kernel's
//!
//! zram reports compressed sizes, so ours should match the kernel's page for page, not
//! just round-trip. The encoder is greedy like the kernel's LZO1X-1 and shares its
//! observable conventions (measured through `mm_stat` on single pages, not read from
//! source): the first match is sought at byte 5, the last 20 bytes always go out as
//! literals (copies may run up to seven bytes into them, zero runs may not), and the
//! first literal run uses the ordinary `0000LLLL` form unless the stream has nothing
//! else. The hash function is our own, so single pages differ by a few bytes either way;
//! over 16 MiB of binaries and text the totals agree within 0.1% for both variants (see
//! `crates/lab/tests/lzo_kernel_parity.rs`).

mod decoder;
mod encoder;

pub use decoder::decompress;
pub use encoder::Compressor;

/// Which of the kernel's two LZO flavours to produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The kernel's `lzo`: plain LZO1X (bitstream version 0, no marker).
    Lzo,
    /// The kernel's `lzo-rle`: LZO1X with the version marker `17, 1` and zero-run
    /// encoding (bitstream version 1).
    LzoRle,
}

impl Variant {
    /// The name the kernel gives this compressor in `comp_algorithm`.
    pub fn kernel_name(self) -> &'static str {
        match self {
            Variant::Lzo => "lzo",
            Variant::LzoRle => "lzo-rle",
        }
    }
}

/// Why a stream could not be decoded. The output buffer may hold partial data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ended in the middle of an instruction or its literals.
    #[error("lzo: input truncated in the instruction at byte {at}")]
    InputTruncated {
        /// Input offset of the instruction that needed more bytes.
        at: usize,
    },
    /// The input ended between two instructions without an end-of-stream marker.
    #[error("lzo: input ended without an end-of-stream marker")]
    MissingEndMarker,
    /// The decoded data would not fit in the output buffer.
    #[error(
        "lzo: output overrun: instruction at input byte {at} needs more than {capacity} output bytes"
    )]
    OutputOverrun {
        /// Input offset of the instruction that overran.
        at: usize,
        /// The output buffer's length.
        capacity: usize,
    },
    /// A copy reaches back before the start of the output.
    #[error(
        "lzo: copy at input byte {at} reaches {distance} bytes back but only {written} are written"
    )]
    LookBehind {
        /// Input offset of the copy instruction.
        at: usize,
        /// Distance of the copy.
        distance: usize,
        /// Output bytes written before it.
        written: usize,
    },
    /// Bytes follow the end-of-stream marker.
    #[error("lzo: {extra} bytes of trailing garbage after the end-of-stream marker")]
    TrailingGarbage {
        /// How many bytes follow the marker.
        extra: usize,
    },
    /// The version byte names a bitstream version we do not know.
    #[error("lzo: unsupported bitstream version {0}")]
    UnsupportedVersion(u8),
}

/// Compresses `src` into `dst` (cleared first) with a one-off [`Compressor`].
///
/// For many small buffers (pages), keep a [`Compressor`] instead: it reuses its hash table.
pub fn compress(variant: Variant, src: &[u8], dst: &mut Vec<u8>) {
    Compressor::new(variant).compress(src, dst);
}

/// The most bytes [`compress`] can produce for `n` input bytes (either variant).
///
/// Every copy saves at least one byte over the literals it replaces and a zero run at
/// least none, while a literal run of four or more costs a header: one byte up to 18
/// literals, `1 + ceil((len - 18) / 255)` beyond. The worst pattern is four literals and
/// four zeros over and over in `lzo-rle` (nine bytes out for eight in, as in the kernel),
/// hence `n / 8`; the constant covers rounding, the version marker and the end marker.
pub const fn worst_case_compressed_len(n: usize) -> usize {
    n + n / 8 + 16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(variant: Variant, src: &[u8]) -> Vec<u8> {
        let mut c = Vec::new();
        compress(variant, src, &mut c);
        assert!(c.len() <= worst_case_compressed_len(src.len()));
        let mut out = vec![0u8; src.len()];
        let n = decompress(&c, &mut out).unwrap_or_else(|e| panic!("{e}: {c:?}"));
        assert_eq!(n, src.len());
        assert_eq!(out, src);
        c
    }

    #[test]
    fn empty_streams() {
        assert_eq!(round_trip(Variant::Lzo, &[]), [0x11, 0, 0]);
        assert_eq!(round_trip(Variant::LzoRle, &[]), [17, 1, 0x11, 0, 0]);
    }

    #[test]
    fn short_literals_use_first_byte() {
        assert_eq!(
            round_trip(Variant::Lzo, b"ab"),
            [19, b'a', b'b', 0x11, 0, 0]
        );
        assert_eq!(
            round_trip(Variant::LzoRle, b"abc"),
            [17, 1, 20, b'a', b'b', b'c', 0x11, 0, 0]
        );
    }

    #[test]
    fn zero_page_uses_rle_only_in_v1() {
        let page = [0u8; 4096];
        let v0 = round_trip(Variant::Lzo, &page);
        let v1 = round_trip(Variant::LzoRle, &page);
        // The last 20 bytes always go out as literals, as the kernel's encoder does.
        assert!(v1.len() <= 48, "{v1:?}");
        assert!(v0.len() <= 48, "{v0:?}");
        assert!(v1.windows(2).any(|w| w == [0xfc, 0xff]));
    }

    #[test]
    fn hand_made_stream() {
        // "abcd" as a first-byte literal run, then an M2 copy of 8 bytes at distance 4,
        // then an end marker.
        let stream = [
            21,
            b'a',
            b'b',
            b'c',
            b'd',
            (7 << 5) | (3 << 2),
            0,
            0x11,
            0,
            0,
        ];
        let mut out = [0u8; 12];
        assert_eq!(decompress(&stream, &mut out), Ok(12));
        assert_eq!(&out, b"abcdabcdabcd");
    }

    #[test]
    fn errors() {
        let mut out = [0u8; 16];
        assert_eq!(
            decompress(&[], &mut out),
            Err(DecodeError::MissingEndMarker)
        );
        assert_eq!(
            decompress(&[0x11, 0], &mut out),
            Err(DecodeError::InputTruncated { at: 0 })
        );
        assert_eq!(
            decompress(&[0x11, 0, 0, 7], &mut out),
            Err(DecodeError::TrailingGarbage { extra: 1 })
        );
        assert_eq!(
            decompress(&[17, 9, 0x11, 0, 0], &mut out),
            Err(DecodeError::UnsupportedVersion(9))
        );
        assert!(matches!(
            decompress(&[18, b'x', 0x40 | (1 << 2), 0, 0x11, 0, 0], &mut out),
            Err(DecodeError::LookBehind { .. })
        ));
        let mut small = [0u8; 2];
        assert!(matches!(
            decompress(&[20, 1, 2, 3, 0x11, 0, 0], &mut small),
            Err(DecodeError::OutputOverrun { .. })
        ));
    }
}
