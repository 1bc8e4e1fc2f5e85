//! `zramd bench locking`: seed 001's experiment. The seed consolidated zsmalloc's pool and
//! class locks into one pool lock and measured fs_mark and a kernel build on ext4 over zram,
//! before and after. Here the same two workloads run on ext4 over a zramd device in each
//! locking mode (`--locking pool,class,sharded`: one lock for the pool, the kernel's
//! per-class locks, zramd's class shards) and over the kernel's zram, with the seed's
//! figures over `--runs` runs: mean, median and standard deviation.
//!
//! - fs_mark: `fs_mark -d DIR -s SIZE -n FILES -t THREADS -k` (the seed: `-s 100000 -n 2500
//!   -t 32`; the default scales `-n` to 40 so that a run writes 128 MB), the `fs_mark`
//!   program where it is installed (Debian's `fsmark`), else the lab's equivalent; each
//!   run into a new directory, deleted, synced and trimmed after.
//! - the build: a Debian source package (`--package`, default `lua5.4`) fetched with
//!   `apt-get source` through a private deb-src copy of the system's apt sources (or the
//!   tree `--source`), copied onto the filesystem before each run, then `make -jN TARGET`
//!   and a sync of the filesystem timed (real, user, sys, from bash's `time`).
//!
//! Runs alternate between the configurations (run 1 on each, then run 2, …) so that the
//! machine's load falls on all alike. `--quick`: one tiny fs_mark run per configuration,
//! no build. Needs root (loop devices, mount) and FUSE. The figures: [`LockingReport`]
//! (`markdown()`, `csv()`), printed, and written to `--out` as `locking.md`, `locking.csv`
//! and `locking.json`.

mod report;
mod sides;
mod workload;

use std::path::PathBuf;

use anyhow::bail;
use zram::{Algorithm, Locking, Size};

pub use report::{BuildTime, ConfigResult, LockingReport, Summary};
use sides::Sides;
use workload::{Build, FsMark, fetch_source};

use crate::kernel::is_root;
use crate::outln;

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The locking modes zramd's devices run, one device each.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "pool,class,sharded"
    )]
    pub locking: Vec<Locking>,
    /// Runs of each workload on each configuration (the seed: 5).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// fs_mark threads (`-t`; the seed: 32).
    #[arg(long, default_value_t = 32)]
    pub threads: usize,
    /// fs_mark files per thread (`-n`; the seed: 2500).
    #[arg(long, default_value_t = 40)]
    pub files: usize,
    /// fs_mark bytes per file (`-s`; the seed: 100000).
    #[arg(long, default_value_t = 100_000)]
    pub file_size: usize,
    /// Use the lab's fs_mark equivalent even where `fs_mark` is installed.
    #[arg(long)]
    pub builtin_fs_mark: bool,
    /// The Debian source package to build.
    #[arg(long, default_value = "lua5.4")]
    pub package: String,
    /// A source tree to build instead of fetching `--package`.
    #[arg(long)]
    pub source: Option<PathBuf>,
    /// The make target (lua5.4's upstream Makefile: `linux`; empty: the default).
    #[arg(long, default_value = "linux")]
    pub make_target: String,
    /// `make -jN` (default: the CPUs).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Skip the build.
    #[arg(long)]
    pub no_build: bool,
    /// The compression algorithm of every device (the kernel zram's default, as the seed).
    #[arg(long, default_value = "lzo-rle")]
    pub algorithm: Algorithm,
    /// Each device's size.
    #[arg(long, default_value = "1G")]
    pub size: Size,
    /// Skip the kernel's zram.
    #[arg(long)]
    pub no_kernel: bool,
    /// One tiny fs_mark run per configuration (4 threads × 16 files of 16 KiB on 256 MiB
    /// devices), no build: a smoke run.
    #[arg(long)]
    pub quick: bool,
    /// Where locking.md, locking.csv and locking.json go (default: a new directory under
    /// the temp dir).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

impl Default for Args {
    /// The command line's defaults.
    fn default() -> Self {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        <Cli as clap::Parser>::try_parse_from(["locking"])
            .map(|c| c.args)
            .unwrap_or_else(|e| unreachable!("the defaults parse: {e}"))
    }
}

impl Args {
    /// These settings, made tiny by `--quick`.
    fn effective(&self) -> Self {
        if !self.quick {
            return self.clone();
        }
        Self {
            runs: 1,
            threads: 4,
            files: 16,
            file_size: 16 << 10,
            no_build: true,
            size: Size(256 << 20),
            ..self.clone()
        }
    }
}

/// Is `program` on the PATH?
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

/// Runs the experiment and returns its figures (printing progress, not the figures).
pub fn run(args: &Args) -> anyhow::Result<LockingReport> {
    let args = args.effective();
    if args.runs == 0 || args.threads == 0 || args.files == 0 || args.file_size == 0 {
        bail!("--runs, --threads, --files and --file-size must be at least 1");
    }
    if args.locking.is_empty() {
        bail!("--locking names no mode");
    }
    if !is_root() {
        bail!("bench locking needs root (losetup, mkfs.ext4, mount)");
    }
    let tmp = tempfile::Builder::new()
        .prefix("zramd-locking-")
        .tempdir()?;
    let mut notes = Vec::new();
    let builtin = args.builtin_fs_mark || !on_path("fs_mark");
    if builtin && !args.builtin_fs_mark {
        notes.push("fs_mark is not installed (Debian: fsmark): the lab's equivalent ran".into());
    }
    let fs_mark = FsMark {
        threads: args.threads,
        files: args.files,
        size: args.file_size,
        builtin,
    };
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let build = if args.no_build {
        None
    } else {
        let (tree, what) = match &args.source {
            Some(tree) => (tree.clone(), tree.display().to_string()),
            None => {
                crate::progress::doing(&format!("apt-get source {}", args.package));
                let (tree, tarball) = fetch_source(&args.package, &tmp.path().join("apt"))?;
                (tree, format!("{tarball} (apt-get source {})", args.package))
            }
        };
        let b = Build {
            tree,
            jobs,
            target: args.make_target.clone(),
        };
        Some((b.describe(&what), b))
    };
    let sides = Sides::new(
        &args.locking,
        args.algorithm,
        args.size,
        args.no_kernel,
        tmp.path(),
    )?;
    if let Some(why) = &sides.kernel_skipped {
        notes.push(format!("kernel zram: skipped ({why})"));
    }
    let mut configs: Vec<ConfigResult> = sides
        .sides
        .iter()
        .map(|s| ConfigResult {
            name: s.name.clone(),
            locking: s.locking,
            files_per_s: Vec::new(),
            builds: Vec::new(),
        })
        .collect();
    let workloads = 1 + usize::from(build.is_some());
    let bar = crate::progress::bar(
        "locking",
        (args.runs * sides.sides.len() * workloads) as u64,
    );
    for run in 1..=args.runs {
        for (side, config) in sides.sides.iter().zip(&mut configs) {
            crate::progress::doing(&format!("fs_mark run {run} on {}", side.name));
            let rate = fs_mark.run(&side.mounted.dir, run)?;
            side.compact()?;
            outln!("fs_mark  {:14} run {run}: {rate:.1} files/s", side.name);
            config.files_per_s.push(rate);
            crate::progress::tick("");
        }
    }
    if let Some((_, b)) = &build {
        for run in 1..=args.runs {
            for (side, config) in sides.sides.iter().zip(&mut configs) {
                crate::progress::doing(&format!("build run {run} on {}", side.name));
                let t = b.run(&side.mounted.dir, run)?;
                side.compact()?;
                outln!(
                    "build    {:14} run {run}: real {:.2} s, user {:.2} s, sys {:.2} s",
                    side.name,
                    t.real,
                    t.user,
                    t.sys
                );
                config.builds.push(t);
                crate::progress::tick("");
            }
        }
    }
    drop(bar);
    drop(sides);
    notes.push(format!(
        "{} CPUs, load average before the end: {}",
        std::thread::available_parallelism().map_or(1, usize::from),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    ));
    Ok(LockingReport {
        fs_mark: fs_mark.describe(),
        build: build.map(|(what, _)| what),
        configs,
        notes,
    })
}

/// `zramd bench locking`: runs, prints the Markdown report and writes the files.
pub fn main(args: &Args) -> anyhow::Result<()> {
    let report = run(args)?;
    let out = match &args.out {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("zramd-locking-{}", std::process::id())),
    };
    std::fs::create_dir_all(&out)?;
    std::fs::write(out.join("locking.md"), report.markdown())?;
    std::fs::write(out.join("locking.csv"), report.csv())?;
    std::fs::write(
        out.join("locking.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    println!("{}", report.markdown());
    for note in &report.notes {
        println!("note: {note}");
    }
    println!(
        "figures: {} (locking.md, locking.csv, locking.json)",
        out.display()
    );
    Ok(())
}
