//! Compressible test data: pages of text from a small vocabulary in a pseudo-random order.

/// A page of text from a small vocabulary in a pseudo-random order (zstd packs it tighter
/// than lz4).
pub fn prose(seed: u64) -> Vec<u8> {
    const WORDS: [&str; 16] = [
        "zram ",
        "keeps ",
        "pages ",
        "compressed ",
        "in ",
        "memory ",
        "and ",
        "writes ",
        "cold ",
        "ones ",
        "back ",
        "to ",
        "a ",
        "file ",
        "when ",
        "asked ",
    ];
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let mut page = Vec::with_capacity(4096);
    while page.len() < 4096 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        page.extend_from_slice(WORDS[(x >> 60) as usize].as_bytes());
    }
    page.truncate(4096);
    page
}
