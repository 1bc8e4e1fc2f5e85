//! `zramd serve --swap-safe` (config file: `swap_safe = true`): readies the server to back
//! swap (docs/swap.md).
//!
//! A swap device served from user space deadlocks when the server needs memory to store
//! what the kernel swaps out to free memory. These mitigations exist, and all are applied
//! before the server makes its devices or starts a thread:
//!
//! - **`PR_SET_IO_FLUSHER`** marks the calling task (`PF_MEMALLOC_NOIO | PF_LOCAL_THROTTLE`):
//!   its allocations never wait on I/O in reclaim (such as a swap-out to this very server)
//!   and it is not throttled for the dirty pages it writes. The flag is per task and copied
//!   to the threads created after it, so setting it on the main thread first covers every
//!   thread the server starts (the FUSE session's, the NBD connections' and workers', the
//!   control and metrics threads). Needs `CAP_SYS_RESOURCE`.
//! - **`mlockall(MCL_CURRENT | MCL_FUTURE)`** keeps every page of the server resident, and
//!   every page it maps later (the pool as it grows, thread stacks, buffers) resident from
//!   the moment it is mapped, so serving a request never waits for one of its own pages to
//!   come back from swap. Needs `CAP_IPC_LOCK` or an unlimited `RLIMIT_MEMLOCK`; the limit
//!   is raised to unlimited where the process may (`CAP_SYS_RESOURCE`, or a hard limit
//!   already unlimited). With a finite limit and no `CAP_IPC_LOCK` the server refuses to
//!   start: once the locked memory reached the limit, the pool's next mapping would fail.
//! - **`oom_score_adj = -1000`**: the OOM killer never picks the server. Killing it would
//!   free its memory, but lose every page swapped to it (their owners would die on their
//!   next touch). Needs `CAP_SYS_RESOURCE`.
//!
//! Any of them failing stops the start with the reason; nothing is skipped silently.

use std::io;

use anyhow::{Context as _, bail};
use rustix::mm::{MlockAllFlags, mlockall};
use rustix::process::{Resource, Rlimit, configure_io_flusher_behavior, getrlimit, setrlimit};

/// `CAP_IPC_LOCK`'s bit in `/proc/self/status`'s `CapEff`.
const CAP_IPC_LOCK: u32 = 14;

/// What [`apply`] did, for the log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// Memory locked right after `mlockall`, in bytes (`VmLck`).
    pub locked_bytes: u64,
    /// How the memlock limit was met: "unlimited", "raised to unlimited", or
    /// "not applied (CAP_IPC_LOCK)".
    pub memlock: &'static str,
}

impl std::fmt::Display for Applied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "swap-safe: memory locked (mlockall current+future, {} locked now; \
             RLIMIT_MEMLOCK {}); IO_FLUSHER set for every serving thread; oom_score_adj -1000",
            crate::human::size(self.locked_bytes),
            self.memlock
        )
    }
}

/// Locks the process's memory, marks it an I/O flusher and keeps the OOM killer off it (see
/// the module's text). Call on the main thread before any other thread starts: threads
/// started earlier keep their flags.
pub fn apply() -> anyhow::Result<Applied> {
    let memlock = memlock_limit()?;
    mlockall(MlockAllFlags::CURRENT | MlockAllFlags::FUTURE)
        .map_err(io::Error::from)
        .context("swap-safe: mlockall(MCL_CURRENT | MCL_FUTURE)")?;
    let locked_bytes = status_kb("VmLck")?.saturating_mul(1024);
    if let Err(e) = configure_io_flusher_behavior(true) {
        let why = match e {
            rustix::io::Errno::PERM => "needs CAP_SYS_RESOURCE",
            rustix::io::Errno::INVAL => "needs Linux 5.6 or later",
            _ => "unexpected",
        };
        bail!(
            "swap-safe: prctl(PR_SET_IO_FLUSHER): {} ({why}; memory was locked: VmLck {} kB); \
             the server does not start half-prepared for swap",
            io::Error::from(e),
            locked_bytes / 1024
        );
    }
    std::fs::write("/proc/self/oom_score_adj", "-1000")
        .context("swap-safe: oom_score_adj -1000 (needs CAP_SYS_RESOURCE)")?;
    Ok(Applied {
        locked_bytes,
        memlock,
    })
}

/// Makes sure locking all memory is allowed without bound: an unlimited `RLIMIT_MEMLOCK`
/// (raised when possible) or `CAP_IPC_LOCK`.
fn memlock_limit() -> anyhow::Result<&'static str> {
    let limit = getrlimit(Resource::Memlock);
    if limit.current.is_none() {
        return Ok("unlimited");
    }
    let unlimited = Rlimit {
        current: None,
        maximum: None,
    };
    let Err(refused) = setrlimit(Resource::Memlock, unlimited) else {
        return Ok("raised to unlimited");
    };
    if has_capability(CAP_IPC_LOCK)? {
        return Ok("not applied (CAP_IPC_LOCK)");
    }
    let kib = |v: Option<u64>| v.map_or("unlimited".to_owned(), |b| format!("{} kB", b / 1024));
    bail!(
        "swap-safe: RLIMIT_MEMLOCK is {} (hard {}) and cannot be raised ({}), and the process \
         lacks CAP_IPC_LOCK: locked memory would run out as the pool grows. Run as root, or \
         raise the limit first (ulimit -l unlimited; systemd: LimitMEMLOCK=infinity)",
        kib(limit.current),
        kib(limit.maximum),
        io::Error::from(refused),
    )
}

/// Whether the process's effective capabilities hold `bit`.
fn has_capability(bit: u32) -> anyhow::Result<bool> {
    let hex = status_field("CapEff")?;
    let set = u64::from_str_radix(hex.trim(), 16)
        .with_context(|| format!("/proc/self/status CapEff {hex:?}"))?;
    Ok(set >> bit & 1 == 1)
}

/// A `kB` figure of `/proc/self/status` (`VmLck`, `VmRSS`, …), in kB.
fn status_kb(name: &str) -> anyhow::Result<u64> {
    let text = status_field(name)?;
    let number = text.trim().trim_end_matches("kB").trim();
    number
        .parse()
        .with_context(|| format!("/proc/self/status {name} {text:?}"))
}

/// The text after `name:` in `/proc/self/status`.
fn status_field(name: &str) -> anyhow::Result<String> {
    let status = std::fs::read_to_string("/proc/self/status").context("read /proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::to_owned)
        .with_context(|| format!("no {name} in /proc/self/status"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_of_this_process() {
        // Every Linux process has these lines; the figures are what the kernel says.
        assert!(status_kb("VmRSS").unwrap() > 0);
        assert!(status_kb("NoSuchField").is_err());
        let caps = status_field("CapEff").unwrap();
        assert!(u64::from_str_radix(caps.trim(), 16).is_ok(), "{caps:?}");
    }

    #[test]
    fn the_log_line_says_what_was_applied() {
        let line = Applied {
            locked_bytes: 3 << 20,
            memlock: "raised to unlimited",
        }
        .to_string();
        assert!(
            line.contains("3M locked") && line.contains("raised to unlimited"),
            "{line}"
        );
        assert!(
            line.contains("IO_FLUSHER") && line.contains("mlockall"),
            "{line}"
        );
    }
}
