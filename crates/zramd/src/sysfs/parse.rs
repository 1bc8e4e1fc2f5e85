//! The kernel's rules for reading numbers written to attribute files, rule for rule:
//! `memparse` (sizes with K/M/G/T/P/E suffixes) and `kstrtoull` (plain decimal numbers,
//! with the range checks of `kstrtou16` and kin). Our own code after the kernel's
//! `lib/cmdline.c` and `lib/kstrtox.c`.

/// The kernel's `memparse` (`lib/cmdline.c`), rule for rule, for the attributes the kernel
/// parses with it (`disksize`, `mem_limit`, and our `unit_size`): the number as
/// `simple_strtoull` reads it with base 0 (`0x` and a hex digit: hexadecimal; a leading
/// `0`: octal; else decimal; no sign, no leading blanks; overflow wraps), then one optional
/// suffix K, M, G, T, P or E in either case (each a further shift by 10, wrapping).
/// Whatever follows is left alone, as the kernel leaves it (`1Mxyz` is 1 MiB). Returns the
/// value and how many bytes were read; 0 bytes read means no number at all.
///
/// Config files and command lines use the strict [`zram::size::parse_size`] instead: there a
/// typo should be an error, not a silently different size; here the kernel's scripts must
/// read as the kernel reads them.
pub fn memparse(text: &[u8]) -> (u64, usize) {
    let (mut value, mut used) = simple_strtoull(text);
    let shift = match text.get(used).map(u8::to_ascii_uppercase) {
        Some(b'K') => 10,
        Some(b'M') => 20,
        Some(b'G') => 30,
        Some(b'T') => 40,
        Some(b'P') => 50,
        Some(b'E') => 60,
        _ => 0,
    };
    if shift > 0 {
        // `ret <<= 10` per step in the kernel: bits shifted out are lost.
        value <<= shift;
        used += 1;
    }
    (value, used)
}

/// The kernel's `simple_strtoull(s, &end, 0)`: the value and the bytes read.
fn simple_strtoull(text: &[u8]) -> (u64, usize) {
    let (base, prefix) = radix(text);
    let (value, digits, _) = parse_digits(&text[prefix..], base);
    (value, prefix + digits)
}

/// The kernel's `_parse_integer_fixup_radix` for base 0: `0x` and a hex digit is
/// hexadecimal (the prefix's 2 bytes skipped), a leading `0` octal, else decimal.
fn radix(text: &[u8]) -> (u64, usize) {
    match text {
        [b'0', x, d, ..] if x.eq_ignore_ascii_case(&b'x') && d.is_ascii_hexdigit() => (16, 2),
        [b'0', ..] => (8, 0),
        _ => (10, 0),
    }
}

/// The kernel's `_parse_integer`: digits of `base` from the start of `text`, the value
/// (wrapped), how many digits, and whether it overflowed.
fn parse_digits(text: &[u8], base: u64) -> (u64, usize, bool) {
    let (mut value, mut overflow) = (0u64, false);
    let mut digits = 0;
    for &c in text {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' | b'A'..=b'F' => c.to_ascii_lowercase() - b'a' + 10,
            _ => break,
        };
        if u64::from(d) >= base {
            break;
        }
        let (v, o1) = value.overflowing_mul(base);
        let (v, o2) = v.overflowing_add(u64::from(d));
        (value, overflow, digits) = (v, overflow || o1 || o2, digits + 1);
    }
    (value, digits, overflow)
}

/// The kernel's `kstrtoull(s, 10, &v)` with a range check, as `kstrtou16` and `kstrtoul`
/// make it: an optional `+`, decimal digits, at most one newline and nothing else; `ERANGE`
/// when the value overflows or exceeds `max`, `EINVAL` for anything else wrong.
pub fn kstrtoull(text: &[u8], max: u64) -> Result<u64, i32> {
    let text = text.strip_prefix(b"+").unwrap_or(text);
    let (value, digits, overflow) = parse_digits(text, 10);
    integer_end(&text[digits..], value, digits, overflow, max)
}

/// The kernel's `kstrtoull(s, 0, &v)`: as [`kstrtoull`] (no limit), the base read from
/// the start: `0x` and a hex digit hexadecimal, a leading `0` octal, else decimal.
pub fn kstrtoull_any_base(text: &[u8]) -> Result<u64, i32> {
    let text = text.strip_prefix(b"+").unwrap_or(text);
    let (base, prefix) = radix(text);
    let text = &text[prefix..];
    let (value, digits, overflow) = parse_digits(text, base);
    integer_end(&text[digits..], value, digits, overflow, u64::MAX)
}

/// What `kstrto*` makes of the rest after the digits.
fn integer_end(
    rest: &[u8],
    value: u64,
    digits: usize,
    overflow: bool,
    max: u64,
) -> Result<u64, i32> {
    match rest {
        _ if overflow => Err(libc::ERANGE),
        _ if digits == 0 => Err(libc::EINVAL),
        b"" | b"\n" if value <= max => Ok(value),
        b"" | b"\n" => Err(libc::ERANGE),
        _ => Err(libc::EINVAL),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kstrtoull_with_base_0_reads_as_the_kernels() {
        for (text, want) in [
            ("16", Ok(16)),
            ("0x10", Ok(16)),
            ("0X1f\n", Ok(31)),
            ("010", Ok(8)),
            ("+5", Ok(5)),
            ("0", Ok(0)),
            ("08", Err(libc::EINVAL)),
            ("0x", Err(libc::EINVAL)),
            (" 5", Err(libc::EINVAL)),
            ("5 ", Err(libc::EINVAL)),
            ("5\n\n", Err(libc::EINVAL)),
            ("", Err(libc::EINVAL)),
            ("0x10000000000000000", Err(libc::ERANGE)),
        ] {
            assert_eq!(kstrtoull_any_base(text.as_bytes()), want, "{text:?}");
        }
    }

    /// The kernel's answers: each text was written to a kernel 6.18 device's `mem_limit`
    /// and read back from its `mm_stat` (see also the attribute tests in `sysfs`).
    #[test]
    fn memparse_reads_as_the_kernels() {
        for (text, value, used) in [
            ("0x10M", 16 << 20, 5),
            ("010", 8, 3),
            ("1Kxyz", 1024, 2),
            ("1M ", 1 << 20, 2),
            ("4096\n", 4096, 4),
            ("0x1e", 30, 4),
            ("0x1g", 1 << 30, 4),
            ("09", 0, 1),
            ("0x", 0, 1),
            ("16E", 0, 3),
            (" 1M", 0, 0),
            ("-1", 0, 0),
            ("lots", 0, 0),
            // No digits, but `p` is a suffix: 0, one byte read (the kernel's mem_limit
            // takes "plenty" as 0).
            ("plenty", 0, 1),
            ("", 0, 0),
        ] {
            assert_eq!(memparse(text.as_bytes()), (value, used), "{text:?}");
        }
        // Overflow wraps, as simple_strtoull's does.
        assert_eq!(
            memparse(b"18446744073709551617").0,
            1,
            "2^64 + 1 wraps to 1"
        );
    }
}
