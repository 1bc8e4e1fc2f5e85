//! A command-line tool whose output nobody reads any more (`… | head` once `head` is done)
//! ends as SIGPIPE ends other tools: no panic, no backtrace on stderr. (Also used by the
//! lab's tests, for `zramd-lab`.)

use std::os::unix::process::ExitStatusExt as _;
use std::process::Command;

/// Runs `cmd` with its standard output a pipe whose reader is already closed, and checks
/// that it ended by SIGPIPE without a panic.
pub fn ends_quietly_on_a_closed_pipe(cmd: &mut Command) {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = cmd.stdout(writer).output().expect("run the command");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{cmd:?}: {:?}: {stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{cmd:?}: {stderr}");
}
