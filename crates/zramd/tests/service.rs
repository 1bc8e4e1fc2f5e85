//! zramd as a service: the shipped systemd unit passes `systemd-analyze verify`, `zramd
//! serve` tells a notify socket READY=1 once its endpoints answer and STOPPING=1 on a stop,
//! SIGHUP stops it cleanly (sockets removed, FUSE tree unmounted), so does SIGTERM with its
//! output a pipe nobody reads, `--zram-generator` serves
//! a zram-generator.conf's devices, completions and man pages come from the CLI, and a
//! user's error is one line without a backtrace. Tests that need a missing tool say so.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    pub mod have;
    #[expect(
        dead_code,
        reason = "the SIGHUP test needs the mount helpers, not errno_of"
    )]
    pub mod mnt;
    #[expect(
        dead_code,
        reason = "these tests check the status themselves, not via run_ok"
    )]
    pub mod run;
    #[expect(
        dead_code,
        reason = "the generator test needs start, stat_json and stop, not the NBD helpers"
    )]
    pub mod served;
}

use std::io::Read as _;
use std::net::TcpStream;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::have::have;
use common::run::{Run, run};
use common::served::Served;

const ZRAMD: &str = env!("CARGO_BIN_EXE_zramd");

/// A hang guard for starts, stops and notices.
const LIMIT: Duration = Duration::from_secs(30);

/// The shipped unit and config file.
fn dist(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../dist")
        .join(file)
}

fn zramd(args: &[&str]) -> Run {
    run(Command::new(ZRAMD).args(args), LIMIT)
}

/// A `zramd serve` child with `NOTIFY_SOCKET` set to a datagram socket the test bound;
/// killed when dropped if it is still running.
struct Notified {
    child: Child,
    notify: UnixDatagram,
    out: PathBuf,
    err: PathBuf,
}

impl Notified {
    fn start(dir: &Path, notify_socket: &str, notify: UnixDatagram, args: &[&str]) -> Self {
        let (out, err) = (dir.join("serve.out"), dir.join("serve.err"));
        let output = (
            std::fs::File::create(&out).unwrap().into(),
            std::fs::File::create(&err).unwrap().into(),
        );
        Self::start_to(output, (out, err), notify_socket, notify, args)
    }

    /// [`Notified::start`] with stdout and stderr going where `output` says (the files
    /// `files` name are then empty).
    fn start_to(
        output: (Stdio, Stdio),
        files: (PathBuf, PathBuf),
        notify_socket: &str,
        notify: UnixDatagram,
        args: &[&str],
    ) -> Self {
        let (out, err) = files;
        notify.set_read_timeout(Some(LIMIT)).unwrap();
        let child = Command::new(ZRAMD)
            .arg("serve")
            .args(args)
            .env("NOTIFY_SOCKET", notify_socket)
            .stdin(Stdio::null())
            .stdout(output.0)
            .stderr(output.1)
            .spawn()
            .expect("start zramd serve");
        Self {
            child,
            notify,
            out,
            err,
        }
    }

    /// The next notice (one datagram).
    fn notice(&self) -> String {
        let mut buf = [0; 4096];
        let len = self
            .notify
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("no notice ({e}): {}", self.stderr()));
        String::from_utf8_lossy(&buf[..len]).into_owned()
    }

    fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("a pid");
        rustix::process::kill_process(pid, signal).expect("signal zramd serve");
    }

    fn wait(&mut self) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(start.elapsed() < LIMIT, "no exit: {}", self.stderr());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }
}

impl Drop for Notified {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The address after `prefix` in `text` (up to the next `/` or blank).
fn address_after(text: &str, prefix: &str) -> String {
    let at = text
        .find(prefix)
        .unwrap_or_else(|| panic!("no {prefix:?} in {text}"));
    text[at + prefix.len()..]
        .split(['/', ' ', '\n'])
        .next()
        .unwrap()
        .to_owned()
}

#[test]
fn ready_once_every_endpoint_answers_and_stopping_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify");
    let notify = UnixDatagram::bind(&path).unwrap();
    let control = dir.path().join("control.sock");
    let unix = dir.path().join("nbd.sock");
    let mut served = Notified::start(
        dir.path(),
        path.to_str().unwrap(),
        notify,
        &[
            "--size",
            "16M",
            "--listen",
            "127.0.0.1:0",
            "--unix",
            unix.to_str().unwrap(),
            "--control",
            control.to_str().unwrap(),
            "--metrics",
            "127.0.0.1:0",
        ],
    );
    let ready = served.notice();
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    let pid = format!("MAINPID={}", served.child.id());
    assert!(ready.lines().any(|l| l == pid), "{ready:?}");
    assert!(ready.contains("STATUS=1 device(s)"), "{ready:?}");
    // Every endpoint answers now: NBD greets (TCP and unix), the control socket and the
    // metrics port accept.
    let stdout = served.stdout();
    let nbd = address_after(&stdout, "nbd://");
    let mut greeting = [0; 8];
    TcpStream::connect(&nbd)
        .unwrap()
        .read_exact(&mut greeting)
        .unwrap();
    assert_eq!(&greeting, b"NBDMAGIC");
    UnixStream::connect(&unix)
        .unwrap()
        .read_exact(&mut greeting)
        .unwrap();
    assert_eq!(&greeting, b"NBDMAGIC");
    UnixStream::connect(&control).unwrap();
    TcpStream::connect(address_after(&stdout, "metrics: http://")).unwrap();

    served.signal(rustix::process::Signal::TERM);
    let stopping = served.notice();
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping:?}");
    let status = served.wait();
    assert!(status.success(), "{status}: {}", served.stderr());
    assert!(!control.exists() && !unix.exists());
}

#[test]
fn ready_on_an_abstract_notify_socket() {
    let dir = tempfile::tempdir().unwrap();
    let name = format!("zramd-service-test-{}", std::process::id());
    let addr =
        <std::os::unix::net::SocketAddr as std::os::linux::net::SocketAddrExt>::from_abstract_name(
            name.as_bytes(),
        )
        .unwrap();
    let notify = UnixDatagram::bind_addr(&addr).unwrap();
    let control = dir.path().join("control.sock");
    let mut served = Notified::start(
        dir.path(),
        &format!("@{name}"),
        notify,
        &[
            "--size",
            "4M",
            "--unix",
            dir.path().join("nbd.sock").to_str().unwrap(),
            "--control",
            control.to_str().unwrap(),
        ],
    );
    let ready = served.notice();
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    UnixStream::connect(&control).unwrap();
    served.signal(rustix::process::Signal::INT);
    assert!(served.notice().contains("STOPPING=1"));
    assert!(served.wait().success(), "{}", served.stderr());
}

#[test]
fn sighup_stops_cleanly() {
    let fuse = common::mnt::fuse_dirs("sighup_stops_cleanly (the FUSE part)");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify");
    let notify = UnixDatagram::bind(&path).unwrap();
    let control = dir.path().join("control.sock");
    let unix = dir.path().join("nbd.sock");
    let mut args = vec![
        "--size".to_owned(),
        "8M".to_owned(),
        "--unix".to_owned(),
        unix.to_str().unwrap().to_owned(),
        "--control".to_owned(),
        control.to_str().unwrap().to_owned(),
    ];
    if let Some((_, mnt, _)) = &fuse {
        args.extend(["--fuse".to_owned(), mnt.to_str().unwrap().to_owned()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut served = Notified::start(dir.path(), path.to_str().unwrap(), notify, &args);
    assert!(served.notice().contains("READY=1"), "{}", served.stderr());
    assert!(control.exists() && unix.exists());
    if let Some((_, mnt, _)) = &fuse {
        assert_eq!(common::mnt::mounts_on(mnt), 1);
        assert!(mnt.join("zram0/disksize").exists());
    }
    served.signal(rustix::process::Signal::HUP);
    assert!(served.notice().contains("STOPPING=1"));
    let status = served.wait();
    assert_eq!(status.code(), Some(0), "{}", served.stderr());
    assert!(served.stderr().contains("SIGHUP"), "{}", served.stderr());
    assert!(!control.exists(), "the control socket is left");
    assert!(!unix.exists(), "the NBD socket is left");
    if let Some((_, mnt, _)) = &fuse {
        assert_eq!(common::mnt::mounts_on(mnt), 0, "the FUSE tree is left");
    }
}

/// A server whose stdout and stderr are a pipe nobody reads any more (a pager quit, a log
/// stream gone) serves and stops cleanly. Before, its start-up report panicked the main
/// thread (`println!` on EPIPE), and so did a log line (tracing-subscriber's `eprintln!`
/// about the failed write, at the latest the stop's), leaving the sockets behind.
#[test]
fn a_closed_stdout_and_stderr_stop_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify");
    let notify = UnixDatagram::bind(&path).unwrap();
    let (control, unix) = (dir.path().join("control.sock"), dir.path().join("nbd.sock"));
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = (writer.try_clone().unwrap().into(), writer.into());
    let args = [
        "--size",
        "8M",
        "--unix",
        unix.to_str().unwrap(),
        "--control",
        control.to_str().unwrap(),
    ];
    let files = (dir.path().join("none.out"), dir.path().join("none.err"));
    let mut served = Notified::start_to(output, files, path.to_str().unwrap(), notify, &args);
    assert!(served.notice().contains("READY=1"));
    let stat = zramd(&["stat", "--control", control.to_str().unwrap()]);
    assert!(stat.ok && stat.stdout.contains("zram0"), "{stat:?}");
    served.signal(rustix::process::Signal::TERM);
    assert!(served.notice().contains("STOPPING=1"));
    assert_eq!(served.wait().code(), Some(0));
    assert!(!control.exists(), "the control socket is left");
    assert!(!unix.exists(), "the NBD socket is left");
}

/// A backing file under the process's file-size limit (`ulimit -f`, a unit's
/// `LimitFSIZE=`): writeback fills what the limit leaves and then fails with `ENOSPC`, the
/// pages not written back stay in memory and read back, and the server lives on. Before, the
/// first write past the limit ended the server by SIGXFSZ, and every device's data with it.
#[test]
fn writeback_within_the_file_size_limit() {
    let dir = tempfile::tempdir().unwrap();
    // 6 MiB of bytes that do not compress: huge pages, 6 MiB to write back.
    let mut data = vec![0u8; 6 << 20];
    rand::RngCore::fill_bytes(
        &mut <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(3),
        &mut data,
    );
    let image = dir.path().join("image");
    std::fs::write(&image, &data).unwrap();
    let backing = dir.path().join("backing");
    std::fs::write(&backing, b"").unwrap();
    let args = [
        "--size",
        "8M",
        "--image",
        image.to_str().unwrap(),
        "--backing-dev",
        backing.to_str().unwrap(),
    ];
    // 2048 blocks: 1 MiB in sh's 512-byte blocks, 2 MiB in bash's KiB.
    let served = Served::start_with(dir.path(), &args, Some("ulimit -f 2048"));
    let r = served.cli(&["writeback", "zram0", "huge"]);
    assert!(!r.ok, "6 MiB written back under a 2 MiB limit: {r:?}");
    assert!(r.stderr.contains("No space left"), "{r:?}");
    let stat = served.stat_json();
    assert_eq!(stat[0]["data"], 6 << 20, "{stat}");
    let pages = stat[0]["post"]["bd_count"].as_u64().unwrap();
    assert!(
        pages > 0 && pages < 1536,
        "{pages} pages written back of 1536"
    );
    let written = std::fs::metadata(&backing).unwrap().len();
    assert!(
        written <= 2 << 20,
        "the backing file grew to {written} bytes"
    );
    if have(
        "writeback_within_the_file_size_limit (reading back)",
        "nbdcopy",
    ) {
        let back = dir.path().join("back");
        let copy = run(
            Command::new("nbdcopy").arg(served.uri("zram0")).arg(&back),
            LIMIT,
        );
        assert!(copy.ok, "{copy:?}");
        let back = std::fs::read(&back).unwrap();
        assert!(back[..data.len()] == data[..], "the pages read back differ");
    }
    served.stop();
}

#[test]
fn the_shipped_unit_verifies() {
    let unit = std::fs::read_to_string(dist("zramd.service")).unwrap();
    assert!(unit.lines().any(|l| l == "Type=notify"));
    // SIGHUP stops zramd: a reload command would stop the service instead.
    assert!(!unit.lines().any(|l| l.starts_with("ExecReload")));
    let exec = "ExecStart=/usr/local/bin/zramd serve --config /etc/zramd/zramd.toml";
    assert!(unit.lines().any(|l| l == exec), "{unit}");
    // The config file the unit reads, as shipped.
    zramd::serve::ConfigFile::load(&dist("zramd.toml")).unwrap();
    if !have("the_shipped_unit_verifies", "systemd-analyze") {
        return;
    }
    // A copy whose ExecStart is this build (verify checks that the program exists), with
    // the man pages its Documentation= names where `man` finds them.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("zramd.service");
    std::fs::write(
        &copy,
        unit.replace(
            "ExecStart=/usr/local/bin/zramd",
            &format!("ExecStart={ZRAMD}"),
        ),
    )
    .unwrap();
    let man = dir.path().join("man");
    let written = zramd(&["man", "--dir", man.join("man1").to_str().unwrap()]);
    assert!(written.ok, "{}", written.stderr);
    let mut verify = Command::new("systemd-analyze");
    verify.env("MANPATH", &man).arg("verify");
    if !have("the_shipped_unit_verifies (its man: links)", "man") {
        verify.arg("--man=no");
    }
    let r = run(verify.arg(&copy), LIMIT);
    assert!(r.ok, "systemd-analyze verify:\n{}{}", r.stdout, r.stderr);
    // verify passes units with ignored lines too: it must say nothing about ours.
    let said = format!("{}{}", r.stdout, r.stderr);
    assert!(!said.contains("zramd"), "systemd-analyze verify:\n{said}");
}

#[test]
fn completions_name_every_subcommand() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let r = zramd(&["completions", shell]);
        assert!(r.ok, "{shell}: {}", r.stderr);
        for word in [
            "serve",
            "stat",
            "compact",
            "policy",
            "completions",
            "zram-generator",
        ] {
            assert!(r.stdout.contains(word), "{shell} completions lack {word}");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("zramd.bash");
    std::fs::write(&script, zramd(&["completions", "bash"]).stdout).unwrap();
    if have("completions_name_every_subcommand", "bash") {
        let r = run(Command::new("bash").arg("-n").arg(&script), LIMIT);
        assert!(r.ok, "bash -n: {}", r.stderr);
        // Sourced, it completes `zramd se` to serve and set.
        let r = run(
            Command::new("bash").arg("-c").arg(format!(
                "source {}; COMP_WORDS=(zramd se); COMP_CWORD=1; _zramd zramd se zramd; \
                 echo \"${{COMPREPLY[@]}}\"",
                script.display()
            )),
            LIMIT,
        );
        assert!(r.ok, "{}", r.stderr);
        let words: Vec<&str> = r.stdout.split_whitespace().collect();
        assert!(
            words.contains(&"serve") && words.contains(&"set"),
            "{words:?}"
        );
    }
    let bad = zramd(&["completions", "tcsh"]);
    assert!(!bad.ok && bad.stderr.contains("tcsh"), "{}", bad.stderr);
}

#[test]
fn man_pages_name_the_subcommands_and_render() {
    let page = zramd(&["man"]);
    assert!(page.ok, "{}", page.stderr);
    assert!(page.stdout.starts_with(".ie") || page.stdout.contains(".TH zramd"));
    let dir = tempfile::tempdir().unwrap();
    let written = zramd(&["man", "--dir", dir.path().to_str().unwrap()]);
    assert!(written.ok, "{}", written.stderr);
    for name in ["zramd.1", "zramd-serve.1", "zramd-stat.1", "zramd-man.1"] {
        assert!(dir.path().join(name).is_file(), "no {name}");
        assert!(written.stdout.contains(name), "{}", written.stdout);
    }
    if !have("man_pages_name_the_subcommands_and_render", "groff") {
        return;
    }
    for file in std::fs::read_dir(dir.path()).unwrap() {
        let file = file.unwrap().path();
        // -k: the input's UTF-8 through preconv, as man does; -ww: every warning.
        let r = run(
            Command::new("groff")
                .args(["-k", "-man", "-Tutf8", "-ww"])
                .arg(&file),
            LIMIT,
        );
        assert!(
            r.ok && r.stderr.is_empty(),
            "{}: {}",
            file.display(),
            r.stderr
        );
        if file.ends_with("zramd.1") {
            for sub in ["zramd-serve(1)", "zramd-stat(1)", "zramd-completions(1)"] {
                assert!(r.stdout.contains(sub), "the page lacks {sub}");
            }
        }
    }
}

#[test]
fn a_users_error_is_one_line_without_a_backtrace() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("zram-generator.conf");
    std::fs::write(&bad, "[swap0]\nzram-size = 1\n").unwrap();
    let missing = dir.path().join("missing.sock");
    for (args, why) in [
        (
            vec!["stat", "--control", missing.to_str().unwrap()],
            "missing.sock",
        ),
        (
            vec!["serve", "--zram-generator", bad.to_str().unwrap()],
            "unknown section [swap0]",
        ),
    ] {
        let r = run(
            Command::new(ZRAMD).args(&args).env("RUST_BACKTRACE", "1"),
            LIMIT,
        );
        assert!(!r.ok);
        let lines: Vec<&str> = r.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {}", r.stderr);
        assert!(
            lines[0].starts_with("zramd: ") && lines[0].contains(why),
            "{}",
            r.stderr
        );
        assert!(!r.stderr.contains("acktrace"), "{}", r.stderr);
    }
    let status = Command::new(ZRAMD)
        .args(["stat", "--control", missing.to_str().unwrap()])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1));
}

#[test]
fn serves_a_zram_generator_file() {
    let dir = tempfile::tempdir().unwrap();
    let back = dir.path().join("zram1.back");
    std::fs::write(&back, b"").unwrap();
    let conf = dir.path().join("zram-generator.conf");
    std::fs::write(
        &conf,
        format!(
            "[zram0]\nzram-size = 16\ncompression-algorithm = zstd(level=5) lz4 (type=idle)\n\
             swap-priority = 100\n\n[zram1]\nzram-size = min(ram, 8)\nzram-resident-limit = 2\n\
             writeback-device = {}\n",
            back.display()
        ),
    )
    .unwrap();
    let served = Served::start(dir.path(), &["--zram-generator", conf.to_str().unwrap()]);
    let stat = served.stat_json();
    let devices = stat.as_array().expect("a list");
    let names: Vec<&str> = devices
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["zram0", "zram1"]);
    assert_eq!(devices[0]["disksize"], 16 << 20);
    assert_eq!(devices[0]["algorithm"], "zstd");
    assert_eq!(devices[1]["disksize"], 8 << 20);
    assert_eq!(devices[1]["algorithm"], "lz4");
    assert_eq!(devices[1]["backing_dev"], back.to_str().unwrap());
    assert_eq!(devices[1]["mm_stat_fields"][3], 2 << 20, "mem_limit");
    let log = served.stderr();
    assert!(log.contains("swap-priority ignored"), "{log}");
    assert!(log.contains("type=idle"), "{log}");
    served.stop();
}
