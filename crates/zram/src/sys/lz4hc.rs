//! LZ4's high-compression encoder (the kernel's `lz4hc`) through liblz4's C API, with its
//! state (about 256 KiB) kept per context. `LZ4_compress_HC`, the one call the `lz4` crate
//! wraps, allocates that state and clears it whole for every call; here it is made once and
//! reset the library's fast way between pages (`LZ4_compress_HC_extStateHC_fastReset`:
//! earlier pages' table entries fall below the new block's window instead of being
//! cleared), as the kernel's backend keeps one per CPU. Its output is an ordinary LZ4 block,
//! decoded by `LZ4_decompress_safe`.
//!
//! # Safety
//!
//! The state buffer is owned by [`HcState`], sized by `LZ4_sizeofStateHC` and aligned to 8
//! bytes (the structure's own alignment), initialized once by `LZ4_initStreamHC` before any
//! use; every call passes slices with their own lengths (checked to fit a C `int`), and the
//! library reads at most `src.len()` bytes and writes at most `dst.len()`.

use std::ffi::{c_char, c_int, c_void};

// liblz4 (1.10, the copy the `lz4-sys` crate builds and links statically). The first two are
// its stable API; the fast-reset call is in its "static linking only" section, which a
// statically linked copy exports like the rest.
unsafe extern "C" {
    fn LZ4_sizeofStateHC() -> c_int;
    fn LZ4_initStreamHC(buffer: *mut c_void, size: usize) -> *mut c_void;
    fn LZ4_compress_HC_extStateHC_fastReset(
        state: *mut c_void,
        src: *const c_char,
        dst: *mut c_char,
        src_size: c_int,
        dst_capacity: c_int,
        level: c_int,
    ) -> c_int;
}

/// One lz4hc compression state.
pub(crate) struct HcState {
    buf: Box<[u64]>,
}

impl std::fmt::Debug for HcState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HcState")
            .field("bytes", &(self.buf.len() * 8))
            .finish()
    }
}

impl HcState {
    /// A fresh, initialized state; `None` if the library refuses it.
    pub(crate) fn new() -> Option<Self> {
        // SAFETY: a pure function of the library's build.
        let size = usize::try_from(unsafe { LZ4_sizeofStateHC() }).ok()?;
        let mut buf = vec![0u64; size.div_ceil(8)].into_boxed_slice();
        // SAFETY: `buf` holds at least `size` writable bytes, aligned to 8.
        let init = unsafe { LZ4_initStreamHC(buf.as_mut_ptr().cast(), size) };
        (!init.is_null()).then_some(Self { buf })
    }

    /// Compresses `src` into `dst` at `level` (1..=12); returns the compressed length, or
    /// `None` if it does not fit in `dst` or the input is too large for LZ4.
    pub(crate) fn compress(&mut self, src: &[u8], dst: &mut [u8], level: i32) -> Option<usize> {
        let src_len = c_int::try_from(src.len()).ok()?;
        let dst_len = c_int::try_from(dst.len()).unwrap_or(c_int::MAX);
        // SAFETY: the state was initialized in `new` and is used by one thread at a time
        // (`&mut self`); `src` and `dst` are valid for the lengths given.
        let n = unsafe {
            LZ4_compress_HC_extStateHC_fastReset(
                self.buf.as_mut_ptr().cast(),
                src.as_ptr().cast(),
                dst.as_mut_ptr().cast(),
                src_len,
                dst_len,
                level,
            )
        };
        usize::try_from(n).ok().filter(|&n| n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_state_gives_the_same_blocks_as_a_fresh_one() {
        let text = b"the quick brown fox jumps over the lazy dog; zram pages ";
        let pages: Vec<Vec<u8>> = (0..4u8)
            .map(|k| {
                (0..4096)
                    .map(|i| text[(i * (k as usize + 1)) % text.len()] ^ k)
                    .collect()
            })
            .collect();
        let mut reused = HcState::new().unwrap();
        for page in &pages {
            let mut a = vec![0u8; 8192];
            let mut b = vec![0u8; 8192];
            let n = reused.compress(page, &mut a, 9).unwrap();
            let m = HcState::new().unwrap().compress(page, &mut b, 9).unwrap();
            assert_eq!(a[..n], b[..m]);
            let back = lz4::block::decompress(&a[..n], Some(4096)).unwrap();
            assert_eq!(&back, page);
        }
        let mut tiny = [0u8; 8];
        assert_eq!(reused.compress(&pages[0], &mut tiny, 9), None);
    }
}
