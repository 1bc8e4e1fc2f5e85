//! `zramd-lab bench … | head` ends quietly once `head` is done, as other tools do: by
//! SIGPIPE, with no panic and no backtrace on stderr.

use std::os::unix::process::ExitStatusExt as _;
use std::process::Command;

#[test]
fn a_closed_pipe_ends_a_bench_quietly() {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_zramd-lab"))
        .args(["bench", "pool", "--threads", "1", "--repeat", "1"])
        .args(["--ops", "1000", "--objects", "1000"])
        .stdout(writer)
        .output()
        .expect("run zramd-lab bench pool");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
