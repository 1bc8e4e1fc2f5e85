//! `zramd classes`: the class table of an empty pool, as `/sys/kernel/debug/zsmalloc/*/classes`.

use zsmalloc::{Pool, format_class_table};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Most pages per zspage (the kernel's CONFIG_ZSMALLOC_CHAIN_SIZE), 1..=16.
    #[arg(long, default_value_t = zsmalloc::class::DEFAULT_CHAIN_SIZE)]
    chain_size: usize,
    /// Zspage-length rule: seed (kernels up to 6.2, the seed's tables) or min-waste (6.3+).
    #[arg(long, default_value = "seed")]
    geometry: zsmalloc::Geometry,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let pool = Pool::with_config(zsmalloc::PoolConfig {
        chain_size: args.chain_size,
        geometry: args.geometry,
        ..zsmalloc::PoolConfig::default()
    })?;
    print!("{}", format_class_table(&pool.class_stats()));
    Ok(())
}
