//! A failing handler never leaves a program waiting: when restoring a page fails (a failed
//! `UFFDIO_COPY`) or the fault service panics (in a handler thread, or in the faulting
//! thread's SIGBUS handler), the region is torn down and the thread that touched it gets
//! SIGSEGV, in both fault modes. Each case runs in a child process (this test binary run
//! again in child mode), which the parent waits for with a deadline.

mod common;

use std::os::unix::process::ExitStatusExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{PAGE, config, page_of, region_or_skip};
use uswap::FailPoint;

/// Environment variable that puts this binary in child mode, naming the failure.
const CHILD: &str = "USWAP_FAILURE_CHILD";

/// Environment variable naming the child's fault mode (`in-thread` or `handlers`).
const MODE: &str = "USWAP_FAILURE_MODE";

/// Longest a child may take before the parent kills it and fails the test.
const DEADLINE: Duration = Duration::from_secs(60);

/// Child mode: fills a region, evicts it, then touches an evicted page with the failure
/// armed. Never returns normally when the region behaves.
#[test]
#[ignore = "run by the failure tests in a child process"]
fn child() {
    let Ok(what) = std::env::var(CHILD) else {
        return;
    };
    let fail = match what.as_str() {
        "copy" => FailPoint::Copy,
        "panic" => FailPoint::Panic,
        _ => panic!("unknown failure {what}"),
    };
    let faults = match std::env::var(MODE).as_deref() {
        Ok("handlers") => uswap::FaultMode::Handlers,
        _ => uswap::FaultMode::InThread,
    };
    let cfg = uswap::RegionConfig {
        fail,
        faults,
        ..config(16)
    };
    let Some(mut region) = region_or_skip(64 * PAGE, cfg) else {
        std::process::exit(77);
    };
    for p in 0..64 {
        region.write(p * PAGE, &page_of(p as u64)).unwrap();
    }
    region.evict_oldest(64).unwrap();
    eprintln!("child: touching an evicted page");
    // A second thread blocked on another evicted page must not hang either.
    let mut parts = region.parts_mut();
    let part = parts.pop().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = [0u8; 8];
            let _ = part.read(40 * PAGE, &mut buf);
        });
        let mut buf = [0u8; 8];
        let _ = part.read(3 * PAGE, &mut buf);
    });
    // Reaching here means the touches returned: they may only do so with the failure
    // reported.
    eprintln!("child: survived; failure = {:?}", region.failure());
    std::process::exit(if region.failure().is_some() { 3 } else { 4 });
}

/// Runs the child with `what` armed; returns the signal that ended it, or `None` when it
/// was skipped.
fn run_child(what: &str, mode: &str) -> Option<i32> {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["--exact", "child", "--ignored", "--nocapture"])
        .env(CHILD, what)
        .env(MODE, mode)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The child's own report, kept for the failure message.
    let mut stderr = child.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            let log = log.join().unwrap_or_default();
            panic!("{what}: the child hung on a fault after the handler failed:\n{log}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = log.join().unwrap_or_default();
    if status.code() == Some(77) {
        eprintln!("SKIPPED: userfaultfd regions unavailable in the child");
        return None;
    }
    assert!(
        status.signal().is_some(),
        "{what}: the child ended with {status:?}, not a signal:\n{log}"
    );
    status.signal()
}

#[test]
fn a_failed_copy_tears_the_region_down_with_sigsegv() {
    for mode in ["in-thread", "handlers"] {
        if let Some(sig) = run_child("copy", mode) {
            assert_eq!(sig, libc::SIGSEGV, "{mode}");
        }
    }
}

#[test]
fn a_dead_handler_tears_the_region_down_with_sigsegv() {
    for mode in ["in-thread", "handlers"] {
        if let Some(sig) = run_child("panic", mode) {
            assert_eq!(sig, libc::SIGSEGV, "{mode}");
        }
    }
}
