//! Sizes for people, as `zramctl` prints them (`1G`, `12.3M`, `512B`).

/// `bytes` in the largest binary unit that keeps it at least 1, one decimal where needed.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "K", "M", "G", "T", "P"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 || (value - value.round()).abs() < 0.05 {
        format!("{}{}", value.round() as u64, UNITS[unit])
    } else {
        format!("{value:.1}{}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_read_like_zramctl() {
        assert_eq!(super::size(0), "0B");
        assert_eq!(super::size(512), "512B");
        assert_eq!(super::size(1 << 30), "1G");
        assert_eq!(super::size(12_900_000), "12.3M");
    }
}
