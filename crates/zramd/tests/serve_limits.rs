//! `zramd serve`'s limits on what all its devices hold together:
//! - in a memory cgroup with a limit, its devices' pools stay within a budget under the
//!   limit, together, so a write past it fails with an error the client sees, not the
//!   cgroup's OOM killer, and the server and what it stored live on;
//! - `--total-mem-limit` (config key `total_mem_limit`) holds them to a limit of the
//!   operator's, cgroup or not.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    #[expect(
        dead_code,
        reason = "the server moves itself in, and swap is not this test's"
    )]
    pub mod cgroup;
    pub mod have;
    pub mod image;
    pub mod run;
    #[expect(dead_code, reason = "these tests stop their servers cleanly")]
    pub mod served;
}

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::cgroup::Cgroup;
use common::have::have;
use common::image::real_image;
use common::run::{Run, run, run_ok};
use common::served::Served;

const LIMIT: Duration = Duration::from_secs(120);
/// The cgroup's limit: the pool budget is 24 MiB of it.
const CGROUP_LIMIT: u64 = 64 << 20;
/// Real data (binaries, libraries, licences, runs of zeroes): its 65 MiB compressed pass
/// the cgroup's limit, so that without the budget the OOM killer ends the server.
const DATA: usize = 256 << 20;
const PAGE: usize = 4096;

/// Starts `zramd serve` with devices zram0 and zram1 of `size` (each of which alone could
/// take all the memory allowed) and the config file's top-level `keys`.
fn serve_two(dir: &Path, size: &str, keys: &str, prelude: Option<&str>) -> Served {
    let config = dir.join("zramd.toml");
    std::fs::write(
        &config,
        format!(
            "{keys}[[device]]\nname = \"zram0\"\nsize = \"{size}\"\n\
             [[device]]\nname = \"zram1\"\nsize = \"{size}\"\n"
        ),
    )
    .unwrap();
    Served::start_with(dir, &["--config", config.to_str().unwrap()], prelude)
}

/// Copies `src` into `device`, which must fill up first: the copy fails with `ENOSPC`.
fn copy_until_full(served: &Served, src: &Path, device: &str) -> Run {
    let copy = run(
        Command::new("nbdcopy").arg(src).arg(served.uri(device)),
        LIMIT,
    );
    assert!(!copy.ok, "all of it fitted into {device}");
    assert!(
        copy.stderr.contains("No space left on device"),
        "{device}: {}",
        copy.stderr
    );
    copy
}

/// `mm_stat` of each device, in order.
fn mm_stats(served: &Served) -> Vec<Vec<u64>> {
    let stat = served.stat_json();
    (0..2)
        .map(|d| serde_json::from_value(stat[d]["mm_stat_fields"].clone()).unwrap())
        .collect()
}

/// Reads zram0 back: every page holds what `img` has there or, where its write was
/// refused, zeroes. Returns the pages stored and refused.
fn read_back(served: &Served, dir: &Path, img: &[u8]) -> (usize, usize) {
    let back = dir.join("out.img");
    run_ok(
        Command::new("nbdcopy").arg(served.uri("zram0")).arg(&back),
        LIMIT,
    );
    let back = std::fs::read(&back).unwrap();
    let (mut stored, mut zero) = (0, 0);
    for (i, (b, s)) in back.chunks(PAGE).zip(img.chunks(PAGE)).enumerate() {
        if b == s {
            stored += 1;
        } else {
            assert!(
                b.iter().all(|&x| x == 0),
                "page {i} reads neither its data nor zeroes"
            );
            zero += 1;
        }
    }
    assert!(stored > img.len() / PAGE / 8, "only {stored} pages stored");
    assert!(zero > 0);
    (stored, zero)
}

#[test]
fn a_full_budget_fails_writes_and_the_server_lives() {
    const TEST: &str = "a_full_budget_fails_writes_and_the_server_lives";
    if !have(TEST, "root") || !have(TEST, "nbdcopy") {
        return;
    }
    let Some(cgroup) = Cgroup::for_test(TEST, CGROUP_LIMIT) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("in.img");
    let img = real_image(&src, DATA);
    // The server moves itself into the cgroup before it starts, so that it reads the limit.
    let join = format!("echo $$ > '{}'", cgroup.procs_file().display());
    let served = serve_two(dir.path(), "512M", "", Some(&join));
    let budget = zramd::cgroup::budget_of(CGROUP_LIMIT);
    assert!(
        served.stdout().contains(
            "memory cgroup limit 64M: the devices' pools hold at most 24M together (each \
             device's mem_limit too), request buffers 20M"
        ),
        "{}",
        served.stdout()
    );

    let copy = copy_until_full(&served, &src, "zram0");
    // (Kernels before 4.13 count no OOM kills in v1: the server's answers below tell.)
    assert_eq!(
        cgroup.oom_kills().unwrap_or(0),
        0,
        "the cgroup's OOM killer ran"
    );
    let mm = &mm_stats(&served)[0];
    assert_eq!(mm[3], budget, "mem_limit is the budget");
    assert!(mm[2] <= budget, "mem_used_total {} over {budget}", mm[2]);

    // The second device finds the budget taken: its copy fails too, and the two pools
    // together stay within the budget.
    copy_until_full(&served, &src, "zram1");
    assert_eq!(cgroup.oom_kills().unwrap_or(0), 0, "the OOM killer ran");
    let used: Vec<u64> = mm_stats(&served).iter().map(|mm| mm[2]).collect();
    assert!(
        used[0] + used[1] <= budget,
        "mem_used_total {used:?} together over {budget}"
    );

    let (stored, zero) = read_back(&served, dir.path(), &img);
    eprintln!(
        "{TEST}: {:?} cgroup of {} MiB, budget {} MiB: {stored} pages stored, {zero} refused \
         (mem_used_total {:.1} MiB); {}",
        cgroup.version(),
        CGROUP_LIMIT >> 20,
        budget >> 20,
        mm[2] as f64 / f64::from(1 << 20),
        copy.stderr.lines().next().unwrap_or("")
    );
    served.stop();
    drop(cgroup);
}

#[test]
fn devices_are_held_to_the_total_limit_together() {
    const TEST: &str = "devices_are_held_to_the_total_limit_together";
    /// Well under what the data compresses to (a quarter of it).
    const TOTAL: u64 = 8 << 20;
    if !have(TEST, "nbdcopy") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("in.img");
    let img = real_image(&src, 64 << 20);
    let served = serve_two(dir.path(), "64M", "total_mem_limit = \"8M\"\n", None);
    assert!(
        served
            .stdout()
            .contains("total memory limit 8M: the devices' pools hold at most that together"),
        "{}",
        served.stdout()
    );
    let mut used = Vec::new();
    for device in ["zram0", "zram1"] {
        copy_until_full(&served, &src, device);
        let mm = mm_stats(&served);
        assert!(
            mm.iter().all(|mm| mm[3] == 0),
            "a device's own mem_limit is set"
        );
        used = mm.iter().map(|mm| mm[2]).collect();
        let together: u64 = used.iter().sum();
        assert!(
            together <= TOTAL,
            "after {device}: mem_used_total {used:?} together over {TOTAL}"
        );
    }
    assert!(used[0] > TOTAL / 2, "the first device took most: {used:?}");
    read_back(&served, dir.path(), &img);
    served.stop();
}
