//! A process's resident memory, as the kernel counts it (`VmRSS`): the second field of
//! `/proc/PID/statm`, in pages.

use zram::PAGE_SIZE;

/// Resident memory of process `pid` in bytes (`None` where its `statm` cannot be read or
/// parsed, e.g. the process is gone).
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let resident: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(resident * PAGE_SIZE as u64)
}

/// Resident memory of this process in bytes.
pub fn process_rss_bytes() -> Option<u64> {
    rss_bytes(std::process::id())
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
