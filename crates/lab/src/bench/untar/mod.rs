//! `zramd bench untar --tarball FILE`: the seeds' workload. ext4 (mounted with `discard`)
//! on the device; untar the tree (seed 000), then delete `drivers`, `arch`, `fs`, `sound`
//! and `include` in that order, `fstrim` after each (seed 003), for `--cycles` rounds. After
//! every step it prints seed 003's columns (`orig_size compr_size used_size overhead
//! overhead_ratio`), zramd's metadata, the overhead with it (`real_overhead`, `real_ratio`)
//! and — for zramd — the process RSS ([`figures`] defines them); for zramd (through the
//! FUSE export and a loop device; once per `--allocator`, each on a fresh in-process
//! server) and, as root where the kernel offers the algorithm, for a hot-added kernel zram
//! device (zsmalloc). Needs root (loop, mount).
//!
//! `--out DIR` (default: a new directory under the temp dir): `untar.csv` and `untar.json`,
//! one row per (side, allocator, cycle, step) with every figure in bytes and the ratios,
//! and `untar-overhead.png`, the overhead ratio after every step across the cycles, one
//! line per side and allocator ([`plot`]).
//!
//! Seed 004's folding: `--copies N` untars the tarball N times, into `copy1`..`copyN` of
//! the same filesystem (the deletes then apply to every copy); `--fold` folds zramd's
//! device after each untar (a `fold` step: `pages_folded`, the pass's CPU seconds, per GB
//! stored). The kernel's zram cannot fold: it runs the same steps without that one. At the
//! end, `mem_used_total` zramd/kernel after each untar and after each fold.

pub mod figures;
pub mod plot;
pub(crate) mod side;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, bail};
use zram::{Size, ZramConfig};
use zramd::serve::{DeviceSpec, ServeOptions, Server};
use zsmalloc::Allocator;

use crate::kernel::{KernelZram, is_root, unavailable_reason};
use crate::outln;
use figures::{Row, Sample, seed_header};
use side::{Mounted, Ours, Side, Theirs, report, sh};

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
    /// The allocators zramd's device runs on, one run each (a comma-separated list).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "zsmalloc")]
    allocator: Vec<Allocator>,
    /// Where the figures go (CSV, JSON, PNG); default: a new directory under the temp dir.
    #[arg(long)]
    out: Option<PathBuf>,
}

impl Args {
    /// The allocators zramd's side runs on, in order.
    pub fn allocators(&self) -> &[Allocator] {
        &self.allocator
    }
}

/// A side's figures after each step.
type Steps = Vec<Sample>;

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
    let step = "fold";
    let Some(cost) = side.fold()? else {
        outln!(
            "{:16} {cycle:>5} {step:12} (the kernel's zram cannot fold)",
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
    steps.push(report(side, cycle, step, &extra)?);
    Ok(())
}

fn workload(side: &dyn Side, mnt: &Path, args: &Args) -> anyhow::Result<Steps> {
    let mut steps = Steps::new();
    for cycle in 1..=args.cycles.max(1) {
        crate::progress::doing(&format!(
            "{} {} cycle {cycle}",
            side.name(),
            side.allocator()
        ));
        let start = Instant::now();
        let roots = untar(mnt, args)?;
        sh(&mut Command::new("sync"))?;
        side.settle();
        steps.push(report(side, cycle, "untar", "")?);
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
            steps.push(report(side, cycle, &format!("rm {dir}"), "")?);
        }
        for t in &top {
            std::fs::remove_dir_all(t)?;
        }
        for root in roots.iter().filter(|r| r.as_path() != mnt) {
            std::fs::remove_dir_all(root)?;
        }
        sh(&mut Command::new("sync"))?;
        sh(Command::new("fstrim").arg(mnt))?;
        outln!(
            "{:16} {cycle:>5} took {:.1} s",
            format!("{} {}", side.name(), side.allocator()),
            start.elapsed().as_secs_f64()
        );
        crate::progress::tick("");
    }
    Ok(steps)
}

/// `mem_used_total` zramd/kernel after each untar and each fold (the kernel's after the
/// same cycle's untar: it cannot fold).
fn print_ratios(allocator: Allocator, ours: &Steps, theirs: &Steps) {
    let kernel = |cycle: usize| {
        theirs
            .iter()
            .find(|s| s.cycle == cycle && s.step == "untar")
            .map(|s| s.mm[2] as f64)
    };
    for s in ours {
        let note = match s.step.as_str() {
            "fold" => " (the kernel's after the untar)",
            "untar" => "",
            _ => continue,
        };
        if let Some(k) = kernel(s.cycle).filter(|&k| k > 0.0) {
            outln!(
                "mem_used_total zramd ({allocator})/kernel after {} #{}: {:.3}{note}",
                s.step,
                s.cycle,
                s.mm[2] as f64 / k
            );
        }
    }
}

/// Runs the workload on zramd's device storing into `allocator`, served by a fresh
/// in-process server; `None` (with the reason printed) where the device cannot be set up.
fn run_ours(args: &Args, allocator: Allocator, tmp: &Path) -> anyhow::Result<Option<Steps>> {
    let dir = tmp.join(allocator.name());
    std::fs::create_dir_all(dir.join("fuse"))?;
    let mut config = args.device.clone();
    config.pool.allocator = allocator;
    let server = match Server::start(&ServeOptions {
        devices: vec![DeviceSpec {
            name: "zram0".into(),
            size: args.size,
            config,
            ..DeviceSpec::default()
        }],
        control: Some(dir.join("control.sock")),
        fuse: Some(dir.join("fuse")),
        ..ServeOptions::default()
    }) {
        Ok(server) => server,
        Err(e) => {
            outln!("zramd {allocator}: skipped ({e:#})");
            return Ok(None);
        }
    };
    let ours = Ours { server, allocator };
    let steps = {
        let mounted = Mounted::new(&dir.join("fuse/zram0/disk"), true, dir.join("ext4"))?;
        workload(&ours, &mounted.dir, args)
    };
    ours.server.stop();
    steps.map(Some)
}

/// Writes the figures (CSV, JSON, the plot) into `out` and says where.
fn write_figures(out: &Path, rows: &[Row]) -> anyhow::Result<()> {
    figures::write(out, rows)?;
    let png = out.join("untar-overhead.png");
    if !plot::draw(rows, &png, (1280, 720))? {
        println!("plot: no font found (ZRAMD_LAB_FONT, fonts-dejavu-core): drawn without text");
    }
    println!(
        "figures: {} (untar.csv, untar.json, untar-overhead.png)",
        out.display()
    );
    Ok(())
}

/// Runs the workload on every side `args` names (printing each step as it goes) and
/// returns one row per (side, allocator, cycle, step); writes no files.
pub fn measure(args: &Args) -> anyhow::Result<Vec<Row>> {
    if !args.tarball.is_file() {
        bail!("{} is not a file", args.tarball.display());
    }
    if !is_root() {
        bail!("bench untar needs root (losetup, mkfs.ext4, mount)");
    }
    let tmp = std::env::temp_dir().join(format!("zramd-untar-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    outln!("{}", seed_header());
    let mut rows = Vec::new();
    let mut ours = Vec::new();
    // A step per cycle of each side (the kernel's counted even where it is skipped).
    let sides = args.allocator.len() + 1;
    let bar = crate::progress::bar("untar", (sides * args.cycles.max(1)) as u64);
    for &allocator in &args.allocator {
        if let Some(steps) = run_ours(args, allocator, &tmp)? {
            rows.extend(Row::all("zramd", allocator.name(), &steps));
            ours.push((allocator, steps));
        }
    }
    let mut theirs_steps = Steps::new();
    if args.no_kernel {
        outln!("kernel: skipped (--no-kernel)");
    } else if let Some(why) =
        unavailable_reason(args.device.algorithm.name(), args.device.params.level)
    {
        outln!("kernel: skipped ({why})");
    } else {
        let size = args.size.bytes();
        let theirs = Theirs {
            dev: KernelZram::with(args.device.algorithm.name(), args.device.params.level, size)?,
        };
        let mounted = Mounted::new(&theirs.dev.dev_path(), false, tmp.join("ext4-kernel"))?;
        theirs_steps = workload(&theirs, &mounted.dir, args)?;
        rows.extend(Row::all("kernel", &theirs.allocator(), &theirs_steps));
    }
    drop(bar);
    for (allocator, steps) in &ours {
        print_ratios(*allocator, steps, &theirs_steps);
    }
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(rows)
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let out = match &args.out {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("zramd-untar-figures-{}", std::process::id())),
    };
    std::fs::create_dir_all(&out).with_context(|| format!("create {}", out.display()))?;
    let rows = measure(args)?;
    write_figures(&out, &rows)
}
