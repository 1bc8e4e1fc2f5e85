//! `zramd stat`: a running server's devices as zramctl shows the kernel's (its options
//! `-o/--output`, `--output-all`, `-b/--bytes`, `-n/--noheadings`, `--raw`, its columns,
//! sizes and alignment), the `mm_stat` line (`--mm-stat`), every figure as JSON (`--json`),
//! and the post-processing lines (`-v`); or the figures of a program run by `zramd run`.

mod columns;
mod post;
mod table;

use std::path::Path;

use anyhow::Context as _;
use zramd::control::{self, Request};
use zramd::registry::DeviceStat;

/// The options of the device table; `--mm-stat` and `--json` print other things.
const TABLE: [&str; 6] = [
    "output",
    "output_all",
    "bytes",
    "noheadings",
    "raw",
    "verbose",
];

/// `zramd stat`'s options (zramctl's status options, and ours).
#[derive(Debug, clap::Args)]
pub struct Options {
    /// Columns to show, separated by commas (zramctl's -o; see --help for the list).
    #[arg(short = 'o', long = "output", value_name = "LIST", long_help = columns::help())]
    output: Option<String>,
    /// Show every column.
    #[arg(long, conflicts_with = "output")]
    output_all: bool,
    /// Sizes in bytes rather than in human-readable form.
    #[arg(short, long)]
    bytes: bool,
    /// Leave the header line out.
    #[arg(short, long)]
    noheadings: bool,
    /// Raw output: cells separated by one space, not aligned, their blanks, backslashes and
    /// control characters written \xHH (zramctl's --raw).
    #[arg(long)]
    raw: bool,
    /// After the table, each device's writeback, recompression, policy, folding and
    /// deduplication figures.
    #[arg(short, long)]
    verbose: bool,
    /// Print the mm_stat line: DEV's exactly as its sysfs file has it, or every device's
    /// after its name (`zram0: …`).
    #[arg(long, conflicts_with_all = TABLE, conflicts_with = "json")]
    mm_stat: bool,
    /// Print every figure as JSON.
    #[arg(long, conflicts_with_all = TABLE)]
    json: bool,
    /// Only this device (shown even when uninitialized; without DEV the table leaves out
    /// devices of size 0, as zramctl does).
    device: Option<String>,
}

/// Runs `zramd stat` against the control socket at `control`.
pub fn stat(control: &Path, o: &Options) -> anyhow::Result<()> {
    // Bad columns are refused before the server is asked.
    let columns = match (&o.output, o.output_all) {
        (Some(list), _) => columns::parse(list)?,
        (None, true) => columns::Column::all(),
        (None, false) => columns::DEFAULT.to_vec(),
    };
    let value = control::call_value(control, &Request::Stat)?;
    if value.get("uswap").is_some() {
        // A program run by `zramd run`: its regions.
        let figures: uswap::ProgramFigures =
            serde_json::from_value(value).context("parse the program's figures")?;
        if o.json {
            println!("{}", serde_json::to_string_pretty(&figures)?);
        } else {
            print!("{}", figures.format());
        }
        return Ok(());
    }
    let response: control::Response =
        serde_json::from_value(value).context("parse the server's answer")?;
    let mut devices = response.devices;
    if let Some(name) = &o.device {
        devices.retain(|d| &d.name == name);
        if devices.is_empty() {
            anyhow::bail!("no device named {name:?}");
        }
    }
    if o.json {
        println!("{}", serde_json::to_string_pretty(&devices)?);
    } else if o.mm_stat {
        print!("{}", mm_stat(&devices, o.device.is_some()));
    } else {
        if o.device.is_none() {
            devices.retain(|d| d.disksize > 0);
        }
        print!("{}", device_table(&devices, &columns, o));
        if o.verbose {
            devices.iter().for_each(post::post_lines);
        }
    }
    Ok(())
}

/// The `mm_stat` lines: the one device's as its file has it (`alone`), or each after its
/// name.
fn mm_stat(devices: &[DeviceStat], alone: bool) -> String {
    if alone {
        return devices.iter().map(|d| d.mm_stat.as_str()).collect();
    }
    devices
        .iter()
        .map(|d| format!("{}: {}", d.name, d.mm_stat))
        .collect()
}

/// The table of `devices`, a row each, in `columns`.
fn device_table(devices: &[DeviceStat], columns: &[columns::Column], o: &Options) -> String {
    let cols: Vec<table::Col> = columns.iter().map(|c| c.col()).collect();
    let rows: Vec<Vec<String>> = devices
        .iter()
        .map(|d| columns.iter().map(|c| c.cell(d, o.bytes)).collect())
        .collect();
    let style = table::Style {
        noheadings: o.noheadings,
        raw: o.raw,
    };
    table::render(&cols, &rows, style)
}
