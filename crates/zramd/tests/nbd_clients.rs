//! Real NBD clients that nobody here wrote, against the in-process server: qemu-img,
//! qemu-io, nbdinfo, nbdcopy, nbdfuse, libnbd's Python binding and fio's nbd engine.
//!
//! The test script installs them (`apt-get install -y libnbd-bin python3-libnbd qemu-utils
//! fio nbdkit fuse3`). A test whose tool is missing says so on stderr and returns; it never
//! passes silently. Every tool runs under a time limit and the server is stopped at the end.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    pub mod ext4;
    pub mod have;
    pub mod image;
    #[expect(
        dead_code,
        reason = "real clients need only the server and a few raw requests, not the bad-input checks"
    )]
    pub mod nbd;
    pub mod run;
}

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::ext4::Ext4;
use common::have::have;
use common::image::real_image;
use common::nbd::*;
use common::run::{run, run_ok};
use zramd::nbd::ServerConfig;

#[test]
fn qemu_img_convert_and_compare() {
    if !have("qemu_img_convert_and_compare", "qemu-img") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let size = 24 << 20;
    let img = dir.path().join("src.img");
    real_image(&img, size);
    let server = Server::start(size as u64, ServerConfig::default());
    let target = server.uri("zram0");
    run_ok(
        Command::new("qemu-img")
            .args(["convert", "-n", "-p", "-f", "raw", "-O", "raw"])
            .arg(&img)
            .arg(&target),
        Duration::from_secs(120),
    );
    let r = run_ok(
        Command::new("qemu-img")
            .args(["compare", "-f", "raw", "-F", "raw"])
            .arg(&img)
            .arg(&target),
        Duration::from_secs(120),
    );
    assert!(r.stdout.contains("identical"), "{}", r.stdout);
    // And through the TCP listener with qemu's own NBD syntax.
    let tcp = Server::start_tcp(size as u64, ServerConfig::default());
    run_ok(
        Command::new("qemu-img")
            .args(["convert", "-n", "-f", "raw", "-O", "raw"])
            .arg(&img)
            .arg(tcp.qemu_target("zram0")),
        Duration::from_secs(120),
    );
    run_ok(
        Command::new("qemu-img")
            .args(["compare", "-f", "raw", "-F", "raw"])
            .arg(&img)
            .arg(tcp.qemu_target("zram0")),
        Duration::from_secs(120),
    );
    // The comparison notices a difference.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&img)
        .and_then(|mut f| {
            use std::io::{Seek, SeekFrom, Write};
            f.seek(SeekFrom::Start(12345))?;
            f.write_all(b"different")
        })
        .unwrap();
    let r = run(
        Command::new("qemu-img")
            .args(["compare", "-f", "raw", "-F", "raw"])
            .arg(&img)
            .arg(&target),
        Duration::from_secs(120),
    );
    assert!(!r.ok && r.stdout.contains("mismatch"), "{r:?}");
    server.stop();
    tcp.stop();
}

#[test]
fn qemu_io_write_read_verify() {
    if !have("qemu_io_write_read_verify", "qemu-io") {
        return;
    }
    let server = Server::start(16 << 20, ServerConfig::default());
    let commands = [
        "write -P 0xab 0 1M",
        "read -P 0xab 0 1M",
        "write -P 0x5a 4095 3000",
        "read -P 0x5a 4095 3000",
        "read -P 0xab 0 4095",
        "write -z 1M 1M",
        "read -P 0 1M 1M",
        "write -P 0x11 2M 256k",
        "discard 2M 128k",
        "read -P 0x11 2176k 128k",
        "aio_write -P 0x22 4M 64k",
        "aio_write -P 0x33 5M 64k",
        "aio_flush",
        "read -P 0x22 4M 64k",
        "read -P 0x33 5M 64k",
        "writev -P 0x44 8M 4k 8k 512",
        "readv -P 0x44 8M 12800",
        "flush",
        "read -P 0 15M 1M",
    ];
    let mut cmd = Command::new("qemu-io");
    cmd.args(["-f", "raw"]);
    for c in commands {
        cmd.args(["-c", c]);
    }
    cmd.arg(server.uri("zram0"));
    let r = run_ok(&mut cmd, Duration::from_secs(60));
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(!all.contains("failed") && !all.contains("error"), "{all}");
    assert_eq!(all.matches("read ").count(), 9, "{all}");
    // A read-only export refuses writes.
    let r = run(
        Command::new("qemu-io")
            .args(["-f", "raw", "-c", "write -P 1 0 4k"])
            .arg(server.uri("ro")),
        Duration::from_secs(60),
    );
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(!r.ok, "{all}");
    assert!(
        ["read-only", "Permission denied", "Operation not permitted"]
            .iter()
            .any(|m| all.contains(m)),
        "{all}"
    );
    // Opened read-only, it reads.
    run_ok(
        Command::new("qemu-io")
            .args(["-r", "-f", "raw", "-c", "read -P 0 0 64k"])
            .arg(server.uri("ro")),
        Duration::from_secs(60),
    );
    server.stop();
}

#[test]
fn nbdinfo_size_flags_and_map() {
    if !have("nbdinfo_size_flags_and_map", "nbdinfo") {
        return;
    }
    let size: u64 = 4 << 20;
    let server = Server::start(size, ServerConfig::default());
    let r = run_ok(
        Command::new("nbdinfo")
            .arg("--json")
            .arg(server.uri("zram0")),
        Duration::from_secs(30),
    );
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("nbdinfo json");
    let e = &v["exports"][0];
    assert_eq!(e["export-size"], size, "{v}");
    for key in [
        "can_multi_conn",
        "can_trim",
        "can_zero",
        "can_fua",
        "can_flush",
        "can_cache",
        "can_fast_zero",
        "can_df",
    ] {
        assert_eq!(e[key], true, "{key} in {v}");
    }
    assert_eq!(e["is_read_only"], false, "{v}");
    assert_eq!(e["block_size_preferred"], 4096, "{v}");
    assert_eq!(e["block_size_maximum"], 32 << 20, "{v}");
    let contexts = e["contexts"].as_array().expect("contexts");
    assert!(contexts.iter().any(|c| c == "base:allocation"), "{v}");
    let r = run_ok(
        Command::new("nbdinfo").arg("--json").arg(server.uri("ro")),
        Duration::from_secs(30),
    );
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("json");
    assert_eq!(v["exports"][0]["is_read_only"], true, "{v}");
    let r = run_ok(
        Command::new("nbdinfo").arg("--list").arg(server.uri("")),
        Duration::from_secs(30),
    );
    assert!(
        r.stdout.contains("zram0") && r.stdout.contains("ro"),
        "{}",
        r.stdout
    );

    // Data in the first MiB, zeroes written into the second, a trim punched into the first.
    let mut c = server.connect();
    c.greet();
    c.go("zram0", false);
    let data: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8 | 1).collect();
    c.request(zramd::nbd::proto::CMD_WRITE, 0, 1, 0, 1 << 20);
    c.send(&data);
    assert_eq!(c.simple_reply(1), 0);
    c.request(zramd::nbd::proto::CMD_WRITE, 0, 2, 1 << 20, 1 << 20);
    c.send(&vec![0u8; 1 << 20]);
    assert_eq!(c.simple_reply(2), 0);
    c.request(zramd::nbd::proto::CMD_TRIM, 0, 3, 256 << 10, 256 << 10);
    assert_eq!(c.simple_reply(3), 0);
    drop(c);
    let r = run_ok(
        Command::new("nbdinfo")
            .args(["--map", "--json"])
            .arg(server.uri("zram0")),
        Duration::from_secs(30),
    );
    let map: serde_json::Value = serde_json::from_str(&r.stdout).expect("map json");
    let extents: Vec<(u64, u64, u64)> = map
        .as_array()
        .expect("array")
        .iter()
        .map(|x| {
            (
                x["offset"].as_u64().unwrap(),
                x["length"].as_u64().unwrap(),
                x["type"].as_u64().unwrap(),
            )
        })
        .collect();
    let k = 1024;
    assert_eq!(
        extents,
        vec![
            (0, 256 * k, 0),
            (256 * k, 256 * k, 3),
            (512 * k, 512 * k, 0),
            (1024 * k, 1024 * k, 2),
            (2048 * k, 2048 * k, 3),
        ],
        "{}",
        r.stdout
    );
    let r = run_ok(
        Command::new("nbdinfo")
            .args(["--map", "--totals"])
            .arg(server.uri("zram0")),
        Duration::from_secs(30),
    );
    assert!(r.stdout.contains("hole,zero"), "{}", r.stdout);
    server.stop();
}

#[test]
fn nbdcopy_both_ways_with_several_connections() {
    if !have("nbdcopy_both_ways_with_several_connections", "nbdcopy") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let size = 32 << 20;
    let src = dir.path().join("src.img");
    let a = real_image(&src, size);
    for tcp in [false, true] {
        let server = if tcp {
            Server::start_tcp(size as u64, ServerConfig::default())
        } else {
            Server::start(size as u64, ServerConfig::default())
        };
        let uri = server.uri("zram0");
        run_ok(
            Command::new("nbdcopy")
                .args(["--connections=4", "--requests=16", "--flush"])
                .arg(&src)
                .arg(&uri),
            Duration::from_secs(180),
        );
        let dst = dir.path().join("dst.img");
        std::fs::write(&dst, b"").unwrap();
        run_ok(
            Command::new("nbdcopy")
                .args(["--connections=4", "--requests=16"])
                .arg(&uri)
                .arg(&dst),
            Duration::from_secs(180),
        );
        let b = std::fs::read(&dst).unwrap();
        assert_eq!(a.len(), b.len());
        assert!(a == b, "nbdcopy round trip differs");
        // The export itself, byte for byte, through our own reader.
        let back = read_all(&server, size);
        assert!(back == a, "export content differs from the source");
        // A copy between two connections to the same server (NBD to NBD).
        run_ok(
            Command::new("nbdcopy")
                .args(["--connections=2"])
                .arg(&uri)
                .arg("null:"),
            Duration::from_secs(180),
        );
        server.stop();
    }
}

fn read_all(server: &Server, size: usize) -> Vec<u8> {
    let mut c = server.connect();
    c.greet();
    c.go("zram0", false);
    let mut out = Vec::with_capacity(size);
    for (h, off) in (0..size).step_by(1 << 20).enumerate() {
        c.request(
            zramd::nbd::proto::CMD_READ,
            0,
            h as u64,
            off as u64,
            1 << 20,
        );
        assert_eq!(c.simple_reply(h as u64), 0);
        out.extend(c.recv(1 << 20));
    }
    out
}

/// Writes a fio job file and runs it.
fn fio(uri: &str, jobs: &str) {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job.fio");
    let text = format!(
        "[global]\nioengine=nbd\nuri={uri}\nverify=crc32c\nverify_fatal=1\ndo_verify=1\nverify_state_save=0\nruntime=120\ngroup_reporting=1\n{jobs}"
    );
    std::fs::write(&job, text).unwrap();
    let r = run_ok(
        Command::new("fio").arg(&job).current_dir(dir.path()),
        Duration::from_secs(300),
    );
    assert!(
        !r.stdout.contains("verify:") || !r.stdout.contains("bad"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("err= 0"), "{}\n{}", r.stdout, r.stderr);
    eprintln!("{}", r.stdout);
}

#[test]
fn fio_nbd_engine_with_verify() {
    if !have("fio_nbd_engine_with_verify", "fio") {
        return;
    }
    let server = Server::start(128 << 20, ServerConfig::default());
    fio(
        &server.uri("zram0"),
        "[rand-4k]\nrw=randwrite\nbs=4k\niodepth=16\noffset=0\nsize=64m\n\
         [seq-1m]\nstonewall\nrw=write\nbs=1m\niodepth=16\noffset=64m\nsize=64m\n",
    );
    let tcp = Server::start_tcp(64 << 20, ServerConfig::default());
    fio(
        &tcp.uri("zram0"),
        "[rand-mixed]\nrw=randwrite\nbsrange=512-64k\nblockalign=512\niodepth=16\nsize=32m\n",
    );
    server.stop();
    tcp.stop();
}

#[test]
fn libnbd_python_strict_checks() {
    if !have("libnbd_python_strict_checks", "python3") {
        return;
    }
    // The Debian binding lives in the system interpreter.
    let python = if Path::new("/usr/bin/python3").is_file() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let probe = run(
        Command::new(python).args(["-c", "import nbd"]),
        Duration::from_secs(30),
    );
    if !probe.ok {
        eprintln!(
            "SKIPPED libnbd_python_strict_checks: python3-libnbd is not installed ({})",
            probe.stderr.trim()
        );
        return;
    }
    let server = Server::start(8 << 20, ServerConfig::default());
    let script = r#"
import sys, nbd
uri = sys.argv[1]
h = nbd.NBD()
h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
h.set_strict_mode(nbd.STRICT_COMMANDS | nbd.STRICT_FLAGS | nbd.STRICT_BOUNDS | nbd.STRICT_ZERO_SIZE | nbd.STRICT_ALIGN)
h.connect_uri(uri)
assert h.get_structured_replies_negotiated()
assert h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
assert h.can_df() and h.can_fast_zero() and h.can_multi_conn() and h.can_cache()
assert h.get_size() == 8 << 20
data = bytes((i * 13 + 7) % 256 for i in range(65536))
h.pwrite(data, 4096, nbd.CMD_FLAG_FUA)
assert h.pread(65536, 4096) == data
chunks = []
def chunk(buf, offset, status, err):
    chunks.append((offset, len(buf), status))
    return 0
got = h.pread_structured(65536, 4096, chunk, nbd.CMD_FLAG_DF)
assert got == data and chunks == [(4096, 65536, nbd.READ_DATA)], chunks
h.zero(65536, 1 << 20, nbd.CMD_FLAG_FAST_ZERO)
h.zero(4096, 2 << 20, nbd.CMD_FLAG_NO_HOLE)
h.trim(1 << 20, 3 << 20)
h.cache(65536, 0)
h.flush()
seen = []
def extents(ctx, offset, entries, err):
    seen.append((ctx, offset, list(entries)))
    return 0
h.block_status(8 << 20, 0, extents)
h.block_status(8 << 20, 0, extents, nbd.CMD_FLAG_REQ_ONE)
assert seen[0][0] == nbd.CONTEXT_BASE_ALLOCATION
ents = seen[0][2]
pairs = list(zip(ents[0::2], ents[1::2]))
assert pairs == [(4096, 3), (65536, 0), ((2 << 20) - 69632, 3), (4096, 2), ((6 << 20) - 4096, 3)], pairs
assert seen[1][2] == [4096, 3], seen[1]
# Without the client-side checks, the server's own refusals come back as errors.
h.set_strict_mode(0)
for call in (lambda: h.pread(4096, (8 << 20) - 100), lambda: h.pwrite(b"x" * 4096, (8 << 20) - 100)):
    try:
        call()
        raise SystemExit("a request past the end succeeded")
    except nbd.Error as e:
        print("refused:", e.errno, e)
assert h.pread(10, 4096) == data[:10]
h.shutdown()
print("libnbd ok")
"#;
    let r = run_ok(
        Command::new(python)
            .args(["-c", script])
            .arg(server.uri("zram0")),
        Duration::from_secs(60),
    );
    assert!(r.stdout.contains("libnbd ok"), "{r:?}");
    server.stop();
}

/// `nbdfuse` serving an NBD export as the file `<mnt>/nbd`; unmounted and stopped on drop,
/// whatever happens.
#[derive(Debug)]
struct Nbdfuse {
    child: Child,
    mnt: PathBuf,
}

impl Nbdfuse {
    /// Starts nbdfuse for `uri` on `mnt` (created) and waits for its file; if the file does
    /// not appear, says why `test` is skipped and returns `None`.
    fn mount(test: &str, mnt: &Path, uri: &str) -> Option<Self> {
        std::fs::create_dir(mnt).expect("FUSE mount point");
        let child = Command::new("nbdfuse")
            .arg(mnt)
            .arg(uri)
            .stdin(Stdio::null())
            .spawn()
            .expect("start nbdfuse");
        let mut fuse = Self {
            child,
            mnt: mnt.to_owned(),
        };
        let start = Instant::now();
        while !fuse.file().exists() {
            let exited = matches!(fuse.child.try_wait(), Ok(Some(_)));
            if exited || start.elapsed() > Duration::from_secs(20) {
                let how = if exited {
                    "it exited"
                } else {
                    "no file in 20 s"
                };
                eprintln!("SKIPPED {test}: nbdfuse did not mount ({how})");
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(fuse)
    }

    /// The export as a file.
    fn file(&self) -> PathBuf {
        self.mnt.join("nbd")
    }
}

impl Drop for Nbdfuse {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.mnt)
            .status();
        let start = Instant::now();
        while self.child.try_wait().ok().flatten().is_none()
            && start.elapsed() < Duration::from_secs(20)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn nbdfuse_file_reads_and_writes() {
    const NAME: &str = "nbdfuse_file_reads_and_writes";
    for need in ["nbdfuse", "fusermount3", "fuse"] {
        if !have(NAME, need) {
            return;
        }
    }
    let server = Server::start(8 << 20, ServerConfig::default());
    let dir = tempfile::tempdir().unwrap();
    let Some(fuse) = Nbdfuse::mount(NAME, &dir.path().join("mnt"), &server.uri("zram0")) else {
        return;
    };
    {
        use std::io::{Read, Seek, SeekFrom, Write};
        let file = fuse.file();
        assert_eq!(std::fs::metadata(&file).unwrap().len(), 8 << 20);
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 31 % 253) as u8).collect();
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&file)
            .unwrap();
        f.seek(SeekFrom::Start(12_345)).unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
        let mut back = vec![0u8; data.len()];
        f.seek(SeekFrom::Start(12_345)).unwrap();
        f.read_exact(&mut back).unwrap();
        assert!(back == data);
    }
    drop(fuse);
    // What went through the FUSE file is on the device.
    let mut c = server.connect();
    c.greet();
    c.go("zram0", false);
    c.request(zramd::nbd::proto::CMD_READ, 0, 1, 12_345, 100);
    assert_eq!(c.simple_reply(1), 0);
    let want: Vec<u8> = (0..100u32).map(|i| (i * 31 % 253) as u8).collect();
    assert_eq!(c.recv(100), want);
    drop(c);
    server.stop();
}

#[test]
fn ext4_on_nbdfuse_loop_mkfs_mount_fsck() {
    const NAME: &str = "ext4_on_nbdfuse_loop_mkfs_mount_fsck";
    const LIMIT: Duration = Duration::from_secs(300);
    for need in [
        "nbdfuse",
        "fusermount3",
        "losetup",
        "mkfs.ext4",
        "e2fsck",
        "root",
        "fuse",
    ] {
        if !have(NAME, need) {
            return;
        }
    }
    let server = Server::start(128 << 20, ServerConfig::default());
    let dir = tempfile::tempdir().unwrap();
    let Some(fuse) = Nbdfuse::mount(NAME, &dir.path().join("fuse"), &server.uri("zram0")) else {
        return;
    };
    let ext4 = dir.path().join("ext4");
    let fs = Ext4::create(&fuse.file(), &ext4, &[]);
    // Real files in, read back, a consistent filesystem after.
    run_ok(
        Command::new("cp")
            .args(["-a", "/usr/include/linux"])
            .arg(&ext4),
        LIMIT,
    );
    run_ok(&mut Command::new("sync"), LIMIT);
    run_ok(
        Command::new("diff")
            .args(["-r", "/usr/include/linux"])
            .arg(ext4.join("linux")),
        LIMIT,
    );
    fs.unmount_and_check();
    drop(fuse);
    server.stop();
}

/// `nbdinfo --list` shows each export's description, computed when asked: the size,
/// algorithm and allocator of an initialized device (`read-only` where so); the list reply
/// (read raw: nbdinfo stops at an export it cannot open) says `uninitialized` for a device
/// without a disksize, and the description follows the device's state.
#[test]
fn nbdinfo_list_shows_descriptions() {
    if !have("nbdinfo_list_shows_descriptions", "nbdinfo") {
        return;
    }
    let blank = Arc::new(zramd::device::Device::new(
        "zram2",
        zram::ZramConfig::default(),
    ));
    let exports = vec![
        Arc::new(zramd::export::Export::new("zram0", device(24 << 20), false)),
        Arc::new(zramd::export::Export::new("ro", device(1 << 20), true)),
    ];
    let server = Server::with_exports(exports, ServerConfig::default(), false);
    let r = run_ok(
        Command::new("nbdinfo").arg("--list").arg(server.uri("")),
        Duration::from_secs(30),
    );
    for want in [
        "description: zram0: 24 MiB lz4 compressed RAM disk (zsmalloc)\n",
        "description: ro: 1 MiB lz4 compressed RAM disk (zsmalloc), read-only\n",
    ] {
        assert!(
            r.stdout.contains(want),
            "{want:?} missing from\n{}",
            r.stdout
        );
    }
    let r = run_ok(
        Command::new("nbdinfo").arg("--json").arg(server.uri("ro")),
        Duration::from_secs(30),
    );
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("json");
    assert_eq!(
        v["exports"][0]["description"], "ro: 1 MiB lz4 compressed RAM disk (zsmalloc), read-only",
        "{v}"
    );
    drop(server);

    let exports = vec![Arc::new(zramd::export::Export::new(
        "zram2",
        Arc::clone(&blank),
        false,
    ))];
    let server = Server::with_exports(exports, ServerConfig::default(), false);
    let list = |server: &Server| {
        let mut c = server.connect();
        c.greet();
        c.option(zramd::nbd::proto::OPT_LIST, &[]);
        let r = c.opt_reply();
        assert_eq!(r.reply_type, zramd::nbd::proto::REP_SERVER, "{r:?}");
        assert_eq!(c.opt_reply().reply_type, zramd::nbd::proto::REP_ACK);
        let (len, rest) = r.data.split_at(4);
        let len = u32::from_be_bytes(len.try_into().unwrap()) as usize;
        let (name, description) = rest.split_at(len);
        assert_eq!(name, b"zram2");
        String::from_utf8(description.to_vec()).unwrap()
    };
    assert_eq!(list(&server), "zram2: uninitialized compressed RAM disk");
    blank.init(2 << 30).unwrap();
    assert_eq!(
        list(&server),
        "zram2: 2 GiB lz4 compressed RAM disk (zsmalloc)"
    );
}
