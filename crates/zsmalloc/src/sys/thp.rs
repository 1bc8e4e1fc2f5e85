//! Transparent huge pages kept off memory that is faulted in and given back a page at a
//! time, and the check the tests make of it.

/// Asks the OS not to back the whole pages inside `ptr..ptr+len` with transparent huge
/// pages (memory of the caller's that is faulted in and given back a page at a time: the
/// pool's arenas, zram's slot table). Advice only: it changes no contents, and kernels
/// without transparent huge pages refuse it, where there is nothing to avoid.
pub fn no_huge_pages(ptr: *mut u8, len: usize) {
    // The OS's page (4 KiB on x86-64, larger on some arm64 kernels), which `madvise` needs
    // its range aligned to.
    // SAFETY: `sysconf` reads a constant of the system.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .unwrap_or(4096)
        .max(1);
    let start = (ptr as usize).next_multiple_of(page);
    let end = (ptr as usize).saturating_add(len) / page * page;
    if start < end {
        // SAFETY: advice on whole pages; it changes no memory's contents or mapping.
        unsafe {
            libc::madvise(
                start as *mut libc::c_void,
                end - start,
                libc::MADV_NOHUGEPAGE,
            )
        };
    }
}

/// For tests (this crate's and zram's): whether this process's mapping that holds `addr`
/// refuses transparent huge pages (`nh` in its `VmFlags` in `/proc/self/smaps`); `Err`
/// says why that cannot be told here.
#[doc(hidden)]
pub fn huge_pages_refused_at(addr: usize) -> Result<bool, String> {
    if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
        return Err("this kernel has no transparent huge pages".into());
    }
    let smaps = std::fs::read_to_string("/proc/self/smaps").map_err(|e| e.to_string())?;
    let mut inside = false;
    for line in smaps.lines() {
        let range = line
            .split_once(' ')
            .and_then(|(r, _)| r.split_once('-'))
            .and_then(|(a, b)| {
                Some((
                    usize::from_str_radix(a, 16).ok()?,
                    usize::from_str_radix(b, 16).ok()?,
                ))
            });
        if let Some((start, end)) = range {
            inside = (start..end).contains(&addr);
        } else if inside && let Some(flags) = line.strip_prefix("VmFlags:") {
            return Ok(flags.split_whitespace().any(|f| f == "nh"));
        }
    }
    Err(format!("no mapping holds {addr:#x}"))
}
