//! Parity with the kernel's zram, device against device: for each of lzo, lzo-rle, lz4, lz4
//! at acceleration 8 (`algorithm_params level=8`, where the kernel has that file) and lz4
//! with a dictionary (`algorithm_params dict=`: the corpus's first 64 KiB) that the kernel
//! offers, the same corpus of real pages (binaries, C headers, zero and
//! same-filled pages) is written with O_DIRECT to a hot-added kernel zram device and through
//! our `Zram` with the same algorithm and chain size 8. `orig_data_size` and `same_pages`
//! must match exactly, `compr_data_size` within 2% (lz4, the same C library on both sides,
//! within 0.1%), and both devices must read the corpus back.
//!
//! Needs root and `/sys/class/zram-control`; otherwise it says why and returns. The kernel
//! device is ours alone (hot-added; zram0 and zram1 are never touched) and is reset and
//! hot-removed on every way out, panics included, by a guard's `Drop`.

use std::io;

use lab::kernel::{KernelZram, absent_reason, read_direct, write_direct};

/// Bytes written to our device per call.
const CHUNK: usize = 64 * PAGE_SIZE;
use zram::{Algorithm, AlgorithmParams, Header, PAGE_SIZE, PoolConfig, Zram, ZramConfig};

pub mod common;

use common::files;

const DISKSIZE: u64 = 64 << 20;
const TOLERANCE: f64 = 0.02;
const LZ4_TOLERANCE: f64 = 0.001;

/// About 14 MiB of this machine's binaries and headers, with zero pages and pages of a
/// repeated non-zero word mixed in; whole pages.
fn corpus() -> Vec<u8> {
    let mut real = files("/usr/bin", "", 256 << 10, 10 << 20);
    real.extend(files("/usr/include", ".h", 64 << 10, 4 << 20));
    real.truncate(real.len() / PAGE_SIZE * PAGE_SIZE);
    let mut out = Vec::with_capacity(real.len() + (1 << 20));
    for (i, page) in real.chunks_exact(PAGE_SIZE).enumerate() {
        out.extend_from_slice(page);
        if i % 37 == 0 {
            out.extend_from_slice(&[0u8; PAGE_SIZE]);
        }
        if i % 101 == 0 {
            out.extend_from_slice(
                &(0x0102_0304_0506_0708u64 ^ i as u64)
                    .to_ne_bytes()
                    .repeat(512),
            );
        }
    }
    out
}

#[derive(Debug)]
struct Figures {
    orig: u64,
    compr: u64,
    used: u64,
    same: u64,
    huge: u64,
}

/// A case's algorithm parameters, as the kernel's `algorithm_params` takes them.
struct Params<'a> {
    level: Option<i32>,
    dict: Option<&'a std::path::Path>,
}

fn kernel_run(name: &str, params: &Params<'_>, corpus: &[u8]) -> io::Result<Figures> {
    let dev = KernelZram::add()?;
    dev.set("comp_algorithm", name)?;
    let chosen = dev.get("comp_algorithm")?;
    assert!(
        chosen.contains(&format!("[{name}]")),
        "zram{}: {chosen:?}",
        dev.id()
    );
    if let Some(level) = params.level {
        dev.set("algorithm_params", &format!("algo={name} level={level}"))?;
    }
    if let Some(dict) = params.dict {
        dev.set(
            "algorithm_params",
            &format!("algo={name} dict={}", dict.display()),
        )?;
    }
    dev.set("disksize", &DISKSIZE.to_string())?;
    let file = dev.open_direct()?;
    write_direct(&file, 0, corpus)?;
    let back = read_direct(&file, 0, corpus.len())?;
    assert!(
        back == corpus,
        "zram{} ({name}) read back different data",
        dev.id()
    );
    drop(file);
    let f = dev.mm_stat()?;
    Ok(Figures {
        orig: f[0],
        compr: f[1],
        used: f[2],
        same: f[5],
        huge: f[7],
    })
}

fn our_run(algorithm: Algorithm, params: &Params<'_>, corpus: &[u8]) -> Figures {
    let zram = Zram::new(ZramConfig {
        disksize: DISKSIZE,
        algorithm,
        params: AlgorithmParams {
            level: params.level,
            dictionary: params
                .dict
                .map(|p| std::sync::Arc::new(std::fs::read(p).expect("dictionary"))),
        },
        // The kernel's object layout, so that the huge threshold is the kernel's too.
        pool: PoolConfig {
            header: Header::Handle,
            ..PoolConfig::default()
        },
        auto_compact: None,
        ..ZramConfig::default()
    })
    .expect("device");
    for (i, chunk) in corpus.chunks(CHUNK).enumerate() {
        zram.write((i * CHUNK) as u64, chunk).expect("write");
    }
    let mut back = vec![0u8; corpus.len()];
    zram.read(0, &mut back).expect("read");
    assert!(back == corpus, "{algorithm}: read back different data");
    zram.pool().check_invariants().expect("pool invariants");
    let m = zram.mm_stat();
    Figures {
        orig: m.orig_data_size,
        compr: m.compr_data_size,
        used: m.mem_used_total,
        same: m.same_pages,
        huge: m.huge_pages,
    }
}

#[test]
fn compressed_sizes_match_the_kernel() {
    if let Some(why) = absent_reason() {
        println!("SKIPPED compressed_sizes_match_the_kernel: {why}");
        return;
    }
    let offered = {
        // Ask a throwaway device which algorithms the kernel has.
        let dev = KernelZram::add().expect("hot_add");
        dev.get("comp_algorithm").expect("comp_algorithm")
    };
    let offered: Vec<String> = offered
        .split_whitespace()
        .map(|a| a.trim_matches(['[', ']']).to_owned())
        .collect();
    let corpus = corpus();
    assert!(corpus.len() > 8 << 20, "corpus only {} bytes", corpus.len());
    let zero_and_same = corpus
        .chunks_exact(PAGE_SIZE)
        .filter(|p| p.chunks_exact(8).all(|w| w == &p[..8]))
        .count() as u64;
    println!(
        "corpus: {} pages, {} same-filled; kernel offers {offered:?}",
        corpus.len() / PAGE_SIZE,
        zero_and_same
    );

    let mut compared = 0;
    let scratch = tempfile::tempdir().expect("tempdir");
    let dict = scratch.path().join("lz4.dict");
    std::fs::write(&dict, &corpus[..64 << 10]).expect("dictionary file");
    let plain = |level| Params { level, dict: None };
    let cases = [
        (Algorithm::Lzo, plain(None)),
        (Algorithm::LzoRle, plain(None)),
        (Algorithm::Lz4, plain(None)),
        (Algorithm::Lz4, plain(Some(8))),
        (
            Algorithm::Lz4,
            Params {
                level: None,
                dict: Some(&dict),
            },
        ),
    ];
    for (algorithm, params) in cases {
        let name = algorithm.name();
        if !offered.iter().any(|a| a == name) {
            println!("{name}: not offered by this kernel, skipped");
            continue;
        }
        let with_params = params.level.is_some() || params.dict.is_some();
        if with_params && !std::path::Path::new("/sys/block/zram0/algorithm_params").exists() {
            println!("{name} with parameters: this kernel has no algorithm_params, skipped");
            continue;
        }
        let k = kernel_run(name, &params, &corpus)
            .unwrap_or_else(|e| panic!("kernel {name} {:?}: {e}", params.level));
        let o = our_run(algorithm, &params, &corpus);
        let name = match (params.level, params.dict) {
            (Some(l), _) => format!("{name} level={l}"),
            (None, Some(_)) => format!("{name} dict"),
            (None, None) => name.to_owned(),
        };
        let diff = (o.compr as f64 - k.compr as f64) / k.compr as f64;
        println!(
            "{name:8} kernel: orig {} compr {} used {} same {} huge {}\n\
             {name:8} ours:   orig {} compr {} used {} same {} huge {}\n\
             {name:8} compr_data_size differs by {:+.4}%",
            k.orig,
            k.compr,
            k.used,
            k.same,
            k.huge,
            o.orig,
            o.compr,
            o.used,
            o.same,
            o.huge,
            diff * 100.0
        );
        assert_eq!(o.orig, corpus.len() as u64, "{name}");
        assert_eq!(k.orig, o.orig, "{name}: orig_data_size");
        assert_eq!(k.same, o.same, "{name}: same_pages");
        assert_eq!(o.same, zero_and_same, "{name}: same_pages vs corpus");
        let tolerance = if algorithm == Algorithm::Lz4 {
            LZ4_TOLERANCE
        } else {
            TOLERANCE
        };
        assert!(
            diff.abs() <= tolerance,
            "{name}: compr_data_size kernel {} ours {} ({:+.3}%)",
            k.compr,
            o.compr,
            diff * 100.0
        );
        compared += 1;
    }
    assert!(compared > 0, "the kernel offers none of lzo, lzo-rle, lz4");
}
