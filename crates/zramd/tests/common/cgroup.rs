//! A memory cgroup of its own for a test's child process, with a memory limit: a child of
//! the cgroup v2 root (with `+memory` enabled in the root's `cgroup.subtree_control` if it
//! was not), or, where memory is a cgroup v1 controller, a child of the test's own memory
//! cgroup. Removed on drop, after killing whatever test process is still in it; `+memory`
//! is disabled again on drop if this enabled it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Which hierarchy the memory controller is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// A memory cgroup made by a test.
#[derive(Debug)]
pub struct Cgroup {
    dir: PathBuf,
    version: Version,
    /// The v2 root's `cgroup.subtree_control` where this enabled `+memory`.
    enabled_memory: Option<PathBuf>,
}

impl Cgroup {
    /// A cgroup for the test `test` (named after it and this process) with memory limited
    /// to `limit` bytes, or `None` after printing `SKIPPED <test>: <why>` where it cannot
    /// be made here.
    pub fn for_test(test: &str, limit: u64) -> Option<Self> {
        Self::create(&format!("zramd-{test}-{}", std::process::id()), limit)
            .inspect_err(|why| eprintln!("SKIPPED {test}: {why}"))
            .ok()
    }

    /// Makes the cgroup `name` with memory limited to `limit` bytes and swap unlimited;
    /// Err says why it cannot be made here (no memory controller, a read-only hierarchy…).
    fn create(name: &str, limit: u64) -> Result<Self, String> {
        let (parent, version) = memory_parent()?;
        let mut enabled_memory = None;
        if version == Version::V2 {
            let control = parent.join("cgroup.subtree_control");
            let enabled = std::fs::read_to_string(&control).map_err(|e| e.to_string())?;
            if !enabled.split_whitespace().any(|c| c == "memory") {
                std::fs::write(&control, "+memory").map_err(|e| {
                    format!("cannot enable the memory controller in {control:?}: {e}")
                })?;
                enabled_memory = Some(control);
            }
        }
        let dir = parent.join(name);
        let made = std::fs::create_dir(&dir);
        // From here on, drop undoes what was done, whatever fails next.
        let cgroup = Self {
            dir,
            version,
            enabled_memory,
        };
        made.map_err(|e| format!("cannot make the cgroup {:?}: {e}", cgroup.dir))?;
        let (max, swap_max) = match version {
            Version::V1 => ("memory.limit_in_bytes", None),
            Version::V2 => ("memory.max", Some("memory.swap.max")),
        };
        cgroup.write(max, &limit.to_string())?;
        // Unlimited is the default; the file is missing where swap is not accounted.
        if let Some(swap_max) = swap_max.filter(|f| cgroup.dir.join(f).exists()) {
            cgroup.write(swap_max, "max")?;
        }
        Ok(cgroup)
    }

    /// The hierarchy it is in.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The file a process writes its id to to move itself in.
    pub fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Processes the cgroup's OOM killer has killed (v2: `memory.events`; v1:
    /// `memory.oom_control`).
    pub fn oom_kills(&self) -> Option<u64> {
        let file = match self.version {
            Version::V2 => "memory.events",
            Version::V1 => "memory.oom_control",
        };
        stat_value(&self.dir.join(file), "oom_kill")
    }

    /// Moves the process `pid` into the cgroup.
    pub fn add(&self, pid: u32) -> Result<(), String> {
        self.write("cgroup.procs", &pid.to_string())
    }

    /// The cgroup's memory in swap now, in bytes, if this kernel accounts it (v2:
    /// `memory.swap.current`; v1: `memory.stat`'s `swap`).
    pub fn swap_bytes(&self) -> Option<u64> {
        match self.version {
            Version::V2 => std::fs::read_to_string(self.dir.join("memory.swap.current"))
                .ok()?
                .trim()
                .parse()
                .ok(),
            Version::V1 => stat_value(&self.dir.join("memory.stat"), "swap"),
        }
    }

    fn write(&self, file: &str, value: &str) -> Result<(), String> {
        let path = self.dir.join(file);
        std::fs::write(&path, value).map_err(|e| format!("write {value:?} to {path:?}: {e}"))
    }

    /// The processes in it.
    fn procs(&self) -> Vec<u32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Only the test's own child can be in it (the test moved it there); it is killed by
        // its guard first, this catches a child that outlived it.
        let start = Instant::now();
        while !self.procs().is_empty() && start.elapsed() < Duration::from_secs(10) {
            for pid in self.procs() {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        while std::fs::remove_dir(&self.dir).is_err() && start.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(100));
        }
        if self.dir.exists() {
            eprintln!("WARNING: the cgroup {:?} could not be removed", self.dir);
        }
        if let Some(control) = &self.enabled_memory {
            let _ = std::fs::write(control, "-memory");
        }
    }
}

/// One `name value` line of a `memory.stat`-like file.
pub fn stat_value(file: &Path, name: &str) -> Option<u64> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Where the test's memory cgroup goes: the cgroup v2 root where memory is a v2
/// controller, else the test's own cgroup in the v1 memory hierarchy.
fn memory_parent() -> Result<(PathBuf, Version), String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
    let mounts: Vec<(PathBuf, &str, &str)> = mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let point = PathBuf::from(left.split(' ').nth(4)?);
            let mut right = right.split(' ');
            let fstype = right.next()?;
            let options = right.nth(1)?;
            Some((point, fstype, options))
        })
        .collect();
    for (point, fstype, _) in &mounts {
        let controllers = std::fs::read_to_string(point.join("cgroup.controllers"));
        if *fstype == "cgroup2"
            && controllers.is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
        {
            return Ok((point.clone(), Version::V2));
        }
    }
    let v1 = mounts.iter().find(|(_, fstype, options)| {
        *fstype == "cgroup" && options.split(',').any(|o| o == "memory")
    });
    if let Some((point, _, _)) = v1 {
        let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let path = own
            .lines()
            .find_map(|l| {
                let mut f = l.splitn(3, ':');
                let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
                controllers
                    .split(',')
                    .any(|c| c == "memory")
                    .then_some(path)
            })
            .ok_or("no memory line in /proc/self/cgroup")?;
        return Ok((point.join(path.trim_start_matches('/')), Version::V1));
    }
    Err("no cgroup memory controller is mounted (cgroup v2 with memory, or v1 memory)".into())
}
