//! `zramd bench untar --tarball FILE`: the seeds' workload. ext4 (mounted with `discard`)
//! on the device; untar the tree (seed 000), then delete `drivers`, `arch`, `fs`, `sound`
//! and `include` in that order, `fstrim` after each (seed 003), for `--cycles` rounds. After
//! every step it prints the `mm_stat` line, the overhead `(mem_used_total -
//! compr_data_size) / compr_data_size` and — for zramd — the process RSS; for zramd
//! (through the FUSE export and a loop device) and, as root where the kernel offers the
//! algorithm, for a hot-added kernel zram device, side by side. Needs root (loop, mount).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use zram::{Size, ZramConfig};
use zramd::serve::{DeviceSpec, ServeOptions, Server};

use crate::kernel::{KernelZram, is_root, unavailable_reason};

const DELETE_ORDER: [&str; 5] = ["drivers", "arch", "fs", "sound", "include"];

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The tarball to untar (e.g. the Linux source; compressed or not).
    #[arg(long)]
    tarball: PathBuf,
    /// The device's settings, as `zramd serve` takes them (the seeds ran lzo-rle, the
    /// kernel zram's default: `--algorithm lzo-rle`).
    #[command(flatten)]
    device: ZramConfig,
    /// Untar-and-delete rounds.
    #[arg(long, default_value_t = 1)]
    cycles: usize,
    /// Device size.
    #[arg(long, default_value = "4G")]
    size: Size,
    /// Skip the kernel's zram.
    #[arg(long)]
    no_kernel: bool,
}

fn sh(cmd: &mut Command) -> anyhow::Result<()> {
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
struct Mounted {
    dir: PathBuf,
    loopdev: Option<String>,
}

impl Mounted {
    fn new(block: &Path, is_file: bool, dir: PathBuf) -> anyhow::Result<Self> {
        let loopdev = if is_file {
            let out = Command::new("losetup")
                .args(["-f", "--show"])
                .arg(block)
                .output()?;
            if !out.status.success() {
                bail!("losetup: {}", String::from_utf8_lossy(&out.stderr).trim());
            }
            Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
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

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
        if let Some(l) = &self.loopdev {
            let _ = Command::new("losetup").args(["-d", l]).status();
        }
    }
}

/// One side of the comparison.
trait Side {
    fn name(&self) -> &str;
    fn mm_stat(&self) -> anyhow::Result<Vec<u64>>;
    fn rss(&self) -> Option<u64>;
    /// Waits for background work (compaction) to settle after a step.
    fn settle(&self) {}
}

struct Ours {
    server: Server,
}

impl Side for Ours {
    fn name(&self) -> &str {
        "zramd"
    }
    fn mm_stat(&self) -> anyhow::Result<Vec<u64>> {
        let dev = self
            .server
            .registry
            .device("zram0")
            .and_then(|d| d.zram())
            .context("device")?;
        Ok(dev.mm_stat().fields().to_vec())
    }
    fn rss(&self) -> Option<u64> {
        crate::rss::process_rss_bytes()
    }
    fn settle(&self) {
        // Automatic compaction runs in the background: give it a bounded while.
        let Some(dev) = self.server.registry.device("zram0").and_then(|d| d.zram()) else {
            return;
        };
        let start = Instant::now();
        let policy = zram::compact::AutoCompact::default();
        while start.elapsed() < Duration::from_secs(5) && policy.due(dev.pool(), true) {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

struct Theirs {
    dev: KernelZram,
}

impl Side for Theirs {
    fn name(&self) -> &str {
        "kernel"
    }
    fn mm_stat(&self) -> anyhow::Result<Vec<u64>> {
        Ok(self.dev.mm_stat()?)
    }
    fn rss(&self) -> Option<u64> {
        None
    }
}

fn report(side: &dyn Side, step: &str) -> anyhow::Result<()> {
    let mm = side.mm_stat()?;
    let overhead = if mm[1] == 0 {
        0.0
    } else {
        (mm[2] as f64 - mm[1] as f64) / mm[1] as f64
    };
    let line: Vec<String> = mm.iter().take(9).map(|v| format!("{v:10}")).collect();
    let rss = side.rss().map_or_else(
        || "       -".to_owned(),
        |r| format!("{:8.1}", r as f64 / 1048576.0),
    );
    println!(
        "{:6} {:14} {}  overhead {:6.2}%  RSS MiB {rss}",
        side.name(),
        step,
        line.join(""),
        overhead * 100.0
    );
    Ok(())
}

fn workload(side: &dyn Side, mnt: &Path, args: &Args) -> anyhow::Result<()> {
    for cycle in 1..=args.cycles.max(1) {
        sh(Command::new("tar")
            .arg("xf")
            .arg(&args.tarball)
            .arg("-C")
            .arg(mnt))?;
        sh(&mut Command::new("sync"))?;
        side.settle();
        report(side, &format!("untar #{cycle}"))?;
        let top: Vec<PathBuf> = std::fs::read_dir(mnt)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n != "lost+found"))
            .collect();
        for dir in DELETE_ORDER {
            for t in &top {
                let victim = t.join(dir);
                if victim.exists() {
                    std::fs::remove_dir_all(&victim)
                        .with_context(|| format!("rm -rf {}", victim.display()))?;
                }
            }
            sh(&mut Command::new("sync"))?;
            sh(Command::new("fstrim").arg(mnt))?;
            side.settle();
            report(side, &format!("rm {dir}"))?;
        }
        for t in &top {
            std::fs::remove_dir_all(t)?;
        }
        sh(&mut Command::new("sync"))?;
        sh(Command::new("fstrim").arg(mnt))?;
    }
    Ok(())
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    if !args.tarball.is_file() {
        bail!("{} is not a file", args.tarball.display());
    }
    if !is_root() {
        bail!("bench untar needs root (losetup, mkfs.ext4, mount)");
    }
    let tmp = std::env::temp_dir().join(format!("zramd-untar-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    println!(
        "{:6} {:14} {:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "",
        "step",
        "orig",
        "compr",
        "mem_used",
        "limit",
        "used_max",
        "same",
        "compacted",
        "huge",
        "huge_since"
    );
    {
        std::fs::create_dir_all(tmp.join("fuse"))?;
        let server = Server::start(&ServeOptions {
            devices: vec![DeviceSpec {
                name: "zram0".into(),
                size: args.size,
                config: args.device.clone(),
                ..DeviceSpec::default()
            }],
            control: Some(tmp.join("control.sock")),
            fuse: Some(tmp.join("fuse")),
            ..ServeOptions::default()
        })?;
        let ours = Ours { server };
        {
            let mounted = Mounted::new(&tmp.join("fuse/zram0/disk"), true, tmp.join("ext4-zramd"))?;
            workload(&ours, &mounted.dir, args)?;
        }
        ours.server.stop();
    }
    if args.no_kernel {
        println!("kernel: skipped (--no-kernel)");
    } else if let Some(why) = unavailable_reason(args.device.algorithm.name()) {
        println!("kernel: skipped ({why})");
    } else {
        let size = args.size.bytes();
        let theirs = Theirs {
            dev: KernelZram::with(args.device.algorithm.name(), size)?,
        };
        let mounted = Mounted::new(&theirs.dev.dev_path(), false, tmp.join("ext4-kernel"))?;
        workload(&theirs, &mounted.dir, args)?;
    }
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}
