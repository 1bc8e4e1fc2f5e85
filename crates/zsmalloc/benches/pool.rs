//! Criterion micro-benchmarks: malloc+write, read and free per size class, on one and on two
//! threads (each thread with its own objects in one shared pool), in both layouts: the zram
//! device's (the default: min-waste zspage lengths, no handle header) and the seed kernel's
//! (`PoolConfig::seed`: its zspage lengths, the handle written into every object).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use zsmalloc::{Handle, Pool, PoolConfig};

const SIZES: &[usize] = &[64, 256, 1024, 2048, 3072, 4096];
const BATCH: usize = 2048;

/// Runs `f` on `threads` threads, each over its own batch of handles, and returns the wall
/// time of the slowest.
fn on_threads(threads: usize, f: impl Fn(usize) -> Duration + Sync) -> Duration {
    std::thread::scope(|s| {
        let f = &f;
        let hs: Vec<_> = (0..threads).map(|t| s.spawn(move || f(t))).collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_default())
            .max()
            .unwrap_or_default()
    })
}

fn malloc_batch(pool: &Pool, size: usize, data: &[u8]) -> Vec<Handle> {
    (0..BATCH)
        .map(|_| {
            let h = pool.malloc(size).expect("malloc");
            pool.write(h, &data[..size.min(pool.capacity(h).unwrap_or(0))])
                .expect("write");
            h
        })
        .collect()
}

fn bench_pool(c: &mut Criterion) {
    let data = vec![0x5au8; 4096];
    let layouts = [
        ("device", PoolConfig::default()),
        ("seed", PoolConfig::seed(8)),
    ];
    for ((layout, config), threads) in layouts.into_iter().flat_map(|l| [(l, 1usize), (l, 2)]) {
        let pool = || Pool::with_config(config).expect("pool");
        let mut group = c.benchmark_group(format!("pool/{layout}/{threads}t"));
        group
            .sample_size(20)
            .measurement_time(Duration::from_secs(2));
        for &size in SIZES {
            let size = size.min(4096);
            group.throughput(Throughput::Elements((BATCH * threads) as u64));
            group.bench_with_input(BenchmarkId::new("malloc_write", size), &size, |b, &size| {
                b.iter_custom(|iters| {
                    let pool = pool();
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += on_threads(threads, |_| {
                            let start = Instant::now();
                            let hs = malloc_batch(&pool, size, &data);
                            let t = start.elapsed();
                            hs.into_iter().for_each(|h| pool.free(h).expect("free"));
                            t
                        });
                    }
                    total
                });
            });
            group.bench_with_input(BenchmarkId::new("read", size), &size, |b, &size| {
                b.iter_custom(|iters| {
                    let pool = pool();
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += on_threads(threads, |_| {
                            let hs = malloc_batch(&pool, size, &data);
                            let mut buf = vec![0u8; 4096];
                            let start = Instant::now();
                            for &h in &hs {
                                let n = pool.capacity(h).expect("cap").min(size);
                                pool.read(h, &mut buf[..n]).expect("read");
                                black_box(&buf);
                            }
                            let t = start.elapsed();
                            hs.into_iter().for_each(|h| pool.free(h).expect("free"));
                            t
                        });
                    }
                    total
                });
            });
            group.bench_with_input(BenchmarkId::new("free", size), &size, |b, &size| {
                b.iter_custom(|iters| {
                    let pool = pool();
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += on_threads(threads, |_| {
                            let hs = malloc_batch(&pool, size, &data);
                            let start = Instant::now();
                            hs.into_iter().for_each(|h| pool.free(h).expect("free"));
                            start.elapsed()
                        });
                    }
                    total
                });
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench_pool);
criterion_main!(benches);
