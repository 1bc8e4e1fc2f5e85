//! Running a program that nobody here wrote, under a time limit, with its output kept for
//! the test's messages.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Output of a finished command.
#[derive(Debug)]
pub struct Run {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` (stdin empty) to completion; panics with its output if it runs over `limit`.
/// Output goes to files, so a talkative command never blocks on a full pipe.
pub fn run(cmd: &mut Command, limit: Duration) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_path = dir.path().join("out");
    let err_path = dir.path().join("err");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).expect("stdout file"))
        .stderr(std::fs::File::create(&err_path).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let Some(status) = status else {
        panic!("{cmd:?} ran over {limit:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    };
    Run {
        ok: status.success(),
        stdout,
        stderr,
    }
}

/// Runs `cmd` as [`run`] does and requires success.
pub fn run_ok(cmd: &mut Command, limit: Duration) -> Run {
    let r = run(cmd, limit);
    assert!(
        r.ok,
        "{cmd:?} failed\nstdout:\n{}\nstderr:\n{}",
        r.stdout, r.stderr
    );
    r
}
