//! The two object layouts a test runs in: the zram device's (the default, no header) and
//! the seed kernel's (`PoolConfig::seed`: the handle in every object's header).

use zsmalloc::PoolConfig;

pub fn layouts() -> [PoolConfig; 2] {
    [PoolConfig::default(), PoolConfig::seed(8)]
}
