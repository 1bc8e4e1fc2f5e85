//! Sizes written as text, as the kernel's `memparse`: a number with an optional K, M, G, T,
//! P or E suffix (powers of 1024, either case).

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
        assert_eq!(page_align(8192), Some(8192));
    }
}
