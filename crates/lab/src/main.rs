//! `zramd-lab`: the lab's command line. `zramd-lab bench ARGS…` runs a measurement and
//! prints its figures; `zramd bench ARGS…` runs exactly this.

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "zramd-lab",
    version,
    about = "zramd's lab: measurements side by side"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a measurement and print its figures (`--input FILE`: the device; `pool`: the
    /// allocator).
    Bench(Box<lab::bench::Args>),
    /// Run every seed's scenario and write one report (Markdown, CSV, JSON, PNG plots).
    Report(lab::report::Args),
}

fn main() -> std::process::ExitCode {
    // The untar bench serves a device in-process: its log goes where `zramd serve`'s does.
    zramd::logging::init();
    // `zramd-lab bench … | head` stops quietly, as `zramd bench` does.
    zramd::sys::die_on_sigpipe();
    // A failed bench prints one line, as `zramd` does (no backtrace with RUST_BACKTRACE).
    zramd::logging::exit_status(
        "zramd-lab",
        match Cli::parse().command {
            Command::Bench(args) => lab::bench::run(&args),
            Command::Report(args) => lab::report::run(&args),
        },
    )
}
