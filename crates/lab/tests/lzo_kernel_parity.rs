//! Compression-ratio parity with the kernel's own `lzo` and `lzo-rle` zram compressors.
//!
//! Needs root and `/sys/class/zram-control`: the test hot-adds a zram device of its own,
//! writes a corpus of real 4 KiB pages (binaries from /usr/bin, C headers, licence texts)
//! with O_DIRECT, and compares the kernel's `compr_data_size` from `mm_stat` with the sum
//! of our compressed sizes counted the kernel's way: same-filled pages count nothing, and
//! a page whose compressed length reaches `huge_class_size` is stored raw and counts
//! 4096. The device is reset and hot-removed on every path out (a guard's `Drop`).
//! Elsewhere the test says why it skips.

use std::fs::File;
use std::io;

use lab::kernel::{KernelZram, absent_reason, write_direct};
use zram::lzo::{Compressor, Variant};

pub mod common;

use common::files;

const PAGE: usize = 4096;
/// Allowed relative difference between the kernel's total and ours.
const TOLERANCE: f64 = 0.02;

/// A zram device this test hot-added; reset and removed when dropped.
struct Device(KernelZram);

impl Device {
    fn hot_add() -> io::Result<Self> {
        KernelZram::add().map(Self)
    }

    fn set(&self, name: &str, value: &str) -> io::Result<()> {
        self.0.set(name, value)
    }

    /// Resets the device and configures it for `variant`.
    fn configure(&self, variant: Variant) -> io::Result<()> {
        self.set("reset", "1")?;
        self.set("comp_algorithm", variant.kernel_name())?;
        self.set("disksize", "64M")
    }

    fn algorithms(&self) -> io::Result<String> {
        self.0.get("comp_algorithm")
    }

    fn mm_stat(&self) -> io::Result<MmStat> {
        let f = self.0.mm_stat()?;
        Ok(MmStat {
            compr_data_size: f[1],
            same_pages: f[5],
            huge_pages: f[7],
        })
    }

    fn open(&self) -> io::Result<File> {
        self.0.open_direct()
    }
}

#[derive(Debug, Clone, Copy)]
struct MmStat {
    compr_data_size: u64,
    same_pages: u64,
    huge_pages: u64,
}

fn corpus() -> Vec<u8> {
    let mut c = Vec::new();
    c.extend(files("/usr/bin", "", 256 << 10, 12 << 20));
    c.extend(files("/usr/include", ".h", 64 << 10, 4 << 20));
    c.extend(files("/usr/share/common-licenses", "", 1 << 20, 1 << 20));
    c.truncate(c.len() / PAGE * PAGE);
    c
}

fn same_filled(page: &[u8]) -> bool {
    let first = &page[..8];
    page.chunks_exact(8).all(|w| w == first)
}

/// A page that is `PAGE - k` zeros then `k` pseudo-random bytes: it compresses to about
/// `k` bytes with the same encoding in the kernel and here.
fn calibration_page(k: usize) -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut page = vec![0u8; PAGE - k];
    page.extend((0..k).map(|_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 24) as u8
    }));
    page
}

/// Finds `huge_class_size` as the kernel applies it: the smallest compressed length it
/// stores as a huge (raw) page. Binary search over calibration pages written to page 0.
fn huge_threshold(dev: &Device, file: &File, variant: Variant) -> io::Result<usize> {
    let mut c = Compressor::new(variant);
    let mut out = Vec::new();
    let mut probe = |k: usize| -> io::Result<(bool, usize, u64)> {
        let page = calibration_page(k);
        write_direct(file, 0, &page)?;
        let st = dev.mm_stat()?;
        c.compress(&page, &mut out);
        Ok((st.huge_pages == 1, out.len(), st.compr_data_size))
    };
    let (mut lo, mut hi) = (1usize, PAGE);
    if probe(lo)?.0 || !probe(hi)?.0 {
        return Err(io::Error::other(
            "calibration pages do not straddle the huge size",
        ));
    }
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if probe(mid)?.0 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let (_, below, kernel_below) = probe(lo)?;
    let (_, threshold, _) = probe(hi)?;
    println!(
        "{}: huge_class_size = {threshold} (largest stored page: kernel {kernel_below} bytes, ours {below})",
        variant.kernel_name()
    );
    Ok(threshold)
}

#[derive(Debug, Default)]
struct Totals {
    compr_data_size: u64,
    same_pages: u64,
    huge_pages: u64,
}

fn ours(variant: Variant, corpus: &[u8], huge: usize) -> Totals {
    let mut c = Compressor::new(variant);
    let mut out = Vec::new();
    let mut t = Totals::default();
    for page in corpus.chunks(PAGE) {
        if same_filled(page) {
            t.same_pages += 1;
            continue;
        }
        c.compress(page, &mut out);
        if out.len() >= huge {
            t.huge_pages += 1;
            t.compr_data_size += PAGE as u64;
        } else {
            t.compr_data_size += out.len() as u64;
        }
    }
    t
}

fn kernel(dev: &Device, variant: Variant, corpus: &[u8]) -> io::Result<(Totals, usize)> {
    dev.configure(variant)?;
    let file = dev.open()?;
    let huge = huge_threshold(dev, &file, variant)?;
    drop(file);
    dev.configure(variant)?;
    let file = dev.open()?;
    write_direct(&file, 0, corpus)?;
    let st = dev.mm_stat()?;
    Ok((
        Totals {
            compr_data_size: st.compr_data_size,
            same_pages: st.same_pages,
            huge_pages: st.huge_pages,
        },
        huge,
    ))
}

#[test]
fn lzo_sizes_match_the_kernel() {
    if let Some(why) = absent_reason() {
        println!("SKIPPED lzo_sizes_match_the_kernel: {why}");
        return;
    }
    let corpus = corpus();
    assert!(
        corpus.len() >= 1 << 20,
        "corpus too small: {} bytes",
        corpus.len()
    );
    let dev = Device::hot_add().expect("hot_add a zram device");
    let algorithms = dev.algorithms().expect("read comp_algorithm");
    println!(
        "zram{}: corpus of {} pages; kernel algorithms: {}",
        dev.0.id(),
        corpus.len() / PAGE,
        algorithms.trim()
    );
    let mut failures = Vec::new();
    for variant in [Variant::Lzo, Variant::LzoRle] {
        let name = variant.kernel_name();
        let offered = algorithms
            .split_whitespace()
            .any(|a| a.trim_matches(['[', ']']) == name);
        if !offered {
            println!("SKIPPED {name}: the kernel does not offer it");
            continue;
        }
        let (k, huge) = kernel(&dev, variant, &corpus).expect("kernel run");
        let o = ours(variant, &corpus, huge);
        let rel = o.compr_data_size as f64 / k.compr_data_size as f64;
        println!(
            "{name}: compr_data_size kernel {} ours {} (ours/kernel {rel:.4}); \
             ratio kernel {:.3} ours {:.3}; same pages kernel {} ours {}; \
             huge pages kernel {} ours {}",
            k.compr_data_size,
            o.compr_data_size,
            corpus.len() as f64 / k.compr_data_size as f64,
            corpus.len() as f64 / o.compr_data_size as f64,
            k.same_pages,
            o.same_pages,
            k.huge_pages,
            o.huge_pages,
        );
        if (rel - 1.0).abs() > TOLERANCE {
            failures.push(format!("{name}: ours/kernel = {rel:.4}"));
        }
        if k.same_pages != o.same_pages {
            failures.push(format!(
                "{name}: same pages kernel {} ours {}",
                k.same_pages, o.same_pages
            ));
        }
    }
    drop(dev);
    assert!(failures.is_empty(), "{failures:?}");
}
