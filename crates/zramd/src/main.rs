//! `zramd`: compressed memory in userspace.
//!
//! Subcommands: `classes` (the zsmalloc class table for a chain size) and `bench` (the lab's
//! measurements). `serve`, the NBD/FUSE front ends and the control commands follow.

mod bench;
mod classes;
mod kernel;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "zramd", version, about = "Compressed memory in userspace")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the zsmalloc size-class table of an empty pool, in the kernel's format.
    Classes(classes::Args),
    /// Run a measurement and print its figures (`--input FILE`: the device; `pool`: the
    /// allocator).
    Bench(bench::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Classes(args) => classes::run(&args),
        Command::Bench(args) => bench::run(&args),
    }
}
