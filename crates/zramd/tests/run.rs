//! `zramd run`: a program's large anonymous mappings served by uswap regions through the
//! LD_PRELOAD shim (`libzramd_uswap.so`, crate `uswap-preload`, which `cargo test
//! --workspace` builds into `deps/` beside `zramd`, where `zramd run` finds it; its
//! integration test makes cargo build it).
//!
//! The programs under test are this test binary itself, run again by `zramd run` with
//! `ZRAMD_RUN_TEST_CHILD` naming what to do (the ignored test [`child`]); they map memory
//! with `libc::mmap`, the dynamic symbol the shim interposes. Every run has a time limit:
//! past it, `zramd run` is sent SIGTERM (which it passes on), then killed, and the test
//! fails. Where userfaultfd is unavailable, the shim passes mappings through and says why:
//! those tests print `SKIPPED <test>: <why>` and return.

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use uswap::ProgramFigures;

/// What a child program does.
const CHILD: &str = "ZRAMD_RUN_TEST_CHILD";
/// Its mapping's length, bytes.
const LEN: &str = "ZRAMD_RUN_TEST_LEN";
/// A file the `wait` child waits for.
const GO: &str = "ZRAMD_RUN_TEST_GO";
/// Longest a run may take.
const LIMIT: Duration = Duration::from_secs(60);
const PAGE: usize = 4096;
const MIB: usize = 1 << 20;

/// A finished run of `zramd run`.
#[derive(Debug)]
struct Ran {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }

    /// The figures `--json` printed (the last line of stderr that holds them).
    fn figures(&self) -> ProgramFigures {
        self.stderr
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("no figures in the output\n{self}"))
    }

    /// Why the shim could not serve mappings here, if it could not.
    fn unavailable(&self) -> Option<String> {
        self.stderr
            .lines()
            .find(|l| l.contains("cannot serve"))
            .map(str::to_owned)
    }
}

impl std::fmt::Display for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "status {:?}\nstdout:\n{}\nstderr:\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// `zramd run ARGS -- <this binary as child MODE>`.
fn zramd_run(args: &[&str], mode: &str, len: usize) -> Command {
    let me = std::env::current_exe().expect("the test binary");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_zramd"));
    cmd.arg("run")
        .args(args)
        .arg("--")
        .arg(me)
        .args([
            "--ignored",
            "--exact",
            "child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, mode)
        .env(LEN, len.to_string());
    cmd
}

/// Starts `cmd` with its output in files under `dir`.
fn start(cmd: &mut Command, dir: &Path) -> std::process::Child {
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("out")).expect("stdout file"))
        .stderr(std::fs::File::create(dir.join("err")).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"))
}

/// Waits for `child` up to [`LIMIT`]; past it, SIGTERM (passed on to the program), then
/// SIGKILL, and a panic with the output.
fn finish(mut child: std::process::Child, dir: &Path) -> Ran {
    let start = Instant::now();
    let mut termed = None;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if start.elapsed() > LIMIT && termed.is_none() {
            if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            termed = Some(Instant::now());
        }
        if termed.is_some_and(|t| t.elapsed() > Duration::from_secs(5)) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |name| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let (stdout, stderr) = (read("out"), read("err"));
    match status {
        Some(status) if termed.is_none() => Ran {
            status,
            stdout,
            stderr,
        },
        _ => panic!("zramd run ran over {LIMIT:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"),
    }
}

fn run(cmd: &mut Command) -> Ran {
    let dir = tempfile::tempdir().expect("tempdir");
    let child = start(cmd, dir.path());
    finish(child, dir.path())
}

/// Prints why `test` is skipped if the shim could not serve mappings; true if it could.
fn served(test: &str, ran: &Ran) -> bool {
    match ran.unavailable() {
        Some(why) => {
            eprintln!("SKIPPED {test}: {why}");
            false
        }
        None => true,
    }
}

#[test]
fn a_large_mapping_is_served_compressed_beyond_the_budget() {
    let ran = run(&mut zramd_run(
        &["--budget", "16M", "--vma-ra-max-order", "4", "--json"],
        "pattern",
        256 * MIB,
    ));
    if !served(
        "a_large_mapping_is_served_compressed_beyond_the_budget",
        &ran,
    ) {
        return;
    }
    assert_eq!(ran.code(), 0, "{ran}");
    assert!(ran.stdout.contains("pattern checked"), "{ran}");
    let f = ran.figures();
    assert_eq!(f.served, 1, "{ran}");
    assert_eq!(f.uswap.len(), 1, "{ran}");
    let r = &f.uswap[0];
    assert_eq!(r.len, (256 * MIB) as u64);
    assert_eq!(r.budget_pages, (16 * MIB / PAGE) as u64);
    assert!(r.pswpout > 0, "{r:?}");
    assert!(r.pswpin > 0, "{r:?}");
    // The pattern is read back in order: seed 002's readahead, with the order asked for.
    assert_eq!((r.vma_ra_enabled, r.vma_ra_max_order), (true, 4), "{r:?}");
    assert!(r.swap_ra > 0 && r.swap_ra_hit > 0, "{r:?}");
    assert_eq!(r.failed, None);
}

#[test]
fn small_mappings_pass_through() {
    let ran = run(&mut zramd_run(&["--budget", "16M", "--json"], "small", MIB));
    assert_eq!(ran.code(), 0, "{ran}");
    assert!(ran.stdout.contains("small checked"), "{ran}");
    let f = ran.figures();
    assert_eq!(f.served, 0, "{ran}");
    assert!(f.uswap.is_empty(), "{ran}");
    assert!(f.passed_through >= 1, "{ran}");
}

#[test]
fn discarding_unmapping_and_moving_a_served_mapping() {
    let ran = run(&mut zramd_run(
        &["--budget", "1M", "--threshold", "1M", "--json"],
        "advise",
        8 * MIB,
    ));
    if !served("discarding_unmapping_and_moving_a_served_mapping", &ran) {
        return;
    }
    assert_eq!(ran.code(), 0, "{ran}");
    assert!(ran.stdout.contains("advise checked"), "{ran}");
    let f = ran.figures();
    assert_eq!(f.served, 1, "{ran}");
    // Unmapped piece by piece, the region was dropped; its last figures stay.
    assert_eq!(f.uswap.len(), 1, "{ran}");
    assert_eq!(f.uswap[0].len, (8 * MIB) as u64);
    assert!(f.uswap[0].pswpout > 0, "{ran}");
}

#[test]
fn a_touch_past_the_end_is_sigsegv() {
    let ran = run(&mut zramd_run(
        &["--budget", "16M", "--threshold", "1M"],
        "past_end",
        4 * MIB,
    ));
    if !served("a_touch_past_the_end_is_sigsegv", &ran) {
        return;
    }
    assert_eq!(ran.code(), 128 + 11, "{ran}");
    assert!(
        ran.stdout.contains("a guard page follows the mapping"),
        "{ran}"
    );
    assert!(ran.stdout.contains("touching past the end"), "{ran}");
}

#[test]
fn a_failing_region_kills_the_program_rather_than_hang_it() {
    let ran = run(zramd_run(
        &["--budget", "1M", "--threshold", "1M"],
        "pattern",
        64 * MIB,
    )
    .env("ZRAMD_USWAP_FAIL", "copy"));
    if !served(
        "a_failing_region_kills_the_program_rather_than_hang_it",
        &ran,
    ) {
        return;
    }
    assert!(ran.code() >= 128, "{ran}");
    assert!(!ran.stdout.contains("pattern checked"), "{ran}");
}

#[test]
fn the_control_socket_answers_while_the_program_runs() {
    let test = "the_control_socket_answers_while_the_program_runs";
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("ctl.sock");
    let go = dir.path().join("go");
    let child = start(
        zramd_run(
            &[
                "--budget",
                "1M",
                "--threshold",
                "1M",
                "--json",
                "--control",
                sock.to_str().unwrap(),
            ],
            "wait",
            8 * MIB,
        )
        .env(GO, &go),
        dir.path(),
    );
    let stat = |json: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_zramd"));
        cmd.args(["stat", "--control", sock.to_str().unwrap()]);
        if json {
            cmd.arg("--json");
        }
        cmd.stdin(Stdio::null()).output().expect("zramd stat")
    };
    // Ask until the program has written its mapping (or the child ends), bounded.
    let start = Instant::now();
    let mut figures = None;
    while start.elapsed() < LIMIT {
        let out = stat(true);
        if out.status.success() {
            let f: ProgramFigures = serde_json::from_slice(&out.stdout).expect("stat's JSON");
            if f.unavailable.is_some() || f.uswap.first().is_some_and(|r| r.pswpout > 0) {
                figures = Some(f);
                break;
            }
        }
        if std::fs::read_to_string(dir.path().join("err"))
            .is_ok_and(|e| e.contains("figures") || e.contains("cannot serve"))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = stat(false);
    std::fs::write(&go, b"go").expect("release the child");
    let ran = finish(child, dir.path());
    if !served(test, &ran) {
        return;
    }
    let f = figures.unwrap_or_else(|| panic!("no figures from the control socket\n{ran}"));
    assert_eq!(f.served, 1, "{f:?}");
    assert_eq!(f.uswap[0].len, (8 * MIB) as u64);
    assert!(f.pid > 0);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("1 mapping(s) served"), "{text}");
    assert!(text.contains("pswpout "), "{text}");
    assert_eq!(ran.code(), 0, "{ran}");
    assert_eq!(ran.figures().served, 1, "{ran}");
    assert!(!sock.exists(), "the control socket outlived the run");
}

#[test]
fn sigterm_is_passed_on_to_the_program() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("ctl.sock");
    let never = dir.path().join("never");
    let child = start(
        zramd_run(
            &[
                "--budget",
                "1M",
                "--threshold",
                "1M",
                "--control",
                sock.to_str().unwrap(),
            ],
            "wait",
            4 * MIB,
        )
        .env(GO, &never),
        dir.path(),
    );
    // Once the control socket answers, the program runs with the shim loaded.
    let start = Instant::now();
    while std::os::unix::net::UnixStream::connect(&sock).is_err() && start.elapsed() < LIMIT {
        std::thread::sleep(Duration::from_millis(20));
    }
    if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    }
    let ran = finish(child, dir.path());
    assert_eq!(ran.code(), 128 + 15, "{ran}");
    // Killed, the program wrote no exit figures; zramd run says so.
    assert!(
        ran.stderr.contains("ended without writing its figures")
            || ran.stderr.contains("no figures came"),
        "{ran}"
    );
    assert!(!sock.exists(), "the control socket outlived the run");
}

#[test]
fn bad_input_is_refused_clearly() {
    let zramd = env!("CARGO_BIN_EXE_zramd");
    let cases: [(&[&str], &str); 5] = [
        (&["run", "--budget", "16M"], "COMMAND"),
        (
            &["run", "--budget", "lots", "--", "true"],
            "invalid value 'lots'",
        ),
        (&["run", "--", "true"], "--budget"),
        (
            &[
                "run",
                "--budget",
                "16M",
                "--vma-ra-max-order",
                "10",
                "--",
                "true",
            ],
            "invalid value '10'",
        ),
        (
            &[
                "run",
                "--budget",
                "16M",
                "--",
                "/nonexistent/zramd-run-test",
            ],
            "cannot run /nonexistent/zramd-run-test",
        ),
    ];
    for (args, said) in cases {
        let ran = run(Command::new(zramd).args(args));
        assert!(!ran.status.success(), "{args:?}: {ran}");
        assert!(ran.stderr.contains(said), "{args:?}: want {said:?}\n{ran}");
    }
    // A shell's statuses: 127 for a program not found, 126 for one that cannot run.
    let ran = run(Command::new(zramd).args(["run", "--budget", "16M", "--", "/nonexistent/x"]));
    assert_eq!(ran.status.code(), Some(127), "{ran}");
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = dir.path().join("not-executable");
    std::fs::write(&plain, "data").expect("write");
    let ran = run(Command::new(zramd)
        .args(["run", "--budget", "16M", "--"])
        .arg(&plain));
    assert_eq!(ran.status.code(), Some(126), "{ran}");
    // Without the shim beside it, `zramd run` says how to build it.
    let copy = dir.path().join("zramd");
    std::fs::copy(zramd, &copy).expect("copy zramd");
    let ran = run(Command::new(&copy).args(["run", "--budget", "16M", "--", "true"]));
    assert!(!ran.status.success(), "{ran}");
    assert!(
        ran.stderr
            .contains("cargo build --release -p uswap-preload"),
        "{ran}"
    );
}

/// The programs under test, selected by `ZRAMD_RUN_TEST_CHILD` (without it, nothing).
#[test]
#[ignore = "a program run by the other tests under `zramd run`"]
fn child() {
    let Ok(mode) = std::env::var(CHILD) else {
        return;
    };
    let len: usize = std::env::var(LEN)
        .expect("ZRAMD_RUN_TEST_LEN")
        .parse()
        .expect("a length");
    match mode.as_str() {
        "pattern" => {
            let mut m = raw::Map::new(len);
            write_pattern(&mut m, 0..len / PAGE);
            for _ in 0..2 {
                check_pattern(&m, 0..len / PAGE);
            }
            m.unmap(0, len);
            println!("pattern checked");
        }
        "small" => {
            let mut m = raw::Map::new(len);
            write_pattern(&mut m, 0..len / PAGE);
            check_pattern(&m, 0..len / PAGE);
            m.unmap(0, len);
            println!("small checked");
        }
        "advise" => advise(len),
        "past_end" => {
            let mut m = raw::Map::new(len);
            write_pattern(&mut m, 0..len / PAGE);
            // A served mapping is followed by its region's inaccessible guard page.
            let end = format!("{:x}-", m.end());
            let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
            if maps
                .lines()
                .any(|l| l.starts_with(&end) && l[end.len()..].contains(" ---p "))
            {
                println!("a guard page follows the mapping");
            }
            println!("touching past the end");
            let b = m.past_end();
            println!("read {b} past the end, and lived");
        }
        "wait" => {
            let mut m = raw::Map::new(len);
            write_pattern(&mut m, 0..len / PAGE);
            let go = std::env::var_os(GO).expect("ZRAMD_RUN_TEST_GO");
            let start = Instant::now();
            while !Path::new(&go).exists() {
                assert!(start.elapsed() < LIMIT, "never released");
                std::thread::sleep(Duration::from_millis(20));
            }
            check_pattern(&m, 0..len / PAGE);
            println!("wait checked");
        }
        other => panic!("no child mode {other:?}"),
    }
}

fn word(page: usize) -> u64 {
    (page as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1
}

fn write_pattern(m: &mut raw::Map, pages: std::ops::Range<usize>) {
    for p in pages {
        m.write(p * PAGE, word(p));
        m.write(p * PAGE + PAGE - 8, !word(p));
    }
}

fn check_pattern(m: &raw::Map, pages: std::ops::Range<usize>) {
    for p in pages {
        assert_eq!(m.read(p * PAGE), word(p), "page {p}");
        assert_eq!(m.read(p * PAGE + PAGE - 8), !word(p), "page {p}");
    }
}

/// `madvise(MADV_DONTNEED)` zeroes, `mremap` is refused, unmapping piece by piece works.
fn advise(len: usize) {
    let pages = len / PAGE;
    let mut m = raw::Map::new(len);
    write_pattern(&mut m, 0..pages);
    assert_eq!(m.advise(0, MIB, libc::MADV_DONTNEED), 0);
    for p in 0..MIB / PAGE {
        assert_eq!(m.read(p * PAGE), 0, "page {p} after MADV_DONTNEED");
    }
    check_pattern(&m, MIB / PAGE..pages);
    assert_eq!(m.advise(0, len, libc::MADV_WILLNEED), 0);
    assert!(!m.remap(2 * len), "mremap of a served mapping must fail");
    // The second half goes; the first half still holds its bytes.
    assert_eq!(m.unmap(len / 2, len / 2), 0);
    check_pattern(&m, MIB / PAGE..pages / 2);
    write_pattern(&mut m, 0..pages / 2);
    check_pattern(&m, 0..pages / 2);
    assert_eq!(m.unmap(0, len / 2), 0);
    println!("advise checked");
}

#[expect(
    unsafe_code,
    reason = "the programs under test map memory with libc::mmap, the symbol the shim interposes"
)]
mod raw {
    use std::ptr::null_mut;

    /// A private anonymous mapping made with `libc::mmap`.
    pub struct Map {
        ptr: *mut u8,
        len: usize,
    }

    impl Map {
        pub fn new(len: usize) -> Self {
            // SAFETY: a fresh private anonymous mapping at an address the kernel (or the
            // shim) chooses; no existing memory is affected.
            let p = unsafe {
                libc::mmap(
                    null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(
                p,
                libc::MAP_FAILED,
                "mmap: {}",
                std::io::Error::last_os_error()
            );
            Self { ptr: p.cast(), len }
        }

        pub fn write(&mut self, offset: usize, v: u64) {
            assert!(offset + 8 <= self.len && offset.is_multiple_of(8));
            // SAFETY: in bounds of the mapping, aligned; only this thread uses it.
            unsafe { self.ptr.add(offset).cast::<u64>().write_volatile(v) }
        }

        pub fn read(&self, offset: usize) -> u64 {
            assert!(offset + 8 <= self.len && offset.is_multiple_of(8));
            // SAFETY: as in `write`.
            unsafe { self.ptr.add(offset).cast::<u64>().read_volatile() }
        }

        /// The address just past the end.
        pub fn end(&self) -> usize {
            self.ptr as usize + self.len
        }

        /// Reads the byte just past the end: a served mapping's guard page, so SIGSEGV.
        pub fn past_end(&self) -> u8 {
            // SAFETY: not safe on purpose: the page after a served mapping is its
            // inaccessible guard page, and the fault ends the process before any byte is
            // read.
            unsafe { self.ptr.add(self.len).read_volatile() }
        }

        pub fn advise(&self, offset: usize, len: usize, advice: i32) -> i32 {
            // SAFETY: a range of this mapping; the caller reads it again only through
            // `read`, which expects what the advice leaves.
            unsafe { libc::madvise(self.ptr.add(offset).cast(), len, advice) }
        }

        /// Tries to move the mapping to `new_len` bytes; true if that worked.
        pub fn remap(&mut self, new_len: usize) -> bool {
            // SAFETY: the whole mapping; if it moved, the new address is kept.
            let p =
                unsafe { libc::mremap(self.ptr.cast(), self.len, new_len, libc::MREMAP_MAYMOVE) };
            if p == libc::MAP_FAILED {
                return false;
            }
            self.ptr = p.cast();
            self.len = new_len;
            true
        }

        pub fn unmap(&mut self, offset: usize, len: usize) -> i32 {
            assert!(offset + len <= self.len);
            // SAFETY: a range of this mapping; the callers touch only what is left.
            unsafe { libc::munmap(self.ptr.add(offset).cast(), len) }
        }
    }
}
