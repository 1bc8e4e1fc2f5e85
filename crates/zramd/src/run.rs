//! `zramd run --budget SIZE [--algorithm A] [--threshold SIZE] [--control PATH] [--json]
//! -- CMD ARGS…`: runs a program with its large anonymous mappings served by uswap regions
//! (issue 14, "for unmodified programs"), through the LD_PRELOAD shim
//! `libzramd_uswap.so` (crate `uswap-preload`) built beside this binary (or in `deps/`
//! beside it, where `cargo test --workspace` leaves it).
//!
//! The shim reads its settings from the environment set here (`ZRAMD_USWAP_*`), answers
//! `{"cmd":"stat"}` on the control socket while the program runs (so `zramd stat
//! --control PATH` shows its regions), and writes its figures, one JSON line, on an
//! inherited pipe when the program exits. This prints them on stderr and exits with the
//! program's status (128 + the signal that killed it). A program that ends without running
//! its exit handlers (`_exit`, a fatal signal) writes none: then the last figures read from
//! the control socket are printed instead, said as such, or that none came.
//!
//! Signals: the program is in this process's group, so a terminal's Ctrl-C reaches it
//! directly; here SIGINT is caught and left to the program. SIGTERM and SIGHUP sent to
//! `zramd run` are passed on to the program.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::FileTypeExt as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::Duration;

use anyhow::{Context as _, bail};
use rustix::process::Signal;
use uswap::ProgramFigures;

use crate::forward::exit_code;

/// The shim, built beside `zramd`.
const SHIM: &str = "libzramd_uswap.so";
/// How often the control socket is asked for figures while the program runs.
const POLL: Duration = Duration::from_millis(500);
/// How long the exit figures may take to arrive once the program has ended (a process it
/// left behind may hold the pipe open).
const LINGER: Duration = Duration::from_secs(2);

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Resident budget of each served mapping (K, M, G suffixes): pages beyond it live
    /// compressed.
    #[arg(long)]
    budget: zram::Size,
    /// Compression algorithm of the regions' devices (lz4, lz4hc, zstd, lzo, lzo-rle).
    #[arg(long)]
    algorithm: Option<zram::Algorithm>,
    /// Smallest anonymous mapping served.
    #[arg(long, default_value = "64M")]
    threshold: zram::Size,
    /// Read ahead along the faulting mapping (seed 002's `vma_ra_enabled`, the kernel's
    /// `/sys/kernel/mm/swap/vma_ra_enabled`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    vma_ra_enabled: bool,
    /// The readahead window is at most 2^N pages (`vma_ra_max_order`, 0..=9; the kernel's
    /// default 3).
    #[arg(long, default_value_t = uswap::readahead::DEFAULT_MAX_ORDER,
          value_parser = clap::value_parser!(u32).range(0..=i64::from(uswap::readahead::MAX_ORDER_CEILING)))]
    vma_ra_max_order: u32,
    /// The program's control socket (default: zramd-run-PID.sock in $XDG_RUNTIME_DIR or
    /// /tmp).
    #[arg(long)]
    control: Option<PathBuf>,
    /// Print the figures as one line of JSON.
    #[arg(long)]
    json: bool,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<OsString>,
}

/// The default control socket of this run.
fn default_control() -> PathBuf {
    let dir =
        std::env::var_os("XDG_RUNTIME_DIR").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    dir.join(format!("zramd-run-{}.sock", std::process::id()))
}

/// `LD_PRELOAD` with `shim` appended.
fn preload(existing: Option<OsString>, shim: &Path) -> OsString {
    match existing.filter(|e| !e.is_empty()) {
        Some(mut e) => {
            e.push(":");
            e.push(shim);
            e
        }
        None => shim.as_os_str().to_owned(),
    }
}

/// Runs the program; exits with its status.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let zramd = std::env::current_exe().context("find the running zramd binary")?;
    let shim = zramd.with_file_name(SHIM);
    // `cargo test` leaves the library in `deps/` only (`cargo build` copies it up).
    let in_deps = zramd.with_file_name("deps").join(SHIM);
    let shim = if !shim.is_file() && in_deps.is_file() {
        in_deps
    } else {
        shim
    };
    if !shim.is_file() {
        bail!(
            "the uswap shim is missing: `zramd run` preloads {}, which is not there; build \
             it with `cargo build --release -p uswap-preload` (a plain `cargo build \
             --release` of the workspace builds it too)",
            shim.display()
        );
    }
    if args.budget.bytes() == 0 {
        bail!("--budget must be more than 0");
    }
    let control = args.control.clone().unwrap_or_else(default_control);
    let (reader, writer) = std::io::pipe().context("make the figures pipe")?;
    // The program's end is inherited; this end stays close-on-exec.
    rustix::io::fcntl_setfd(&writer, rustix::io::FdFlags::empty())
        .context("let the program inherit the figures pipe")?;
    let (program, rest) = args.command.split_first().context("no command given")?;
    let mut cmd = Command::new(program);
    cmd.args(rest)
        .env("LD_PRELOAD", preload(std::env::var_os("LD_PRELOAD"), &shim))
        .env("ZRAMD_USWAP_BUDGET", args.budget.bytes().to_string())
        .env("ZRAMD_USWAP_THRESHOLD", args.threshold.bytes().to_string())
        .env(
            "ZRAMD_USWAP_VMA_RA_ENABLED",
            args.vma_ra_enabled.to_string(),
        )
        .env(
            "ZRAMD_USWAP_VMA_RA_MAX_ORDER",
            args.vma_ra_max_order.to_string(),
        )
        .env("ZRAMD_USWAP_CONTROL", &control)
        .env("ZRAMD_USWAP_STATS_FD", writer.as_raw_fd().to_string());
    match args.algorithm {
        Some(a) => cmd.env("ZRAMD_USWAP_ALGORITHM", a.to_string()),
        None => cmd.env_remove("ZRAMD_USWAP_ALGORITHM"),
    };
    let mut forward = Vec::new();
    for (sig, as_sent) in [
        (signal_hook::consts::SIGTERM, Signal::TERM),
        (signal_hook::consts::SIGHUP, Signal::HUP),
    ] {
        let flag = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(sig, Arc::clone(&flag))?;
        forward.push((flag, as_sent));
    }
    // Caught, not ignored (an ignored signal would stay ignored in the program), and not
    // passed on: a terminal's Ctrl-C reaches the program itself.
    signal_hook::flag::register(
        signal_hook::consts::SIGINT,
        Arc::new(AtomicBool::new(false)),
    )?;
    let child = cmd.spawn();
    drop(writer);
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            remove_socket(&control);
            // A shell's statuses: 127 for a program not found, 126 for one it cannot run.
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => 127,
                _ => 126,
            };
            eprintln!("zramd: cannot run {}: {e}", program.to_string_lossy());
            std::process::exit(code);
        }
    };
    let lines = read_lines(reader);
    let polled = Arc::new(Mutex::new(None));
    let done = Arc::new(AtomicBool::new(false));
    let poller = poll(&control, &polled, &done);
    let status = wait(&mut child, &forward);
    done.store(true, Ordering::Relaxed);
    let _ = poller.join();
    let status = status?;
    let exit_lines = lines.recv_timeout(LINGER).unwrap_or_default();
    remove_socket(&control);
    let last = polled.lock().unwrap_or_else(PoisonError::into_inner).take();
    report(&exit_lines, last, args.json, program)?;
    std::process::exit(exit_code(status));
}

/// Waits for the program, passing SIGTERM and SIGHUP on.
fn wait(child: &mut Child, forward: &[(Arc<AtomicBool>, Signal)]) -> anyhow::Result<ExitStatus> {
    loop {
        if let Some(status) = child.try_wait().context("wait for the program")? {
            return Ok(status);
        }
        let pid = rustix::process::Pid::from_raw(child.id() as i32);
        for (flag, sig) in forward {
            if let Some(pid) = pid.filter(|_| flag.swap(false, Ordering::Relaxed)) {
                let _ = rustix::process::kill_process(pid, *sig);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads the figures lines until every writer has closed the pipe; the lines come on the
/// channel then.
fn read_lines(reader: std::io::PipeReader) -> mpsc::Receiver<Vec<String>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let lines = BufReader::new(reader)
            .lines()
            .map_while(Result::ok)
            .filter(|l| !l.trim().is_empty())
            .collect();
        let _ = tx.send(lines);
    });
    rx
}

/// Asks the program's control socket for its figures every [`POLL`] until `done`, keeping
/// the last answer.
fn poll(
    control: &Path,
    last: &Arc<Mutex<Option<ProgramFigures>>>,
    done: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let (control, last, done) = (control.to_owned(), Arc::clone(last), Arc::clone(done));
    std::thread::spawn(move || {
        while !done.load(Ordering::Relaxed) {
            if let Some(f) = ask(&control) {
                *last.lock().unwrap_or_else(PoisonError::into_inner) = Some(f);
            }
            std::thread::sleep(POLL);
        }
    })
}

/// One `stat` request to the program's control socket, bounded in time.
fn ask(control: &Path) -> Option<ProgramFigures> {
    let stream = UnixStream::connect(control).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(2)))
        .ok()?;
    (&stream).write_all(b"{\"cmd\":\"stat\"}\n").ok()?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line).ok()?;
    serde_json::from_str(&line).ok()
}

/// Removes the control socket the program left (only a socket).
fn remove_socket(path: &Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
}

/// Prints the figures on stderr: the exit figures, else the last ones polled.
fn report(
    lines: &[String],
    last: Option<ProgramFigures>,
    json: bool,
    program: &OsStr,
) -> anyhow::Result<()> {
    let exit: Vec<ProgramFigures> = lines
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let name = program.to_string_lossy();
    let figures = if exit.is_empty() {
        match last {
            Some(f) => {
                eprintln!(
                    "zramd run: {name} ended without writing its figures (killed by a \
                     signal, or _exit); the last ones from its control socket:"
                );
                f
            }
            None => {
                eprintln!(
                    "zramd run: no figures came from {name} (it ended without running its \
                     exit handlers before its control socket answered, or the shim was \
                     not loaded: a statically linked or set-user-ID program)"
                );
                return Ok(());
            }
        }
    } else {
        ProgramFigures::merge(exit)
    };
    let mut err = std::io::stderr().lock();
    if json {
        writeln!(err, "{}", serde_json::to_string(&figures)?)?;
    } else {
        write!(err, "{}", figures.format())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shim_is_appended_to_ld_preload() {
        let shim = Path::new("/x/libzramd_uswap.so");
        assert_eq!(preload(None, shim), OsString::from("/x/libzramd_uswap.so"));
        assert_eq!(
            preload(Some("".into()), shim),
            OsString::from("/x/libzramd_uswap.so")
        );
        assert_eq!(
            preload(Some("liba.so".into()), shim),
            OsString::from("liba.so:/x/libzramd_uswap.so")
        );
    }
}
