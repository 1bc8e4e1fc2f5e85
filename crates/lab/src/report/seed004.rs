//! Seed 004 (object folding, `echo 1 > fold` and `pages_folded` in `mm_stat`): the tree
//! untarred twice on one ext4 (`bench untar --copies 2 --fold`), zramd's device folded after
//! the untar, the kernel's zram (which cannot fold) beside; `mm_stat` in the seed's columns
//! with `pages_folded` at the end.

use crate::bench::untar::{self, figures, figures::Row};
use crate::kernel::is_root;

use super::published::S004_CLAIM;
use super::section::{Ctx, Section, Table, bench_args, block, command, md_table};
use super::seed000_runs;

/// `mm_stat` with the seed's `pages_folded` column.
fn mm_line(r: &Row) -> String {
    let folded = r.pages_folded.map_or("-".into(), |p| p.to_string());
    format!("{} {folded:>8}", seed000_runs::mm_line(r))
}

fn used(rows: &[Row], side: &str, step: &str) -> Option<u64> {
    rows.iter()
        .find(|r| r.side == side && r.cycle == 1 && r.step == step)
        .map(|r| r.used_size)
}

fn mib(v: Option<u64>) -> String {
    v.map_or("—".into(), |v| {
        format!("{:.1} MiB", v as f64 / f64::from(1 << 20))
    })
}

/// Seed 004's section.
pub fn run(ctx: &Ctx) -> anyhow::Result<Section> {
    let mut section = Section::new("004", "folding identical objects");
    section.notes.push(format!(
        "The seed publishes one figure, no table: {S004_CLAIM}. Its `mm_stat` gains \
         `pages_folded`. Here: the input untarred twice into one ext4, then `fold`."
    ));
    if !is_root() {
        section.skip("the untar workload needs root (loop device, mkfs.ext4, mount)".into());
        return Ok(section);
    }
    let argv = ctx.untar_argv(&["--copies", "2", "--fold"]);
    section.commands.push(command(ctx, "untar", &argv));
    let rows = untar::measure(&bench_args(&argv)?)?;
    let mut text = String::from(
        "orig_data_size compr_data_size mem_used_total mem_limit mem_used_max same_pages \
         pages_compacted huge_pages pages_folded\n",
    );
    for r in rows.iter().filter(|r| r.cycle == 1) {
        text.push_str(&format!("{:8} {:10} {}\n", r.side, r.step, mm_line(r)));
    }
    let steps = ["untar", "fold", "rm include"];
    let table: Vec<Vec<String>> = steps
        .iter()
        .map(|&step| {
            let ours = used(&rows, "zramd", step);
            // The kernel cannot fold: after `fold` it holds what it held after the untar.
            let kstep = if step == "fold" { "untar" } else { step };
            let kernel = used(&rows, "kernel", kstep);
            let ratio = match (ours, kernel) {
                (Some(o), Some(k)) if k > 0 => format!("{:.3}", o as f64 / k as f64),
                _ => "—".into(),
            };
            vec![step.to_owned(), mib(ours), mib(kernel), ratio]
        })
        .collect();
    let (before, after) = (used(&rows, "zramd", "untar"), used(&rows, "zramd", "fold"));
    let folded = rows
        .iter()
        .find(|r| r.side == "zramd" && r.step == "fold")
        .and_then(|r| r.pages_folded)
        .unwrap_or(0);
    let saved = match (before, after) {
        (Some(b), Some(a)) if b > 0 => format!("{:.1}%", (b as f64 - a as f64) / b as f64 * 100.0),
        _ => "—".into(),
    };
    let kernel_ratio = match (after, used(&rows, "kernel", "untar")) {
        (Some(a), Some(k)) if k > 0 => format!("{:.3}x the kernel's", a as f64 / k as f64),
        _ => "the kernel's zram was not run".into(),
    };
    section.tables.push(Table {
        title: "mm_stat with pages_folded: the tree twice, folded".into(),
        markdown: format!(
            "{}{}",
            block("zramd and the kernel, measured now", &text),
            md_table(
                &[
                    "step",
                    "zramd mem_used_total",
                    "kernel mem_used_total",
                    "zramd / kernel"
                ],
                &table
            )
        ),
        verdict: format!(
            "fold freed {saved} of zramd's mem_used_total ({folded} pages folded; seed: up to \
             15–20%), leaving {kernel_ratio}"
        ),
    });
    section.write_csv(ctx, "seed004-fold.csv", &figures::csv(&rows))?;
    section.json = serde_json::json!({ "rows": rows });
    Ok(section)
}
