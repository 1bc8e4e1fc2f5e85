//! Compressors behind one trait, each with a one-byte id, as the kernel's zcomp backends.
//!
//! A [`Codec`] is one compression context (the kernel's per-CPU stream): it owns scratch
//! state, so compressing a page allocates nothing. A device keeps a [`CodecPool`] of them and
//! lends one to each request.

mod lz4;
mod lzo;
mod zstd;

use std::sync::Arc;

use crate::error::{Error, Result};

/// A compression algorithm the device can use (named as the kernel's `comp_algorithm`
/// names it, in config files too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Algorithm {
    /// LZ4 (C liblz4, `LZ4_compress_fast`; the level is its acceleration, as the kernel's):
    /// the default.
    Lz4,
    /// LZ4's high-compression encoder (levels 1..=12, default 9); read back as LZ4.
    #[serde(rename = "lz4hc")]
    Lz4Hc,
    /// Zstandard, with a level and an optional dictionary.
    Zstd,
    /// LZO1X-1 (our own clean-room code).
    Lzo,
    /// LZO1X-1 with run-length encoding of zero runs (the kernel's `lzo-rle`).
    LzoRle,
}

impl Algorithm {
    /// Every algorithm, in the order the kernel's `comp_algorithm` lists them.
    pub const ALL: [Algorithm; 5] = [
        Algorithm::LzoRle,
        Algorithm::Lzo,
        Algorithm::Lz4,
        Algorithm::Lz4Hc,
        Algorithm::Zstd,
    ];

    /// The one-byte id stored with a slot's compression priority and in reports.
    pub fn id(self) -> u8 {
        match self {
            Algorithm::Lz4 => 1,
            Algorithm::Zstd => 2,
            Algorithm::Lzo => 3,
            Algorithm::LzoRle => 4,
            Algorithm::Lz4Hc => 5,
        }
    }

    /// The algorithm with this id.
    pub fn from_id(id: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.id() == id)
    }

    /// Whether it takes a dictionary (`algorithm_params dict=`): zstd, lz4 and lz4hc, as
    /// the kernel's backends (LZO has none).
    pub fn takes_dictionary(self) -> bool {
        matches!(self, Algorithm::Zstd | Algorithm::Lz4 | Algorithm::Lz4Hc)
    }

    /// The kernel's name (`comp_algorithm`).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Lz4 => "lz4",
            Algorithm::Lz4Hc => "lz4hc",
            Algorithm::Zstd => "zstd",
            Algorithm::Lzo => "lzo",
            Algorithm::LzoRle => "lzo-rle",
        }
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Algorithm {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        Self::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| Error::UnknownAlgorithm(s.to_owned()))
    }
}

/// Tunables of an algorithm (the kernel's `algorithm_params`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct AlgorithmParams {
    /// Compression level, as the kernel's backends take it: zstd's level (its range, -131072
    /// to 22, negative ones faster; default 3), lz4's acceleration (1..=65537, default 1: higher
    /// is faster and compresses less), lz4hc's level (1..=12, default 9). LZO has none and
    /// refuses one.
    #[cfg_attr(feature = "clap", arg(long, allow_negative_numbers = true))]
    pub level: Option<i32>,
    /// A dictionary (zstd: a trained one, or raw content; lz4 and lz4hc: content, its last
    /// 64 KiB; LZO refuses one), read from a file through `algorithm_params dict=PATH`.
    #[serde(skip)]
    #[cfg_attr(feature = "clap", arg(skip))]
    pub dictionary: Option<Arc<Vec<u8>>>,
}

impl AlgorithmParams {
    /// Refuses what `algorithm` cannot take: a level outside its range (or any level, for
    /// LZO), a dictionary for LZO. The kernel clamps such levels and ignores such
    /// dictionaries; here a setting that would not do what it says is an error.
    pub fn check(&self, algorithm: Algorithm) -> Result<()> {
        let (range, levels) = match algorithm {
            Algorithm::Zstd => (Some(zstd::LEVELS), "-131072 to 22"),
            Algorithm::Lz4 => (Some(lz4::ACCELERATIONS), "1 to 65537, an acceleration"),
            Algorithm::Lz4Hc => (Some(lz4::HC_LEVELS), "1 to 12"),
            Algorithm::Lzo | Algorithm::LzoRle => (None, "none"),
        };
        if let Some(level) = self
            .level
            .filter(|l| !range.as_ref().is_some_and(|r| r.contains(l)))
        {
            return Err(Error::InvalidLevel {
                algorithm: algorithm.name(),
                level,
                levels,
            });
        }
        if self.dictionary.is_some() && !algorithm.takes_dictionary() {
            return Err(Error::CodecSetup {
                algorithm: algorithm.name(),
                reason: "it takes no dictionary (zstd, lz4 and lz4hc do)".into(),
            });
        }
        Ok(())
    }
}

/// One compression context.
pub trait Codec: Send + std::fmt::Debug {
    /// The algorithm this context speaks.
    fn algorithm(&self) -> Algorithm;
    /// Compresses `src` into `dst` (cleared first); returns the compressed length. The
    /// output may be longer than the input: callers store such pages raw.
    fn compress(&mut self, src: &[u8], dst: &mut Vec<u8>) -> Result<usize>;
    /// Decompresses `src` into `dst`, which must come out exactly full; corrupt or
    /// truncated input is an error, never a panic.
    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<()>;
}

/// Makes a fresh context for `algorithm` with `params`.
pub fn new_codec(algorithm: Algorithm, params: &AlgorithmParams) -> Result<Box<dyn Codec>> {
    params.check(algorithm)?;
    Ok(match algorithm {
        Algorithm::Lz4 => Box::new(lz4::Lz4::new(params)?),
        Algorithm::Lz4Hc => Box::new(lz4::Lz4Hc::new(params)?),
        Algorithm::Zstd => Box::new(zstd::Zstd::new(params)?),
        Algorithm::Lzo => Box::new(lzo::Lzo::new(crate::lzo::Variant::Lzo)),
        Algorithm::LzoRle => Box::new(lzo::Lzo::new(crate::lzo::Variant::LzoRle)),
    })
}

/// Contexts of one algorithm and parameter set (the kernel's per-CPU streams): each thread
/// keeps its own context per pool, made on first use, so compressing takes no shared lock.
#[derive(Debug)]
pub struct CodecPool {
    id: u64,
    algorithm: Algorithm,
    params: AlgorithmParams,
}

/// Contexts a thread keeps at most (one per pool it used lately).
const CONTEXTS_PER_THREAD: usize = 8;

thread_local! {
    /// This thread's contexts by pool id, most recently used last.
    static CONTEXTS: std::cell::RefCell<Vec<(u64, Box<dyn Codec>)>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl CodecPool {
    /// A pool for `algorithm`; checks that a context can be made.
    pub fn new(algorithm: Algorithm, params: AlgorithmParams) -> Result<Self> {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        new_codec(algorithm, &params)?;
        Ok(Self {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            algorithm,
            params,
        })
    }

    /// The pool's algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The pool's parameters.
    pub fn params(&self) -> &AlgorithmParams {
        &self.params
    }

    /// Runs `f` with this thread's context.
    pub fn with<R>(&self, f: impl FnOnce(&mut dyn Codec) -> R) -> Result<R> {
        CONTEXTS.with(|cell| {
            let taken = {
                let mut list = cell.borrow_mut();
                list.iter()
                    .position(|(id, _)| *id == self.id)
                    .map(|i| list.remove(i).1)
            };
            let mut codec = match taken {
                Some(c) => c,
                None => new_codec(self.algorithm, &self.params)?,
            };
            let r = f(codec.as_mut());
            let mut list = cell.borrow_mut();
            if list.len() >= CONTEXTS_PER_THREAD {
                list.remove(0);
            }
            list.push((self.id, codec));
            Ok(r)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(seed: u8) -> Vec<u8> {
        let text = b"zram stores pages compressed in memory; zsmalloc packs the objects. ";
        (0..4096)
            .map(|i| text[i % text.len()].wrapping_add(seed * (i % 7 == 0) as u8))
            .collect()
    }

    #[test]
    fn every_algorithm_round_trips_and_rejects_garbage() {
        for alg in Algorithm::ALL {
            let mut c = new_codec(alg, &AlgorithmParams::default()).unwrap();
            let src = page(3);
            let mut dst = Vec::new();
            let n = c.compress(&src, &mut dst).unwrap();
            assert_eq!(n, dst.len());
            assert!(n < 2048, "{alg}: {n}");
            let mut out = vec![0u8; 4096];
            c.decompress(&dst, &mut out).unwrap();
            assert_eq!(out, src, "{alg}");
            assert!(
                c.decompress(&dst[..n / 2], &mut out).is_err(),
                "{alg} truncated"
            );
            let garbage: Vec<u8> = (0..300u32).map(|i| (i * 37 % 251) as u8).collect();
            let _ = c.decompress(&garbage, &mut out);
        }
    }

    /// A page of words drawn at random from a small vocabulary: it compresses, but not so
    /// well that every encoder finds every match.
    fn prose() -> Vec<u8> {
        let words = [
            "zram",
            "page",
            "slot",
            "class",
            "zspage",
            "object",
            "handle",
            "compress",
            "memory",
            "the",
            "a",
            "of",
            "into",
            "pool",
            "writeback",
            "idle",
            "huge",
            "same",
            "kernel",
        ];
        let mut x = 0x2545_f491_u32;
        let mut out = Vec::new();
        while out.len() < 4096 {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            out.extend_from_slice(words[(x >> 16) as usize % words.len()].as_bytes());
            out.push(if x & 7 == 0 { b'.' } else { b' ' });
        }
        out.truncate(4096);
        out
    }

    fn compressed_len(alg: Algorithm, level: Option<i32>, src: &[u8]) -> usize {
        let params = AlgorithmParams {
            level,
            dictionary: None,
        };
        let mut c = new_codec(alg, &params).unwrap();
        let mut dst = Vec::new();
        let n = c.compress(src, &mut dst).unwrap();
        let mut back = vec![0u8; src.len()];
        c.decompress(&dst, &mut back).unwrap();
        assert_eq!(back, src, "{alg} level {level:?}");
        n
    }

    /// The level means what the kernel's backends make of it: lz4's acceleration (higher:
    /// fewer matches looked for), lz4hc's and zstd's effort.
    #[test]
    fn levels_change_what_the_encoders_do() {
        let src = prose();
        let lz4 = compressed_len(Algorithm::Lz4, None, &src);
        assert_eq!(compressed_len(Algorithm::Lz4, Some(1), &src), lz4);
        let fast = compressed_len(Algorithm::Lz4, Some(64), &src);
        assert!(fast > lz4, "acceleration 64: {fast} bytes, 1: {lz4}");
        let hc = compressed_len(Algorithm::Lz4Hc, None, &src);
        assert!(hc < lz4, "lz4hc {hc} bytes, lz4 {lz4}");
        assert_eq!(compressed_len(Algorithm::Lz4Hc, Some(9), &src), hc);
        assert!(compressed_len(Algorithm::Lz4Hc, Some(1), &src) > hc);
        let zstd_fast = compressed_len(Algorithm::Zstd, Some(-50), &src);
        assert!(zstd_fast > compressed_len(Algorithm::Zstd, None, &src));
    }

    #[test]
    fn levels_outside_an_algorithms_range_and_foreign_dictionaries_are_refused() {
        let level = |level| AlgorithmParams {
            level: Some(level),
            dictionary: None,
        };
        for (alg, good, bad) in [
            (Algorithm::Lz4, [1, 65537], [0, 65538]),
            (Algorithm::Lz4Hc, [1, 12], [0, 13]),
            (Algorithm::Zstd, [-131_072, 22], [-131_073, 23]),
        ] {
            for l in good {
                level(l).check(alg).unwrap();
                new_codec(alg, &level(l)).unwrap();
            }
            for l in bad {
                assert!(matches!(
                    new_codec(alg, &level(l)),
                    Err(Error::InvalidLevel { level, .. }) if level == l
                ));
            }
        }
        assert_eq!(zstd::LEVELS, ::zstd::compression_level_range());
        for alg in [Algorithm::Lzo, Algorithm::LzoRle] {
            assert!(level(1).check(alg).is_err(), "{alg}");
            AlgorithmParams::default().check(alg).unwrap();
        }
        let dict = AlgorithmParams {
            level: None,
            dictionary: Some(Arc::new(vec![7u8; 1024])),
        };
        for alg in Algorithm::ALL {
            let lzo = matches!(alg, Algorithm::Lzo | Algorithm::LzoRle);
            assert_eq!(dict.check(alg).is_err(), lzo, "{alg}");
        }
    }

    #[test]
    fn names_and_ids_round_trip() {
        for alg in Algorithm::ALL {
            assert_eq!(alg.name().parse::<Algorithm>().unwrap(), alg);
            assert_eq!(Algorithm::from_id(alg.id()), Some(alg));
            // A config file names it as the kernel does.
            #[derive(serde::Serialize, serde::Deserialize)]
            struct Key {
                algorithm: Algorithm,
            }
            let line = format!("algorithm = \"{}\"\n", alg.name());
            assert_eq!(toml::to_string(&Key { algorithm: alg }).unwrap(), line);
            assert_eq!(toml::from_str::<Key>(&line).unwrap().algorithm, alg);
        }
        assert!("deflate".parse::<Algorithm>().is_err());
    }
}
