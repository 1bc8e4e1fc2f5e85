//! `mem_limit`: a write whose allocation takes `total_pages()` over the limit fails with
//! `Error::MemLimit`, the slot keeps its old data byte for byte, `mem_used_total` never ends
//! an operation above the limit, `mem_used_max` records the peak (including the page the
//! refused allocation briefly held, as the kernel's `update_used_max` does before the check)
//! and restarts on `reset_mem_used_max`; raising or removing the limit lets writes through.
//! Writers racing on one device end within its limit, and devices sharing a limit
//! (`SharedLimit`) end within it together, however their writers race.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use zram::{Algorithm, AlgorithmParams, Error, PAGE_SIZE, PoolConfig, Size, Zram, ZramConfig};

const P: u64 = PAGE_SIZE as u64;
const CHAIN: usize = 8;

fn device(pages: usize, mem_limit: u64) -> Zram {
    Zram::new(ZramConfig {
        disksize: (pages * PAGE_SIZE) as u64,
        algorithm: Algorithm::Lz4,
        params: AlgorithmParams::default(),
        mem_limit: Size(mem_limit),
        pool: PoolConfig {
            chain_size: CHAIN,
            ..PoolConfig::default()
        },
        auto_compact: None,
        ..ZramConfig::default()
    })
    .expect("device")
}

fn random_bytes(rng: &mut SmallRng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

fn text_page(rng: &mut SmallRng) -> Vec<u8> {
    const WORDS: [&str; 5] = ["limit ", "memory ", "zspage ", "class\n", "object "];
    let noise = rng.gen_range(0..2000);
    let mut out = random_bytes(rng, noise);
    while out.len() < PAGE_SIZE {
        out.extend_from_slice(WORDS[rng.gen_range(0..WORDS.len())].as_bytes());
    }
    out.truncate(PAGE_SIZE);
    out
}

fn read_page(zram: &Zram, index: u64) -> Vec<u8> {
    let mut buf = vec![0u8; PAGE_SIZE];
    zram.read(index * P, &mut buf).expect("read");
    buf
}

fn is_mem_limit(r: &zram::Result<()>, limit: u64) -> bool {
    matches!(r, Err(Error::MemLimit { limit: l }) if *l == limit)
}

#[test]
fn incompressible_writes_stop_exactly_at_the_limit() {
    let limit = 64 * P;
    let zram = device(1024, limit);
    let mut rng = SmallRng::seed_from_u64(1);
    assert_eq!(zram.mm_stat().mem_limit, limit);

    let text = text_page(&mut rng);
    zram.write(0, &text).unwrap();
    let text_pages = zram.mm_stat().mem_used_total;
    assert!(text_pages > 0 && text_pages <= CHAIN as u64 * P);
    let text_slot = zram.slot(0).unwrap();

    // Each incompressible page takes one one-page zspage of the huge class: exactly the
    // pages left under the limit go in, and the next write is refused.
    let mut stored = Vec::new();
    let refused = loop {
        let index = 1 + stored.len() as u64;
        let page = random_bytes(&mut rng, PAGE_SIZE);
        let r = zram.write(index * P, &page);
        assert!(zram.mm_stat().mem_used_total <= limit);
        if r.is_err() {
            assert!(is_mem_limit(&r, limit), "{r:?}");
            break index;
        }
        stored.push(page);
        assert!(stored.len() <= 64, "the limit was never enforced");
    };
    assert_eq!(stored.len() as u64, (limit - text_pages) / P);
    let m = zram.mm_stat();
    assert_eq!(m.mem_used_total, limit);
    assert!(
        m.mem_used_max > limit && m.mem_used_max <= limit + CHAIN as u64 * P,
        "{m:?}"
    );
    assert_eq!(zram.slot(refused as usize).unwrap(), Default::default());
    assert_eq!(read_page(&zram, refused), vec![0; PAGE_SIZE]);
    assert_eq!(zram.io_stat().failed_writes, 1);

    // Overwrites that need a new object are refused and leave the old data in place: a
    // whole page over the text page, a partial write that makes it incompressible, and a
    // new random page over a huge page (the new object is allocated before the old freed).
    let attempts: [(u64, Vec<u8>); 3] = [
        (0, random_bytes(&mut rng, PAGE_SIZE)),
        (100, random_bytes(&mut rng, 3500)),
        (P, random_bytes(&mut rng, PAGE_SIZE)),
    ];
    for (n, (offset, data)) in attempts.iter().enumerate() {
        let before = (zram.slot(0).unwrap(), zram.slot(1).unwrap(), zram.mm_stat());
        let r = zram.write(*offset, data);
        assert!(is_mem_limit(&r, limit), "attempt {n}: {r:?}");
        assert_eq!(
            (zram.slot(0).unwrap(), zram.slot(1).unwrap()),
            (before.0, before.1)
        );
        let m = zram.mm_stat();
        assert_eq!(
            (m.orig_data_size, m.compr_data_size, m.mem_used_total),
            (
                before.2.orig_data_size,
                before.2.compr_data_size,
                before.2.mem_used_total
            )
        );
        assert_eq!(read_page(&zram, 0), text, "attempt {n}");
        assert_eq!(read_page(&zram, 1), stored[0], "attempt {n}");
        assert_eq!(zram.io_stat().failed_writes, 2 + n as u64);
    }
    assert_eq!(zram.slot(0).unwrap(), text_slot);

    // Same-filled pages take no memory and go through at the limit; turning a huge page
    // into a same-filled one gives its page back, and one more random page fits.
    zram.write(P, &vec![0xAB; PAGE_SIZE]).unwrap();
    assert_eq!(zram.mm_stat().mem_used_total, limit - P);
    zram.write(refused * P, &stored[0]).unwrap();
    assert_eq!(read_page(&zram, refused), stored[0]);
    assert_eq!(zram.mm_stat().mem_used_total, limit);
    assert!(is_mem_limit(
        &zram.write((refused + 1) * P, &random_bytes(&mut rng, PAGE_SIZE)),
        limit
    ));
    // A discard frees room as well.
    zram.discard(2 * P, 2 * P).unwrap();
    zram.write((refused + 1) * P, &stored[1]).unwrap();
    zram.write((refused + 2) * P, &stored[2]).unwrap();
    assert!(zram.mm_stat().mem_used_total <= limit);

    for (i, page) in stored.iter().enumerate().skip(3) {
        assert_eq!(&read_page(&zram, 1 + i as u64), page, "page {}", 1 + i);
    }
    zram.pool().check_invariants().unwrap();
}

#[test]
fn mixed_writes_never_end_above_the_limit_and_refusals_change_nothing() {
    const PAGES: usize = 2048;
    let limit = 200 * P;
    let zram = device(PAGES, limit);
    let mut rng = SmallRng::seed_from_u64(2);
    let mut model = vec![0u8; PAGES * PAGE_SIZE];
    let mut refusals = 0u64;
    let mut successes = 0u64;
    for step in 0..3000 {
        let index = rng.gen_range(0..PAGES as u64);
        let (offset, data) = match rng.gen_range(0..10) {
            0..=3 => (index * P, text_page(&mut rng)),
            4..=6 => (index * P, random_bytes(&mut rng, PAGE_SIZE)),
            7 => (index * P, vec![rng.r#gen::<u8>(); PAGE_SIZE]),
            _ => {
                let offset = rng.gen_range(0..(PAGES * PAGE_SIZE - 2 * PAGE_SIZE) as u64);
                let len = rng.gen_range(1..2 * PAGE_SIZE);
                (offset, random_bytes(&mut rng, len))
            }
        };
        if rng.gen_range(0..20) == 0 {
            zram.discard(index * P, P).unwrap();
            let i = index as usize;
            model[i * PAGE_SIZE..(i + 1) * PAGE_SIZE].fill(0);
        }
        let r = zram.write(offset, &data);
        let range = offset as usize..offset as usize + data.len();
        match r {
            Ok(()) => {
                successes += 1;
                model[range.clone()].copy_from_slice(&data);
            }
            Err(Error::MemLimit { limit: l }) => {
                assert_eq!(l, limit);
                refusals += 1;
                // A write spanning two pages may have stored its first page before the
                // second was refused: the device holds, page by page, the old or the new
                // bytes. Find out which, and take that into the model.
                let first = offset as usize / PAGE_SIZE;
                let last = (range.end - 1) / PAGE_SIZE;
                for p in first..=last {
                    let page = p * PAGE_SIZE..(p + 1) * PAGE_SIZE;
                    let mut new = model[page.clone()].to_vec();
                    let lo = range.start.max(page.start);
                    let hi = range.end.min(page.end);
                    new[lo - page.start..hi - page.start]
                        .copy_from_slice(&data[lo - range.start..hi - range.start]);
                    let got = read_page(&zram, p as u64);
                    if p == last {
                        // The refused page (a page before it may have gone in).
                        assert!(got == model[page.clone()], "step {step}: page {p} changed");
                    } else if got == new {
                        model[page].copy_from_slice(&new);
                    } else {
                        assert!(got == model[page], "step {step}: page {p} torn");
                    }
                }
            }
            Err(e) => panic!("step {step}: {e}"),
        }
        let m = zram.mm_stat();
        assert!(m.mem_used_total <= limit, "step {step}: {m:?}");
        assert!(
            m.mem_used_max <= limit + CHAIN as u64 * P,
            "step {step}: {m:?}"
        );
        if step % 500 == 0 {
            zram.pool().check_invariants().unwrap();
        }
    }
    assert!(
        refusals > 100 && successes > 100,
        "{refusals} / {successes}"
    );
    assert_eq!(zram.io_stat().failed_writes, refusals);
    let mut image = vec![0u8; PAGES * PAGE_SIZE];
    zram.read(0, &mut image).unwrap();
    for p in 0..PAGES {
        let r = p * PAGE_SIZE..(p + 1) * PAGE_SIZE;
        assert!(image[r.clone()] == model[r], "page {p}");
    }
    zram.pool().check_invariants().unwrap();
}

#[test]
fn mem_used_max_tracks_the_peak_and_restarts() {
    let zram = device(1024, 0);
    let mut rng = SmallRng::seed_from_u64(3);
    for i in 0..100 {
        zram.write(i * P, &random_bytes(&mut rng, PAGE_SIZE))
            .unwrap();
    }
    assert_eq!(zram.mm_stat().mem_used_max, 100 * P);
    zram.discard(0, 60 * P).unwrap();
    let m = zram.mm_stat();
    assert_eq!((m.mem_used_total, m.mem_used_max), (40 * P, 100 * P));
    zram.reset_mem_used_max();
    assert_eq!(zram.mm_stat().mem_used_max, 40 * P);
    for i in 0..10 {
        zram.write(i * P, &random_bytes(&mut rng, PAGE_SIZE))
            .unwrap();
    }
    zram.discard(0, 10 * P).unwrap();
    let m = zram.mm_stat();
    assert_eq!((m.mem_used_total, m.mem_used_max), (40 * P, 50 * P));
}

#[test]
fn raising_or_removing_the_limit_lets_writes_through() {
    let zram = device(1024, 0);
    let mut rng = SmallRng::seed_from_u64(4);
    // Set at run time, rounded up to whole pages as the kernel's PAGE_ALIGN.
    zram.set_mem_limit(10 * P - 100);
    assert_eq!(zram.mm_stat().mem_limit, 10 * P);
    let mut written = 0;
    while zram
        .write(written * P, &random_bytes(&mut rng, PAGE_SIZE))
        .is_ok()
    {
        written += 1;
        assert!(written <= 10);
    }
    assert_eq!(written, 10);

    zram.set_mem_limit(20 * P);
    for i in written..20 {
        zram.write(i * P, &random_bytes(&mut rng, PAGE_SIZE))
            .unwrap_or_else(|e| panic!("page {i} under the raised limit: {e}"));
    }
    assert!(is_mem_limit(
        &zram.write(20 * P, &random_bytes(&mut rng, PAGE_SIZE)),
        20 * P
    ));

    // Lowering the limit below the use keeps the data readable; only new objects fail.
    zram.set_mem_limit(5 * P);
    let page = random_bytes(&mut rng, PAGE_SIZE);
    assert!(is_mem_limit(&zram.write(3 * P, &page), 5 * P));
    assert_eq!(zram.mm_stat().mem_used_total, 20 * P);

    zram.set_mem_limit(0);
    assert_eq!(zram.mm_stat().mem_limit, 0);
    for i in 20..200 {
        zram.write(i * P, &random_bytes(&mut rng, PAGE_SIZE))
            .unwrap();
    }
    zram.write(3 * P, &page).unwrap();
    assert_eq!(read_page(&zram, 3), page);
    assert_eq!(zram.mm_stat().mem_used_total, 200 * P);
    assert_eq!(zram.io_stat().failed_writes, 3);
    zram.pool().check_invariants().unwrap();
}

#[test]
fn devices_sharing_a_limit_are_held_to_it_together() {
    let limit = 96 * P;
    let group = zram::SharedLimit::new(limit);
    let devices: Vec<Zram> = (0..3).map(|_| device(1024, 0)).collect();
    for d in &devices {
        d.share_limit(&group).unwrap();
    }
    assert!(matches!(devices[0].share_limit(&group), Err(Error::Busy)));
    assert_eq!(group.members(), 3);
    // Incompressible pages, round robin over the devices, until all three refuse.
    let mut rng = SmallRng::seed_from_u64(7);
    let mut stored: Vec<Vec<(u64, Vec<u8>)>> = vec![Vec::new(); 3];
    let mut refused = [0; 3];
    for index in 0..200u64 {
        for (d, zram) in devices.iter().enumerate() {
            let page = random_bytes(&mut rng, PAGE_SIZE);
            let r = zram.write(index * P, &page);
            if r.is_ok() {
                stored[d].push((index, page));
            } else {
                assert!(is_mem_limit(&r, limit), "{r:?}");
                refused[d] += 1;
                assert_eq!(
                    read_page(zram, index),
                    vec![0; PAGE_SIZE],
                    "refused, unchanged"
                );
            }
            let together: u64 = devices.iter().map(|z| z.mm_stat().mem_used_total).sum();
            assert!(together <= limit, "{together} bytes held together");
        }
    }
    assert!(refused.iter().all(|&r| r > 0), "refused {refused:?}");
    assert_eq!(group.used_pages() * P, 96 * P, "the limit is used up");
    for (zram, pages) in devices.iter().zip(&stored) {
        assert!(pages.len() > 20, "{} pages stored", pages.len());
        for (index, page) in pages {
            assert_eq!(&read_page(zram, *index), page);
        }
    }
    // A device that frees its pages makes room for the others, without writing itself.
    devices[0].discard(0, 200 * P).unwrap();
    devices[0].compact();
    assert!(
        devices[1]
            .write(300 * P, &random_bytes(&mut rng, PAGE_SIZE))
            .is_ok()
    );
    // A device dropped leaves the group with its pages.
    let mut devices = devices;
    devices.truncate(1);
    assert_eq!(group.members(), 1);
    assert!(
        devices[0]
            .write(0, &random_bytes(&mut rng, PAGE_SIZE))
            .is_ok()
    );
}

/// Four writers, each on its own pages of `devices[t % devices.len()]`: text and
/// incompressible pages, in several classes; every write stores or meets the limit.
fn race(devices: &[Zram], limit: u64, round: u64) {
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let zram = &devices[t as usize % devices.len()];
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(round * 8 + t);
                for i in 0..150u64 {
                    let page = if i % 3 == 0 {
                        random_bytes(&mut rng, PAGE_SIZE)
                    } else {
                        text_page(&mut rng)
                    };
                    let r = zram.write((t * 1024 + i) * P, &page);
                    assert!(r.is_ok() || is_mem_limit(&r, limit), "{r:?}");
                }
            });
        }
    });
}

#[test]
fn writers_racing_on_one_device_end_within_its_limit() {
    let limit = 200 * P;
    for round in 0..20u64 {
        let zram = device(4096, limit);
        race(std::slice::from_ref(&zram), limit, round);
        let used = zram.mm_stat().mem_used_total;
        assert!(used <= limit, "round {round}: {} pages", used / P);
    }
}

#[test]
fn writers_racing_on_devices_sharing_a_limit_end_within_it() {
    let limit = 200 * P;
    for round in 0..20u64 {
        let group = zram::SharedLimit::new(limit);
        let devices: Vec<Zram> = (0..2).map(|_| device(4096, 0)).collect();
        for d in &devices {
            d.share_limit(&group).unwrap();
        }
        race(&devices, limit, round);
        let together: u64 = devices.iter().map(|z| z.mm_stat().mem_used_total).sum();
        assert!(
            together <= limit,
            "round {round}: {together} bytes held together"
        );
        assert_eq!(group.used_pages() * P, together);
    }
}
