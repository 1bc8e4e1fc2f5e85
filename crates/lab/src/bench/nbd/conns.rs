//! `zramd bench nbd --input FILE --connections 1,2,4,8`: how the NBD data path scales with
//! connections. For each count N, in each of `--repeat` rounds, zramd (lz4) and `nbdkit
//! memory allocator=zstd`, each a fresh process on a unix socket, get the file written in
//! with `nbdcopy -C N -T N` and read back out to `null:` the same way (both timed; nbdcopy
//! uses min(connections, threads) connections, each served by its own worker threads on
//! zramd's side); then fio reads 4 KiB blocks at random offsets of the written part, with N
//! jobs (each its own connection, 16 requests in flight) for `--fio-seconds`: how many small
//! requests a second the server answers, where nbdcopy's large ones show bandwidth. (fio is
//! left out where it is missing or has no nbd engine; the report says so.) The servers take
//! turns, in the other order every other round. The curve prints each figure's median over
//! the rounds, zramd's against nbdkit's, and each count's against the first count's, so that
//! one run shows how far more connections carry on the machine it runs on.

use std::path::Path;
use std::process::Command;

use serde::Serialize;

use anyhow::{Context as _, bail};

use super::{Args, NBDKIT_ZSTD, Server, fio_has_nbd, median, run_peer, run_tool, start_server};

/// One connection count's medians.
#[derive(Debug, Serialize)]
struct Point {
    connections: usize,
    zramd_write_mb_s: f64,
    zramd_read_mb_s: f64,
    nbdkit_write_mb_s: f64,
    nbdkit_read_mb_s: f64,
    /// fio's 4 KiB random reads per second (none without fio's nbd engine).
    zramd_fio_read_iops: Option<f64>,
    nbdkit_fio_read_iops: Option<f64>,
}

/// 4 KiB random reads a second from the first `bytes` of `server`'s disk (at least one
/// block), by `n` fio jobs, each its own connection with 16 requests in flight, for `secs`.
fn fio_read_iops(server: &mut Server, bytes: u64, n: usize, secs: u64) -> anyhow::Result<f64> {
    let mut fio = Command::new("fio");
    fio.args([
        "--name=randread",
        "--ioengine=nbd",
        &format!("--uri={}", server.uri()),
        "--rw=randread",
        "--bs=4k",
        "--iodepth=16",
        &format!("--numjobs={n}"),
        &format!("--size={}", (bytes / 4096).max(1) * 4096),
        "--time_based",
        &format!("--runtime={secs}"),
        "--group_reporting",
        "--output-format=json",
    ]);
    let (_, stdout) = run_peer(&mut fio, server)?;
    let text = String::from_utf8_lossy(&stdout);
    read_iops(&text).with_context(|| format!("fio against {:?}", server.name))
}

/// The reads a second in fio's JSON report `text` (with `--group_reporting`: one job),
/// which may follow lines of warnings; an error unless it is a positive finite number.
fn read_iops(text: &str) -> anyhow::Result<f64> {
    // The report is the first line that opens a JSON object; warnings come before it.
    let at = if text.starts_with('{') {
        Some(0)
    } else {
        text.find("\n{").map(|at| at + 1)
    };
    let report = at.map_or("", |at| &text[at..]);
    let v: serde_json::Value =
        serde_json::from_str(report).with_context(|| format!("fio's report: {text}"))?;
    let iops = v["jobs"][0]["read"]["iops"].as_f64().unwrap_or(0.0);
    if !(iops.is_finite() && iops > 0.0) {
        bail!("fio reported no reads: {text}");
    }
    Ok(iops)
}

/// MB/s of writing `input` into `server` and reading the disk back out, `n` connections.
fn copy_in_and_out(
    server: &mut Server,
    input: &Path,
    bytes: u64,
    n: usize,
) -> anyhow::Result<(f64, f64)> {
    let uri = server.uri();
    let n = n.to_string();
    let nbdcopy = || {
        let mut c = Command::new("nbdcopy");
        c.args(["-C", &n, "-T", &n]);
        c
    };
    let write = run_tool(nbdcopy().arg(input).arg(&uri), server)?;
    let read = run_tool(nbdcopy().arg(&uri).arg("null:"), server)?;
    Ok((bytes as f64 / 1e6 / write, bytes as f64 / 1e6 / read))
}

/// Runs the curve (see the module's comment) with `dir` for the sockets; `size` is the
/// disk's size, `bytes` the input's. `run` checked the counts.
pub(super) fn run(args: &Args, dir: &Path, size: u64, bytes: u64) -> anyhow::Result<()> {
    let (input, counts, repeat, json) = (&args.input, &args.connections, args.repeat, args.json);
    let fio = fio_has_nbd();
    // Per count: every round's (write, read, fio reads/s) of zramd, then of nbdkit.
    let mut figures: Vec<Vec<[f64; 6]>> = vec![Vec::new(); counts.len()];
    let bar = crate::progress::bar("nbd connections", (repeat * counts.len() * 2) as u64);
    for round in 0..repeat {
        for (i, &n) in counts.iter().enumerate() {
            let mut order = [0, NBDKIT_ZSTD];
            if round % 2 == 1 {
                order.reverse();
            }
            let mut f = [f64::NAN; 6];
            for server in order {
                crate::progress::doing(&format!("{} connections", n));
                let mut s = start_server(server, dir, size)?;
                let (w, r) = copy_in_and_out(&mut s, input, bytes, n)?;
                let at = if server == 0 { 0 } else { 3 };
                if fio {
                    f[at + 2] = fio_read_iops(&mut s, bytes, n, args.fio_seconds)?;
                }
                drop(s);
                crate::progress::tick("");
                f[at] = w;
                f[at + 1] = r;
            }
            figures[i].push(f);
        }
    }
    drop(bar);
    let points: Vec<Point> = counts
        .iter()
        .zip(&figures)
        .map(|(&connections, runs)| {
            let m = |k: usize| median(runs.iter().map(|f| f[k]).collect());
            Point {
                connections,
                zramd_write_mb_s: m(0),
                zramd_read_mb_s: m(1),
                nbdkit_write_mb_s: m(3),
                nbdkit_read_mb_s: m(4),
                zramd_fio_read_iops: fio.then(|| m(2)),
                nbdkit_fio_read_iops: fio.then(|| m(5)),
            }
        })
        .collect();
    if json {
        println!("{}", serde_json::json!({ "connections": points }));
        return Ok(());
    }
    println!(
        "NBD over a unix socket, nbdcopy -C N -T N (MB/s) and fio 4 KiB random reads, N jobs \
         (thousands a second), medians of {repeat} rounds (x first: against the first count's)"
    );
    if !fio {
        println!("fio columns: none (fio is not installed or has no nbd engine)");
    }
    println!(
        "{:>5} {:>9} {:>9} {:>6} {:>9} {:>9} {:>6} {:>10} {:>10} {:>6} {:>8} {:>8} {:>9}",
        "conns",
        "zramd w",
        "nbdkit w",
        "w x",
        "zramd r",
        "nbdkit r",
        "r x",
        "zramd k/s",
        "nbdkit k/s",
        "k/s x",
        "w x 1st",
        "r x 1st",
        "k/s x 1st"
    );
    let first = &points[0];
    let k = |iops: Option<f64>| iops.map_or("-".to_owned(), |v| format!("{:.1}", v / 1e3));
    let x = |a: Option<f64>, b: Option<f64>| {
        a.zip(b)
            .map_or("-".to_owned(), |(a, b)| format!("{:.2}x", a / b))
    };
    for p in &points {
        println!(
            "{:>5} {:>9.1} {:>9.1} {:>5.2}x {:>9.1} {:>9.1} {:>5.2}x {:>10} {:>10} {:>6} {:>7.2}x {:>7.2}x {:>9}",
            p.connections,
            p.zramd_write_mb_s,
            p.nbdkit_write_mb_s,
            p.zramd_write_mb_s / p.nbdkit_write_mb_s,
            p.zramd_read_mb_s,
            p.nbdkit_read_mb_s,
            p.zramd_read_mb_s / p.nbdkit_read_mb_s,
            k(p.zramd_fio_read_iops),
            k(p.nbdkit_fio_read_iops),
            x(p.zramd_fio_read_iops, p.nbdkit_fio_read_iops),
            p.zramd_write_mb_s / first.zramd_write_mb_s,
            p.zramd_read_mb_s / first.zramd_read_mb_s,
            x(p.zramd_fio_read_iops, first.zramd_fio_read_iops),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::read_iops;

    #[test]
    fn fio_reports_are_read_past_warnings_and_refused_without_reads() {
        let report = r#"{"fio version": "fio-3.33", "jobs": [{"jobname": "randread", "read": {"iops": 123456.5}}]}"#;
        assert_eq!(read_iops(report).unwrap(), 123456.5);
        let warned = format!("fio: a warning with {{braces}}\nnote: more\n{report}\n");
        assert_eq!(read_iops(&warned).unwrap(), 123456.5);
        for bad in [
            "",
            "fio: no report",
            r#"{"jobs": []}"#,
            r#"{"jobs": [{"read": {"iops": 0}}]}"#,
            r#"{"jobs": [{"read": {"iops": "many"}}]}"#,
            "{ truncated",
        ] {
            assert!(read_iops(bad).is_err(), "{bad:?}");
        }
    }
}
