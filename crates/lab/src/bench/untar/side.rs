//! The two sides of the untar bench and what runs on them: an ext4 filesystem mounted on a
//! block device, zramd's device (served in-process through FUSE) and the kernel's, and the
//! report of a step (seed 003's columns).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use zramd::serve::Server;

use zsmalloc::Allocator;

use super::figures::{Row, Sample, seed_line};
use crate::kernel::KernelZram;
use crate::outln;

/// Runs `cmd`; its stderr is the error when it fails.
pub fn sh(cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd.output().with_context(|| format!("run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// An ext4 filesystem on a block device, mounted at a temporary directory; unmounted (and
/// its loop device detached) when dropped.
pub struct Mounted {
    /// Where it is mounted.
    pub dir: PathBuf,
    loopdev: Option<String>,
}

impl Mounted {
    /// Makes ext4 on `block` (through a loop device when `is_file`, see [`attach_loop`]) and
    /// mounts it on `dir` with `discard`.
    pub fn new(block: &Path, is_file: bool, dir: PathBuf) -> anyhow::Result<Self> {
        let loopdev = if is_file {
            Some(attach_loop(block)?)
        } else {
            None
        };
        let dev = loopdev
            .clone()
            .unwrap_or_else(|| block.display().to_string());
        let m = Self { dir, loopdev };
        std::fs::create_dir_all(&m.dir)?;
        sh(Command::new("mkfs.ext4").args(["-q", "-F", &dev]))?;
        sh(Command::new("mount")
            .args(["-o", "discard", &dev])
            .arg(&m.dir))?;
        Ok(m)
    }
}

/// Attaches a loop device to `file` with direct I/O (`losetup --direct-io=on`), as the
/// README recommends for zramd's FUSE `disk`: with the kernel's asynchronous FUSE direct
/// I/O the loop device keeps several requests in flight, where buffered it waits for each
/// in turn (docs/benchmarks.md, issue 17 part 3). Where the file refuses direct I/O, a
/// plain loop device. Returns its path.
pub fn attach_loop(file: &Path) -> anyhow::Result<String> {
    let attach = |direct: bool| {
        let mut cmd = Command::new("losetup");
        if direct {
            cmd.arg("--direct-io=on");
        }
        cmd.args(["-f", "--show"]).arg(file).output()
    };
    let mut out = attach(true)?;
    if !out.status.success() {
        out = attach(false)?;
    }
    if !out.status.success() {
        bail!("losetup: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
        if let Some(l) = &self.loopdev {
            let _ = Command::new("losetup").args(["-d", l]).status();
        }
    }
}

/// What a fold pass did and cost.
#[derive(Debug, Clone, Copy)]
pub struct FoldCost {
    /// CPU seconds the process used during the pass (all its threads).
    pub cpu_s: f64,
    /// Wall seconds of the pass.
    pub wall_s: f64,
    /// Bytes stored when it started (`orig_data_size`).
    pub stored: u64,
}

/// One side of the comparison.
pub trait Side {
    /// `zramd` or `kernel`.
    fn name(&self) -> &str;
    /// The allocator its device stores into.
    fn allocator(&self) -> String;
    fn mm_stat(&self) -> anyhow::Result<Vec<u64>>;
    fn rss(&self) -> Option<u64>;
    /// Waits for background work (compaction) to settle after a step.
    fn settle(&self) {}
    /// Folds identical objects (seed 004); `None` where the side cannot.
    fn fold(&self) -> anyhow::Result<Option<FoldCost>> {
        Ok(None)
    }
}

/// zramd's device, served in-process.
pub struct Ours {
    pub server: Server,
    /// The allocator its device was set up with.
    pub allocator: Allocator,
}

impl Ours {
    /// The device the server serves.
    pub fn device(&self) -> anyhow::Result<std::sync::Arc<zram::Zram>> {
        self.server
            .registry
            .device("zram0")
            .and_then(|d| d.zram())
            .context("device")
    }
}

impl Side for Ours {
    fn name(&self) -> &str {
        "zramd"
    }
    fn allocator(&self) -> String {
        self.allocator.to_string()
    }
    fn mm_stat(&self) -> anyhow::Result<Vec<u64>> {
        Ok(self.device()?.mm_stat().fields().to_vec())
    }
    fn rss(&self) -> Option<u64> {
        crate::rss::process_rss_bytes()
    }
    fn settle(&self) {
        // Automatic compaction runs in the background: give it a bounded while.
        let Ok(dev) = self.device() else {
            return;
        };
        let start = Instant::now();
        let policy = zram::compact::AutoCompact::default();
        while start.elapsed() < Duration::from_secs(5) && policy.due(dev.pool(), true) {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    fn fold(&self) -> anyhow::Result<Option<FoldCost>> {
        let dev = self.device()?;
        let stored = dev.mm_stat().orig_data_size;
        let cpu = || crate::sys::process_cpu_seconds().context("getrusage");
        let cpu0 = cpu()?;
        let start = Instant::now();
        dev.fold()?;
        let wall_s = start.elapsed().as_secs_f64();
        Ok(Some(FoldCost {
            cpu_s: cpu()? - cpu0,
            wall_s,
            stored,
        }))
    }
}

/// A kernel zram device this process hot-added.
pub struct Theirs {
    pub dev: KernelZram,
}

impl Side for Theirs {
    fn name(&self) -> &str {
        "kernel"
    }
    fn allocator(&self) -> String {
        // The kernel's zram stores into zsmalloc.
        Allocator::Zsmalloc.to_string()
    }
    fn mm_stat(&self) -> anyhow::Result<Vec<u64>> {
        Ok(self.dev.mm_stat()?)
    }
    fn rss(&self) -> Option<u64> {
        None
    }
}

/// Takes the side's figures after a step of cycle `cycle` and prints them as seed 003's
/// columns (see [`seed_line`]), then `extra` on a line of its own where not empty.
pub fn report(side: &dyn Side, cycle: usize, step: &str, extra: &str) -> anyhow::Result<Sample> {
    let sample = Sample {
        cycle,
        step: step.to_owned(),
        mm: side.mm_stat()?,
        rss: side.rss(),
    };
    outln!(
        "{}",
        seed_line(&Row::new(side.name(), &side.allocator(), &sample, 0, 1))
    );
    if !extra.is_empty() {
        outln!("{:16} {:>5} {step:12} {}", "", "", extra.trim());
    }
    Ok(sample)
}
