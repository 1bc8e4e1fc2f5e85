//! `zramd bench`: the lab's measurements, each printing figures measured side by side.

mod device;
mod nbd;
mod pool;

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    what: Option<What>,
    #[command(flatten)]
    device: device::Args,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// The allocator alone: thread scaling, compaction throughput, memory overhead.
    Pool(pool::Args),
    /// zramd against `nbdkit memory` over NBD: throughput and server RSS.
    Nbd(nbd::Args),
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    match &args.what {
        Some(What::Pool(a)) => pool::run(a),
        Some(What::Nbd(a)) => nbd::run(a),
        None => device::run(&args.device),
    }
}
