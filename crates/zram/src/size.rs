//! Sizes written as text, with the kernel's `memparse` suffixes: a decimal number with an
//! optional K, M, G, T, P or E suffix (powers of 1024, either case), and nothing else.
//!
//! This is the strict form for config files and command lines, where a typo must be an
//! error: no hex or octal, no text after the suffix, no silent overflow. The daemon's
//! attribute files read sizes with the kernel's own, lenient rules instead (zramd's
//! `sysfs::memparse`), since zram users' scripts write them.

use crate::error::{Error, Result};

/// Parses `"1G"`, `"512m"`, `"4096"`… into bytes.
pub fn parse_size(text: &str) -> Result<u64> {
    let t = text.trim();
    let bad = || Error::InvalidSize(text.to_owned());
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                'P' => 50,
                'E' => 60,
                _ => return Err(bad()),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(1u64 << shift).ok_or_else(bad)
}

/// A size in bytes, written and read as the kernel's `memparse` text (`"1G"`, `"4K"`,
/// `"4096"`): the type of every size setting on command lines and in config files (where a
/// plain integer is taken as bytes too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Size(pub u64);

impl Size {
    /// Bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl std::str::FromStr for Size {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        parse_size(s).map(Size)
    }
}

impl std::fmt::Display for Size {
    /// The shortest exact form: `1G`, `4K`, `12345`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0;
        let unit = ['E', 'P', 'T', 'G', 'M', 'K']
            .into_iter()
            .zip([60, 50, 40, 30, 20, 10])
            .find(|&(_, shift)| n != 0 && n.trailing_zeros() >= shift);
        match unit {
            Some((suffix, shift)) => write!(f, "{}{suffix}", n >> shift),
            None => write!(f, "{n}"),
        }
    }
}

impl serde::Serialize for Size {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Size;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a size: bytes, or a number with a K, M, G, T, P or E suffix")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Size, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<Size, E> {
                Ok(Size(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<Size, E> {
                u64::try_from(v).map(Size).map_err(E::custom)
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// Rounds up to a whole number of pages.
pub fn page_align(bytes: u64) -> Option<u64> {
    bytes.checked_next_multiple_of(crate::PAGE_SIZE as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_and_errors() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size(" 64m\n").unwrap(), 64 << 20);
        assert_eq!(parse_size("3k").unwrap(), 3072);
        for bad in ["", "G", "1X", "-1", "1.5G", "99999999999E"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
        assert_eq!(page_align(1), Some(4096));
        for (text, shown) in [("1G", "1G"), ("4096", "4K"), ("1536K", "1536K"), ("7", "7")] {
            let size: Size = text.parse().unwrap();
            assert_eq!(size.to_string(), shown);
            assert_eq!(shown.parse::<Size>().unwrap(), size);
        }
        assert_eq!(Size(0).to_string(), "0");
        assert_eq!(page_align(8192), Some(8192));
    }
}
