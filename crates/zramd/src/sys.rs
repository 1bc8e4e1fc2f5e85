//! The only module of this crate with `unsafe` code: the signal disposition that the
//! command-line commands' output needs.

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
