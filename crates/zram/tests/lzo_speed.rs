//! A quick throughput print for the LZO codec on real 4 KiB pages (no assertions on
//! time). Run with `cargo test --release -p zram --test lzo_speed -- --ignored --nocapture`.

use std::fs;
use std::path::Path;
use std::time::Instant;

use zram::lzo::{Compressor, Variant, decompress};

const PAGE: usize = 4096;

/// Up to `budget` bytes from the files directly in `dir` (sorted), cut to whole pages.
fn sample(dir: &str, suffix: &str, budget: usize) -> Vec<u8> {
    let mut files: Vec<_> = fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    let mut data = Vec::new();
    for f in files {
        if data.len() >= budget {
            break;
        }
        if f.is_file() && f.to_string_lossy().ends_with(suffix) {
            data.extend(fs::read(&f).unwrap_or_default());
        }
    }
    data.truncate(budget.min(data.len() / PAGE * PAGE));
    data
}

fn measure(name: &str, data: &[u8]) {
    for variant in [Variant::Lzo, Variant::LzoRle] {
        let mut c = Compressor::new(variant);
        let mut streams: Vec<Vec<u8>> = Vec::new();
        let mut out = Vec::new();
        let rounds = 5;
        let t = Instant::now();
        for _ in 0..rounds {
            streams.clear();
            for page in data.chunks(PAGE) {
                c.compress(page, &mut out);
                streams.push(out.clone());
            }
        }
        let compress = t.elapsed().as_secs_f64() / f64::from(rounds);
        let mut page = vec![0u8; PAGE];
        let t = Instant::now();
        for _ in 0..rounds {
            for s in &streams {
                let n = decompress(s, &mut page).expect("own stream");
                assert_eq!(n, PAGE);
            }
        }
        let decompress = t.elapsed().as_secs_f64() / f64::from(rounds);
        let total: usize = streams.iter().map(Vec::len).sum();
        let mb = data.len() as f64 / 1e6;
        println!(
            "{name} ({} pages) {}: ratio {:.3}, compress {:.0} MB/s, decompress {:.0} MB/s",
            data.len() / PAGE,
            variant.kernel_name(),
            data.len() as f64 / total as f64,
            mb / compress,
            mb / decompress,
        );
    }
}

#[test]
#[ignore = "prints throughput; run in release with --ignored --nocapture"]
fn lzo_throughput() {
    for (name, dir, suffix) in [
        ("text: /usr/include/*.h", "/usr/include", ".h"),
        ("binaries: /usr/bin", "/usr/bin", ""),
    ] {
        if !Path::new(dir).is_dir() {
            println!("{name}: no {dir}, skipped");
            continue;
        }
        let data = sample(dir, suffix, 8 << 20);
        if data.is_empty() {
            println!("{name}: nothing readable, skipped");
            continue;
        }
        measure(name, &data);
    }
    let mut zeros_and_text = Vec::new();
    for i in 0..2048usize {
        zeros_and_text.resize(zeros_and_text.len() + (i * 97) % 3000, 0);
        zeros_and_text.extend(format!("line {i}: the quick brown fox\n").bytes());
    }
    zeros_and_text.truncate(zeros_and_text.len() / PAGE * PAGE);
    measure("synthetic zero runs and text", &zeros_and_text);
}
