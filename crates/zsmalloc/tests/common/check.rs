//! Checking that an object reads back what its thread wrote.

use zsmalloc::{Handle, Pool};

pub fn check(pool: &Pool, h: Handle, want: &[u8]) {
    let mut got = vec![0u8; want.len()];
    pool.read(h, &mut got).unwrap();
    assert!(got == want, "handle {h}: read back different bytes");
}
