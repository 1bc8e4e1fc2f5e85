//! This process's resident memory, as the kernel counts it: the second field of
//! `/proc/self/statm`, in pages.

use zram::PAGE_SIZE;

/// Resident memory of this process in bytes, from `/proc/self/statm` (`None` where that
/// file cannot be read or parsed).
pub fn process_rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let resident: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(resident * PAGE_SIZE as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_touched_memory() {
        const LEN: usize = 64 << 20;
        let before = process_rss_bytes().expect("/proc/self/statm is readable");
        let mut buf = vec![0u8; LEN];
        // Write to every page so that each is really resident.
        for page in buf.chunks_mut(PAGE_SIZE) {
            page[0] = 1;
        }
        std::hint::black_box(&mut buf);
        let after = process_rss_bytes().unwrap();
        assert!(
            after >= before + (LEN as u64) * 3 / 4,
            "RSS {before} -> {after} after touching {LEN} bytes"
        );
    }
}
