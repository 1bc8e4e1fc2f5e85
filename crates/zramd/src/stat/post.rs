//! `zramd stat -v`: each device's lines on writeback, recompression, the policy, folding
//! and deduplication, after the table.

/// `zramd stat`'s lines on writeback, recompression, the policy, folding and deduplication
/// of one device.
pub fn post_lines(d: &zramd::registry::DeviceStat) {
    use zramd::human::size;
    let p = &d.post;
    let backing = d.backing_dev.as_deref().unwrap_or("none");
    print!(
        "{}: backing_dev {backing}  bd_stat {} {} {} (pages held, read, written; {} written)",
        d.name,
        p.bd_count,
        p.bd_reads,
        p.bd_writes,
        size(p.bd_write_bytes)
    );
    match &d.backing {
        Some(b) => println!(
            "  file {}  live {}  moved {}  cache hits {}",
            size(b.file_bytes),
            size(b.live_bytes),
            size(b.moved_bytes),
            b.cache_hits
        ),
        None => println!(),
    }
    println!(
        "{}: recompressed {} of {} attempts, {} saved; {} slots marked idle",
        d.name,
        p.recomp_done,
        p.recomp_attempts,
        size(p.recomp_saved_bytes),
        p.idle_marked
    );
    let pol = &d.policy;
    println!(
        "{}: policy {}; {} rounds, {} recompressed, {} pages written back, {} errors",
        d.name,
        pol.policy,
        pol.stats.rounds,
        pol.stats.recompressed,
        pol.stats.written_back_pages,
        pol.stats.errors
    );
    let f = &d.fold;
    println!(
        "{}: dedup {}; {} folds, {} objects folded, {} pages folded; {} pages deduplicated ({} saved); {} shared objects, index {}",
        d.name,
        if f.dedup { "on" } else { "off" },
        f.folds,
        f.objects_folded,
        f.pages_folded,
        f.dedup_pages,
        size(f.dedup_bytes),
        f.shared_objects,
        size(f.index_bytes)
    );
}
