//! Seed 002 (VMA-based swap readahead): its three workloads — sequential, random, and
//! sequential with random noise — on a `uswap` region (`bench uswap`), readahead off (the
//! seed's base kernel) and on (its optimized kernel); the program-observed latency of each
//! page's first touch in the seed's own lines, latency CDFs, and the fault tiers.

use uswap::histogram::Summary;

use crate::bench::swap_ra::{self, source::Source, workload::Run};

use super::plot::{Chart, Series, lines};
use super::published::{S002, numbers};
use super::section::{Ctx, Plot, Section, Table, bench_args, block, csv, md_table};

/// The summary as the seed printed it (µs with two decimals; the seed's whole µs).
fn seed_lines(s: &Summary, min_us: f64) -> String {
    format!(
        "samples: {}, average: {:.2}us, min: {min_us:.2}us, max: {:.2}ms\n50th: {:.2}us, 60th: \
         {:.2}us, 70th: {:.2}us, 80th: {:.2}us, 90th: {:.2}us, 95th: {:.2}us, 99th: {:.2}us",
        s.samples,
        s.avg_us,
        s.max_us / 1000.0,
        s.p50_us,
        s.p60_us,
        s.p70_us,
        s.p80_us,
        s.p90_us,
        s.p95_us,
        s.p99_us
    )
}

fn min_us(r: &Run) -> f64 {
    r.touches.quantile_ns(0.0) as f64 / 1000.0
}

/// samples, average, min, max, p50..p99 of a seed's two lines.
fn seed_cells(text: &str) -> Vec<String> {
    let v: Vec<f64> = text.lines().flat_map(numbers).collect();
    v.iter().map(|x| format!("{x}")).collect()
}

fn our_cells(r: &Run) -> Vec<String> {
    let s = &r.latency;
    let mut v = vec![
        s.samples.to_string(),
        format!("{:.2}", s.avg_us),
        format!("{:.2}", min_us(r)),
        format!("{:.0}", s.max_us),
    ];
    v.extend(
        [
            s.p50_us, s.p60_us, s.p70_us, s.p80_us, s.p90_us, s.p95_us, s.p99_us,
        ]
        .map(|p| format!("{p:.2}")),
    );
    v
}

const HEADER: [&str; 12] = [
    "", "samples", "avg µs", "min µs", "max µs", "50th", "60th", "70th", "80th", "90th", "95th",
    "99th",
];

fn workload_table(
    name: &str,
    base: &str,
    opt: &str,
    runs: &[Run],
    source: Source,
) -> Option<Table> {
    let get = |ra| Run::find(runs, name, source, ra);
    let (off, on) = (get(false)?, get(true)?);
    let row = |who: &str, cells: Vec<String>| {
        let mut r = vec![who.to_owned()];
        r.extend(cells);
        r
    };
    let rows = vec![
        row("seed, base kernel", seed_cells(base)),
        row("seed, VMA readahead", seed_cells(opt)),
        row("zramd, readahead off", our_cells(off)),
        row("zramd, readahead on", our_cells(on)),
    ];
    let p90 = |t: &str| numbers(t.lines().nth(1).unwrap_or("")).get(4).copied();
    let seed_ratio = match (p90(opt), p90(base)) {
        (Some(o), Some(b)) if b > 0.0 => format!("{:.3} ({b} → {o} µs)", o / b),
        _ => "—".into(),
    };
    let ours = if off.latency.p90_us > 0.0 {
        on.latency.p90_us / off.latency.p90_us
    } else {
        0.0
    };
    Some(Table {
        title: match source {
            Source::Compressed => format!("{name} workload: first-touch latency"),
            Source::WrittenBack => {
                format!("{name} workload, pages written back to a file: first-touch latency")
            }
        },
        markdown: format!(
            "{}{}{}{}",
            block("Seed, base kernel", base),
            block("Seed, optimized kernel (VMA readahead)", opt),
            block(
                &format!(
                    "zramd (uswap, pages from the {} tier), readahead off / on, measured now",
                    source.name()
                ),
                &format!(
                    "{}\n\n{}",
                    seed_lines(&off.latency, min_us(off)),
                    seed_lines(&on.latency, min_us(on))
                )
            ),
            md_table(&HEADER, &rows)
        ),
        verdict: format!(
            "p90 with readahead on / off: zramd {ours:.3} ({:.2} → {:.2} µs); seed {seed_ratio}",
            off.latency.p90_us, on.latency.p90_us
        ),
    })
}

fn cdf(ctx: &Ctx, runs: &[Run]) -> anyhow::Result<(Plot, String)> {
    let mut series: Vec<Series> = Vec::new();
    let mut rows = Vec::new();
    for r in runs {
        let name = r.label();
        let mut points = Vec::new();
        for i in 0..=200 {
            let q = f64::from(i) / 200.0;
            let us = r.touches.quantile_ns(q) as f64 / 1000.0;
            points.push((us.max(0.01).log10(), q));
            rows.push(vec![
                r.workload.name().to_owned(),
                r.source.name().to_owned(),
                r.readahead.to_string(),
                format!("{q:.3}"),
                format!("{us:.3}"),
            ]);
        }
        series.push((name, points));
    }
    let file = "seed002-latency-cdf.png";
    lines(
        &Chart {
            title: "first-touch latency CDF (uswap region)",
            x_desc: "latency (µs, log scale)",
            y_desc: "fraction of touches",
            x_label: &|x| format!("{}", 10f64.powf(*x)),
        },
        &series,
        &ctx.out.join(file),
    )?;
    let plot = Plot {
        file: file.into(),
        title: "latency CDFs, readahead on and off".into(),
    };
    Ok((
        plot,
        csv(
            &["workload", "source", "readahead", "quantile", "latency_us"],
            &rows,
        ),
    ))
}

/// Seed 002's section.
pub fn run(ctx: &Ctx) -> anyhow::Result<Section> {
    let mut section = Section::new("002", "VMA-based swap readahead: fault latencies");
    section.notes.push(
        "The seed's kernels swapped to disk; zramd's region evicts into a zram device in \
         userspace and faults pages back through userfaultfd (docs/swap.md). Latencies are the \
         program's, per page's first touch in a round, with 24 µs of work per page."
            .into(),
    );
    let argv: Vec<String> = if ctx.quick {
        ["--size", "32M", "--budget", "8M", "--rounds", "1"]
            .map(String::from)
            .to_vec()
    } else {
        Vec::new()
    };
    section
        .commands
        .push(super::section::command(ctx, "uswap", &argv));
    section.skip(
        "the kernel's own swap: not measured (it needs a swap device and memory pressure on \
         this process's cgroup); the seed's kernels stand for it"
            .into(),
    );
    let report = match swap_ra::figures(&bench_args(&argv)?) {
        Ok(r) => r,
        Err(e) => match swap_ra::unavailable(&e) {
            Some(why) => {
                section.skip(format!("uswap: userfaultfd unavailable: {why}"));
                return Ok(section);
            }
            None => return Err(e),
        },
    };
    for source in [Source::Compressed, Source::WrittenBack] {
        for (name, base, opt) in S002 {
            if let Some(t) = workload_table(name, base, opt, &report.runs, source) {
                section.tables.push(t);
            }
        }
    }
    let mut rows = Vec::new();
    for r in &report.runs {
        let mut row = vec![
            r.workload.name().to_owned(),
            r.source.name().to_owned(),
            r.readahead.to_string(),
        ];
        row.extend(our_cells(r));
        rows.push(row);
    }
    for t in &report.tiers {
        let mut row = vec![format!("tier {}", t.label()), String::new(), "false".into()];
        let s = &t.latency;
        let cells = [
            s.avg_us, s.max_us, s.p50_us, s.p60_us, s.p70_us, s.p80_us, s.p90_us, s.p95_us,
            s.p99_us,
        ]
        .map(|v| format!("{v:.2}"));
        // No minimum is kept for the tiers.
        row.extend([s.samples.to_string(), cells[0].clone(), String::new()]);
        row.extend(cells[1..].iter().cloned());
        rows.push(row);
    }
    let header = [
        "workload",
        "source",
        "readahead",
        "samples",
        "avg_us",
        "min_us",
        "max_us",
        "p50_us",
        "p60_us",
        "p70_us",
        "p80_us",
        "p90_us",
        "p95_us",
        "p99_us",
    ];
    section.write_csv(ctx, "seed002-latency.csv", &csv(&header, &rows))?;
    let (plot, cdf_csv) = cdf(ctx, &report.runs)?;
    section.plots.push(plot);
    section.write_csv(ctx, "seed002-cdf.csv", &cdf_csv)?;
    section.json = serde_json::to_value(&report)?;
    Ok(section)
}
