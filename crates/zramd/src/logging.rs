//! The log: `tracing` events to stderr, at `info` unless `RUST_LOG` says otherwise, in colour
//! only on a terminal. Set up once per process by the binaries (`zramd`, and `zramd-lab`,
//! which serves devices in-process). Also the one line a failed command leaves.

/// The filter without `RUST_LOG`: `info`, but only errors of the FUSE library (it warns of
/// every request the tree does not implement, which are answered as the kernel expects).
pub const DEFAULT_FILTER: &str = "info,fuser=error";

/// Installs the log subscriber for this process.
pub fn init() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_FILTER)),
        )
        .with_writer(|| Stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// stderr, whose write errors are dropped. A log that can no longer be written (its pipe
/// gone, a journal restarted) must not stop a server: tracing-subscriber reports a failed
/// write with `eprintln!`, which panics on that same broken stderr, in whichever thread
/// logged (at shutdown, the main thread, before the sockets are removed).
struct Stderr;

impl std::io::Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// The line a failed command prints: `zramd: ` and the error with its causes, on one line,
/// without a backtrace (whatever `RUST_BACKTRACE` says).
pub fn error_line(program: &str, e: &anyhow::Error) -> String {
    let text = format!("{e:#}");
    let one: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    format!("{program}: {}", one.join(" "))
}

/// A command's end: its error, if any, as one line on stderr, and exit status 1.
pub fn exit_status(program: &str, result: anyhow::Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", error_line(program, &e));
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_one_line_with_their_causes() {
        let e = anyhow::anyhow!("no such file\n(second line)").context("read a.toml");
        assert_eq!(
            error_line("zramd", &e),
            "zramd: read a.toml: no such file (second line)"
        );
    }
}
