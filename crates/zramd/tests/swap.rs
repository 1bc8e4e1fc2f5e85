//! Swap on zramd (docs/swap.md), end to end, as root:
//!
//! - `swap_safe_start`: `zramd serve --swap-safe` locks the server's memory (`VmLck` > 0),
//!   marks every one of its threads an I/O flusher (`PF_MEMALLOC_NOIO` in each task's flags)
//!   and keeps the OOM killer off it (`oom_score_adj` -1000); where the process lacks
//!   `CAP_SYS_RESOURCE`, the server refuses to start and says why, instead of serving
//!   half-prepared.
//! - `swap_out_and_in_through_a_loop_device`: a 512 MiB lz4 device served over FUSE, a loop
//!   device over its `disk` file, `mkswap`, `swapon --discard -p 32767`; a memory hog (this
//!   binary, re-executed) writes 256 MiB of patterned pages in a memory cgroup limited to
//!   64 MiB, then reads every page back and checks it. The pages must have gone through the
//!   device (the device's `orig_data_size`, the kernel's swap-out and swap-in counts) and
//!   come back intact, the device's data must drop once the hog's swap is freed (discard),
//!   and `swapoff` must succeed. Whatever happens, guards turn swap off, detach the loop
//!   device, remove the cgroup and stop the server. Takes 3 to 12 s on a 2-vCPU VM (the
//!   hog's 256 MiB out and back in through FUSE; docs/swap.md has the figures).
//!
//! The memory hog is this binary run with `ZRAMD_SWAP_TEST_HOG=<bytes>`, which is why the
//! file has its own `main` (`harness = false`). Tests that cannot run here print
//! `SKIPPED <test>: <why>` and return.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    #[expect(
        dead_code,
        reason = "the hog is moved in by its id and is not meant to meet the OOM killer"
    )]
    pub mod cgroup;
    pub mod have;
    pub mod mm_stat;
    #[expect(dead_code, reason = "these tests check no errno")]
    pub mod mnt;
    pub mod run;
    #[expect(dead_code, reason = "these tests reach the server through its tree")]
    pub mod served;
}

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::cgroup::{Cgroup, stat_value};
use common::have::have;
use common::mm_stat::mm_stat;
use common::mnt::{fuse_dirs, mounts_on};
use common::run::{run, run_ok};
use common::served::Served;

const ZRAMD: &str = env!("CARGO_BIN_EXE_zramd");
/// The environment variable that makes this binary the memory hog.
const HOG_ENV: &str = "ZRAMD_SWAP_TEST_HOG";
/// The hog's memory, and its cgroup's limit: three quarters of it must go to swap.
const HOG_BYTES: u64 = 256 << 20;
const CGROUP_LIMIT: u64 = 64 << 20;
/// Hang guards: a system command, and the hog's whole run.
const LIMIT: Duration = Duration::from_secs(60);
const HOG_LIMIT: Duration = Duration::from_secs(300);
const PAGE: usize = 4096;
/// `PF_MEMALLOC_NOIO`, the task flag `PR_SET_IO_FLUSHER` sets (with `PF_LOCAL_THROTTLE`).
const PF_MEMALLOC_NOIO: u64 = 0x0008_0000;
/// `CAP_SYS_RESOURCE`'s bit in `CapEff`.
const CAP_SYS_RESOURCE: u32 = 24;

type Test = (&'static str, fn());

fn main() {
    if let Ok(bytes) = std::env::var(HOG_ENV) {
        std::process::exit(hog(&bytes));
    }
    let tests: [Test; 2] = [
        ("swap_safe_start", swap_safe_start),
        ("swap_out_and_in_through_a_loop_device", swap_out_and_in),
    ];
    // The harness's arguments that matter here: `--list`, and name filters.
    let mut filters = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--list" => {
                for (name, _) in &tests {
                    println!("{name}: test");
                }
                return;
            }
            "--test-threads" | "--skip" | "--format" | "--color" | "--logfile" | "-Z" => {
                args.next();
            }
            a if a.starts_with('-') => {}
            _ => filters.push(arg),
        }
    }
    for (name, test) in tests {
        if filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())) {
            let start = Instant::now();
            test();
            eprintln!(
                "test {name} ... ok ({:.1} s)",
                start.elapsed().as_secs_f64()
            );
        }
    }
}

/// The memory hog: fills `bytes` of memory page by page with a pattern of the page's
/// index, reads it all back and checks it. Exits 0 only when every page came back intact.
/// Starts when a line arrives on stdin (after the test moved it into its cgroup).
fn hog(bytes: &str) -> i32 {
    let Ok(bytes) = bytes.parse::<usize>() else {
        eprintln!("hog: {HOG_ENV}={bytes:?} is not a number of bytes");
        return 2;
    };
    let mut go = String::new();
    if std::io::stdin().read_line(&mut go).is_err() {
        return 2;
    }
    let words = PAGE / 8;
    let pages = bytes / PAGE;
    let word = |page: usize, i: usize| (page as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i as u64;
    let mut memory = vec![0u64; pages * words];
    for (page, chunk) in memory.chunks_exact_mut(words).enumerate() {
        for (i, w) in chunk.iter_mut().enumerate() {
            *w = word(page, i);
        }
    }
    let memory = std::hint::black_box(memory);
    let bad: Vec<usize> = memory
        .chunks_exact(words)
        .enumerate()
        .filter(|(page, chunk)| chunk.iter().enumerate().any(|(i, w)| *w != word(*page, i)))
        .map(|(page, _)| page)
        .collect();
    if bad.is_empty() {
        println!("hog: {pages} pages written and verified");
        0
    } else {
        eprintln!(
            "hog: {} of {pages} pages came back wrong (first: {:?})",
            bad.len(),
            &bad[..bad.len().min(8)]
        );
        1
    }
}

/// Whether this process's effective capabilities hold `bit`.
fn capable(bit: u32) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .unwrap();
    u64::from_str_radix(hex.trim(), 16).unwrap() >> bit & 1 == 1
}

/// A `kB` line of `/proc/<pid>/status`, in kB.
fn status_kb(pid: u32, name: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
}

/// Each thread of `pid` and its task flags (field 9 of `/proc/<pid>/task/<tid>/stat`).
fn task_flags(pid: u32) -> Vec<(String, u64)> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|t| {
            let t = t.unwrap().path();
            let stat = std::fs::read_to_string(t.join("stat")).unwrap();
            // After the command's closing parenthesis: state (field 3), ..., flags (9).
            let rest = &stat[stat.rfind(')').unwrap() + 2..];
            let flags = rest.split(' ').nth(6).unwrap().parse().unwrap();
            let comm = std::fs::read_to_string(t.join("comm")).unwrap();
            (comm.trim().to_owned(), flags)
        })
        .collect()
}

fn swap_safe_start() {
    const TEST: &str = "swap_safe_start";
    if !have(TEST, "root") {
        return;
    }
    let Some((tmp, mnt, _detach)) = fuse_dirs(TEST) else {
        return;
    };
    let mnt_arg = mnt.to_str().unwrap();
    let args = ["--fuse", mnt_arg, "--size", "16M", "--swap-safe"];
    if !capable(CAP_SYS_RESOURCE) {
        // PR_SET_IO_FLUSHER is refused: the server must not start, and must say why.
        let control = tmp.path().join("control.sock");
        let r = run(
            Command::new(ZRAMD)
                .arg("serve")
                .args(args)
                .arg("--control")
                .arg(&control),
            LIMIT,
        );
        assert!(!r.ok, "started without CAP_SYS_RESOURCE: {}", r.stderr);
        assert!(
            r.stderr.contains("PR_SET_IO_FLUSHER") && r.stderr.contains("CAP_SYS_RESOURCE"),
            "{}",
            r.stderr
        );
        let locked: u64 = r
            .stderr
            .split("VmLck ")
            .nth(1)
            .and_then(|s| s.split(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no VmLck figure: {}", r.stderr));
        assert!(locked > 0, "mlockall locked nothing: {}", r.stderr);
        assert_eq!(mounts_on(&mnt), 0, "a refused start left its tree mounted");
        assert!(!control.exists(), "a refused start left its control socket");
        eprintln!(
            "NOTE {TEST}: no CAP_SYS_RESOURCE here: checked the refusal (memory had been \
             locked: {locked} kB)"
        );
        return;
    }
    let served = Served::start(tmp.path(), &args);
    let pid = served.pid();
    let locked = status_kb(pid, "VmLck");
    assert!(locked > 0, "VmLck {locked} kB");
    let tasks = task_flags(pid);
    // main, the FUSE session's threads (two at least), NBD's, the control socket's.
    assert!(tasks.len() >= 4, "{tasks:?}");
    for (comm, flags) in &tasks {
        assert!(
            flags & PF_MEMALLOC_NOIO != 0,
            "thread {comm:?} is no I/O flusher (flags {flags:#x})"
        );
    }
    let oom = std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).unwrap();
    assert_eq!(oom.trim(), "-1000");
    let log = served.stderr();
    assert!(log.contains("swap-safe: memory locked"), "{log}");
    served.stop();
    eprintln!(
        "{TEST}: VmLck {locked} kB, {} threads with PF_MEMALLOC_NOIO",
        tasks.len()
    );
}

/// A loop device, detached on drop.
struct Loop {
    dev: String,
    attached: bool,
}

impl Loop {
    fn detach(mut self) {
        run_ok(Command::new("losetup").args(["-d", &self.dev]), LIMIT);
        self.attached = false;
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        if self.attached {
            let _ = Command::new("losetup").args(["-d", &self.dev]).status();
        }
    }
}

/// A swap device in use, turned off on drop.
struct SwapOn {
    dev: String,
    on: bool,
}

impl SwapOn {
    fn off(mut self) {
        run_ok(Command::new("swapoff").arg(&self.dev), LIMIT);
        self.on = false;
        assert!(!swaps().contains(&self.dev), "{} is still swap", self.dev);
    }
}

impl Drop for SwapOn {
    fn drop(&mut self) {
        if !self.on {
            return;
        }
        for _ in 0..10 {
            let off = run(Command::new("swapoff").arg(&self.dev), LIMIT);
            if off.ok || !swaps().contains(&self.dev) {
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        eprintln!("WARNING: swapoff {} failed; it is still swap", self.dev);
    }
}

/// The swap devices in use (`/proc/swaps`).
fn swaps() -> String {
    std::fs::read_to_string("/proc/swaps").unwrap_or_default()
}

/// The hog, killed on drop if still running.
struct Hog {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Hog {
    /// Starts this binary as the hog of `bytes`; it waits for [`Hog::go`].
    fn start(dir: &Path, bytes: u64) -> Self {
        let (out, err) = (dir.join("hog.out"), dir.join("hog.err"));
        let child = Command::new(std::env::current_exe().unwrap())
            .env(HOG_ENV, bytes.to_string())
            .stdin(Stdio::piped())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .expect("start the hog");
        Self { child, out, err }
    }

    fn go(&mut self) {
        let mut stdin = self.child.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
    }

    fn output(&self) -> String {
        let out = std::fs::read_to_string(&self.out).unwrap_or_default();
        let err = std::fs::read_to_string(&self.err).unwrap_or_default();
        format!("{out}{err}")
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `pswpout` and `pswpin` of `/proc/vmstat`: pages swapped out and in since boot.
fn swapped_pages() -> (u64, u64) {
    let vmstat = Path::new("/proc/vmstat");
    let get = |name| stat_value(vmstat, name).unwrap_or(0);
    (get("pswpout"), get("pswpin"))
}

fn swap_out_and_in() {
    const TEST: &str = "swap_out_and_in_through_a_loop_device";
    for need in ["root", "losetup", "mkswap", "swapon", "swapoff"] {
        if !have(TEST, need) {
            return;
        }
    }
    if !Path::new("/proc/swaps").exists() {
        eprintln!("SKIPPED {TEST}: the kernel has no swap support (/proc/swaps)");
        return;
    }
    let Some((tmp, mnt, _detach)) = fuse_dirs(TEST) else {
        return;
    };
    let mnt_arg = mnt.to_str().unwrap();
    let mut args = vec!["--fuse", mnt_arg, "--size", "512M", "--algorithm", "lz4"];
    if capable(CAP_SYS_RESOURCE) {
        args.push("--swap-safe");
    } else {
        eprintln!("NOTE {TEST}: no CAP_SYS_RESOURCE here: serving without --swap-safe");
    }
    // Guards, dropped in the reverse order: hog, cgroup, swap, loop device, server.
    let served = Served::start(tmp.path(), &args);
    let dev = mnt.join("zram0");
    let attach = run(
        Command::new("losetup")
            .args(["--direct-io=on", "-f", "--show"])
            .arg(dev.join("disk")),
        LIMIT,
    );
    if !attach.ok {
        eprintln!(
            "SKIPPED {TEST}: no loop device here: {}",
            attach.stderr.trim()
        );
        return;
    }
    let lo = Loop {
        dev: attach.stdout.trim().to_owned(),
        attached: true,
    };
    run_ok(Command::new("mkswap").arg(&lo.dev), LIMIT);
    let on = run(
        Command::new("swapon").args(["--discard", "-p", "32767", &lo.dev]),
        LIMIT,
    );
    if !on.ok && on.stderr.contains("Operation not permitted") {
        eprintln!("SKIPPED {TEST}: swapon refused here: {}", on.stderr.trim());
        return;
    }
    assert!(on.ok, "swapon {}: {}", lo.dev, on.stderr);
    let swap = SwapOn {
        dev: lo.dev.clone(),
        on: true,
    };
    let Some(cgroup) = Cgroup::for_test(TEST, CGROUP_LIMIT) else {
        return;
    };
    let data_before = mm_stat(&dev)[0];
    let (out_before, in_before) = swapped_pages();
    let start = Instant::now();
    let mut hog = Hog::start(tmp.path(), HOG_BYTES);
    cgroup
        .add(hog.child.id())
        .expect("move the hog into its cgroup");
    hog.go();
    let (mut most_data, mut most_swap) = (0, 0);
    let status: ExitStatus = loop {
        most_data = most_data.max(mm_stat(&dev)[0]);
        most_swap = most_swap.max(cgroup.swap_bytes().unwrap_or(0));
        if let Some(status) = hog.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < HOG_LIMIT,
            "the hog ran over {HOG_LIMIT:?}: {}",
            hog.output()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let hog_secs = start.elapsed().as_secs_f64();
    let (out_after, in_after) = swapped_pages();
    let (pages_out, pages_in) = (out_after - out_before, in_after - in_before);
    assert!(
        status.success(),
        "the hog failed ({status}): {}",
        hog.output()
    );
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    eprintln!(
        "{TEST}: hog of {} MiB in {:?} cgroup limited to {} MiB, {hog_secs:.1} s: \
         {pages_out} pages swapped out, {pages_in} in; device data up to {:.1} MiB \
         (was {:.1}), cgroup swap up to {:.1} MiB",
        mib(HOG_BYTES),
        cgroup.version(),
        mib(CGROUP_LIMIT),
        mib(most_data),
        mib(data_before),
        mib(most_swap),
    );
    // At least half of what cannot stay in memory went out to the device and came back.
    let must_go = (HOG_BYTES - CGROUP_LIMIT) / 2;
    assert!(most_data >= must_go, "device data {most_data} < {must_go}");
    assert!(pages_out * PAGE as u64 >= must_go, "{pages_out} pages out");
    assert!(pages_in > 0, "nothing was swapped in");
    drop(cgroup);
    // The hog's swap is free; `--discard` hands its pages back to the device (a punched
    // hole through the loop device) as the kernel discards its free swap clusters.
    let wait = Instant::now();
    let mut data = mm_stat(&dev)[0];
    while data > most_data / 16 && wait.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(200));
        data = mm_stat(&dev)[0];
    }
    eprintln!(
        "{TEST}: device data {:.1} MiB after the hog's exit ({:.1} s)",
        mib(data),
        wait.elapsed().as_secs_f64()
    );
    assert!(
        data <= most_data / 16,
        "discard freed too little: {data} of {most_data}"
    );
    swap.off();
    lo.detach();
    served.stop();
}
