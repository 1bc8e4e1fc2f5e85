//! Shared by the zram tests: a seeded xorshift generator and the incompressible bytes it
//! makes, so every test's data is the same on every run.

/// One step of a 64-bit xorshift generator (13, 7, 17).
pub fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// `len` incompressible bytes from `seed`.
pub fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..len).map(|_| xorshift(&mut s) as u8).collect()
}
