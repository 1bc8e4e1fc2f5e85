//! The log: `tracing` events to stderr, at `info` unless `RUST_LOG` says otherwise, in colour
//! only on a terminal. Set up once per process by the binaries (`zramd`, and `zramd-lab`,
//! which serves devices in-process).

/// Installs the log subscriber for this process.
pub fn init() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
