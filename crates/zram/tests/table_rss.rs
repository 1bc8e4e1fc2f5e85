//! The slot table is sized for the whole disk but costs memory only where slots are used:
//! creating a large device barely moves the process's RSS (read from `/proc/self/statm`).
//! One test in this binary, so no other test allocates meanwhile.

use zram::{Zram, ZramConfig};

/// This process's resident memory in bytes: `/proc/self/statm`'s second field, in pages.
fn process_rss_bytes() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * zram::PAGE_SIZE)
}

#[test]
fn a_large_device_costs_memory_only_where_it_is_used() {
    let Some(before) = process_rss_bytes() else {
        println!("SKIPPED a_large_device_costs_memory_only_where_it_is_used: no /proc/self/statm");
        return;
    };
    // 16 GiB: 4 Mi slots, a 64 MiB table.
    let zram = Zram::new(ZramConfig {
        disksize: 16 << 30,
        auto_compact: None,
        ..ZramConfig::default()
    })
    .expect("device");
    assert!(zram.table_bytes() >= 64 << 20, "{}", zram.table_bytes());
    let created = process_rss_bytes().unwrap();
    let grown = created.saturating_sub(before);
    println!(
        "table spans {} MiB; RSS grew {} KiB",
        zram.table_bytes() >> 20,
        grown >> 10
    );
    assert!(
        grown < 8 << 20,
        "creating the device made {grown} bytes resident"
    );

    // Writing pages far apart makes only their slots' table pages resident.
    let page: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    for i in 0..64u64 {
        zram.write(i * (256 << 20), &page).unwrap();
    }
    let written = process_rss_bytes().unwrap();
    let grown = written.saturating_sub(created);
    println!(
        "64 pages written 256 MiB apart: RSS grew {} KiB",
        grown >> 10
    );
    assert!(
        grown < 8 << 20,
        "64 scattered writes made {grown} bytes resident"
    );
    let mut back = vec![0u8; 4096];
    zram.read(63 * (256 << 20), &mut back).unwrap();
    assert_eq!(back, page);
}
