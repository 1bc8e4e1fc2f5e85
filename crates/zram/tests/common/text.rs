//! Compressible test pages: words of a small list in a pseudo-random order, each followed
//! by one letter, so lz4 packs a page to about half and zstd further. The same `page` and
//! `words` give the same bytes on every run.

use zram::PAGE_SIZE;

/// Page number `page` of text made of `words`.
pub fn text_page(page: usize, words: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut s = page as u64 * 7919 + 1;
    while out.len() < PAGE_SIZE {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        out.extend_from_slice(words[(s >> 33) as usize % words.len()].as_bytes());
        out.push((s >> 40) as u8 % 16 + b'a');
    }
    out.truncate(PAGE_SIZE);
    out
}
