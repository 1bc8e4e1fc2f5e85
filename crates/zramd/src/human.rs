//! Sizes for people, as `zramctl` prints them (`1G`, `12.3M`, `512B`), and timeouts as
//! people write them (`30s`, `500ms`, `1h`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `bytes` as zramctl prints sizes: in the largest binary unit (B, K, M, G, T, P, E) it
/// reaches, with one decimal where that decimal is not 0. The decimal is the thousandths,
/// truncated, then rounded half up to tenths, so `1023.96K` prints `1024K` (as zramctl).
pub fn size(bytes: u64) -> String {
    const UNITS: [char; 7] = ['B', 'K', 'M', 'G', 'T', 'P', 'E'];
    let mut exp = 0;
    while exp < 60 && bytes >> (exp + 10) != 0 {
        exp += 10;
    }
    let mut whole = bytes >> exp;
    let rest = bytes - (whole << exp);
    // Thousandths of the unit; for a rest too large to multiply by 1000 (exbibytes),
    // from its kibibytes, as zramctl computes it.
    let thousandths = if rest >= u64::MAX / 1000 {
        ((rest / 1024) * 1000) >> (exp - 10)
    } else {
        (rest * 1000) >> exp
    };
    let mut tenths = (thousandths + 50) / 100;
    if tenths == 10 {
        whole += 1;
        tenths = 0;
    }
    let unit = UNITS[exp / 10];
    if tenths == 0 {
        format!("{whole}{unit}")
    } else {
        format!("{whole}.{tenths}{unit}")
    }
}

/// A timeout: `500ms`, `30s`, `5m`, `1h`, or a number of seconds; `0` is none (wait for
/// ever). Config files take the same text, or a number of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "TimeoutText", into = "String")]
pub struct Timeout(pub Duration);

impl Timeout {
    /// A timeout of `secs` seconds.
    pub const fn secs(secs: u64) -> Self {
        Self(Duration::from_secs(secs))
    }

    /// A timeout of `ms` milliseconds.
    pub const fn millis(ms: u64) -> Self {
        Self(Duration::from_millis(ms))
    }

    /// The time allowed; `None` when there is no limit.
    pub fn limit(self) -> Option<Duration> {
        (!self.0.is_zero()).then_some(self.0)
    }
}

impl From<Duration> for Timeout {
    fn from(d: Duration) -> Self {
        Self(d)
    }
}

/// The units of a timeout, largest first, in milliseconds.
const TIME_UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)];

impl std::str::FromStr for Timeout {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let bad = || format!("invalid timeout {s:?} (e.g. 500ms, 30s, 5m, 1h; 0 for none)");
        let n: u64 = t[..digits].parse().map_err(|_| bad())?;
        let unit = match t[digits..].trim() {
            "" => 1000,
            u => {
                TIME_UNITS
                    .iter()
                    .find(|(name, _)| *name == u)
                    .ok_or_else(bad)?
                    .1
            }
        };
        n.checked_mul(unit).map(Self::millis).ok_or_else(bad)
    }
}

impl std::fmt::Display for Timeout {
    /// The shortest exact form: `500ms`, `30s`, `5m`, `1h`, `0`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = self.0.as_millis();
        match TIME_UNITS
            .iter()
            .find(|(_, unit)| ms > 0 && ms.is_multiple_of(u128::from(*unit)))
        {
            Some((name, unit)) => write!(f, "{}{name}", ms / u128::from(*unit)),
            None => write!(f, "{ms}"),
        }
    }
}

impl From<Timeout> for String {
    fn from(t: Timeout) -> Self {
        t.to_string()
    }
}

/// A timeout as a config file gives it: text, or a number of seconds.
#[derive(Deserialize)]
#[serde(untagged)]
enum TimeoutText {
    Secs(u64),
    Text(String),
}

impl TryFrom<TimeoutText> for Timeout {
    type Error = String;

    fn try_from(t: TimeoutText) -> Result<Self, String> {
        match t {
            TimeoutText::Secs(s) => Ok(Self::secs(s)),
            TimeoutText::Text(s) => s.parse(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Timeout;

    #[test]
    fn timeouts_read_and_print_as_written() {
        for (text, ms) in [
            ("500ms", 500),
            ("30s", 30_000),
            ("5m", 300_000),
            ("1h", 3_600_000),
        ] {
            let t: Timeout = text.parse().unwrap();
            assert_eq!(t, Timeout::millis(ms));
            assert_eq!(t.to_string(), text);
        }
        assert_eq!("90".parse::<Timeout>().unwrap(), Timeout::secs(90));
        assert_eq!("0".parse::<Timeout>().unwrap().limit(), None);
        for bad in ["", "s", "1d", "-1s", "1.5s", "99999999999999999h"] {
            assert!(bad.parse::<Timeout>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sizes_read_like_zramctl() {
        assert_eq!(super::size(0), "0B");
        assert_eq!(super::size(512), "512B");
        assert_eq!(super::size(1 << 30), "1G");
        assert_eq!(super::size(12_900_000), "12.3M");
        // Figures zramctl printed for these byte counts (a kernel zram device's mm_stat).
        for (bytes, shown) in [
            (1023, "1023B"),
            (1024, "1K"),
            (102_400, "100K"),
            (31_588_352, "30.1M"),
            (16_323_054, "15.6M"),
            (18_055_168, "17.2M"),
            (67_108_864, "64M"),
        ] {
            assert_eq!(super::size(bytes), shown, "{bytes}");
        }
        // Rounding: 1.05K is 1.0498 (1.0), 1.25K up to 1.3, 1023.96K to 1024K.
        assert_eq!(super::size(1075), "1K");
        assert_eq!(super::size(1280), "1.3K");
        assert_eq!(super::size(1_048_535), "1024K");
        assert_eq!(super::size(u64::MAX), "16E");
        assert_eq!(super::size(3 << 60), "3E");
    }
}
