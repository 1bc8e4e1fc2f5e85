//! Same-filled pages (the kernel's `page_same_filled`): a page (or unit) whose every 8-byte
//! word is equal is stored as that word alone, with no object.

/// The fill word of a same-filled page (or unit), if it is one.
pub(crate) fn same_filled(data: &[u8]) -> Option<u64> {
    let mut words = data.chunks_exact(8).map(|w| {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        u64::from_ne_bytes(b)
    });
    let first = words.next()?;
    words.all(|w| w == first).then_some(first)
}

/// Writes the fill pattern of `word` into `out`, which starts `at` bytes into its page (or
/// unit), so that a part of a same-filled page reads as the page would.
pub(crate) fn fill(out: &mut [u8], word: u64, at: usize) {
    let bytes = word.to_ne_bytes();
    if at.is_multiple_of(8) {
        let mut chunks = out.chunks_exact_mut(8);
        for chunk in &mut chunks {
            chunk.copy_from_slice(&bytes);
        }
        let rest = chunks.into_remainder();
        let n = rest.len();
        rest.copy_from_slice(&bytes[..n]);
    } else {
        for (i, b) in out.iter_mut().enumerate() {
            *b = bytes[(at + i) % 8];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_read_back_as_the_whole_page_would() {
        let word = 0x0102_0304_0506_0708_u64;
        let mut page = vec![0u8; 4096];
        fill(&mut page, word, 0);
        assert_eq!(same_filled(&page), Some(word));
        for at in [0, 1, 7, 8, 13, 4090] {
            for len in [0, 1, 5, 8, 9, 4096 - at]
                .into_iter()
                .filter(|&n| at + n <= 4096)
            {
                let mut part = vec![0u8; len];
                fill(&mut part, word, at);
                assert_eq!(part, page[at..at + len], "at {at} len {len}");
            }
        }
        page[100] ^= 1;
        assert_eq!(same_filled(&page), None);
        assert_eq!(same_filled(&[]), None);
    }
}
