//! `fold` and `fold_stat` over a device (no FUSE): `fold` is write-only and needs an
//! initialized device (`EINVAL`, as `compact`); `fold_stat` is one line of seven numbers,
//! `folds objects_folded pages_folded dedup_pages dedup_bytes shared_objects index_bytes`,
//! each in 8 columns as `mm_stat`'s, zeroes while uninitialized, the device's figures
//! after a fold.

mod common {
    pub mod prose;
}

use common::prose::prose;
use zram::ZramConfig;
use zramd::device::Device;
use zramd::sysfs::{attr, format_fold_stat, read, write};

/// The numbers of a `fold_stat` text, checking its layout on the way: one line of seven
/// numbers, each right-aligned in 8 columns, separated by one blank (the text is exactly
/// the numbers written back that way).
fn fields(text: &str) -> Vec<u64> {
    let out: Vec<u64> = text
        .split_whitespace()
        .map(|f| f.parse().expect("a number"))
        .collect();
    assert_eq!(out.len(), 7, "{text:?}");
    let laid_out: Vec<String> = out.iter().map(|v| format!("{v:8}")).collect();
    assert_eq!(text, format!("{}\n", laid_out.join(" ")));
    out
}

#[test]
fn fold_stat_is_one_line_of_the_devices_figures() {
    assert_eq!(attr("fold").map(|a| a.mode), Some(0o200));
    assert_eq!(attr("fold_stat").map(|a| a.mode), Some(0o444));
    let d = Device::new("zram0", ZramConfig::default());
    let zeroes = read(&d, "fold_stat").unwrap();
    assert_eq!(zeroes, format!("{}\n", ["       0"; 7].join(" ")));
    assert_eq!(fields(&zeroes), [0; 7]);
    assert_eq!(
        write(&d, "fold", b"1\n"),
        Err(libc::EINVAL),
        "uninitialized"
    );
    assert_eq!(read(&d, "fold"), Err(libc::EACCES));
    assert_eq!(write(&d, "fold_stat", b"1"), Err(libc::EACCES));

    write(&d, "disksize", b"4M").unwrap();
    let z = d.zram().unwrap();
    const PAGES: u64 = 64;
    for copy in 0..2 {
        for i in 0..PAGES {
            z.write((copy * PAGES + i) * 4096, &prose(i)).unwrap();
        }
    }
    // As the kernel's compact, fold reads nothing of what was written.
    write(&d, "fold", b"anything").unwrap();
    let text = read(&d, "fold_stat").unwrap();
    let f = fields(&text);
    let s = z.fold_stats();
    // The seven fields in the order the attribute documents, each the device's figure.
    let named = [
        ("folds", s.folds),
        ("objects_folded", s.objects_folded),
        ("pages_folded", s.pages_folded),
        ("dedup_pages", s.dedup_pages),
        ("dedup_bytes", s.dedup_bytes),
        ("shared_objects", s.shared_objects),
        ("index_bytes", s.index_bytes),
    ];
    for (&got, (name, want)) in f.iter().zip(named) {
        assert_eq!(got, want, "{name} in {text:?}");
    }
    assert_eq!(text, format_fold_stat(&s));
    assert_eq!(s.folds, 1);
    assert!(
        (1..=PAGES).contains(&s.objects_folded),
        "{PAGES} duplicated pages: {s:?}"
    );
    assert_eq!(s.dedup_pages, 0, "dedup is off");
    let mm_folded: u64 = read(&d, "mm_stat")
        .unwrap()
        .split_whitespace()
        .nth(9)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(f[2], mm_folded, "pages_folded is mm_stat's tenth field");
}
