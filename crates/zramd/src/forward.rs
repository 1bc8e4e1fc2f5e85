//! `zramd bench ARGS…` and `zramd lab ARGS…`: the lab's measurements live in their own
//! binary, `zramd-lab` (crate `lab`, which depends on zramd's library, so zramd cannot depend
//! on it). This runs `zramd-lab bench ARGS…` (or `zramd-lab report ARGS…`) from the
//! directory of the running `zramd` with the same arguments, `--help` included, the same
//! stdin, stdout and stderr, and exits with its status.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Command, ExitStatus};

use anyhow::{Context as _, bail};

/// The lab's binary, built beside `zramd`.
const LAB: &str = "zramd-lab";

#[derive(Debug, clap::Args)]
#[command(disable_help_flag = true)]
pub struct Args {
    /// Arguments of `zramd-lab bench` (see `zramd bench --help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

#[derive(Debug, clap::Args)]
#[command(disable_help_flag = true)]
pub struct LabArgs {
    /// Arguments of `zramd-lab report` (see `zramd lab --help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

/// Runs `zramd-lab bench ARGS…`; returns only if it succeeded, else exits with its status.
pub fn run(args: &Args) -> anyhow::Result<()> {
    forward("bench", &args.args)
}

/// Runs `zramd-lab report ARGS…` (the lab's report of every seed), as [`run`] does.
pub fn lab(args: &LabArgs) -> anyhow::Result<()> {
    forward("report", &args.args)
}

fn forward(command: &str, args: &[OsString]) -> anyhow::Result<()> {
    let zramd = std::env::current_exe().context("find the running zramd binary")?;
    let lab = zramd.with_file_name(LAB);
    if !lab.is_file() {
        bail!(
            "the lab binary is missing: `zramd {}` runs {}, which is not there; build it \
             with `cargo build --release -p lab` (a plain `cargo build --release` of the \
             workspace builds it too)",
            if command == "report" { "lab" } else { command },
            lab.display()
        );
    }
    let status = Command::new(&lab)
        .arg(command)
        .args(args)
        .status()
        .with_context(|| format!("run {}", lab.display()))?;
    if !status.success() {
        std::process::exit(exit_code(status));
    }
    Ok(())
}

/// The exit code a shell would report for `status`: the child's own, or 128 + the signal
/// that ended it.
pub(crate) fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}
