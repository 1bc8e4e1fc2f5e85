//! The shape every scenario of the report shares: what it runs on ([`Ctx`]), what it hands
//! back ([`Section`]: tables in the seed's own columns beside zramd's and the kernel's, one
//! verdict line per table, CSV files, JSON, plots), and small helpers to build them.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// What every scenario runs on.
#[derive(Debug, Clone, Serialize)]
pub struct Ctx {
    /// Where the report, CSV, JSON and PNG files go.
    pub out: PathBuf,
    /// Small inputs and few repetitions (a few minutes in all).
    pub quick: bool,
    /// The tarball the untar workloads unpack.
    pub tarball: PathBuf,
    /// What the tarball is, in words (for the report's head).
    pub input: String,
    /// The compression algorithm of every device (the seeds': lzo-rle).
    pub algorithm: String,
    /// Runs per chain size of seed 000's series.
    pub runs: usize,
    /// Untar-and-delete cycles of seed 003's repeated workload.
    pub cycles: usize,
    /// Leave the kernel's zram out.
    pub no_kernel: bool,
}

impl Ctx {
    /// `bench untar`'s arguments for the tarball and the algorithm (with `--quick`, a 1 GiB
    /// device: its slot table, in the metadata, is sized by the device), then `more`.
    pub fn untar_argv(&self, more: &[&str]) -> Vec<String> {
        let mut argv: Vec<String> = vec![
            "--tarball".into(),
            self.tarball.display().to_string(),
            "--algorithm".into(),
            self.algorithm.clone(),
        ];
        if self.quick {
            argv.extend(["--size".into(), "1G".into()]);
        }
        if self.no_kernel {
            argv.push("--no-kernel".into());
        }
        argv.extend(more.iter().map(|s| (*s).to_owned()));
        argv
    }
}

/// One published table of a seed, reproduced.
#[derive(Debug, Clone, Serialize)]
pub struct Table {
    /// What the table shows.
    pub title: String,
    /// The seed's figures in its own columns, then zramd's and the kernel's measured now.
    pub markdown: String,
    /// One line: where zramd stands.
    pub verdict: String,
}

/// A PNG the scenario drew into the report's directory.
#[derive(Debug, Clone, Serialize)]
pub struct Plot {
    /// File name, relative to the report's directory.
    pub file: String,
    /// What it shows.
    pub title: String,
}

/// What a scenario hands back.
#[derive(Debug, Clone, Serialize)]
pub struct Section {
    /// The seed, as its file names it (`000`).
    pub seed: &'static str,
    /// What the seed measured.
    pub title: String,
    /// The commands that give the same figures alone.
    pub commands: Vec<String>,
    /// The seed's tables, reproduced.
    pub tables: Vec<Table>,
    /// CSV files written into the report's directory (names).
    pub csv: Vec<String>,
    /// Every figure, for `report.json`.
    pub json: serde_json::Value,
    /// The plots.
    pub plots: Vec<Plot>,
    /// Parts left out here, with why (printed as `SKIPPED:` lines too).
    pub skipped: Vec<String>,
    /// Lines of explanation under the title.
    pub notes: Vec<String>,
}

impl Section {
    /// An empty section of `seed` titled `title`.
    pub fn new(seed: &'static str, title: &str) -> Self {
        Self {
            seed,
            title: title.to_owned(),
            commands: Vec::new(),
            tables: Vec::new(),
            csv: Vec::new(),
            json: serde_json::Value::Null,
            plots: Vec::new(),
            skipped: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Notes a part left out, and says so on stderr.
    pub fn skip(&mut self, why: String) {
        crate::progress::print(|| eprintln!("SKIPPED: seed {}: {why}", self.seed));
        self.skipped.push(why);
    }

    /// Writes `contents` as `ctx.out/name` and lists it.
    pub fn write_csv(&mut self, ctx: &Ctx, name: &str, contents: &str) -> anyhow::Result<()> {
        write(&ctx.out, name, contents)?;
        self.csv.push(name.to_owned());
        Ok(())
    }

    /// The section in Markdown.
    pub fn markdown(&self) -> String {
        let mut md = format!("## Seed {}: {}\n\n", self.seed, self.title);
        for n in &self.notes {
            md.push_str(n);
            md.push_str("\n\n");
        }
        if !self.commands.is_empty() {
            md.push_str("Measured with (each also runs alone):\n\n");
            for c in &self.commands {
                md.push_str(&format!("    {c}\n"));
            }
            md.push('\n');
        }
        for s in &self.skipped {
            md.push_str(&format!("SKIPPED: {s}\n\n"));
        }
        for t in &self.tables {
            md.push_str(&format!("### {}\n\n{}\n", t.title, t.markdown));
            md.push_str(&format!("**Where zramd stands:** {}\n\n", t.verdict));
        }
        for p in &self.plots {
            md.push_str(&format!("![{}]({})\n\n", p.title, p.file));
        }
        if !self.csv.is_empty() {
            md.push_str(&format!("Figures: {}.\n\n", self.csv.join(", ")));
        }
        md
    }
}

/// Writes `contents` as `dir/name`.
pub fn write(dir: &Path, name: &str, contents: &str) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let path = dir.join(name);
    std::fs::write(&path, contents).with_context(|| format!("write {}", path.display()))
}

/// A Markdown table of `header` and `rows`.
pub fn md_table<S: AsRef<str>>(header: &[&str], rows: &[Vec<S>]) -> String {
    let mut md = format!("| {} |\n", header.join(" | "));
    md.push_str(&format!("|{}\n", "---|".repeat(header.len())));
    for r in rows {
        let cells: Vec<&str> = r.iter().map(AsRef::as_ref).collect();
        md.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    md
}

/// A fenced block of plain text titled `what` (the seed's own printout, or ours in it).
pub fn block(what: &str, text: &str) -> String {
    format!("{what}:\n\n```\n{}\n```\n\n", text.trim_end())
}

/// A CSV of `header` and `rows` (a comma inside a cell becomes a semicolon).
pub fn csv<S: AsRef<str>>(header: &[&str], rows: &[Vec<S>]) -> String {
    let mut out = format!("{}\n", header.join(","));
    for r in rows {
        let cells: Vec<String> = r.iter().map(|c| c.as_ref().replace(',', ";")).collect();
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

/// Parses `argv` as a bench's arguments (`A`), exactly as `zramd bench …` would.
pub fn bench_args<A: clap::Args>(argv: &[String]) -> anyhow::Result<A> {
    use clap::Parser as _;
    #[derive(clap::Parser)]
    #[command(no_binary_name = true)]
    struct Parse<A: clap::Args> {
        #[command(flatten)]
        args: A,
    }
    Ok(Parse::<A>::try_parse_from(argv)?.args)
}

/// `zramd bench BENCH ARGS…` with `argv`, for the report's command lines; the input tarball
/// shows as `TAR` (the report's head says what it is).
pub fn command(ctx: &Ctx, bench: &str, argv: &[String]) -> String {
    let tar = ctx.tarball.display().to_string();
    let mut line = format!("zramd bench {bench}");
    for a in argv {
        line.push(' ');
        line.push_str(if *a == tar { "TAR" } else { a });
    }
    line
}

/// Percent change from `a` to `b`.
pub fn change(a: f64, b: f64) -> f64 {
    if a == 0.0 { 0.0 } else { (b - a) / a * 100.0 }
}
