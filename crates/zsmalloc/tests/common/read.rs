//! Reading an object back whole.

use zsmalloc::{Handle, Pool};

/// The first `len` bytes of `h`'s object.
pub fn read(pool: &Pool, h: Handle, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    pool.read(h, &mut buf).unwrap();
    buf
}
