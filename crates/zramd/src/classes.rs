//! `zramd classes`: the class table of an empty pool, as `/sys/kernel/debug/zsmalloc/*/classes`.

use zram::{Pool, PoolConfig, format_class_table};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The pool's settings (what a device with these options would use; the class table
    /// depends on the chain size and the geometry alone).
    #[command(flatten)]
    pool: PoolConfig,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let pool = Pool::with_config(PoolConfig {
        populate: false,
        ..args.pool
    })?;
    print!("{}", format_class_table(&pool.class_stats()));
    Ok(())
}
