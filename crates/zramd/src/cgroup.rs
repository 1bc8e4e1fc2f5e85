//! The memory cgroup's limit, and the share of it the devices' pools may take.
//!
//! A zramd process in a memory cgroup with a limit (a service's `MemoryMax=`, a container's
//! memory limit) is killed by the cgroup's OOM killer when its pages pass the limit, and
//! every device's data goes with it. So `zramd serve` ([`enable`], unless
//! `--no-cgroup-cap`) caps each device's `mem_limit` at the pool budget: the limit less
//! room for what is not in the pools (slot tables, the allocator's metadata, cached pages,
//! request buffers, the program itself). A write past it fails with `ENOSPC`, as under
//! `mem_limit`, and the data already stored stays. The devices also share the budget
//! ([`share_total`]): all their pools together hold at most the budget (or
//! `--total-mem-limit`, if lower), so that several devices cannot pass the limit between
//! them either. The limit is read once, at start.
//! Library users (and `Device`s made without `serve`) are not capped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use zram::SharedLimit;

/// Room kept for memory outside the pools: this much plus an eighth of the limit.
const ROOM: u64 = 32 << 20;

/// Whether devices apply the cap ([`enable`]).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Makes every device of this process cap its `mem_limit` at the pool budget from now on
/// (`zramd serve` calls it before it makes its devices). Returns the cgroup's limit, if
/// there is one.
pub fn enable() -> Option<u64> {
    ENABLED.store(true, Ordering::Relaxed);
    memory_limit()
}

/// Bytes the devices' pools may hold, where the cap is on ([`enable`]) and the process is
/// in a memory cgroup with a limit.
pub fn pool_budget() -> Option<u64> {
    if !ENABLED.load(Ordering::Relaxed) {
        return None;
    }
    memory_limit().map(budget_of)
}

/// The pool budget under a cgroup limit of `limit` bytes: the limit less 32 MiB (`ROOM`)
/// and an eighth of it, and at least a quarter of it (a small limit leaves little room, but
/// a budget of 0 would mean no limit at all).
pub fn budget_of(limit: u64) -> u64 {
    limit.saturating_sub(ROOM + limit / 8).max(limit / 4).max(1)
}

/// The limit all devices' pools share ([`share_total`]), if one is set.
static SHARED: OnceLock<Arc<SharedLimit>> = OnceLock::new();

/// Holds every device made from now on, together with the others, to `bytes` (`zramd
/// serve` calls it before it makes its devices, with the cgroup's pool budget or
/// `--total-mem-limit`, the lower of the two). Set once for the process: a second call
/// changes nothing and returns `false`.
pub fn share_total(bytes: u64) -> bool {
    SHARED.set(SharedLimit::new(bytes)).is_ok()
}

/// The limit all devices' pools share, if [`share_total`] set one.
pub fn shared_limit() -> Option<Arc<SharedLimit>> {
    SHARED.get().cloned()
}

/// `mem_limit` as a device applies it: `bytes` (0: none) capped at the pool budget.
pub fn capped_mem_limit(bytes: u64) -> u64 {
    match pool_budget() {
        Some(budget) if bytes == 0 || bytes > budget => budget,
        _ => bytes,
    }
}

/// This process's memory cgroup limit in bytes, the lowest on its path to the root, read
/// once; `None` where there is none (or no cgroup file system to read it from).
pub fn memory_limit() -> Option<u64> {
    static LIMIT: OnceLock<Option<u64>> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        limit_from(&cgroups, Path::new("/sys/fs/cgroup"))
    })
}

/// The limit for the cgroups listed in `cgroups` (`/proc/self/cgroup`'s text) with the
/// hierarchies mounted under `root`.
fn limit_from(cgroups: &str, root: &Path) -> Option<u64> {
    // cgroup v1: the memory controller's own hierarchy; its `memory.stat` gives the
    // hierarchical limit.
    for line in cgroups.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if controllers.split(',').any(|c| c == "memory") {
            // Without a cgroup namespace (a v1 container) the path is the host's, while the
            // hierarchy mounted here starts at the container's own cgroup: the longest
            // tail of the path that exists here is the process's cgroup.
            let mount = root.join("memory");
            let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
            let dir = (0..=parts.len())
                .map(|skip| mount.join(parts[skip..].join("/")))
                .find(|d| d.join("memory.stat").exists())?;
            let stat = std::fs::read_to_string(dir.join("memory.stat")).ok()?;
            let limit = stat
                .lines()
                .find_map(|l| l.strip_prefix("hierarchical_memory_limit "))?
                .trim()
                .parse()
                .ok()?;
            return real_limit(limit);
        }
    }
    // cgroup v2: the unified hierarchy ("0::/path"); the lowest `memory.max` on the path
    // (walking up also finds a container's own cgroup mounted as the root).
    let path = cgroups.lines().find_map(|l| l.strip_prefix("0::"))?;
    let mut dir = under(root, path);
    let mut lowest: Option<u64> = None;
    loop {
        if let Ok(max) = std::fs::read_to_string(dir.join("memory.max"))
            && let Ok(limit) = max.trim().parse::<u64>()
        {
            lowest = Some(lowest.map_or(limit, |l| l.min(limit)));
        }
        if dir == root || !dir.pop() {
            break;
        }
    }
    lowest.and_then(real_limit)
}

/// `path` (absolute in its hierarchy) under the hierarchy's mount point `root`.
fn under(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

/// A limit, unless it is the "no limit" a v1 hierarchy reports (2^63 rounded down to a page).
fn real_limit(limit: u64) -> Option<u64> {
    (limit < 1 << 62).then_some(limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_leaves_room_and_is_never_zero() {
        assert_eq!(budget_of(8 << 30), (8 << 30) - (32 << 20) - (1 << 30));
        assert_eq!(budget_of(96 << 20), (96 << 20) - (32 << 20) - (12 << 20));
        assert_eq!(budget_of(32 << 20), 8 << 20, "a quarter of a small limit");
        assert_eq!(budget_of(0), 1);
    }

    #[test]
    fn limits_are_read_from_either_hierarchy() {
        let root = tempfile::tempdir().unwrap();
        // v1: the memory controller's hierarchy, hierarchical limit in memory.stat.
        let v1 = root.path().join("memory/svc/zramd");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::write(
            v1.join("memory.stat"),
            "cache 0\nhierarchical_memory_limit 104857600\nrss 0\n",
        )
        .unwrap();
        let cgroups = "5:devices:/\n4:memory:/svc/zramd\n0::/\n";
        assert_eq!(limit_from(cgroups, root.path()), Some(100 << 20));
        std::fs::write(
            v1.join("memory.stat"),
            "hierarchical_memory_limit 9223372036854771712\n",
        )
        .unwrap();
        assert_eq!(limit_from(cgroups, root.path()), None, "no limit");
        // A v1 container without a cgroup namespace: the host's path, the container's
        // cgroup mounted as the hierarchy's root.
        std::fs::write(
            root.path().join("memory/memory.stat"),
            "hierarchical_memory_limit 67108864\n",
        )
        .unwrap();
        assert_eq!(
            limit_from("4:memory:/docker/0123abcd\n", root.path()),
            Some(64 << 20)
        );
        // v2: the lowest memory.max on the path; "max" is none.
        let v2 = root.path().join("a/b");
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(root.path().join("a/memory.max"), "209715200\n").unwrap();
        std::fs::write(v2.join("memory.max"), "max\n").unwrap();
        assert_eq!(limit_from("0::/a/b\n", root.path()), Some(200 << 20));
        std::fs::write(v2.join("memory.max"), "104857600\n").unwrap();
        assert_eq!(limit_from("0::/a/b\n", root.path()), Some(100 << 20));
        std::fs::remove_file(v2.join("memory.max")).unwrap();
        std::fs::remove_file(root.path().join("a/memory.max")).unwrap();
        assert_eq!(limit_from("0::/a/b\n", root.path()), None);
        assert_eq!(limit_from("", root.path()), None);
    }
}
