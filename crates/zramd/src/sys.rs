//! The only module of this crate with `unsafe` code: signal dispositions (SIGPIPE for the
//! command-line commands' output, SIGXFSZ for the server).

/// Lets SIGPIPE end the process, as it ends other command-line tools: `zramd stat | head`
/// then stops quietly once `head` has read enough. Rust starts programs with SIGPIPE
/// ignored (so that a server sees `EPIPE` on a closed socket), which made the next print
/// to a closed pipe panic. Sockets are not affected: the standard library writes to them
/// with `MSG_NOSIGNAL` (an in-process server's write to a client gone gets `EPIPE` either
/// way). Not for `serve` or `run`, which must outlive a closed pipe; children started with
/// `std::process::Command` get the default anyway. (`zramd-lab` calls it too.)
pub fn die_on_sigpipe() {
    // SAFETY: `signal` with `SIG_DFL` installs no handler: it only sets one signal's
    // disposition back to the default, which is sound at any time.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// Makes a write past the file-size limit (`RLIMIT_FSIZE`: a unit's `LimitFSIZE=`, a shell's
/// `ulimit -f`) fail with `EFBIG` instead of ending the process by SIGXFSZ, whose default
/// terminates it: for `serve`, whose devices' data would go with it over one backing file's
/// write. (The backing store also keeps within that limit by itself; this covers any other
/// file.) Not for `run`, whose program would inherit the ignored signal across `exec`.
pub fn ignore_sigxfsz() {
    // SAFETY: `signal` with `SIG_IGN` installs no handler: it only sets one signal's
    // disposition, which is sound at any time.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
}
