//! Seed 003 (afmalloc, "anti-fragmentation memory allocator"): ext4 with `discard` on the
//! device, untar, then `rm -rf` of drivers, arch, fs, sound, include, once and repeated;
//! after each step the seed's columns `orig_size compr_size used_size overhead
//! overhead_ratio` for zramd on zsmalloc and on afmalloc and for the kernel's zram.

use crate::bench::untar::{self, figures, figures::Row, plot};
use crate::kernel::is_root;

use super::published::{S003_CYCLES_ZSMALLOC, S003_ONCE_AFMALLOC, S003_ONCE_ZSMALLOC, column};
use super::section::{Ctx, Plot, Section, Table, bench_args, block, command, md_table};

/// The sides of a run, in the report's column order.
const SIDES: [&str; 3] = ["zramd zsmalloc", "zramd afmalloc", "kernel zsmalloc"];

fn ratio_of(rows: &[Row], series: &str, cycle: usize, step: usize) -> Option<f64> {
    rows.iter()
        .find(|r| r.series() == series && r.cycle == cycle && r.step_in_cycle == step)
        .map(|r| r.overhead_ratio)
}

fn pct(v: Option<f64>) -> String {
    v.map_or("—".into(), |v| format!("{v:.2}%"))
}

/// Min and max overhead ratio of `series` over cycle `cycle` (every cycle: `None`).
fn range(rows: &[Row], series: &str, cycle: Option<usize>) -> Option<(f64, f64)> {
    let v: Vec<f64> = rows
        .iter()
        .filter(|r| r.series() == series && cycle.is_none_or(|c| r.cycle == c))
        .map(|r| r.overhead_ratio)
        .collect();
    let min = v.iter().copied().reduce(f64::min)?;
    Some((min, v.iter().copied().fold(min, f64::max)))
}

fn range_text(r: Option<(f64, f64)>) -> String {
    r.map_or("—".into(), |(a, b)| format!("{a:.2}% – {b:.2}%"))
}

fn ours_text(rows: &[Row], cycles: &[usize]) -> String {
    let mut text = figures::seed_header();
    text.push('\n');
    for r in rows.iter().filter(|r| cycles.contains(&r.cycle)) {
        text.push_str(&figures::seed_line(r));
        text.push('\n');
    }
    text
}

fn once(rows: &[Row]) -> Table {
    let seed_z = column(S003_ONCE_ZSMALLOC, 4);
    let seed_a = column(S003_ONCE_AFMALLOC, 4);
    let seed_real = column(S003_ONCE_AFMALLOC, 6);
    let steps: Vec<&Row> = rows
        .iter()
        .filter(|r| r.series() == SIDES[0] && r.cycle == 1)
        .collect();
    let table: Vec<Vec<String>> = steps
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut row = vec![
                r.step.clone(),
                pct(seed_z.get(i).copied()),
                format!(
                    "{} ({} real)",
                    pct(seed_a.get(i).copied()),
                    pct(seed_real.get(i).copied())
                ),
            ];
            row.extend(SIDES.iter().map(|s| pct(ratio_of(rows, s, 1, i))));
            row
        })
        .collect();
    let (z, k) = (
        range(rows, SIDES[0], Some(1)),
        range(rows, SIDES[2], Some(1)),
    );
    let verdict = format!(
        "overhead ratio after the untar and each delete: zramd (zsmalloc) {}, zramd (afmalloc) \
         {}, the kernel's zram {} (seed: zsmalloc 5.34% – 16.19%, afmalloc 4.02% – 10.81%, \
         real 3.61% – 3.96%)",
        range_text(z),
        range_text(range(rows, SIDES[1], Some(1))),
        range_text(k)
    );
    Table {
        title: "One untar, then rm -rf drivers, arch, fs, sound, include".into(),
        markdown: format!(
            "{}{}{}{}",
            block(
                "Seed, untar-merge.out (orig_size compr_size used_size overhead overhead_ratio)",
                S003_ONCE_ZSMALLOC
            ),
            block(
                "Seed, untar-afmalloc.out (… real real-ratio)",
                S003_ONCE_AFMALLOC
            ),
            block(
                "zramd and the kernel, measured now (cycle 1)",
                &ours_text(rows, &[1])
            ),
            md_table(
                &[
                    "step",
                    "seed zsmalloc",
                    "seed afmalloc",
                    "zramd zsmalloc",
                    "zramd afmalloc",
                    "kernel zram",
                ],
                &table
            )
        ),
        verdict,
    }
}

fn repeated(rows: &[Row], cycles: usize) -> Table {
    let seed = column(S003_CYCLES_ZSMALLOC, 4);
    // The seed printed cycles 1, 2, 9 and 10, six steps each.
    let seed_cycle = |c: usize| -> Option<(f64, f64)> {
        let at = match c {
            1 => 0,
            2 => 1,
            9 => 2,
            10 => 3,
            _ => return None,
        };
        let v = seed.get(at * 6..at * 6 + 6)?;
        Some((
            v.iter().copied().fold(f64::MAX, f64::min),
            v.iter().copied().fold(f64::MIN, f64::max),
        ))
    };
    let table: Vec<Vec<String>> = (1..=cycles)
        .map(|c| {
            let mut row = vec![c.to_string(), range_text(seed_cycle(c))];
            row.extend(SIDES.iter().map(|s| range_text(range(rows, s, Some(c)))));
            row
        })
        .collect();
    let verdict = format!(
        "over {cycles} cycles zramd (zsmalloc) stays within {}, the kernel's zram {} (seed's \
         zsmalloc over 10 cycles: 5.33% – 37.35%, growing every cycle)",
        range_text(range(rows, SIDES[0], None)),
        range_text(range(rows, SIDES[2], None)),
    );
    let last = [cycles.saturating_sub(1).max(1), cycles];
    Table {
        title: format!("Untar and delete, repeated ({cycles} cycles; the seed ran 10)"),
        markdown: format!(
            "{}{}Overhead ratio per cycle, min – max over its six steps:\n\n{}",
            block(
                "Seed, untar-merge.out, ten cycles (first two, last two)",
                S003_CYCLES_ZSMALLOC
            ),
            block(
                "zramd and the kernel, measured now (the last two cycles)",
                &ours_text(rows, &last)
            ),
            md_table(
                &[
                    "cycle",
                    "seed zsmalloc",
                    "zramd zsmalloc",
                    "zramd afmalloc",
                    "kernel zram",
                ],
                &table
            )
        ),
        verdict,
    }
}

/// Seed 003's section.
pub fn run(ctx: &Ctx) -> anyhow::Result<Section> {
    let mut section = Section::new(
        "003",
        "fragmentation over untar and delete cycles (afmalloc)",
    );
    section.notes.push(
        "Overhead = (mem_used_total − compr_data_size) / compr_data_size after each step; the \
         seed's afmalloc \"real\" column counts metadata and internal fragmentation (zramd's \
         `real_ratio` adds its metadata: the slot table and the allocator's bookkeeping)."
            .into(),
    );
    if !is_root() {
        section.skip("the untar workload needs root (loop device, mkfs.ext4, mount)".into());
        return Ok(section);
    }
    let cycles = ctx.cycles.max(1).to_string();
    let argv = ctx.untar_argv(&["--cycles", &cycles, "--allocator", "zsmalloc,afmalloc"]);
    section.commands.push(command(ctx, "untar", &argv));
    let rows = untar::measure(&bench_args(&argv)?)?;
    if !rows.iter().any(|r| r.side == "kernel") {
        section.skip("the kernel's zram: not available here (see the untar bench's line)".into());
    }
    section.tables.push(once(&rows));
    section.tables.push(repeated(&rows, ctx.cycles.max(1)));
    section.write_csv(ctx, "seed003-untar.csv", &figures::csv(&rows))?;
    let file = "seed003-overhead.png";
    plot::draw(&rows, &ctx.out.join(file), (1280, 720))?;
    section.plots.push(Plot {
        file: file.into(),
        title: "overhead ratio after each untar/delete step".into(),
    });
    section.json = serde_json::json!({ "rows": rows });
    Ok(section)
}
