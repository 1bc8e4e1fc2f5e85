//! `zramd-lab report` (which `zramd lab` runs): every scenario the lab has, one per seed,
//! and one report of them — `DIR/report.md` (per seed, its published tables in its own
//! columns beside zramd's and the kernel's figures measured now, and one line per table
//! saying where zramd stands), `DIR/report.json`, `DIR/*.csv` and PNG plots.
//!
//! A scenario is a function `fn(&Ctx) -> Result<Section>` in a module of its own
//! ([`section`] has the shape), listed in [`SCENARIOS`]; adding one is a module and a line.
//! `--quick` makes a small tree up (`corpus`) when no `--tarball` is given and keeps
//! repetitions low: a few minutes on two cores.

mod corpus;
mod plot;
mod published;
pub mod section;
mod seed000;
mod seed000_runs;
mod seed001;
mod seed002;
mod seed003;
mod seed004;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context as _, bail};

use section::{Ctx, Section};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where the report goes (created; default: a new directory under the temp dir).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Small inputs and few repetitions: a few minutes in all.
    #[arg(long)]
    quick: bool,
    /// The tarball the untar workloads unpack (the seeds': the Linux source tree); default:
    /// a tree made up for the purpose (64 MiB with --quick, 256 MiB without).
    #[arg(long)]
    tarball: Option<PathBuf>,
    /// The devices' compression algorithm (the seeds': lzo-rle).
    #[arg(long, default_value = "lzo-rle")]
    algorithm: String,
    /// Untar runs per chain size for seed 000 (default: 1 with --quick, 3 without).
    #[arg(long)]
    runs: Option<usize>,
    /// Untar-and-delete cycles for seed 003 (default: 2 with --quick, 10 without, as the
    /// seed).
    #[arg(long)]
    cycles: Option<usize>,
    /// Leave the kernel's zram out.
    #[arg(long)]
    no_kernel: bool,
    /// Only these seeds (comma-separated, e.g. `000,003`); default: all.
    #[arg(long, value_delimiter = ',')]
    seed: Vec<String>,
}

/// A scenario: the seed it reproduces and the function that runs it.
#[derive(Debug)]
pub struct Scenario {
    /// The seed's number, as its file names it.
    pub seed: &'static str,
    /// Runs the scenario.
    pub run: fn(&Ctx) -> anyhow::Result<Section>,
}

/// Every scenario, in the report's order.
pub const SCENARIOS: [Scenario; 5] = [
    Scenario {
        seed: "000",
        run: seed000_section,
    },
    Scenario {
        seed: "001",
        run: seed001::run,
    },
    Scenario {
        seed: "002",
        run: seed002::run,
    },
    Scenario {
        seed: "003",
        run: seed003::run,
    },
    Scenario {
        seed: "004",
        run: seed004::run,
    },
];

fn seed000_section(ctx: &Ctx) -> anyhow::Result<Section> {
    let mut section = Section::new("000", "zspage chain size (runtime zspage order)");
    seed000::class_tables(ctx, &mut section)?;
    seed000_runs::mm_stat(ctx, &mut section)?;
    Ok(section)
}

/// The report's head: what ran, on what.
fn head(ctx: &Ctx, took: f64) -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    format!(
        "# zramd lab report\n\nMode: {}. Input (`TAR` in the commands): {}. Algorithm: {}. Machine: {cpus} CPUs, Linux \
         {}. Took {took:.0} s.\n\nEach section below takes one seed: its published tables in \
         its own columns, beside zramd's and the kernel's figures measured now, and one line \
         per table saying where zramd stands.\n\n",
        if ctx.quick { "quick" } else { "full" },
        ctx.input,
        ctx.algorithm,
        kernel.trim(),
    )
}

/// The verdicts of every table, one line each.
fn summary(sections: &[Section]) -> String {
    let mut md = String::from("## Where zramd stands\n\n");
    for s in sections {
        for t in &s.tables {
            md.push_str(&format!("- seed {}, {}: {}\n", s.seed, t.title, t.verdict));
        }
        if s.tables.is_empty() {
            md.push_str(&format!("- seed {}: {}\n", s.seed, s.title));
        }
    }
    md.push('\n');
    md
}

/// Runs every scenario and writes the report.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let start = Instant::now();
    let chosen: Vec<&Scenario> = SCENARIOS
        .iter()
        .filter(|s| args.seed.is_empty() || args.seed.iter().any(|w| w == s.seed))
        .collect();
    if chosen.is_empty() {
        bail!("no seed among {:?}: the seeds are 000 to 004", args.seed);
    }
    let out = match &args.out {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("zramd-lab-{}", std::process::id())),
    };
    std::fs::create_dir_all(&out).with_context(|| format!("create {}", out.display()))?;
    let scratch = tempfile::tempdir()?;
    let (tarball, input) = match &args.tarball {
        Some(t) if t.is_file() => (t.clone(), format!("`{}`", t.display())),
        Some(t) => bail!("{} is not a file", t.display()),
        None => {
            let mib: u64 = if args.quick { 64 } else { 256 };
            crate::progress::print(|| eprintln!("lab: making a {mib} MiB source tree"));
            let tar = corpus::make(scratch.path(), mib << 20)?;
            (
                tar,
                format!("a made-up source tree of {mib} MiB (no --tarball)"),
            )
        }
    };
    let ctx = Ctx {
        out: out.clone(),
        quick: args.quick,
        tarball,
        input,
        algorithm: args.algorithm.clone(),
        runs: args.runs.unwrap_or(if args.quick { 1 } else { 3 }),
        cycles: args.cycles.unwrap_or(if args.quick { 2 } else { 10 }),
        no_kernel: args.no_kernel,
    };
    let mut sections = Vec::new();
    let mut failed = Vec::new();
    for (i, s) in chosen.iter().enumerate() {
        crate::progress::print(|| {
            eprintln!("lab: [{}/{}] seed {}", i + 1, chosen.len(), s.seed);
        });
        let t = Instant::now();
        match (s.run)(&ctx) {
            Ok(section) => sections.push(section),
            Err(e) => {
                let mut section = Section::new(s.seed, "FAILED");
                section.notes.push(format!("FAILED: {e:#}"));
                eprintln!("lab: seed {} failed: {e:#}", s.seed);
                failed.push(s.seed);
                sections.push(section);
            }
        }
        eprintln!(
            "lab: seed {} took {:.0} s",
            s.seed,
            t.elapsed().as_secs_f64()
        );
    }
    let mut md = head(&ctx, start.elapsed().as_secs_f64());
    md.push_str(&summary(&sections));
    for s in &sections {
        md.push_str(&s.markdown());
    }
    section::write(&out, "report.md", &md)?;
    let json = serde_json::json!({ "context": ctx, "sections": sections });
    section::write(&out, "report.json", &serde_json::to_string_pretty(&json)?)?;
    println!("report: {}", out.join("report.md").display());
    if !failed.is_empty() {
        bail!("seed(s) {} failed (see the report)", failed.join(", "));
    }
    Ok(())
}
