//! `zramd classes`: the class table of an empty pool, as `/sys/kernel/debug/zsmalloc/*/classes`.

use zsmalloc::{Pool, format_class_table};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Most pages per zspage (the kernel's CONFIG_ZSMALLOC_CHAIN_SIZE), 1..=16.
    #[arg(long, default_value_t = zsmalloc::class::DEFAULT_CHAIN_SIZE)]
    chain_size: usize,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let pool = Pool::new(args.chain_size)?;
    print!("{}", format_class_table(&pool.class_stats()));
    Ok(())
}
