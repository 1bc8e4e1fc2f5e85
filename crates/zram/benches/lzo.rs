//! Criterion benchmarks of the LZO codec on real 4 KiB pages, one page per call as the
//! device uses it: `lzo` and `lzo-rle` compression and decompression, and — with the
//! `liblzo2` feature, which links Debian's `liblzo2-dev` — liblzo2's LZO1X-1 beside them as
//! an outside reference (CI never enables it).
//!
//! Pages: `ZRAMD_BENCH_INPUT=FILE` takes `PAGES` pages spread evenly over FILE (e.g. the
//! Linux source tarball); without it, files from /usr/bin and /usr/include.
//!
//! Run: `cargo bench -p zram --bench lzo` or
//! `cargo bench -p zram --bench lzo --features liblzo2`.

use std::hint::black_box;
use std::os::unix::fs::FileExt as _;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use zram::lzo::{Compressor, Variant, decompress};

const PAGE: usize = 4096;
/// How many pages the sample holds (8 MiB).
const PAGES: usize = 2048;

/// `PAGES` pages spread evenly over `path`.
fn pages_of_file(path: &str) -> std::io::Result<Vec<u8>> {
    let f = std::fs::File::open(path)?;
    let total = f.metadata()?.len() as usize / PAGE;
    if total == 0 {
        return Err(std::io::Error::other(format!(
            "{path}: shorter than a page"
        )));
    }
    let mut data = vec![0u8; PAGES.min(total) * PAGE];
    for (i, page) in data.chunks_mut(PAGE).enumerate() {
        let at = i * total / PAGES.min(total);
        f.read_exact_at(page, (at * PAGE) as u64)?;
    }
    Ok(data)
}

/// Files directly in `dir` (sorted) ending in `suffix`, up to `budget` bytes.
fn files(dir: &str, suffix: &str, budget: usize) -> Vec<u8> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    names.sort();
    let mut data = Vec::new();
    for f in names {
        if data.len() >= budget {
            break;
        }
        if f.is_file() && f.to_string_lossy().ends_with(suffix) {
            data.extend(std::fs::read(&f).unwrap_or_default());
        }
    }
    data.truncate(budget.min(data.len()));
    data
}

fn sample() -> Vec<u8> {
    let mut data = match std::env::var("ZRAMD_BENCH_INPUT") {
        Ok(path) => pages_of_file(&path).unwrap_or_else(|e| panic!("{path}: {e}")),
        Err(_) => {
            let mut d = files("/usr/bin", "", PAGES * PAGE / 2);
            d.extend(files("/usr/include", ".h", PAGES * PAGE / 2));
            d
        }
    };
    data.truncate(data.len() / PAGE * PAGE);
    assert!(!data.is_empty(), "no pages to benchmark");
    data
}

fn bench_lzo(c: &mut Criterion) {
    let data = sample();
    let mut group = c.benchmark_group("lzo");
    group.throughput(Throughput::Bytes(data.len() as u64));
    group.sample_size(20);
    for variant in [Variant::Lzo, Variant::LzoRle] {
        let name = variant.kernel_name();
        let mut comp = Compressor::new(variant);
        let mut out = Vec::new();
        group.bench_function(BenchmarkId::new("compress", name), |b| {
            b.iter(|| {
                let mut total = 0;
                for page in data.chunks(PAGE) {
                    comp.compress(black_box(page), &mut out);
                    total += out.len();
                }
                total
            });
        });
        let streams: Vec<Vec<u8>> = data
            .chunks(PAGE)
            .map(|page| {
                comp.compress(page, &mut out);
                out.clone()
            })
            .collect();
        let total: usize = streams.iter().map(Vec::len).sum();
        eprintln!("{name}: {} pages, {total} bytes compressed", streams.len());
        let mut page = vec![0u8; PAGE];
        group.bench_function(BenchmarkId::new("decompress", name), |b| {
            b.iter(|| {
                for s in &streams {
                    let n = decompress(black_box(s), &mut page).expect("own stream");
                    assert_eq!(n, PAGE);
                }
            });
        });
    }
    #[cfg(feature = "liblzo2")]
    liblzo2::bench(&mut group, &data);
    group.finish();
}

/// liblzo2's LZO1X-1 through a minimal binding, as an outside reference.
#[cfg(feature = "liblzo2")]
mod liblzo2 {
    #![expect(
        unsafe_code,
        reason = "calls liblzo2's C functions, the benchmark's outside reference"
    )]

    use std::ffi::{c_int, c_uchar, c_ulong, c_void};
    use std::hint::black_box;

    use criterion::{BenchmarkGroup, BenchmarkId, measurement::WallTime};

    use super::PAGE;

    /// liblzo2's `LZO1X_1_MEM_COMPRESS` on 64-bit: 2^14 dictionary pointers.
    const WORK_MEM: usize = (1 << 14) * 8;

    #[link(name = "lzo2")]
    unsafe extern "C" {
        fn lzo1x_1_compress(
            src: *const c_uchar,
            src_len: c_ulong,
            dst: *mut c_uchar,
            dst_len: *mut c_ulong,
            wrkmem: *mut c_void,
        ) -> c_int;
        fn lzo1x_decompress_safe(
            src: *const c_uchar,
            src_len: c_ulong,
            dst: *mut c_uchar,
            dst_len: *mut c_ulong,
            wrkmem: *mut c_void,
        ) -> c_int;
    }

    /// Compresses `src` into `dst` (resized to fit), returning the length.
    fn compress(src: &[u8], dst: &mut Vec<u8>, work: &mut [u64]) -> usize {
        assert!(work.len() * 8 >= WORK_MEM);
        dst.resize(src.len() + src.len() / 16 + 64 + 3, 0);
        let mut len = dst.len() as c_ulong;
        // SAFETY: `src` is readable for its length; `dst` is writable for `len` bytes, which
        // is liblzo2's documented worst case for `src.len()` input bytes; `work` is
        // writable and at least `WORK_MEM` bytes, 8-aligned; `len` is a valid out-pointer.
        let rc = unsafe {
            lzo1x_1_compress(
                src.as_ptr(),
                src.len() as c_ulong,
                dst.as_mut_ptr(),
                &raw mut len,
                work.as_mut_ptr().cast(),
            )
        };
        assert_eq!(rc, 0, "lzo1x_1_compress");
        len as usize
    }

    /// Decompresses `src` into `dst`, returning the length.
    fn decompress(src: &[u8], dst: &mut [u8]) -> usize {
        let mut len = dst.len() as c_ulong;
        // SAFETY: `src` is readable for its length; `dst` is writable for `len` bytes, and
        // the safe decoder never writes past `len`; no work memory is needed.
        let rc = unsafe {
            lzo1x_decompress_safe(
                src.as_ptr(),
                src.len() as c_ulong,
                dst.as_mut_ptr(),
                &raw mut len,
                std::ptr::null_mut(),
            )
        };
        assert_eq!(rc, 0, "lzo1x_decompress_safe");
        len as usize
    }

    pub(super) fn bench(group: &mut BenchmarkGroup<'_, WallTime>, data: &[u8]) {
        let mut work = vec![0u64; WORK_MEM / 8];
        let mut out = Vec::new();
        group.bench_function(BenchmarkId::new("compress", "liblzo2-1x_1"), |b| {
            b.iter(|| {
                let mut total = 0;
                for page in data.chunks(PAGE) {
                    total += compress(black_box(page), &mut out, &mut work);
                }
                total
            });
        });
        let streams: Vec<Vec<u8>> = data
            .chunks(PAGE)
            .map(|page| {
                let n = compress(page, &mut out, &mut work);
                out[..n].to_vec()
            })
            .collect();
        let total: usize = streams.iter().map(Vec::len).sum();
        eprintln!("liblzo2: {} pages, {total} bytes compressed", streams.len());
        let mut page = vec![0u8; PAGE];
        for (s, src) in streams.iter().zip(data.chunks(PAGE)) {
            // Our decoder reads liblzo2's streams too.
            assert_eq!(zram::lzo::decompress(s, &mut page), Ok(PAGE));
            assert_eq!(page, src);
        }
        group.bench_function(BenchmarkId::new("decompress", "liblzo2-1x_1"), |b| {
            b.iter(|| {
                for s in &streams {
                    assert_eq!(decompress(black_box(s), &mut page), PAGE);
                }
            });
        });
    }
}

criterion_group!(benches, bench_lzo);
criterion_main!(benches);
