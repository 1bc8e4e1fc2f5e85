//! `zramd-lab bench` (which `zramd bench` runs): the lab's measurements, each printing
//! figures measured side by side.

mod churn;
mod cold;
mod dedup;
mod device;
pub mod locking;
mod nbd;
pub mod pool;
pub mod swap_ra;
pub mod untar;

pub use nbd::fio_has_nbd;

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
#[group(skip)]
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
    /// Memory gone cold: recompression and writeback of idle slots, read-back latencies.
    Cold(cold::Args),
    /// Writeback on a backing store of fixed room while the data changes: rounds that pass
    /// or fail, cleaning's bytes moved, pages held against the kernel's format.
    Churn(churn::Args),
    /// zramd against `nbdkit memory` over NBD: throughput and server RSS.
    Nbd(nbd::Args),
    /// The seeds' workload: ext4 on the device, untar, delete directories, next to the
    /// kernel's zram.
    Untar(Box<untar::Args>),
    /// Inline deduplication and folding: write speed with dedup off and on, memory with the
    /// file twice, and what a fold pass frees and costs.
    Dedup(Box<dedup::Args>),
    /// Seed 002's readahead on a userfaultfd region (issue 14): sequential, random and
    /// combined workloads with readahead on and off, and the fault latency of each tier.
    Uswap(Box<swap_ra::Args>),
    /// Seed 001's experiment: fs_mark and a build on ext4, for each zsmalloc locking mode
    /// (pool, class, sharded) and the kernel's zram.
    Locking(Box<locking::Args>),
}

/// Runs the measurement `args` names.
pub fn run(args: &Args) -> anyhow::Result<()> {
    match &args.what {
        Some(What::Pool(a)) => pool::run(a),
        Some(What::Cold(a)) => cold::run(a),
        Some(What::Churn(a)) => churn::run(a),
        Some(What::Nbd(a)) => nbd::run(a),
        Some(What::Untar(a)) => untar::run(a),
        Some(What::Dedup(a)) => dedup::run(a),
        Some(What::Uswap(a)) => swap_ra::run(a),
        Some(What::Locking(a)) => locking::main(a),
        None => device::run(&args.device),
    }
}
