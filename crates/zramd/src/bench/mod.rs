//! `zramd bench`: the lab's measurements, each printing figures measured side by side.

mod pool;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// The allocator alone: thread scaling, compaction throughput, memory overhead.
    Pool(pool::Args),
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    match &args.what {
        What::Pool(a) => pool::run(a),
    }
}
