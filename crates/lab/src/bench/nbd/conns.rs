//! `zramd bench nbd --input FILE --connections 1,2,4,8`: how the NBD data path scales with
//! connections. For each count N, in each of `--repeat` rounds, zramd (lz4) and `nbdkit
//! memory allocator=zstd`, each a fresh process on a unix socket, get the file written in
//! with `nbdcopy -C N -T N` and read back out to `null:` the same way (both timed; nbdcopy
//! uses min(connections, threads) connections, each served by its own worker threads on
//! zramd's side). The servers take turns, in the other order every other round. The curve
//! prints each figure's median over the rounds, zramd's against nbdkit's, and each count's
//! speeds against the first count's, so that one run shows how far more connections carry
//! on the machine it runs on.

use std::path::Path;
use std::process::Command;

use serde::Serialize;

use super::{Args, NBDKIT_ZSTD, Server, median, run_tool, start_server};

/// One connection count's medians.
#[derive(Debug, Serialize)]
struct Point {
    connections: usize,
    zramd_write_mb_s: f64,
    zramd_read_mb_s: f64,
    nbdkit_write_mb_s: f64,
    nbdkit_read_mb_s: f64,
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
    // Per count: every round's (zramd write, zramd read, nbdkit write, nbdkit read).
    let mut figures: Vec<Vec<[f64; 4]>> = vec![Vec::new(); counts.len()];
    let bar = crate::progress::bar("nbd connections", (repeat * counts.len() * 2) as u64);
    for round in 0..repeat {
        for (i, &n) in counts.iter().enumerate() {
            let mut order = [0, NBDKIT_ZSTD];
            if round % 2 == 1 {
                order.reverse();
            }
            let mut f = [0.0; 4];
            for server in order {
                crate::progress::doing(&format!("{} connections", n));
                let mut s = start_server(server, dir, size)?;
                let (w, r) = copy_in_and_out(&mut s, input, bytes, n)?;
                drop(s);
                crate::progress::tick("");
                let at = if server == 0 { 0 } else { 2 };
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
                nbdkit_write_mb_s: m(2),
                nbdkit_read_mb_s: m(3),
            }
        })
        .collect();
    if json {
        println!("{}", serde_json::json!({ "connections": points }));
        return Ok(());
    }
    println!(
        "NBD over a unix socket, nbdcopy -C N -T N, medians of {repeat} rounds (x first: against the first count's)"
    );
    println!(
        "{:>5} {:>10} {:>10} {:>7} {:>10} {:>10} {:>7} {:>9} {:>9}",
        "conns",
        "zramd w",
        "nbdkit w",
        "w x",
        "zramd r",
        "nbdkit r",
        "r x",
        "w x first",
        "r x first"
    );
    let first = &points[0];
    for p in &points {
        println!(
            "{:>5} {:>10.1} {:>10.1} {:>6.2}x {:>10.1} {:>10.1} {:>6.2}x {:>8.2}x {:>8.2}x",
            p.connections,
            p.zramd_write_mb_s,
            p.nbdkit_write_mb_s,
            p.zramd_write_mb_s / p.nbdkit_write_mb_s,
            p.zramd_read_mb_s,
            p.nbdkit_read_mb_s,
            p.zramd_read_mb_s / p.nbdkit_read_mb_s,
            p.zramd_write_mb_s / first.zramd_write_mb_s,
            p.zramd_read_mb_s / first.zramd_read_mb_s,
        );
    }
    Ok(())
}
