//! `zramd serve` in a memory cgroup with a limit: its devices' pools stay within a budget
//! under the limit, together, so a write past it fails with an error the client sees, not
//! the cgroup's OOM killer, and the server and what it stored live on.

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
    #[expect(dead_code, reason = "this test stops its server cleanly")]
    pub mod served;
}

use std::process::Command;
use std::time::Duration;

use common::cgroup::Cgroup;
use common::have::have;
use common::image::real_image;
use common::run::{run, run_ok};
use common::served::Served;

const TEST: &str = "a_full_budget_fails_writes_and_the_server_lives";
const LIMIT: Duration = Duration::from_secs(120);
/// The cgroup's limit: the pool budget is 24 MiB of it.
const CGROUP_LIMIT: u64 = 64 << 20;
/// Real data (binaries, libraries, licences, runs of zeroes): its 65 MiB compressed pass
/// the cgroup's limit, so that without the budget the OOM killer ends the server.
const DATA: usize = 256 << 20;
const PAGE: usize = 4096;

#[test]
fn a_full_budget_fails_writes_and_the_server_lives() {
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
    // Two devices, each of which alone could take the whole budget.
    let config = dir.path().join("zramd.toml");
    std::fs::write(
        &config,
        "[[device]]\nname = \"zram0\"\nsize = \"512M\"\n\
         [[device]]\nname = \"zram1\"\nsize = \"512M\"\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let served = Served::start_with(dir.path(), &["--config", config], Some(&join));
    let budget = zramd::cgroup::budget_of(CGROUP_LIMIT);
    assert!(
        served.stdout().contains(
            "memory cgroup limit 64M: the devices' pools hold at most 24M together (each \
             device's mem_limit too), request buffers 20M"
        ),
        "{}",
        served.stdout()
    );

    let copy = run(
        Command::new("nbdcopy").arg(&src).arg(served.uri("zram0")),
        LIMIT,
    );
    assert!(!copy.ok, "all of it fitted: {}", copy.stderr);
    assert!(
        copy.stderr.contains("No space left on device"),
        "{}",
        copy.stderr
    );
    // (Kernels before 4.13 count no OOM kills in v1: the server's answers below tell.)
    assert_eq!(
        cgroup.oom_kills().unwrap_or(0),
        0,
        "the cgroup's OOM killer ran"
    );
    let stat = served.stat_json();
    let mm: Vec<u64> = serde_json::from_value(stat[0]["mm_stat_fields"].clone()).unwrap();
    assert_eq!(mm[3], budget, "mem_limit is the budget");
    assert!(mm[2] <= budget, "mem_used_total {} over {budget}", mm[2]);

    // The second device finds the budget taken: its copy fails too, early, and the two
    // pools together stay within the budget.
    let second = run(
        Command::new("nbdcopy").arg(&src).arg(served.uri("zram1")),
        LIMIT,
    );
    assert!(!second.ok, "all of it fitted beside the first");
    assert!(
        second.stderr.contains("No space left on device"),
        "{}",
        second.stderr
    );
    assert_eq!(cgroup.oom_kills().unwrap_or(0), 0, "the OOM killer ran");
    let stat = served.stat_json();
    let used: Vec<u64> = (0..2)
        .map(|d| serde_json::from_value::<Vec<u64>>(stat[d]["mm_stat_fields"].clone()).unwrap()[2])
        .collect();
    assert!(
        used[0] + used[1] <= budget,
        "mem_used_total {used:?} together over {budget}"
    );

    // What was stored reads back; a page whose write failed reads as before (zeroes).
    let back = dir.path().join("out.img");
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
    eprintln!(
        "{TEST}: {:?} cgroup of {} MiB, budget {} MiB: {stored} pages stored, {zero} refused \
         (mem_used_total {:.1} MiB); {}",
        cgroup.version(),
        CGROUP_LIMIT >> 20,
        budget >> 20,
        mm[2] as f64 / f64::from(1 << 20),
        copy.stderr.lines().next().unwrap_or("")
    );
    assert!(stored > DATA / PAGE / 8, "only {stored} pages stored");
    assert!(zero > 0);
    served.stop();
    drop(cgroup);
}
