//! Conformance with seed 000 ("zsmalloc: turn zspage order into runtime variable"): every
//! class row the seed prints, its class counts, its huge-class watermarks, its merging
//! examples and its object distribution tables, for chain sizes 4, 8 and 16 (the seed's
//! "order" 2, 3 and 4). Plus, for every chain size 1..=16, the kernel's class mapping
//! property checked against an independent re-derivation of `zs_create_pool`.

use zsmalloc::{ClassGeometry, ClassStats, INUSE_BUCKETS, Pool, PoolConfig, format_class_table};

const PAGE: usize = 4096;
/// `ZS_HANDLE_SIZE`: zs_malloc adds it to the size before looking the class up.
const HANDLE: usize = 8;

/// `(class index, size, pages_per_zspage)` as printed by the seed.
type Row = (usize, usize, usize);

/// Chain 4 ("order 2"): the merging example (94/100) and the bottom of the classes file.
const ORDER2_EXAMPLE: &[Row] = &[(94, 1536, 3), (100, 1632, 2)];
const ORDER2_BOTTOM: &[Row] = &[(202, 3264, 4), (254, 4096, 1)];

/// Chain 8 ("order 3"): the bottom of the classes file, huge watermark 3632.
const ORDER3_BOTTOM: &[Row] = &[
    (202, 3264, 4),
    (211, 3408, 5),
    (217, 3504, 6),
    (222, 3584, 7),
    (225, 3632, 8),
    (254, 4096, 1),
];

/// Chain 16 ("order 4"): the bottom of the classes file, huge watermark 3840.
const ORDER4_BOTTOM: &[Row] = &[
    (202, 3264, 4),
    (206, 3328, 13),
    (207, 3344, 9),
    (208, 3360, 14),
    (211, 3408, 5),
    (212, 3424, 16),
    (214, 3456, 11),
    (217, 3504, 6),
    (219, 3536, 13),
    (222, 3584, 7),
    (223, 3600, 15),
    (225, 3632, 8),
    (228, 3680, 9),
    (230, 3712, 10),
    (232, 3744, 11),
    (234, 3776, 12),
    (235, 3792, 13),
    (236, 3808, 14),
    (238, 3840, 15),
    (254, 4096, 1),
];

/// One row of the kernel's class table, columns in kernel order.
#[expect(clippy::too_many_arguments, reason = "one argument per kernel column")]
const fn row(
    index: usize,
    size: usize,
    almost_full: usize,
    almost_empty: usize,
    obj_allocated: usize,
    obj_used: usize,
    pages_used: usize,
    pages_per_zspage: usize,
    freeable: usize,
) -> ClassStats {
    ClassStats {
        index,
        size,
        almost_full,
        almost_empty,
        obj_allocated,
        obj_used,
        pages_used,
        pages_per_zspage,
        freeable,
        // The seed's kernel printed the classic columns; see `check_distribution`.
        inuse: [0; INUSE_BUCKETS.len()],
    }
}

/// "Order 2 (4 pages per zspage)" object distribution (linux-6.0 untar + build).
const ORDER2_DISTRIBUTION: &[ClassStats] = &[
    row(71, 1168, 0, 0, 6146, 6146, 1756, 2, 0),
    row(74, 1216, 0, 1, 4560, 4552, 1368, 3, 0),
    row(76, 1248, 0, 1, 2938, 2934, 904, 4, 0),
    row(83, 1360, 0, 0, 10971, 10971, 3657, 1, 0),
    row(91, 1488, 0, 0, 16126, 16126, 5864, 4, 0),
    row(94, 1536, 0, 1, 5912, 5908, 2217, 3, 0),
    row(100, 1632, 0, 0, 11990, 11990, 4796, 2, 0),
    row(107, 1744, 0, 1, 15771, 15768, 6759, 3, 0),
    row(111, 1808, 0, 1, 10386, 10380, 4616, 4, 0),
    row(126, 2048, 0, 0, 45444, 45444, 22722, 1, 0),
    row(144, 2336, 0, 0, 47446, 47446, 27112, 4, 0),
    row(151, 2448, 1, 0, 10760, 10759, 6456, 3, 0),
    row(168, 2720, 0, 0, 10173, 10173, 6782, 2, 0),
    row(190, 3072, 0, 1, 1700, 1697, 1275, 3, 0),
    row(202, 3264, 0, 1, 290, 286, 232, 4, 0),
    row(254, 4096, 0, 0, 34051, 34051, 34051, 1, 0),
];

/// "Order 3 (8 pages per zspage)" object distribution.
const ORDER3_DISTRIBUTION: &[ClassStats] = &[
    row(71, 1168, 0, 1, 2996, 2994, 856, 2, 0),
    row(72, 1184, 0, 1, 1632, 1609, 476, 7, 0),
    row(73, 1200, 1, 0, 1445, 1442, 425, 5, 0),
    row(74, 1216, 0, 0, 1510, 1510, 453, 3, 0),
    row(75, 1232, 0, 1, 1495, 1479, 455, 7, 0),
    row(76, 1248, 0, 1, 1456, 1451, 448, 4, 0),
    row(78, 1280, 0, 1, 3040, 3033, 950, 5, 0),
    row(79, 1296, 0, 1, 1584, 1571, 504, 7, 0),
    row(83, 1360, 0, 0, 6375, 6375, 2125, 1, 0),
    row(84, 1376, 0, 1, 1817, 1796, 632, 8, 0),
    row(87, 1424, 0, 1, 6020, 6006, 2107, 7, 0),
    row(88, 1440, 0, 1, 2108, 2101, 744, 6, 0),
    row(89, 1456, 0, 1, 2072, 2064, 740, 5, 0),
    row(91, 1488, 0, 1, 4169, 4159, 1516, 4, 0),
    row(92, 1504, 0, 1, 2014, 2007, 742, 7, 0),
    row(94, 1536, 0, 1, 3904, 3900, 1464, 3, 0),
    row(95, 1552, 0, 1, 1890, 1873, 720, 8, 0),
    row(96, 1568, 0, 1, 1963, 1958, 755, 5, 0),
    row(97, 1584, 0, 1, 1980, 1974, 770, 7, 0),
    row(100, 1632, 0, 1, 6190, 6187, 2476, 2, 0),
    row(103, 1680, 0, 0, 6477, 6477, 2667, 7, 0),
    row(104, 1696, 0, 1, 2256, 2253, 940, 5, 0),
    row(105, 1712, 0, 1, 2356, 2340, 992, 8, 0),
    row(107, 1744, 1, 0, 4697, 4696, 2013, 3, 0),
    row(110, 1792, 0, 1, 7744, 7734, 3388, 7, 0),
    row(111, 1808, 0, 1, 2655, 2649, 1180, 4, 0),
    row(114, 1856, 0, 1, 8371, 8365, 3805, 5, 0),
    row(116, 1888, 1, 0, 5863, 5862, 2706, 6, 0),
    row(117, 1904, 0, 1, 2955, 2942, 1379, 7, 0),
    row(118, 1920, 0, 1, 3009, 2997, 1416, 8, 0),
    row(126, 2048, 0, 0, 25276, 25276, 12638, 1, 0),
    row(128, 2080, 0, 1, 6060, 6052, 3232, 8, 0),
    row(129, 2096, 1, 0, 3081, 3080, 1659, 7, 0),
    row(134, 2176, 0, 1, 14835, 14830, 7912, 8, 0),
    row(135, 2192, 0, 1, 2769, 2758, 1491, 7, 0),
    row(137, 2224, 0, 1, 5082, 5077, 2772, 6, 0),
    row(140, 2272, 0, 1, 7236, 7232, 4020, 5, 0),
    row(144, 2336, 0, 1, 8428, 8423, 4816, 4, 0),
    row(147, 2384, 0, 1, 5316, 5313, 3101, 7, 0),
    row(151, 2448, 0, 1, 5445, 5443, 3267, 3, 0),
    row(155, 2512, 0, 0, 4121, 4121, 2536, 8, 0),
    row(158, 2560, 0, 1, 2208, 2205, 1380, 5, 0),
    row(160, 2592, 0, 0, 1133, 1133, 721, 7, 0),
    row(168, 2720, 0, 0, 2712, 2712, 1808, 2, 0),
    row(177, 2864, 1, 0, 1100, 1098, 770, 7, 0),
    row(180, 2912, 0, 1, 189, 183, 135, 5, 0),
    row(184, 2976, 0, 1, 176, 166, 128, 8, 0),
    row(190, 3072, 0, 0, 252, 252, 189, 3, 0),
    row(197, 3184, 0, 1, 198, 192, 154, 7, 0),
    row(202, 3264, 0, 1, 100, 96, 80, 4, 0),
    row(211, 3408, 0, 1, 210, 208, 175, 5, 0),
    row(217, 3504, 0, 1, 98, 94, 84, 6, 0),
    row(222, 3584, 0, 0, 104, 104, 91, 7, 0),
    row(225, 3632, 0, 1, 54, 50, 48, 8, 0),
    row(254, 4096, 0, 0, 33591, 33591, 33591, 1, 0),
];

fn pool(chain: usize) -> Pool {
    Pool::with_config(PoolConfig {
        populate: false,
        // One shard per class, so that filling a class is sequential, as in the kernel.
        shards: 1,
        ..PoolConfig::seed(chain)
    })
    .expect("valid chain size")
}

fn find(pool: &Pool, index: usize) -> ClassGeometry {
    *pool
        .classes()
        .classes()
        .iter()
        .find(|c| c.index == index)
        .unwrap_or_else(|| {
            panic!(
                "chain {}: class {index} is not a distinct class",
                pool.chain_size()
            )
        })
}

fn assert_rows(chain: usize, rows: &[Row]) {
    let p = pool(chain);
    for &(index, size, pages) in rows {
        let c = find(&p, index);
        assert_eq!(c.size, size, "chain {chain}: class {index} size");
        assert_eq!(
            c.pages_per_zspage, pages,
            "chain {chain}: class {index} pages_per_zspage"
        );
        assert_eq!(
            c.objs_per_zspage,
            pages * PAGE / size,
            "chain {chain}: class {index} objs_per_zspage"
        );
    }
}

/// The seed prints the *bottom* of the classes file: from class 202 on, the distinct classes
/// are exactly the rows shown.
fn assert_bottom(chain: usize, rows: &[Row]) {
    let p = pool(chain);
    let bottom: Vec<Row> = p
        .classes()
        .classes()
        .iter()
        .filter(|c| c.index >= 202)
        .map(|c| (c.index, c.size, c.pages_per_zspage))
        .collect();
    assert_eq!(bottom, rows, "chain {chain}: classes from 202 on");
}

#[test]
fn order2_rows() {
    assert_rows(4, ORDER2_EXAMPLE);
    assert_rows(4, ORDER2_BOTTOM);
    assert_bottom(4, ORDER2_BOTTOM);
    let dist: Vec<Row> = ORDER2_DISTRIBUTION
        .iter()
        .map(|r| (r.index, r.size, r.pages_per_zspage))
        .collect();
    assert_rows(4, &dist);
}

#[test]
fn order3_rows() {
    assert_rows(8, ORDER3_BOTTOM);
    assert_bottom(8, ORDER3_BOTTOM);
    let dist: Vec<Row> = ORDER3_DISTRIBUTION
        .iter()
        .map(|r| (r.index, r.size, r.pages_per_zspage))
        .collect();
    assert_rows(8, &dist);
}

#[test]
fn order4_rows() {
    assert_rows(16, ORDER4_BOTTOM);
    assert_bottom(16, ORDER4_BOTTOM);
}

#[test]
fn unique_class_counts() {
    // "zspage order / # unique size classes": 2 -> 69, 3 -> 123, 4 -> 191.
    for (chain, count) in [(4, 69), (8, 123), (16, 191)] {
        assert_eq!(
            pool(chain).classes().classes().len(),
            count,
            "chain {chain}"
        );
        // The class table prints one row per distinct class.
        assert_eq!(pool(chain).class_stats().len(), count, "chain {chain}");
    }
}

#[test]
fn huge_watermarks() {
    // Last normal class: 202 (3264 bytes) for order 2, 225 (3632) for order 3, 238 (3840)
    // for order 4; everything larger lands in class 254, one object per page.
    for (chain, last_normal, size) in [(4, 202, 3264), (8, 225, 3632), (16, 238, 3840)] {
        let p = pool(chain);
        let classes = p.classes().classes();
        let n = classes.len();
        assert_eq!(classes[n - 1].index, 254, "chain {chain}");
        assert!(classes[n - 1].is_huge(), "chain {chain}");
        assert_eq!(classes[n - 1].size, 4096);
        assert_eq!(classes[n - 2].index, last_normal, "chain {chain}");
        assert_eq!(classes[n - 2].size, size, "chain {chain}");
        assert!(!classes[n - 2].is_huge(), "chain {chain}");
        // zs_huge_class_size: the class size minus (ZS_HANDLE_SIZE - 1).
        let huge = size - (HANDLE - 1);
        assert_eq!(p.huge_class_size(), huge, "chain {chain}");
        assert_eq!(p.lookup_class(huge).unwrap().index, 254, "chain {chain}");
        assert_eq!(
            p.lookup_class(huge - 1).unwrap().index,
            last_normal,
            "chain {chain}"
        );
        // "classes from #203 to #254" are huge: all merged into 254.
        for nominal in last_normal + 1..=254 {
            assert_eq!(
                p.classes().class_at_index(nominal).unwrap().index,
                254,
                "chain {chain}: nominal class {nominal}"
            );
        }
    }
}

/// The smallest and the largest malloc size that land in nominal class `i`.
fn nominal_sizes(i: usize) -> (usize, usize) {
    let size = 32 + 16 * i;
    (size - 16 + 1 - HANDLE, size - HANDLE)
}

#[test]
fn order2_merging_example() {
    let p = pool(4);
    // "Size classes #95-99 are merged with size class #100."
    for nominal in 95..=99 {
        let (lo, hi) = nominal_sizes(nominal);
        for size in [lo, (lo + hi) / 2, hi] {
            assert_eq!(
                p.lookup_class(size).unwrap().index,
                100,
                "size {size} (nominal {nominal})"
            );
        }
        assert_eq!(p.classes().class_at_index(nominal).unwrap().index, 100);
    }
    // Class 94 stays itself, 101 is not 100.
    assert_eq!(p.lookup_class(nominal_sizes(94).1).unwrap().index, 94);
    assert_ne!(p.lookup_class(nominal_sizes(101).0).unwrap().index, 100);
    // "storing an object of size 1568 bytes instead of using class #96 we end up storing it
    // in size class #100 ... 2 physical pages and can hold 5 objects".
    let c100 = p.lookup_class(1568 - HANDLE).unwrap();
    assert_eq!(
        (
            c100.index,
            c100.size,
            c100.pages_per_zspage,
            c100.objs_per_zspage
        ),
        (100, 1632, 2, 5)
    );
    // "Order 2 ... tends to put many objects in size class 2048, which is merged with size
    // classes #112-#125".
    for nominal in 112..=125 {
        assert_eq!(
            p.classes().class_at_index(nominal).unwrap().index,
            126,
            "nominal {nominal}"
        );
    }
    assert_eq!(p.classes().class_at_index(111).unwrap().index, 111);
}

#[test]
fn class_96_trace() {
    // The seed's get_pages_per_zspage() trace for class #96 (1568 bytes).
    let trace = [
        (1, 960, 76),
        (2, 352, 95),
        (3, 1312, 89),
        (4, 704, 95),
        (5, 96, 99),
    ];
    for (pages, waste, used) in trace {
        let zspage = pages * PAGE;
        assert_eq!(zspage % 1568, waste);
        assert_eq!((zspage - waste) * 100 / zspage, used);
    }
    assert_eq!(zsmalloc::class::pages_per_zspage(1568, 4), 2);
    assert_eq!(zsmalloc::class::pages_per_zspage(1568, 5), 5);
    // With chain 8, class 96 is a class of its own: 5 pages, 13 objects.
    let c = find(&pool(8), 96);
    assert_eq!(
        (c.size, c.pages_per_zspage, c.objs_per_zspage),
        (1568, 5, 13)
    );
}

/// Allocates `n` objects of `size` bytes and returns the pages the pool then holds.
fn pages_for(chain: usize, size: usize, n: usize) -> usize {
    let p = pool(chain);
    let handles: Vec<_> = (0..n).map(|_| p.malloc(size).unwrap()).collect();
    let pages = p.total_pages();
    for h in handles {
        p.free(h).unwrap();
    }
    assert_eq!(p.total_pages(), 0);
    pages
}

#[test]
fn seed_page_counts() {
    // "13 objects of size 1568 ... three zspages; in other words, 6 physical pages", whereas
    // a 5 page class #96 "would store 13 objects of size 1568 in a single zspage".
    assert_eq!(pages_for(4, 1568 - HANDLE, 13), 6);
    assert_eq!(pages_for(8, 1568 - HANDLE, 13), 5);
    // "size class #211 holds 210 objects of size 3408 and uses 175 physical pages, while
    // previously for those objects we would have used 210 physical pages."
    assert_eq!(pages_for(8, 3408 - HANDLE, 210), 175);
    assert_eq!(pages_for(4, 3408 - HANDLE, 210), 210);
}

/// Distribution rows: geometry agrees with the obj_allocated/pages_used columns, and filling
/// a fresh pool with `obj_used` objects of the class reproduces the whole row.
fn check_distribution(chain: usize, rows: &[ClassStats]) {
    for want in rows {
        let p = pool(chain);
        let c = find(&p, want.index);
        assert_eq!(c.size, want.size);
        assert_eq!(c.pages_per_zspage, want.pages_per_zspage);
        assert_eq!(
            want.obj_allocated % c.objs_per_zspage,
            0,
            "chain {chain}: class {}: obj_allocated is whole zspages",
            want.index
        );
        assert_eq!(
            want.obj_allocated / c.objs_per_zspage * c.pages_per_zspage,
            want.pages_used,
            "chain {chain}: class {}: objs_per_zspage {} disagrees with the seed's columns",
            want.index,
            c.objs_per_zspage
        );
        let size = c.capacity().min(4096);
        assert_eq!(p.lookup_class(size).unwrap().index, want.index);
        for _ in 0..want.obj_used {
            p.malloc(size).unwrap();
        }
        let got = p
            .class_stats()
            .into_iter()
            .find(|r| r.index == want.index)
            .unwrap();
        let classic = ClassStats {
            inuse: want.inuse,
            ..got
        };
        assert_eq!(&classic, want, "chain {chain}: class {} row", want.index);
        // The 6.3+ buckets: the full zspages, and the one partly used zspage (if any) in
        // the bucket of its ten-percent step.
        let (objs, used) = (c.objs_per_zspage, want.obj_used);
        let mut buckets = [0; INUSE_BUCKETS.len()];
        buckets[10] = used / objs;
        if used % objs > 0 {
            buckets[100 * (used % objs) / objs / 10] += 1;
        }
        assert_eq!(got.inuse, buckets, "chain {chain}: class {}", want.index);
        assert_eq!(
            got.inuse[..10].iter().sum::<usize>(),
            got.almost_full + got.almost_empty
        );
        assert_eq!(p.total_pages(), want.pages_used);
        p.check_invariants().unwrap();
    }
}

#[test]
fn order2_distribution_reproduced() {
    check_distribution(4, ORDER2_DISTRIBUTION);
}

#[test]
fn order3_distribution_reproduced() {
    check_distribution(8, ORDER3_DISTRIBUTION);
}

/// The seed's zero rows are what an empty pool prints, in the table format of kernels 6.3
/// and later (eleven fullness buckets where the seed's kernel had two columns; compared
/// column by column: the mail's indentation is not reliable).
#[test]
fn empty_pool_prints_seed_rows() {
    let header = "class size 10% 20% 30% 40% 50% 60% 70% 80% 90% 99% 100% obj_allocated \
                  obj_used pages_used pages_per_zspage freeable";
    for (chain, rows) in [
        (4, [ORDER2_EXAMPLE, ORDER2_BOTTOM].concat()),
        (8, ORDER3_BOTTOM.to_vec()),
        (16, ORDER4_BOTTOM.to_vec()),
    ] {
        let p = pool(chain);
        let table = format_class_table(&p.class_stats());
        let lines: Vec<Vec<&str>> = table
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(lines[0], header.split_whitespace().collect::<Vec<_>>());
        for (index, size, pages) in rows {
            let want = format!("{index} {size} {}0 0 0 {pages} 0", "0 ".repeat(11));
            let want: Vec<&str> = want.split_whitespace().collect();
            assert!(
                lines.contains(&want),
                "chain {chain}: row {want:?} missing from\n{table}"
            );
        }
    }
}

/// The kernel's `get_pages_per_zspage`, written out again from the seed's patch.
fn kernel_pages_per_zspage(class_size: usize, max_pages: usize) -> usize {
    let (mut max_usedpc, mut order) = (0, 1);
    for i in 1..=max_pages {
        let zspage_size = i * PAGE;
        let waste = zspage_size % class_size;
        let usedpc = (zspage_size - waste) * 100 / zspage_size;
        if usedpc > max_usedpc {
            max_usedpc = usedpc;
            order = i;
        }
    }
    order
}

/// The kernel's `zs_create_pool` class loop: for each nominal index, the index of the class
/// serving it, and the distinct classes.
fn kernel_classes(chain: usize) -> (Vec<usize>, Vec<ClassGeometry>) {
    let n = (4096 - 32usize).div_ceil(16) + 1;
    let mut serving = vec![0; n];
    let mut distinct: Vec<ClassGeometry> = Vec::new();
    for i in (0..n).rev() {
        let size = (32 + i * 16).min(4096);
        let pages = kernel_pages_per_zspage(size, chain);
        let objs = pages * PAGE / size;
        if let Some(prev) = distinct.last()
            && prev.pages_per_zspage == pages
            && prev.objs_per_zspage == objs
        {
            serving[i] = prev.index;
            continue;
        }
        distinct.push(ClassGeometry {
            index: i,
            size,
            pages_per_zspage: pages,
            objs_per_zspage: objs,
            // The kernel's layout: the handle in the object, except in the huge class.
            header: if pages == 1 && objs == 1 { 0 } else { 8 },
        });
        serving[i] = i;
    }
    distinct.reverse();
    (serving, distinct)
}

#[test]
fn mapping_property_every_chain_size() {
    for chain in 1..=16 {
        let p = pool(chain);
        let table = p.classes();
        let (serving, distinct) = kernel_classes(chain);
        assert_eq!(table.classes(), &distinct[..], "chain {chain}");
        assert_eq!(table.classes().len(), p.class_stats().len());
        for w in table.classes().windows(2) {
            assert!(w[0].index < w[1].index && w[0].size < w[1].size);
            // Adjacent distinct classes differ, or they would have been merged.
            assert_ne!(
                (w[0].pages_per_zspage, w[0].objs_per_zspage),
                (w[1].pages_per_zspage, w[1].objs_per_zspage),
                "chain {chain}: classes {} and {} should be merged",
                w[0].index,
                w[1].index
            );
        }
        for size in 1..=4096 {
            let c = p.lookup_class(size).unwrap();
            // Room for the object and its handle, or the 4096 class.
            assert!(
                c.size >= size + HANDLE || c.index == 254,
                "chain {chain}: size {size} -> class {} of {} bytes",
                c.index,
                c.size
            );
            assert!(c.capacity() >= size, "chain {chain}: size {size}");
            let nominal = (size + HANDLE).saturating_sub(32).div_ceil(16).min(254);
            assert_eq!(c.index, serving[nominal], "chain {chain}: size {size}");
            // A merged class has the same (pages, objs) as the nominal class it replaces.
            let nominal_size = (32 + 16 * nominal).min(4096);
            let pages = kernel_pages_per_zspage(nominal_size, chain);
            assert_eq!(
                (c.pages_per_zspage, c.objs_per_zspage),
                (pages, pages * PAGE / nominal_size),
                "chain {chain}: size {size}: nominal {nominal} merged into {}",
                c.index
            );
            assert!(c.pages_per_zspage <= chain);
        }
        // The huge watermark is the smallest size that lands in the huge class.
        let huge = p.huge_class_size();
        assert!(p.lookup_class(huge).unwrap().is_huge(), "chain {chain}");
        assert!(
            !p.lookup_class(huge - 1).unwrap().is_huge(),
            "chain {chain}"
        );
    }
}
