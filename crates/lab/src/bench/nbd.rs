//! `zramd bench nbd --input FILE`: zramd against `nbdkit memory` over NBD, same client, same
//! data, one run of `--repeat` rounds (each round runs every server once, in alternating
//! order; the summary takes each figure's median over the rounds). For each server (zramd with lz4 and with zstd, page at a time, and with
//! zstd in 32, 64 and 128 KiB compression units; nbdkit with `allocator=zstd` and
//! `allocator=sparse`), started as a process of its own on a unix
//! socket: `nbdcopy` writes the file in and `nbdcopy -C 4` reads it back out (timed), the
//! server's RSS is read from `/proc/PID/status` before, after the write, and after a
//! `qemu-io discard` of the whole disk; then `qemu-img convert` writes the file in again over
//! one connection (timed), and the server is stopped. For zramd, the device's own figures
//! when full (`mem_used_total`, compressed bytes, metadata, cached free pages) show what the
//! RSS is made of.
//!
//! Each round also times the library path on the same data, right before zramd lz4 in odd
//! rounds and right after it in even ones: one thread writing the file a page at a time into
//! a `Zram` with lz4, in this process, the figure the NBD servers' single-connection write is
//! held against (as the median of the rounds' ratios, each taken between neighbours).
//!
//! Speeds are the input's bytes over the copy's time (the device is the input's size rounded
//! up to a whole MiB, so the read-back copies little more than the input). Its sockets and the
//! servers' logs live in a temporary folder that is removed however the run ends. When a peer
//! (a server or a client tool) fails, the error names it, its exit status and the tail of its
//! stderr, and the bench exits non-zero.
//!
//! With `--connections 1,2,4,8`, the bench instead measures zramd lz4 and nbdkit's zstd
//! allocator with `nbdcopy -C N` and fio's 4 KiB random reads with N jobs at each count and
//! prints the curve (`conns.rs`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::Serialize;

use crate::outln;

mod conns;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The file to copy in and out.
    #[arg(long)]
    input: PathBuf,
    /// Rounds; each runs every server once (forwards, then backwards, and so on).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Connection counts (`1,2,4,8`): instead of the table of servers, the curve of zramd
    /// lz4 and nbdkit's zstd allocator written and read with `nbdcopy -C N -T N` at each
    /// count (see `conns.rs`).
    #[arg(long, value_delimiter = ',')]
    connections: Vec<usize>,
    /// Seconds of each fio run in the connections curve (4 KiB random reads, one job and
    /// connection per count; skipped where fio has no nbd engine).
    #[arg(long, default_value_t = 3)]
    fio_seconds: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Serialize)]
struct Row {
    server: String,
    write_mb_s: f64,
    read_mb_s: f64,
    /// `qemu-img convert` of the input into the trimmed disk, one connection.
    convert_mb_s: f64,
    rss_start_mib: f64,
    rss_full_mib: f64,
    rss_after_trim_mib: f64,
    /// zramd only, when full.
    device: Option<Composition>,
}

/// What a full zramd device reports holding, MiB.
#[derive(Debug, Clone, Serialize)]
struct Composition {
    mem_used_total_mib: f64,
    compr_data_mib: f64,
    metadata_mib: f64,
    cached_mib: f64,
}

fn composition(control: &Path) -> anyhow::Result<Composition> {
    let r = zramd::control::call(control, &zramd::control::Request::Stat)?;
    let d = r.devices.first().context("no device")?;
    let mib = |i: usize| {
        d.mm_stat_fields
            .get(i)
            .map_or(0.0, |&v| v as f64 / 1048576.0)
    };
    Ok(Composition {
        mem_used_total_mib: mib(2),
        compr_data_mib: mib(1),
        metadata_mib: mib(10),
        cached_mib: mib(11),
    })
}

/// A server process, stopped (SIGTERM, then SIGKILL) when dropped.
struct Server {
    /// The row name.
    name: &'static str,
    child: Child,
    socket: PathBuf,
    /// zramd's control socket.
    control: Option<PathBuf>,
    /// Where its stderr goes.
    log: PathBuf,
}

/// Lines of a failed peer's stderr shown in the error.
const TAIL_LINES: usize = 20;

/// The last [`TAIL_LINES`] lines of `text`.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let t = lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n");
    if t.trim().is_empty() {
        "(nothing on stderr)".to_owned()
    } else {
        t
    }
}

impl Server {
    /// The NBD URI of its socket.
    fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.socket.display())
    }

    /// If the server has exited: which it was, its exit status and the tail of its stderr.
    fn exited(&mut self) -> Option<String> {
        let status = self.child.try_wait().ok()??;
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        Some(format!(
            "server {:?} exited ({status}); the tail of its stderr:\n{}",
            self.name,
            tail(&log)
        ))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Resident memory of process `pid` in MiB.
fn rss_mib(pid: u32) -> anyhow::Result<f64> {
    let bytes = crate::rss::rss_bytes(pid).with_context(|| format!("RSS of process {pid}"))?;
    Ok(bytes as f64 / 1048576.0)
}

/// Waits until `server` has created its socket; fails if it exits first.
fn wait_for(server: &mut Server) -> anyhow::Result<()> {
    let start = Instant::now();
    while !server.socket.exists() {
        if let Some(exited) = server.exited() {
            bail!("{exited}");
        }
        if start.elapsed() > Duration::from_secs(30) {
            bail!(
                "server {:?} did not create {}",
                server.name,
                server.socket.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    Ok(())
}

/// Whether fio is installed with its nbd engine (the connections curve's fio figures need
/// it).
pub fn fio_has_nbd() -> bool {
    Command::new("fio")
        .arg("--enghelp")
        .output()
        .is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.trim() == "nbd")
        })
}

/// Runs client tool `cmd` against `server`, returning the seconds it took. When it fails, the
/// error names the tool, its exit status and the tail of its stderr, and the server's too if
/// the server has exited.
fn run_tool(cmd: &mut Command, server: &mut Server) -> anyhow::Result<f64> {
    run_peer(cmd, server).map(|(secs, _)| secs)
}

/// As [`run_tool`], also returning what the tool printed on stdout.
fn run_peer(cmd: &mut Command, server: &mut Server) -> anyhow::Result<(f64, Vec<u8>)> {
    let start = Instant::now();
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd
        .stdout(Stdio::piped())
        .output()
        .with_context(|| format!("run {program}"))?;
    if !out.status.success() {
        let mut msg = format!(
            "peer {program} failed ({}) against server {:?}: {cmd:?}; the tail of its stderr:\n{}",
            out.status,
            server.name,
            tail(&String::from_utf8_lossy(&out.stderr))
        );
        if let Some(exited) = server.exited() {
            msg.push('\n');
            msg.push_str(&exited);
        }
        bail!("{msg}");
    }
    Ok((start.elapsed().as_secs_f64(), out.stdout))
}

fn measure(server: &mut Server, input: &Path, size: u64, bytes: u64) -> anyhow::Result<Row> {
    let uri = server.uri();
    let pid = server.child.id();
    let rss_start = rss_mib(pid)?;
    let write = run_tool(Command::new("nbdcopy").arg(input).arg(&uri), server)?;
    let rss_full = rss_mib(pid)?;
    let device = server.control.as_deref().map(composition).transpose()?;
    let read = run_tool(
        Command::new("nbdcopy")
            .args(["-C", "4"])
            .arg(&uri)
            .arg("null:"),
        server,
    )?;
    run_tool(
        Command::new("qemu-io")
            .args(["-f", "raw", "-c", &format!("discard 0 {size}")])
            .arg(&uri),
        server,
    )?;
    std::thread::sleep(Duration::from_millis(500));
    let rss_after_trim = rss_mib(pid)?;
    let convert = run_tool(
        Command::new("qemu-img")
            .args(["convert", "-n", "-f", "raw", "-O", "raw"])
            .arg(input)
            .arg(&uri),
        server,
    )?;
    Ok(Row {
        server: server.name.to_owned(),
        write_mb_s: bytes as f64 / 1e6 / write,
        read_mb_s: bytes as f64 / 1e6 / read,
        convert_mb_s: bytes as f64 / 1e6 / convert,
        rss_start_mib: rss_start,
        rss_full_mib: rss_full,
        rss_after_trim_mib: rss_after_trim,
        device,
    })
}

/// (row name, zramd algorithm and unit size, or nbdkit allocator)
const SERVERS: [(&str, &[&str]); 7] = [
    ("zramd lz4", &["lz4", "4K"]),
    ("zramd zstd", &["zstd", "4K"]),
    ("zramd zstd unit 32K", &["zstd", "32K"]),
    ("zramd zstd unit 64K", &["zstd", "64K"]),
    ("zramd zstd unit 128K", &["zstd", "128K"]),
    ("nbdkit memory allocator=zstd", &["allocator=zstd"]),
    ("nbdkit memory allocator=sparse", &["allocator=sparse"]),
];
/// Position of nbdkit's zstd allocator in [`SERVERS`].
const NBDKIT_ZSTD: usize = 5;
/// The library path's row name.
const LIBRARY: &str = "library path lz4, 1 thread";

/// The `zramd` binary beside this one: the servers run as processes of their own, and the
/// workspace builds `zramd` and `zramd-lab` into the same directory.
fn zramd_exe() -> anyhow::Result<PathBuf> {
    let path = std::env::current_exe()?.with_file_name("zramd");
    if !path.is_file() {
        bail!(
            "{} not found: the nbd bench runs the zramd binary built beside zramd-lab \
             (cargo build --release)",
            path.display()
        );
    }
    Ok(path)
}

/// Starts server `i` of [`SERVERS`] on a unix socket in `dir` and measures it.
fn run_server(i: usize, dir: &Path, input: &Path, size: u64, bytes: u64) -> anyhow::Result<Row> {
    let mut server = start_server(i, dir, size)?;
    measure(&mut server, input, size, bytes)
}

/// Starts server `i` of [`SERVERS`] with a disk of `size` bytes on a unix socket in `dir`
/// and waits until it listens.
fn start_server(i: usize, dir: &Path, size: u64) -> anyhow::Result<Server> {
    let (name, arg) = SERVERS[i];
    let socket = dir.join(format!("s{i}.sock"));
    let zramd = name.starts_with("zramd");
    let control = zramd.then(|| dir.join(format!("c{i}.sock")));
    let log = dir.join(format!("s{i}.log"));
    let stderr =
        std::fs::File::create(&log).with_context(|| format!("create {}", log.display()))?;
    // A previous round's sockets would make the server refuse to start (nbdkit) or the
    // wait below return at once.
    for path in [Some(&socket), control.as_ref()].into_iter().flatten() {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("remove {}", path.display()));
            }
            _ => {}
        }
    }
    let child = if let Some(control) = &control {
        Command::new(zramd_exe()?)
            .args(["serve", "--size", &size.to_string()])
            .args(["--algorithm", arg[0], "--unit-size", arg[1], "--unix"])
            .arg(&socket)
            .arg("--control")
            .arg(control)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()?
    } else {
        Command::new("nbdkit")
            .args(["-f", "-U"])
            .arg(&socket)
            .args(["memory", &format!("size={size}"), arg[0]])
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()?
    };
    let mut server = Server {
        name,
        child,
        socket,
        control,
        log,
    };
    wait_for(&mut server)?;
    Ok(server)
}

fn print_row(row: &Row) {
    println!(
        "{:32} write {:7.1} MB/s  read {:7.1} MB/s  qemu-img {:7.1} MB/s  RSS start {:7.1} MiB  full {:7.1} MiB  after trim {:7.1} MiB",
        row.server,
        row.write_mb_s,
        row.read_mb_s,
        row.convert_mb_s,
        row.rss_start_mib,
        row.rss_full_mib,
        row.rss_after_trim_mib
    );
    if let Some(d) = &row.device {
        println!(
            "{:32} full: mem_used_total {:.1} MiB (compressed {:.1} MiB), metadata {:.1} MiB, cached {:.1} MiB, rest of RSS {:.1} MiB",
            "",
            d.mem_used_total_mib,
            d.compr_data_mib,
            d.metadata_mib,
            d.cached_mib,
            row.rss_full_mib - d.mem_used_total_mib - d.metadata_mib - d.cached_mib
        );
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Each figure's median over the rounds (the device composition is the first round's).
fn median_row(runs: &[Row]) -> Row {
    let m = |f: fn(&Row) -> f64| median(runs.iter().map(f).collect());
    Row {
        server: runs[0].server.clone(),
        write_mb_s: m(|r| r.write_mb_s),
        read_mb_s: m(|r| r.read_mb_s),
        convert_mb_s: m(|r| r.convert_mb_s),
        rss_start_mib: m(|r| r.rss_start_mib),
        rss_full_mib: m(|r| r.rss_full_mib),
        rss_after_trim_mib: m(|r| r.rss_after_trim_mib),
        device: runs[0].device.clone(),
    }
}

/// The library path: one thread writes `data` a page at a time into a fresh lz4 `Zram`;
/// MB/s of the input's `bytes`.
fn library_write(data: &[u8], bytes: u64) -> anyhow::Result<f64> {
    const PAGE: usize = zram::PAGE_SIZE;
    let dev = zram::Zram::new(zram::ZramConfig {
        disksize: data.len() as u64,
        ..zram::ZramConfig::default()
    })?;
    let start = Instant::now();
    for (i, page) in data.chunks(PAGE).enumerate() {
        dev.write((i * PAGE) as u64, page)?;
    }
    Ok(bytes as f64 / 1e6 / start.elapsed().as_secs_f64())
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    for tool in ["nbdcopy", "qemu-io", "qemu-img", "nbdkit"] {
        if Command::new(tool).arg("--version").output().is_err() {
            bail!("{tool} is not installed (apt-get install libnbd-bin qemu-utils nbdkit)");
        }
    }
    zramd_exe()?;
    if args.repeat == 0 {
        bail!("--repeat must be at least 1");
    }
    if args.connections.contains(&0) {
        bail!("--connections takes counts of at least 1");
    }
    if args.fio_seconds == 0 {
        bail!("--fio-seconds must be at least 1");
    }
    let bytes = std::fs::metadata(&args.input)
        .with_context(|| format!("read {}", args.input.display()))?
        .len();
    if bytes == 0 {
        bail!("{} is empty", args.input.display());
    }
    // A whole number of every unit size the servers use.
    let size = bytes.next_multiple_of(1 << 20);
    // Removed when dropped: on success, on error and when unwinding from a panic.
    let tmp = tempfile::Builder::new()
        .prefix("zramd-bench-nbd-")
        .tempdir()
        .context("create a temporary folder")?;
    let dir = tmp.path();
    let read_err = || format!("read {}", args.input.display());
    if !args.connections.is_empty() {
        // Brings the file into the page cache, so that no server pays for that.
        let mut file = std::fs::File::open(&args.input).with_context(read_err)?;
        std::io::copy(&mut file, &mut std::io::sink()).with_context(read_err)?;
        return conns::run(args, dir, size, bytes);
    }
    // The library path's copy of the input, padded to the device's size; reading it also
    // brings the file into the page cache.
    let mut data = std::fs::read(&args.input).with_context(read_err)?;
    data.resize(size as usize, 0);
    let mut runs: Vec<Vec<Row>> = vec![Vec::new(); SERVERS.len()];
    let mut library = Vec::new();
    let bar = crate::progress::bar("nbd", (args.repeat * (SERVERS.len() + 1)) as u64);
    for round in 0..args.repeat {
        // The library path is "server" SERVERS.len(), next to zramd lz4 (0).
        let mut order: Vec<usize> = std::iter::once(SERVERS.len())
            .chain(0..SERVERS.len())
            .collect();
        if round % 2 == 1 {
            order.reverse();
        }
        if !args.json {
            outln!("round {} of {}:", round + 1, args.repeat);
        }
        for i in order {
            if i == SERVERS.len() {
                crate::progress::doing("library path");
                let mb_s = library_write(&data, bytes)?;
                crate::progress::tick("");
                if !args.json {
                    crate::progress::print(|| println!("{LIBRARY:32} write {mb_s:7.1} MB/s"));
                }
                library.push(mb_s);
                continue;
            }
            crate::progress::doing(SERVERS[i].0);
            let row = run_server(i, dir, &args.input, size, bytes)?;
            crate::progress::tick("");
            if !args.json {
                crate::progress::print(|| print_row(&row));
            }
            runs[i].push(row);
        }
    }
    drop(bar);
    drop(data);
    let rows: Vec<Row> = runs.iter().map(|r| median_row(r)).collect();
    let library_mb_s = median(library.clone());
    if args.json {
        let report = serde_json::json!({ "servers": rows, "library_write_mb_s": library_mb_s });
        println!("{report}");
        return Ok(());
    }
    println!("medians of {} rounds:", args.repeat);
    for row in &rows {
        print_row(row);
    }
    println!("{LIBRARY:32} write {library_mb_s:7.1} MB/s");
    let nbdkit = &rows[NBDKIT_ZSTD];
    // Each round's ratio, and their median.
    let ratios = |per: &dyn Fn(usize) -> f64| -> (f64, String) {
        let each: Vec<f64> = (0..args.repeat).map(per).collect();
        let text: Vec<String> = each.iter().map(|r| format!("{r:.2}")).collect();
        (median(each), text.join(", "))
    };
    let (to_library, per_library) = ratios(&|r| runs[0][r].convert_mb_s / library[r]);
    let (to_nbdkit, per_nbdkit) =
        ratios(&|r| runs[0][r].convert_mb_s / runs[NBDKIT_ZSTD][r].convert_mb_s);
    println!(
        "zramd lz4 qemu-img convert / library path write: {to_library:.2}x (per round: {per_library}); \
         / nbdkit zstd: {to_nbdkit:.2}x (per round: {per_nbdkit})"
    );
    let (_, per_write) = ratios(&|r| runs[0][r].write_mb_s / runs[NBDKIT_ZSTD][r].write_mb_s);
    let (_, per_read) = ratios(&|r| runs[0][r].read_mb_s / runs[NBDKIT_ZSTD][r].read_mb_s);
    println!(
        "zramd lz4 / nbdkit zstd: write {:.2}x (per round: {per_write}), read (nbdcopy -C 4) {:.2}x (per round: {per_read})",
        rows[0].write_mb_s / nbdkit.write_mb_s,
        rows[0].read_mb_s / nbdkit.read_mb_s,
    );
    for row in &rows[1..NBDKIT_ZSTD] {
        println!(
            "{} / nbdkit zstd: RSS (full) {:.3}x, write {:.2}x, read {:.2}x",
            row.server,
            row.rss_full_mib / nbdkit.rss_full_mib,
            row.write_mb_s / nbdkit.write_mb_s,
            row.read_mb_s / nbdkit.read_mb_s,
        );
    }
    Ok(())
}
