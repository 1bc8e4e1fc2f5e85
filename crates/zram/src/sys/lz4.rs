//! liblz4's C API where the `lz4` crate does not reach: lz4hc with its state (about 256 KiB)
//! kept per context, and both encoders with a dictionary (the kernel's `algorithm_params
//! dict=` for lz4 and lz4hc).
//!
//! `LZ4_compress_HC`, the one lz4hc call the crate wraps, allocates that state and clears it
//! whole for every call; [`HcState`] makes it once and resets it the library's fast way
//! between pages (earlier pages' table entries fall below the new block's window instead of
//! being cleared), as the kernel's backend keeps one per CPU. A dictionary is loaded into a
//! stream of its own once ([`Dict`]); each lz4 page starts from a copy of that stream (what
//! loading it again would give, as the kernel's backend does per page), each lz4hc page's
//! reset stream is attached to it (`LZ4_attach_HC_dictionary`: no copy of its 256 KiB). The
//! blocks are ordinary LZ4 blocks, decoded by `LZ4_decompress_safe`, or with the dictionary
//! by `LZ4_decompress_safe_usingDict`.
//!
//! # Safety
//!
//! Every state buffer is owned by the value that uses it, sized by the library
//! (`LZ4_sizeofState`, `LZ4_sizeofStateHC`), aligned to 8 bytes (the structures' own
//! alignment) and initialized by `LZ4_initStream`/`LZ4_initStreamHC` before any other use.
//! A loaded dictionary stream points into the dictionary's bytes, which the same [`Dict`]
//! holds (an `Arc`'s heap buffer, which never moves) for as long as it lives; a working
//! stream copied from it or attached to it is used only inside the call that made it so,
//! while `&Dict` is borrowed. Every call passes slices with their own lengths (checked to fit a C `int`), and
//! the library reads at most `src.len()` bytes and writes at most `dst.len()`.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

// liblz4 1.10 (the copy the `lz4-sys` crate builds and links statically): its stable API.
unsafe extern "C" {
    fn LZ4_sizeofState() -> c_int;
    fn LZ4_initStream(buffer: *mut c_void, size: usize) -> *mut c_void;
    fn LZ4_loadDict(stream: *mut c_void, dict: *const c_char, dict_size: c_int) -> c_int;
    fn LZ4_compress_fast_continue(
        stream: *mut c_void,
        src: *const c_char,
        dst: *mut c_char,
        src_size: c_int,
        dst_capacity: c_int,
        acceleration: c_int,
    ) -> c_int;
    fn LZ4_decompress_safe_usingDict(
        src: *const c_char,
        dst: *mut c_char,
        src_size: c_int,
        dst_capacity: c_int,
        dict: *const c_char,
        dict_size: c_int,
    ) -> c_int;
    fn LZ4_sizeofStateHC() -> c_int;
    fn LZ4_initStreamHC(buffer: *mut c_void, size: usize) -> *mut c_void;
    fn LZ4_resetStreamHC_fast(stream: *mut c_void, level: c_int);
    fn LZ4_loadDictHC(stream: *mut c_void, dict: *const c_char, dict_size: c_int) -> c_int;
    fn LZ4_attach_HC_dictionary(working: *mut c_void, dict_stream: *const c_void);
    fn LZ4_compress_HC_continue(
        stream: *mut c_void,
        src: *const c_char,
        dst: *mut c_char,
        src_size: c_int,
        dst_capacity: c_int,
    ) -> c_int;
    fn LZ4_compress_HC_extStateHC_fastReset(
        state: *mut c_void,
        src: *const c_char,
        dst: *mut c_char,
        src_size: c_int,
        dst_capacity: c_int,
        level: c_int,
    ) -> c_int;
}

/// The most of a dictionary LZ4 can refer to: its last 64 KiB.
const WINDOW: usize = 64 << 10;

/// A stream's state: zeroed memory of the library's size, initialized by `init`.
struct Stream(Box<[u64]>);

impl Stream {
    fn new(
        size: unsafe extern "C" fn() -> c_int,
        init: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void,
    ) -> Option<Self> {
        // SAFETY: a pure function of the library's build.
        let bytes = usize::try_from(unsafe { size() }).ok()?;
        let mut buf = vec![0u64; bytes.div_ceil(8)].into_boxed_slice();
        // SAFETY: `buf` holds at least `bytes` writable bytes, aligned to 8.
        let ok = unsafe { !init(buf.as_mut_ptr().cast(), bytes).is_null() };
        ok.then_some(Self(buf))
    }

    fn ptr(&mut self) -> *mut c_void {
        self.0.as_mut_ptr().cast()
    }
}

/// `src` and `dst`'s lengths as C ints (`dst`'s capped: the library writes no more than it
/// needs); `None` if `src` is too large for LZ4.
fn lengths(src: &[u8], dst: &[u8]) -> Option<(c_int, c_int)> {
    Some((
        c_int::try_from(src.len()).ok()?,
        c_int::try_from(dst.len()).unwrap_or(c_int::MAX),
    ))
}

/// A compressed length from the library (0 or less: failed).
fn written(n: c_int) -> Option<usize> {
    usize::try_from(n).ok().filter(|&n| n > 0)
}

/// A dictionary loaded for one encoder: the bytes (their last 64 KiB) and the stream that
/// indexes them.
pub(crate) struct Dict {
    bytes: Arc<Vec<u8>>,
    start: usize,
    loaded: Stream,
}

impl std::fmt::Debug for Dict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dict")
            .field("bytes", &(self.bytes.len() - self.start))
            .finish_non_exhaustive()
    }
}

impl Dict {
    /// `bytes` loaded for lz4 (`hc` None) or for lz4hc at level `hc`.
    pub(crate) fn load(bytes: Arc<Vec<u8>>, hc: Option<i32>) -> Option<Self> {
        let start = bytes.len().saturating_sub(WINDOW);
        let len = c_int::try_from(bytes.len() - start).ok()?;
        let mut loaded = match hc {
            None => Stream::new(LZ4_sizeofState, LZ4_initStream)?,
            Some(_) => Stream::new(LZ4_sizeofStateHC, LZ4_initStreamHC)?,
        };
        let dict = bytes[start..].as_ptr().cast();
        // SAFETY: the stream is initialized; the dictionary's bytes live in `bytes`, kept
        // with the stream. lz4hc's level must be set before loading: it picks the tables.
        let n = unsafe {
            match hc {
                None => LZ4_loadDict(loaded.ptr(), dict, len),
                Some(level) => {
                    LZ4_resetStreamHC_fast(loaded.ptr(), level);
                    LZ4_loadDictHC(loaded.ptr(), dict, len)
                }
            }
        };
        (n == len).then_some(Self {
            bytes,
            start,
            loaded,
        })
    }

    /// The bytes a block compressed with this dictionary refers to.
    fn window(&self) -> &[u8] {
        &self.bytes[self.start..]
    }

    /// Decodes a block compressed with this dictionary into `dst`; the decoded length, or
    /// `None` for a corrupt block or one longer than `dst`.
    pub(crate) fn decompress(&self, src: &[u8], dst: &mut [u8]) -> Option<usize> {
        let (src_len, dst_len) = lengths(src, dst)?;
        let window = self.window();
        // SAFETY: slices valid for their lengths; the dictionary is at most 64 KiB.
        let n = unsafe {
            LZ4_decompress_safe_usingDict(
                src.as_ptr().cast(),
                dst.as_mut_ptr().cast(),
                src_len,
                dst_len,
                window.as_ptr().cast(),
                window.len() as c_int,
            )
        };
        usize::try_from(n).ok()
    }
}

/// One lz4 context with a dictionary: its working stream.
pub(crate) struct DictState {
    work: Stream,
}

impl std::fmt::Debug for DictState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DictState").finish_non_exhaustive()
    }
}

impl DictState {
    pub(crate) fn new() -> Option<Self> {
        Some(Self {
            work: Stream::new(LZ4_sizeofState, LZ4_initStream)?,
        })
    }

    /// Compresses `src` into `dst` with `dict` (loaded for lz4) at `acceleration`.
    pub(crate) fn compress(
        &mut self,
        dict: &Dict,
        src: &[u8],
        dst: &mut [u8],
        acceleration: i32,
    ) -> Option<usize> {
        let (src_len, dst_len) = lengths(src, dst)?;
        // The state `LZ4_loadDict` leaves, as the kernel's backend loads it before each page
        // (a copy of 16 KiB; attaching the loaded stream instead measured 3% slower).
        self.work.0.copy_from_slice(&dict.loaded.0);
        // SAFETY: the copy is a stream loaded by `LZ4_loadDict`, pointing into the
        // dictionary's bytes, which `dict` holds for the call.
        let n = unsafe {
            LZ4_compress_fast_continue(
                self.work.ptr(),
                src.as_ptr().cast(),
                dst.as_mut_ptr().cast(),
                src_len,
                dst_len,
                acceleration,
            )
        };
        written(n)
    }
}

/// One lz4hc compression state.
pub(crate) struct HcState {
    work: Stream,
}

impl std::fmt::Debug for HcState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HcState")
            .field("bytes", &(self.work.0.len() * 8))
            .finish()
    }
}

impl HcState {
    /// A fresh, initialized state; `None` if the library refuses it.
    pub(crate) fn new() -> Option<Self> {
        Some(Self {
            work: Stream::new(LZ4_sizeofStateHC, LZ4_initStreamHC)?,
        })
    }

    /// Compresses `src` into `dst` at `level` (1..=12), with `dict` (loaded for lz4hc at the
    /// same level) if given; returns the compressed length, or `None` if it does not fit in
    /// `dst` or the input is too large for LZ4.
    pub(crate) fn compress(
        &mut self,
        dict: Option<&Dict>,
        src: &[u8],
        dst: &mut [u8],
        level: i32,
    ) -> Option<usize> {
        let (src_len, dst_len) = lengths(src, dst)?;
        let work = self.work.ptr();
        let (src, dst) = (src.as_ptr().cast(), dst.as_mut_ptr().cast());
        // SAFETY: the state was initialized in `new` and is used by one thread at a time
        // (`&mut self`); a dictionary stream was loaded by `LZ4_loadDictHC`, and stays
        // attached only for this call's stream session.
        let n = unsafe {
            match dict {
                None => {
                    LZ4_compress_HC_extStateHC_fastReset(work, src, dst, src_len, dst_len, level)
                }
                Some(dict) => {
                    LZ4_resetStreamHC_fast(work, level);
                    LZ4_attach_HC_dictionary(work, dict.loaded.0.as_ptr().cast());
                    LZ4_compress_HC_continue(work, src, dst, src_len, dst_len)
                }
            }
        };
        written(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four pages of words drawn at random: each compresses some on its own, and to little
    /// beside a dictionary that holds it.
    fn pages() -> Vec<Vec<u8>> {
        let words = [
            "zram", "page", "slot", "zspage", "handle", "the", "of", "pool", "idle",
        ];
        let mut x = 0x9e37_79b9_u32;
        (0..4)
            .map(|_| {
                let mut page = Vec::new();
                while page.len() < 4096 {
                    x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    page.extend_from_slice(words[(x >> 16) as usize % words.len()].as_bytes());
                    page.push(b' ');
                }
                page.truncate(4096);
                page
            })
            .collect()
    }

    #[test]
    fn a_reused_state_gives_the_same_blocks_as_a_fresh_one() {
        let mut reused = HcState::new().unwrap();
        for page in &pages() {
            let mut a = vec![0u8; 8192];
            let mut b = vec![0u8; 8192];
            let n = reused.compress(None, page, &mut a, 9).unwrap();
            let m = HcState::new().unwrap().compress(None, page, &mut b, 9);
            assert_eq!(a[..n], b[..m.unwrap()]);
            let back = lz4::block::decompress(&a[..n], Some(4096)).unwrap();
            assert_eq!(&back, page);
        }
        let mut tiny = [0u8; 8];
        assert_eq!(reused.compress(None, &pages()[0], &mut tiny, 9), None);
    }

    /// Pages found in the dictionary compress to little with it (random bytes: nothing
    /// without it), read back only with it, and a state reused across pages gives what a
    /// fresh one gives.
    #[test]
    fn dictionaries_shrink_pages_and_are_needed_to_read_them() {
        use rand::{RngCore as _, SeedableRng as _};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(0x5eed);
        let pages: Vec<Vec<u8>> = (0..4)
            .map(|_| {
                let mut page = vec![0u8; 4096];
                rng.fill_bytes(&mut page);
                page
            })
            .collect();
        // A dictionary longer than the window: only its last 64 KiB count.
        let mut bytes = vec![0xA5u8; 70_000];
        bytes.extend(pages.concat());
        let bytes = Arc::new(bytes);
        let plain = Dict::load(bytes.clone(), None).unwrap();
        let hc = Dict::load(bytes, Some(9)).unwrap();
        let mut lz4_state = DictState::new().unwrap();
        let mut hc_state = HcState::new().unwrap();
        for page in &pages {
            let mut with = vec![0u8; 8192];
            let mut without = vec![0u8; 8192];
            let n = lz4_state.compress(&plain, page, &mut with, 1).unwrap();
            let m = lz4::block::compress_to_buffer(page, None, false, &mut without).unwrap();
            assert!(n * 4 < m, "with the dictionary {n} bytes, without {m}");
            let mut fresh = vec![0u8; 8192];
            let f = DictState::new()
                .unwrap()
                .compress(&plain, page, &mut fresh, 1);
            assert_eq!(with[..n], fresh[..f.unwrap()]);
            let mut back = vec![0u8; 4096];
            assert_eq!(plain.decompress(&with[..n], &mut back), Some(4096));
            assert_eq!(&back, page);
            assert!(lz4::block::decompress(&with[..n], Some(4096)).is_err());

            let h = hc_state.compress(Some(&hc), page, &mut with, 9).unwrap();
            assert!(h <= n, "lz4hc {h} bytes, lz4 {n}");
            assert_eq!(hc.decompress(&with[..h], &mut back), Some(4096));
            assert_eq!(&back, page);
        }
        let mut back = vec![0u8; 4096];
        assert_eq!(plain.decompress(&[0xF0, 1, 2], &mut back), None);
    }
}
