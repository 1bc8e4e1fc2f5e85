//! Storing random bytes.

use rand::Rng;
use zsmalloc::{Handle, Pool};

/// A new object of `size` bytes written with random bytes from `rng`, and those bytes.
pub fn random_object(pool: &Pool, rng: &mut impl Rng, size: usize) -> (Handle, Vec<u8>) {
    let h = pool.malloc(size).unwrap();
    let mut data = vec![0u8; size];
    rng.fill(&mut data[..]);
    pool.write(h, &data).unwrap();
    (h, data)
}
