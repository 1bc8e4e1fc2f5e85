//! The seeds' published figures, copied from the seeds' text in their own columns (the
//! report prints them beside what it measures), and a reader for their numbers.

/// Seed 000: pages per zspage, wasted bytes and used% of a 1568-byte class.
pub const S000_WASTE_1568: [(usize, usize, usize); 5] = [
    (1, 960, 76),
    (2, 352, 95),
    (3, 1312, 89),
    (4, 704, 95),
    (5, 96, 99),
];

/// Seed 000: zspage order and the unique size classes it gives.
pub const S000_UNIQUE: [(u32, usize); 3] = [(2, 69), (3, 123), (4, 191)];

/// Seed 000: zspage order and the largest class that is not huge.
pub const S000_HUGE: [(u32, usize); 3] = [(2, 3264), (3, 3632), (4, 3840)];

/// Seed 000's `mm_stat` after its untar and kernel build, five reboots per order.
pub const S000_MM_STAT: [(u32, &str); 3] = [
    (
        2,
        "1691791360 628086729 655171584        0 655171584       60        0    34043
1691787264 628089196 655175680        0 655175680       60        0    34046
1691803648 628098840 655187968        0 655187968       59        0    34047
1691795456 628091503 655183872        0 655183872       60        0    34044
1691799552 628086877 655183872        0 655183872       60        0    34047",
    ),
    (
        3,
        "1691803648 627792993 641794048        0 641794048       60        0    33591
1691787264 627779342 641708032        0 641708032       59        0    33591
1691811840 627786616 641769472        0 641769472       60        0    33591
1691803648 627794468 641818624        0 641818624       59        0    33592
1691783168 627780882 641794048        0 641794048       61        0    33591",
    ),
    (
        4,
        "1691803648 627726635 639655936        0 639655936       60        0    33435
1691811840 627733348 639643648        0 639643648       61        0    33434
1691795456 627726290 639614976        0 639614976       60        0    33435
1691803648 627730458 639688704        0 639688704       60        0    33434
1691811840 627727771 639688704        0 639688704       60        0    33434",
    ),
];

/// Seed 000's `mem_used_max` change against order 2 (Student's t, 95%), percent.
pub const S000_CHANGE: [(u32, f64); 2] = [(3, -2.04581), (4, -2.36915)];

/// Seed 003: one untar and the deletes, zsmalloc (`untar-merge.out`).
pub const S003_ONCE_ZSMALLOC: &str = "526.23MB 199.18MB 209.81MB 10.64MB 5.34%
288.68MB 97.45MB 104.08MB 6.63MB 6.80%
177.68MB 61.14MB 66.93MB 5.79MB 9.47%
146.83MB 47.34MB 52.79MB 5.45MB 11.51%
124.52MB 38.87MB 44.30MB 5.43MB 13.96%
104.29MB 31.70MB 36.83MB 5.13MB 16.19%";

/// Seed 003: one untar and the deletes, afmalloc (`untar-afmalloc.out`).
pub const S003_ONCE_AFMALLOC: &str = "526.27MB 199.18MB 206.37MB 8.00MB 4.02% 7.19MB 3.61%
288.71MB 97.45MB 101.25MB 5.86MB 6.01% 3.80MB 3.90%
177.71MB 61.14MB 63.44MB 4.39MB 7.19% 2.30MB 3.76%
146.86MB 47.34MB 49.20MB 3.97MB 8.39% 1.86MB 3.93%
124.55MB 38.88MB 40.41MB 3.71MB 9.54% 1.53MB 3.95%
104.32MB 31.70MB 32.96MB 3.43MB 10.81% 1.26MB 3.96%";

/// Seed 003: ten cycles, zsmalloc: the first two and the last two (the seed snips the rest).
pub const S003_CYCLES_ZSMALLOC: &str = "526.24MB 199.18MB 209.79MB 10.61MB 5.33%
288.69MB 97.45MB 104.09MB 6.64MB 6.81%
177.69MB 61.14MB 66.89MB 5.75MB 9.40%
146.84MB 47.34MB 52.77MB 5.43MB 11.46%
124.53MB 38.88MB 44.28MB 5.40MB 13.90%
104.29MB 31.71MB 36.87MB 5.17MB 16.29%
535.59MB 200.30MB 211.77MB 11.47MB 5.73%
294.84MB 98.28MB 106.24MB 7.97MB 8.11%
179.99MB 61.58MB 69.34MB 7.76MB 12.60%
148.67MB 47.75MB 55.19MB 7.43MB 15.57%
125.98MB 39.26MB 46.62MB 7.36MB 18.75%
105.05MB 32.03MB 39.18MB 7.15MB 22.32%
(snip...)
535.59MB 200.31MB 211.88MB 11.57MB 5.77%
294.84MB 98.28MB 106.62MB 8.34MB 8.49%
179.99MB 61.59MB 73.83MB 12.24MB 19.88%
148.67MB 47.76MB 59.58MB 11.82MB 24.76%
125.98MB 39.27MB 51.10MB 11.84MB 30.14%
105.05MB 32.04MB 43.68MB 11.64MB 36.31%
535.59MB 200.31MB 211.89MB 11.58MB 5.78%
294.84MB 98.28MB 106.68MB 8.40MB 8.55%
179.99MB 61.59MB 74.14MB 12.55MB 20.37%
148.67MB 47.76MB 59.94MB 12.18MB 25.50%
125.98MB 39.27MB 51.46MB 12.19MB 31.04%
105.05MB 32.04MB 44.01MB 11.97MB 37.35%";

/// Seed 002's latencies: workload, base kernel, optimized (VMA readahead) kernel.
pub const S002: [(&str, &str, &str); 3] = [
    (
        "sequential",
        "samples: 100952, average: 40.08us, min: 0us, max: 16.2ms
50th: 1us, 60th: 1us, 70th: 1us, 80th: 3us, 90th: 158us, 95th: 181us, 99th: 254us",
        "samples: 118509, average: 12.04us, min: 0us, max: 17.42ms
50th: 1us, 60th: 2us, 70th: 2us, 80th: 2us, 90th: 8us, 95th: 11us, 99th: 42us",
    ),
    (
        "random",
        "samples: 70757, average: 70.71us, min: 0us, max: 15.19ms
50th: 78us, 60th: 83us, 70th: 91us, 80th: 93us, 90th: 97us, 95th: 103us, 99th: 120us",
        "samples: 70842, average: 72.55us, min: 0us, max: 15.47ms
50th: 79us, 60th: 83us, 70th: 92us, 80th: 94us, 90th: 97us, 95th: 104us, 99th: 122us",
    ),
    (
        "combined",
        "samples: 228658, average: 68.52us, min: 0us, max: 23.67ms
50th: 2us, 60th: 42us, 70th: 74us, 80th: 106us, 90th: 150us, 95th: 181us, 99th: 263us",
        "samples: 271851, average: 26.8us, min: 0us, max: 21.24ms
50th: 1us, 60th: 1us, 70th: 2us, 80th: 3us, 90th: 58us, 95th: 115us, 99th: 225us",
    ),
];

/// Seed 004's figure: what folding saved on the author's machine.
pub const S004_CLAIM: &str = "\"at high loads, on average, when calling the fold mechanism, we can save \
up to 15-20% of the memory usage\" (8 GB RAM + 1 GB zram swap)";

/// The numbers of a line of seed text, in order: `5.34%` gives 5.34, `199.18MB` 199.18,
/// `16.2ms` 16200 (microseconds, the seed 002 lines' unit).
pub fn numbers(line: &str) -> Vec<f64> {
    line.split([' ', ','])
        .filter_map(|w| {
            let w = w.trim();
            let w = w.split_once(':').map_or(w, |(_, v)| v);
            let (num, scale) = if let Some(n) = w.strip_suffix("ms") {
                (n, 1000.0)
            } else if let Some(n) = w.strip_suffix("us") {
                (n, 1.0)
            } else {
                (w.trim_end_matches(['%', 'B', 'M']), 1.0)
            };
            num.parse::<f64>().ok().map(|v| v * scale)
        })
        .collect()
}

/// The `column`th number of every line of `text` that has one.
pub fn column(text: &str, column: usize) -> Vec<f64> {
    text.lines()
        .filter_map(|l| numbers(l).get(column).copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_lines_read_as_numbers() {
        assert_eq!(
            numbers("526.23MB 199.18MB 209.81MB 10.64MB 5.34%"),
            [526.23, 199.18, 209.81, 10.64, 5.34]
        );
        let s = numbers(S002[0].1.lines().next().unwrap());
        assert_eq!(s, [100952.0, 40.08, 0.0, 16200.0]);
        assert_eq!(column(S003_ONCE_ZSMALLOC, 4).len(), 6);
        assert_eq!(column(S003_CYCLES_ZSMALLOC, 4).len(), 24);
        assert_eq!(column(S000_MM_STAT[0].1, 4)[0], 655171584.0);
    }
}
