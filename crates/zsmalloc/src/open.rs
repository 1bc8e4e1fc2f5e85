//! [`open`]: the allocator a [`PoolConfig`] names, behind the [`Backend`] interface.

use std::sync::Arc;

use crate::afmalloc::Afmalloc;
use crate::allocator::Allocator;
use crate::backend::Backend;
use crate::config::PoolConfig;
use crate::error::Result;
use crate::pool::Pool;
use crate::sysmalloc::SysMalloc;
use crate::zbud::Zbud;

/// Builds the allocator `config` names, with the settings of `config` that apply to it.
pub fn open(config: PoolConfig) -> Result<Arc<dyn Backend>> {
    match config.allocator {
        Allocator::Zsmalloc => Ok(Arc::new(Pool::with_config(config)?)),
        Allocator::Afmalloc => Ok(Arc::new(Afmalloc::with_config(config)?)),
        Allocator::Zbud => Ok(Arc::new(Zbud::with_config(config)?)),
        Allocator::Malloc => Ok(Arc::new(SysMalloc::with_config(config)?)),
    }
}
