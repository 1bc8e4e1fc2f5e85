//! Observability (issue 15): the metrics endpoint of a `zramd serve` process (names by
//! Prometheus's conventions, an idle client delaying no scrape, `HEAD`, 405 for other
//! methods, process figures) and `zramd top` against it.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    #[expect(
        dead_code,
        reason = "only the raw client's handshake and requests are used"
    )]
    pub mod nbd;
    #[expect(
        dead_code,
        reason = "the server is reached through its CLI and sockets"
    )]
    pub mod run;
    #[expect(
        dead_code,
        reason = "these tests stop their servers cleanly and never kill one"
    )]
    pub mod served;
}

use std::collections::{BTreeMap, BTreeSet};
use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::nbd::Client;
use common::served::Served;
use zramd::nbd::proto::CMD_WRITE;

const ZRAMD: &str = env!("CARGO_BIN_EXE_zramd");
/// Hang guard for each exchange (never a measure of speed).
const GUARD: Duration = Duration::from_secs(60);

/// A served device with metrics on a free loopback port; the port as the server printed it.
fn serve_with_metrics(dir: &std::path::Path) -> (Served, SocketAddr) {
    let served = Served::start(dir, &["--size", "16M", "--metrics", "127.0.0.1:0"]);
    let start = Instant::now();
    loop {
        let out = served.stdout();
        if let Some(addr) = out
            .lines()
            .find_map(|l| l.strip_prefix("metrics: http://"))
            .and_then(|rest| rest.strip_suffix("/metrics"))
        {
            return (served, addr.parse().expect("metrics address"));
        }
        assert!(start.elapsed() < GUARD, "no metrics address printed: {out}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `request` and reads the whole answer (the server closes after it).
fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut http = TcpStream::connect(addr).unwrap();
    http.set_read_timeout(Some(GUARD)).unwrap();
    http.write_all(request).unwrap();
    let mut answer = String::new();
    http.read_to_string(&mut answer)
        .expect("an answer before the hang guard");
    answer
}

/// An answer's head (status line and headers) and body.
fn split(answer: &str) -> (&str, &str) {
    answer
        .split_once("\r\n\r\n")
        .expect("a head ending in a blank line")
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Is something waiting to be read on `s` (an answer or the end)? Never blocks.
fn answered(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let r = (&*s).read(&mut byte);
    s.set_nonblocking(false).unwrap();
    match r {
        Ok(_) => true,
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(_) => true,
    }
}

#[test]
fn an_idle_client_delays_no_scrape_and_head_and_methods_are_answered() {
    let dir = tempfile::tempdir().unwrap();
    let (served, addr) = serve_with_metrics(dir.path());
    // Connected, sending nothing: before the fix, the only serving thread waited on it.
    let idle = TcpStream::connect(addr).unwrap();
    for _ in 0..3 {
        let answer = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("zramd_orig_data_size_bytes"), "{answer}");
        assert!(
            !answered(&idle),
            "the idle client was answered (timed out) before a scrape completed"
        );
    }

    // HEAD: the headers, a Content-Length, no body.
    let answer = exchange(addr, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let (head, body) = split(&answer);
    assert!(head.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(body.is_empty(), "HEAD got a body: {body}");
    let length: usize = header(head, "content-length")
        .expect("Content-Length")
        .parse()
        .unwrap();
    let get = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let get_body = split(&get).1;
    // The figures move between two scrapes (CPU time, connection counts): the same size
    // within a few percent, not byte for byte.
    let (lo, hi) = (get_body.len() * 9 / 10, get_body.len() * 11 / 10);
    assert!(
        (lo..=hi).contains(&length),
        "HEAD says {length}, GET sent {}",
        get_body.len()
    );
    assert_eq!(
        header(head, "content-type"),
        header(split(&get).0, "content-type")
    );

    // Other methods: 405 with what is allowed; other paths: 404.
    for method in ["POST", "PUT", "DELETE"] {
        let request = format!("{method} /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
        let answer = exchange(addr, request.as_bytes());
        let (head, _) = split(&answer);
        assert!(head.starts_with("HTTP/1.1 405"), "{method}: {answer}");
        assert_eq!(header(head, "allow"), Some("GET, HEAD"), "{answer}");
    }
    let answer = exchange(addr, b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    let answer = exchange(addr, b"HEAD /nothing HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    assert!(split(&answer).1.is_empty(), "{answer}");

    // Lines ended by a bare LF, HTTP/1.0 and a proxy's absolute URL are served; what is
    // not a request line is 400, another major version 505 (before, garbage was 404, HTTP/9.9
    // was served, and a bare-LF head waited for the 5 s deadline and got 408).
    for (request, status) in [
        (&b"GET /metrics HTTP/1.1\nHost: x\n\n"[..], "200"),
        (b"GET /metrics HTTP/1.0\r\n\r\n", "200"),
        (b"GET http://x:9100/metrics?a=b HTTP/1.1\r\n\r\n", "200"),
        (b"hello\r\n\r\n", "400"),
        (b"GET /metrics\r\n\r\n", "400"),
        (b"GET  /metrics HTTP/1.1\r\n\r\n", "400"),
        (b"GET metrics HTTP/1.1\r\n\r\n", "400"),
        (b"G\x01T /metrics HTTP/1.1\r\n\r\n", "400"),
        (b"GET /metrics HTTP/one\r\n\r\n", "400"),
        (b"GET /metrics HTTP/9.9\r\n\r\n", "505"),
        (b"GET /metrics HTTP/2.0\r\n\r\n", "505"),
    ] {
        let answer = exchange(addr, request);
        let text = String::from_utf8_lossy(request);
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{text:?}: {answer}"
        );
    }

    // The idle client is still connected and still unanswered after all of that.
    assert!(!answered(&idle), "the idle client was answered early");
    drop(idle);
    served.stop();
}

/// A sample line: its name, labels (text between the braces) and value.
fn sample(line: &str) -> (&str, &str, f64) {
    let (name_labels, value) = line.rsplit_once(' ').expect("a value");
    let (name, labels) = match name_labels.split_once('{') {
        Some((n, rest)) => (n, rest.strip_suffix('}').expect("closing brace")),
        None => (name_labels, ""),
    };
    (
        name,
        labels,
        value.parse().unwrap_or_else(|_| panic!("value of {line}")),
    )
}

/// The families of an exposition (name: type, unit), checked on the way: every family has
/// HELP then TYPE lines, every sample belongs to the family declared last, counters'
/// samples end in `_total` (histograms' in `_bucket`/`_sum`/`_count`, infos' in `_info`),
/// a unit is the end of its family's name, and the text ends with `# EOF`.
fn families(text: &str) -> BTreeMap<String, (String, Option<String>)> {
    let mut families = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    let mut help = None;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.last(),
        Some(&"# EOF"),
        "the exposition ends with # EOF"
    );
    for line in &lines[..lines.len() - 1] {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest.split(' ').next().unwrap().to_owned());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert_eq!(help.as_deref(), Some(name), "HELP before TYPE of {name}");
            assert!(!families.contains_key(name), "{name} declared twice");
            families.insert(name.to_owned(), (kind.to_owned(), None));
            current = Some((name.to_owned(), kind.to_owned()));
        } else if let Some(rest) = line.strip_prefix("# UNIT ") {
            let (name, unit) = rest.split_once(' ').unwrap();
            assert!(name.ends_with(&format!("_{unit}")), "{line}");
            families.get_mut(name).expect("UNIT after TYPE").1 = Some(unit.to_owned());
        } else {
            assert!(!line.starts_with('#'), "unexpected comment {line}");
            let (name, _, _) = sample(line);
            let (family, kind) = current.as_ref().expect("a sample after a TYPE line");
            let suffixes: &[&str] = match kind.as_str() {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                "info" => &["_info"],
                "gauge" => &[""],
                k => panic!("type {k} of {family}"),
            };
            assert!(
                suffixes.iter().any(|s| name == format!("{family}{s}")),
                "{name} in family {family} ({kind})"
            );
            if kind == "gauge" {
                assert!(!name.ends_with("_total"), "gauge {name} ends in _total");
            }
        }
    }
    families
}

/// The value of the one sample named `name` with exactly `labels`.
fn value(text: &str, name: &str, labels: &str) -> f64 {
    let found: Vec<f64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(sample)
        .filter(|&(n, l, _)| n == name && l == labels)
        .map(|(_, _, v)| v)
        .collect();
    assert_eq!(found.len(), 1, "{name}{{{labels}}} in\n{text}");
    found[0]
}

/// `VmRSS` of `/proc/<pid>/status`, bytes.
fn vm_rss(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .expect("VmRSS");
    kb * 1024.0
}

#[test]
fn metric_names_follow_the_conventions_and_the_process_figures_are_the_servers() {
    let dir = tempfile::tempdir().unwrap();
    let (served, addr) = serve_with_metrics(dir.path());
    let answer = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let rss_after = vm_rss(served.pid());
    let (head, text) = split(&answer);
    assert!(
        header(head, "content-type").is_some_and(|t| t.starts_with("application/openmetrics-text")),
        "{head}"
    );
    let families = families(text);
    let kind = |name: &str| families.get(name).map(|(k, _)| k.as_str());
    let unit = |name: &str| families.get(name).and_then(|(_, u)| u.as_deref());
    // Sizes in bytes, cumulative figures as counters.
    for name in [
        "zramd_orig_data_size_bytes",
        "zramd_compr_data_size_bytes",
        "zramd_mem_used_bytes",
        "zramd_disksize_bytes",
        "zramd_unit_size_bytes",
        "zramd_metadata_bytes",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
    ] {
        assert_eq!(
            (kind(name), unit(name)),
            (Some("gauge"), Some("bytes")),
            "{name}"
        );
    }
    for name in [
        "zramd_pages_compacted",
        "zramd_failed_reads",
        "zramd_bd_writes",
        "zramd_policy_rounds",
        "zramd_requests",
        "zramd_connections_accepted",
        "zramd_connections_refused",
        "zramd_connections_closed",
    ] {
        assert_eq!(kind(name), Some("counter"), "{name}");
    }
    assert_eq!(kind("zramd_bd_write_bytes"), Some("counter"));
    assert_eq!(kind("process_cpu_seconds"), Some("counter"));
    assert_eq!(kind("zramd_request_latency_seconds"), Some("histogram"));
    assert_eq!(kind("zramd_connections"), Some("gauge"));
    assert_eq!(kind("zramd_device"), Some("info"));
    assert_eq!(kind("zramd_build"), Some("info"));
    // No gauge is named as a counter or without its unit.
    let old: BTreeSet<&str> = ["zramd_mem_used_total_bytes", "zramd_pages_compacted"]
        .into_iter()
        .collect();
    for (name, (k, _)) in &families {
        assert!(!(k == "gauge" && old.contains(name.as_str())), "{name}");
    }

    let device = "device=\"zram0\"";
    assert_eq!(
        value(
            text,
            "zramd_device_info",
            "device=\"zram0\",algorithm=\"lz4\",allocator=\"zsmalloc\""
        ),
        1.0
    );
    let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
    assert_eq!(value(text, "zramd_build_info", &version), 1.0);
    assert_eq!(
        value(text, "zramd_disksize_bytes", device),
        16.0 * 1024.0 * 1024.0
    );
    assert_eq!(value(text, "zramd_unit_size_bytes", device), 4096.0);
    // This scrape's own connection was accepted (and is open, answering).
    assert!(
        value(
            text,
            "zramd_connections_accepted_total",
            "server=\"metrics\""
        ) >= 1.0
    );
    assert!(
        value(
            text,
            "zramd_connections",
            "server=\"metrics\",state=\"serving\""
        ) >= 1.0
    );
    assert_eq!(
        value(
            text,
            "zramd_connections",
            "server=\"nbd\",state=\"serving\""
        ),
        0.0
    );

    // The process figures are the server's: its RSS (read just after the scrape) within a
    // factor of two, a few descriptors under the limit, a start time in the last day.
    let rss = value(text, "process_resident_memory_bytes", "");
    assert!(
        rss > rss_after / 2.0 && rss < rss_after * 2.0,
        "RSS {rss} against VmRSS {rss_after}"
    );
    let (open, max) = (
        value(text, "process_open_fds", ""),
        value(text, "process_max_fds", ""),
    );
    assert!(open >= 3.0 && open < max, "{open} of {max} descriptors");
    assert!(value(text, "process_virtual_memory_bytes", "") >= rss);
    assert!(value(text, "process_cpu_seconds_total", "") >= 0.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started = value(text, "process_start_time_seconds", "");
    assert!(
        started > now - 86_400.0 && started < now + 60.0,
        "{started} against {now}"
    );
    served.stop();
}

#[test]
fn top_shows_the_device_and_its_write_rate() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &["--size", "16M"]);
    let out = dir.path().join("top.out");
    let mut top = Command::new(ZRAMD)
        .args(["top", "--iterations", "2", "--interval", "0.2", "--control"])
        .arg(&served.control)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Kill `top` whatever happens below.
    struct Reap<'a>(&'a mut std::process::Child);
    impl Drop for Reap<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let top = Reap(&mut top);
    // Write pages through NBD until `top` has printed both tables.
    let stream = UnixStream::connect(&served.socket).unwrap();
    stream.set_read_timeout(Some(GUARD)).unwrap();
    stream.set_write_timeout(Some(GUARD)).unwrap();
    let mut client = Client {
        s: Box::new(stream),
    };
    client.greet();
    client.go("zram0", false);
    let page: Vec<u8> = b"zramd top counts this write. "
        .iter()
        .copied()
        .cycle()
        .take(4096)
        .collect();
    let start = Instant::now();
    let mut handle = 0u64;
    let status = loop {
        if let Some(status) = top.0.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < GUARD, "zramd top did not finish");
        client.request(CMD_WRITE, 0, handle, (handle % 64) * 4096, 4096);
        client.send(&page);
        assert_eq!(client.simple_reply(handle), 0, "write {handle}");
        handle += 1;
    };
    let mut err = String::new();
    if let Some(e) = top.0.stderr.as_mut() {
        let _ = e.read_to_string(&mut err);
    }
    assert!(status.success(), "zramd top failed: {err}");
    let text = std::fs::read_to_string(&out).unwrap();
    let tables: Vec<&str> = text
        .split("\n\n")
        .filter(|t| !t.trim().is_empty())
        .collect();
    assert_eq!(tables.len(), 2, "two tables:\n{text}");
    let columns: Vec<&str> = tables[0]
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    let col = |name: &str| {
        columns
            .iter()
            .position(|&c| c == name)
            .unwrap_or_else(|| panic!("{name} in {columns:?}"))
    };
    let row = |t: &str| -> Vec<String> {
        let line = t
            .lines()
            .find(|l| l.starts_with("zram0 "))
            .unwrap_or_else(|| panic!("zram0 in\n{t}"));
        line.split_whitespace().map(str::to_owned).collect()
    };
    let (first, second) = (row(tables[0]), row(tables[1]));
    // The first table has nothing to take a rate against; the second has the writes.
    assert_eq!(first[col("WRITES/s")], "-", "{text}");
    let writes: f64 = second[col("WRITES/s")].parse().unwrap();
    assert!(writes > 0.0, "no write rate in\n{text}");
    assert_ne!(second[col("WRITE/s")], "0B", "{text}");
    assert_ne!(second[col("DATA")], "0B", "{text}");
    drop(client);
    served.stop();
}

#[test]
fn top_refuses_bad_options_and_a_missing_server() {
    let dir = tempfile::tempdir().unwrap();
    for bad in [
        ["--interval", "0"],
        ["--interval", "x"],
        ["--iterations", "0"],
    ] {
        let r = common::run::run(Command::new(ZRAMD).arg("top").args(bad), GUARD);
        assert!(
            !r.ok && !r.stderr.contains("panicked"),
            "{bad:?}: {}",
            r.stderr
        );
    }
    let r = common::run::run(
        Command::new(ZRAMD)
            .args(["top", "--iterations", "1", "--control"])
            .arg(dir.path().join("none.sock")),
        GUARD,
    );
    assert!(!r.ok && !r.stderr.contains("panicked"), "{}", r.stderr);
    assert!(r.stderr.contains("none.sock"), "{}", r.stderr);
}
