//! Sizes written as text: a decimal number, optionally with a fraction, and an optional
//! binary suffix: K, M, G, T, P or E (powers of 1024, either case, as the kernel's
//! `memparse`), also written KiB, MiB, … (`1GiB` is `1G`, 2^30 bytes).
//!
//! - A fraction must come to a whole number of bytes: `1.5G` is 1610612736, `0.5K` is 512;
//!   `1.1K` (1126.4 bytes) and `1.5` are refused, never rounded.
//! - `1GB`, `1MB`… are refused as ambiguous (tools differ on 10^9 or 2^30): write `1G`/`1GiB`
//!   for 2^30, or the bytes.
//! - Nothing else: no sign, no hex or octal, no blank inside, no text after the suffix, no
//!   silent overflow.
//!
//! This is the strict form for config files and command lines, where a typo must be an
//! error. The daemon's attribute files read sizes with the kernel's own, lenient rules
//! instead (zramd's `sysfs::memparse`: `1.5G` written to `disksize` reads as 1 there, as the
//! kernel's does), since zram users' scripts write them.

use crate::error::{Error, Result};

/// Parses `"1G"`, `"512m"`, `"1.5G"`, `"4GiB"`, `"4096"`… into bytes (the module's rules).
pub fn parse_size(text: &str) -> Result<u64> {
    let bad = |reason| Error::SizeSyntax {
        text: text.to_owned(),
        reason,
    };
    let t = text.trim();
    let number_end = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, suffix) = t.split_at(number_end);
    let shift = match suffix.to_ascii_uppercase().as_str() {
        "" => 0,
        "K" | "KIB" => 10,
        "M" | "MIB" => 20,
        "G" | "GIB" => 30,
        "T" | "TIB" => 40,
        "P" | "PIB" => 50,
        "E" | "EIB" => 60,
        "KB" | "MB" | "GB" | "TB" | "PB" | "EB" => {
            return Err(bad(
                "ambiguous unit (decimal or binary?): write K, M, G… or KiB, MiB, GiB… for \
                 powers of 1024, or the bytes",
            ));
        }
        _ => {
            return Err(bad(
                "expected a number of bytes, optionally with a K, M, G, T, P or E suffix \
                 (or KiB, MiB, …)",
            ));
        }
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return Err(bad("no number"));
    }
    if fraction.contains('.') {
        return Err(bad("more than one decimal point"));
    }
    // value = digits / 10^places * 2^shift, exactly, in 128 bits.
    let fraction = fraction.trim_end_matches('0');
    let divisor = u32::try_from(fraction.len())
        .ok()
        .and_then(|places| 10u128.checked_pow(places))
        .ok_or_else(|| bad("too many decimals"))?;
    let too_large = || bad("too large (more than 2^64 - 1 bytes)");
    let digits: u128 = format!("{whole}{fraction}")
        .parse()
        .map_err(|_| too_large())?;
    let scaled = digits.checked_mul(1u128 << shift).ok_or_else(too_large)?;
    if scaled % divisor != 0 {
        return Err(bad("not a whole number of bytes"));
    }
    u64::try_from(scaled / divisor).map_err(|_| too_large())
}

/// A size in bytes, read as [`parse_size`] reads it (`"1G"`, `"1GiB"`, `"1.5G"`, `"4096"`) and
/// written as the kernel's `memparse` text (`"1G"`, `"4K"`, `"4096"`): the type of every size
/// setting on command lines and in config files (where a plain integer is taken as bytes
/// too).
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
                f.write_str(
                    "a size: bytes, or a number with a K, M, G, T, P or E suffix (or KiB, MiB, …)",
                )
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
        assert_eq!(page_align(1), Some(4096));
        for (text, shown) in [("1G", "1G"), ("4096", "4K"), ("1536K", "1536K"), ("7", "7")] {
            let size: Size = text.parse().unwrap();
            assert_eq!(size.to_string(), shown);
            assert_eq!(shown.parse::<Size>().unwrap(), size);
        }
        assert_eq!(Size(0).to_string(), "0");
        assert_eq!(page_align(8192), Some(8192));
    }

    #[test]
    fn binary_units_and_fractions() {
        for (text, bytes) in [
            ("1GiB", 1 << 30),
            ("1gib", 1 << 30),
            ("4KiB", 4096),
            ("2MiB", 2 << 20),
            ("1TiB", 1 << 40),
            ("1PiB", 1 << 50),
            ("1EiB", 1 << 60),
            ("1.5G", 3 << 29),
            ("1.5GiB", 3 << 29),
            ("0.5K", 512),
            (".5K", 512),
            ("1.K", 1024),
            ("2.25M", 9 << 18),
            ("1.000000000000000000000000000000000000000000G", 1 << 30),
            ("0.5E", 1 << 59),
            ("0", 0),
            ("4096.0", 4096),
            ("18446744073709551615", u64::MAX),
        ] {
            assert_eq!(parse_size(text).unwrap(), bytes, "{text:?}");
            assert_eq!(text.parse::<Size>().unwrap(), Size(bytes), "{text:?}");
        }
    }

    /// Config files read sizes through the same parser (and take plain integers as bytes).
    #[test]
    fn config_files_take_the_same_forms() {
        #[derive(Debug, serde::Deserialize)]
        struct File {
            size: Size,
        }
        let size = |text: &str| toml::from_str::<File>(text).map(|f| f.size);
        assert_eq!(size("size = \"1.5GiB\"").unwrap(), Size(3 << 29));
        assert_eq!(size("size = 4096").unwrap(), Size(4096));
        let err = size("size = \"1GB\"").unwrap_err().to_string();
        assert!(err.contains("ambiguous"), "{err}");
        assert!(size("size = -1").is_err());
    }

    /// Each refused form, with the reason in the message (no panic on any of them).
    #[test]
    fn refused_forms_say_why() {
        for (text, reason) in [
            ("", "no number"),
            ("   ", "no number"),
            ("G", "no number"),
            (".", "no number"),
            (".G", "no number"),
            ("-1", "expected a number"),
            ("+1", "expected a number"),
            ("1X", "expected a number"),
            ("1 G", "expected a number"),
            ("1Gx", "expected a number"),
            ("0x10", "expected a number"),
            ("1GB", "ambiguous"),
            ("1gb", "ambiguous"),
            ("5MB", "ambiguous"),
            ("1.5.5G", "more than one decimal point"),
            ("1.1K", "not a whole number of bytes"),
            ("1.5", "not a whole number of bytes"),
            ("0.1", "not a whole number of bytes"),
            ("99999999E", "too large"),
            ("16E", "too large"),
            ("18446744073709551616", "too large"),
            ("99999999999999999999999999999999999999999999", "too large"),
            (
                "1.00000000000000000000000000000000000000001",
                "too many decimals",
            ),
        ] {
            let err = parse_size(text).expect_err(text).to_string();
            assert!(err.contains(reason), "{text:?}: {err}");
            assert!(err.contains(&format!("{:?}", text)), "{text:?}: {err}");
        }
    }
}
