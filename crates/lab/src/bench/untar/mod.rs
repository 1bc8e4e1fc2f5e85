//! `zramd bench untar --tarball FILE`: the seeds' workload. ext4 (mounted with `discard`)
//! on the device; untar the tree (seed 000), then delete `drivers`, `arch`, `fs`, `sound`
//! and `include` in that order, `fstrim` after each (seed 003), for `--cycles` rounds. After
//! every step it prints the `mm_stat` line (the kernel's nine fields and seed 004's
//! `pages_folded`), the overhead `(mem_used_total - compr_data_size) / compr_data_size` and
//! — for zramd — the process RSS; for zramd (through the FUSE export and a loop device) and,
//! as root where the kernel offers the algorithm, for a hot-added kernel zram device, side
//! by side. Needs root (loop, mount).
//!
//! Seed 004's folding: `--copies N` untars the tarball N times, into `copy1`..`copyN` of
//! the same filesystem (the deletes then apply to every copy); `--fold` folds zramd's
//! device after each untar (a `fold` step: `pages_folded`, the pass's CPU seconds, per GB
//! stored). The kernel's zram cannot fold: it runs the same steps without that one. At the
//! end, `mem_used_total` zramd/kernel after each untar and after each fold.

mod side;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};
use zram::{Size, ZramConfig};
use zramd::serve::{DeviceSpec, ServeOptions, Server};

use crate::kernel::{KernelZram, is_root, unavailable_reason};
use side::{Mounted, Ours, Side, Theirs, header, report, sh};

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
    /// Untar the tarball this many times, into copy1..copyN of the one filesystem (1: into
    /// its root, as the seeds did).
    #[arg(long, default_value_t = 1)]
    copies: usize,
    /// Fold zramd's device after each untar (seed 004), and report what it freed and cost.
    #[arg(long)]
    fold: bool,
    /// Device size.
    #[arg(long, default_value = "4G")]
    size: Size,
    /// Skip the kernel's zram.
    #[arg(long)]
    no_kernel: bool,
}

/// The `mm_stat` fields after each step, by step name.
type Steps = Vec<(String, Vec<u64>)>;

/// Untars the tarball once into `mnt` (`copies` 1), or into `mnt/copy1..copyN`; returns
/// the directories the tarball's tree went into.
fn untar(mnt: &Path, args: &Args) -> anyhow::Result<Vec<PathBuf>> {
    let roots: Vec<PathBuf> = match args.copies {
        0 | 1 => vec![mnt.to_owned()],
        n => (1..=n).map(|i| mnt.join(format!("copy{i}"))).collect(),
    };
    for root in &roots {
        std::fs::create_dir_all(root)?;
        sh(Command::new("tar")
            .arg("xf")
            .arg(&args.tarball)
            .arg("-C")
            .arg(root))?;
    }
    Ok(roots)
}

/// Folds (where the side can) and reports the step.
fn fold_step(side: &dyn Side, cycle: usize, steps: &mut Steps) -> anyhow::Result<()> {
    let step = format!("fold #{cycle}");
    let Some(cost) = side.fold()? else {
        println!(
            "{:6} {step:14} (the kernel's zram cannot fold)",
            side.name()
        );
        return Ok(());
    };
    side.settle();
    let gb = cost.stored as f64 / 1e9;
    let per_gb = if gb > 0.0 { cost.cpu_s / gb } else { 0.0 };
    let extra = format!(
        "  fold CPU {:.3} s ({:.3} s wall), {per_gb:.3} CPU s/GB stored",
        cost.cpu_s, cost.wall_s
    );
    steps.push((step.clone(), report(side, &step, &extra)?));
    Ok(())
}

fn workload(side: &dyn Side, mnt: &Path, args: &Args) -> anyhow::Result<Steps> {
    let mut steps = Steps::new();
    for cycle in 1..=args.cycles.max(1) {
        let roots = untar(mnt, args)?;
        sh(&mut Command::new("sync"))?;
        side.settle();
        let step = format!("untar #{cycle}");
        steps.push((step.clone(), report(side, &step, "")?));
        if args.fold {
            fold_step(side, cycle, &mut steps)?;
        }
        let mut top: Vec<PathBuf> = Vec::new();
        for root in &roots {
            top.extend(
                std::fs::read_dir(root)?
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n != "lost+found")),
            );
        }
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
            steps.push((format!("rm {dir}"), report(side, &format!("rm {dir}"), "")?));
        }
        for t in &top {
            std::fs::remove_dir_all(t)?;
        }
        for root in roots.iter().filter(|r| r.as_path() != mnt) {
            std::fs::remove_dir_all(root)?;
        }
        sh(&mut Command::new("sync"))?;
        sh(Command::new("fstrim").arg(mnt))?;
    }
    Ok(steps)
}

/// `mem_used_total` zramd/kernel after each untar and each fold (the kernel's after the
/// same cycle's untar: it cannot fold).
fn print_ratios(ours: &Steps, theirs: &Steps) {
    let kernel = |step: &str| {
        theirs
            .iter()
            .find(|(s, _)| s == step)
            .map(|(_, mm)| mm[2] as f64)
    };
    for (step, mm) in ours {
        let (against, note) = match step.strip_prefix("fold ") {
            Some(cycle) => (format!("untar {cycle}"), " (the kernel's after the untar)"),
            None if step.starts_with("untar ") => (step.clone(), ""),
            None => continue,
        };
        if let Some(k) = kernel(&against).filter(|&k| k > 0.0) {
            println!(
                "mem_used_total zramd/kernel after {step}: {:.3}{note}",
                mm[2] as f64 / k
            );
        }
    }
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
    println!("{}", header());
    let ours_steps = {
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
        let steps = {
            let mounted = Mounted::new(&tmp.join("fuse/zram0/disk"), true, tmp.join("ext4-zramd"))?;
            workload(&ours, &mounted.dir, args)?
        };
        ours.server.stop();
        steps
    };
    let mut theirs_steps = Steps::new();
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
        theirs_steps = workload(&theirs, &mounted.dir, args)?;
    }
    print_ratios(&ours_steps, &theirs_steps);
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}
