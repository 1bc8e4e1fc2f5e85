//! Seed 000's `mm_stat` rows: the untar on zramd's device at chain sizes 4, 8 and 16
//! (`bench untar --no-kernel --chain-size N`, `runs` times each; the kernel's zram beside
//! once, at its own chain size), the figures after the untar step in the seed's eight
//! columns and its summary of `mem_used_max` (N, Min, Max, Median, Avg, Stddev).

use crate::bench::untar::{self, figures::Row};
use crate::kernel::is_root;

use super::published::{S000_CHANGE, S000_MM_STAT, column};
use super::section::{Ctx, Section, Table, bench_args, block, change, command, csv, md_table};
use super::seed000::CHAINS;

/// A figure of the seed's `mm_stat`: its name, its column, and where a row has it.
type Figure = (&'static str, usize, fn(&Row) -> u64);

/// One untar's figures after the untar step.
struct Taken {
    side: String,
    chain: Option<usize>,
    run: usize,
    row: Row,
}

/// `mm_stat` as the seed printed it (mem_limit: 0, none set).
pub fn mm_line(r: &Row) -> String {
    format!(
        "{:>10} {:>9} {:>9} {:>8} {:>9} {:>8} {:>8} {:>8}",
        r.orig_size,
        r.compr_size,
        r.used_size,
        0,
        r.used_max,
        r.same_pages,
        r.pages_compacted,
        r.huge_pages
    )
}

/// N, min, max, median, average, stddev (sample) of `v`.
fn stats(v: &[f64]) -> [f64; 6] {
    let n = v.len() as f64;
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let median = if s.is_empty() { 0.0 } else { s[s.len() / 2] };
    let avg = s.iter().sum::<f64>() / n.max(1.0);
    let var = s.iter().map(|x| (x - avg).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    [
        n,
        s.first().copied().unwrap_or(0.0),
        s.last().copied().unwrap_or(0.0),
        median,
        avg,
        var.sqrt(),
    ]
}

fn stat_row(who: &str, v: &[f64], base: Option<f64>) -> Vec<String> {
    let [n, min, max, median, avg, sd] = stats(v);
    vec![
        who.to_owned(),
        format!("{n:.0}"),
        format!("{min:.0}"),
        format!("{max:.0}"),
        format!("{median:.0}"),
        format!("{avg:.1}"),
        format!("{sd:.1}"),
        base.map_or("—".into(), |b| format!("{:+.3}%", change(b, avg))),
    ]
}

/// The untar runs.
fn measure(ctx: &Ctx, section: &mut Section) -> anyhow::Result<Vec<Taken>> {
    let mut taken = Vec::new();
    for run in 1..=ctx.runs.max(1) {
        for chain in CHAINS {
            crate::progress::print(|| {
                eprintln!("lab: seed 000: untar at chain {chain}, run {run}");
            });
            // The kernel goes beside the first run of chain 8 (its own chain size is fixed
            // by its build).
            let kernel = run == 1 && chain == 8;
            let chain_s = chain.to_string();
            let mut more = vec!["--chain-size", &chain_s];
            if !kernel && !ctx.no_kernel {
                more.push("--no-kernel");
            }
            let argv = ctx.untar_argv(&more);
            if run == 1 {
                section.commands.push(command(ctx, "untar", &argv));
            }
            let rows = untar::measure(&bench_args(&argv)?)?;
            for row in rows
                .into_iter()
                .filter(|r| r.cycle == 1 && r.step == "untar")
            {
                let ours = row.side == "zramd";
                taken.push(Taken {
                    side: row.side.clone(),
                    chain: ours.then_some(chain),
                    run,
                    row,
                });
            }
        }
    }
    Ok(taken)
}

/// The `mm_stat` part of seed 000's section.
pub fn mm_stat(ctx: &Ctx, section: &mut Section) -> anyhow::Result<()> {
    if !is_root() {
        section.skip("the untar runs need root (loop device, mkfs.ext4, mount)".into());
        return Ok(());
    }
    let taken = measure(ctx, section)?;
    let mut text = String::new();
    for chain in CHAINS {
        text.push_str(&format!("CHAIN {chain} (zramd)\n\n"));
        for t in taken.iter().filter(|t| t.chain == Some(chain)) {
            text.push_str(&mm_line(&t.row));
            text.push('\n');
        }
        text.push('\n');
    }
    let kernel: Vec<&Taken> = taken.iter().filter(|t| t.side == "kernel").collect();
    if !kernel.is_empty() {
        text.push_str("KERNEL zram (its own chain size)\n\n");
        for t in &kernel {
            text.push_str(&mm_line(&t.row));
            text.push('\n');
        }
    }
    let mut seed_text = String::new();
    for (order, rows) in S000_MM_STAT {
        seed_text.push_str(&format!("ORDER {order} zspage\n\n{rows}\n\n"));
    }
    // mem_used_max (the seed's figure) and mem_used_total (after the untar settled).
    let figures: [Figure; 2] = [
        ("mem_used_max", 4, |r| r.used_max),
        ("mem_used_total", 2, |r| r.used_size),
    ];
    let mut rows = Vec::new();
    let mut changes = Vec::new();
    let mut kernel_vs = String::from("; the kernel's zram was not run");
    for (name, seed_col, get) in figures {
        let ours = |chain: usize| -> Vec<f64> {
            taken
                .iter()
                .filter(|t| t.chain == Some(chain))
                .map(|t| get(&t.row) as f64)
                .collect()
        };
        let seed2 = stats(&column(S000_MM_STAT[0].1, seed_col))[4];
        for (order, text) in S000_MM_STAT {
            let base = (order > 2).then_some(seed2);
            let v = column(text, seed_col);
            rows.push(stat_row(&format!("{name}: seed, order {order}"), &v, base));
        }
        let base4 = stats(&ours(4))[4];
        for chain in CHAINS {
            let base = (chain > 4).then_some(base4);
            rows.push(stat_row(
                &format!("{name}: zramd, chain {chain}"),
                &ours(chain),
                base,
            ));
        }
        let theirs: Vec<f64> = kernel.iter().map(|t| get(&t.row) as f64).collect();
        if !theirs.is_empty() {
            rows.push(stat_row(&format!("{name}: kernel zram"), &theirs, None));
        }
        let (c8, c16) = (stats(&ours(8))[4], stats(&ours(16))[4]);
        changes.push(format!(
            "{name} chain 8 {:+.2}%, chain 16 {:+.2}%",
            change(base4, c8),
            change(base4, c16)
        ));
        if name == "mem_used_total"
            && let Some(&k) = theirs.first().filter(|&&k| k > 0.0)
        {
            kernel_vs = format!(
                "; zramd's mem_used_total at chain 8 is {:.3}x the kernel's",
                c8 / k
            );
        }
    }
    let markdown = format!(
        "{}{}Columns: orig_data_size compr_data_size mem_used_total mem_limit mem_used_max \
         same_pages pages_compacted huge_pages (after the untar step; the seed's after an untar \
         and a kernel build).\n\n{}",
        block("Seed", &seed_text),
        block("zramd and the kernel, measured now", &text),
        md_table(
            &[
                "figure: who",
                "N",
                "Min",
                "Max",
                "Median",
                "Avg",
                "Stddev",
                "vs order 2 / chain 4",
            ],
            &rows
        )
    );
    let verdict = format!(
        "after the untar, against chain 4: {} (seed, mem_used_max: {:+.2}% order 3, {:+.2}% \
         order 4){kernel_vs}",
        changes.join("; "),
        S000_CHANGE[0].1,
        S000_CHANGE[1].1,
    );
    section.tables.push(Table {
        title: "mm_stat after the untar, by zspage chain size".into(),
        markdown,
        verdict,
    });
    let header = [
        "side",
        "chain",
        "run",
        "orig_data_size",
        "compr_data_size",
        "mem_used_total",
        "mem_limit",
        "mem_used_max",
        "same_pages",
        "pages_compacted",
        "huge_pages",
    ];
    let csv_rows: Vec<Vec<String>> = taken
        .iter()
        .map(|t| {
            let r = &t.row;
            vec![
                t.side.clone(),
                t.chain.map_or(String::new(), |c| c.to_string()),
                t.run.to_string(),
                r.orig_size.to_string(),
                r.compr_size.to_string(),
                r.used_size.to_string(),
                "0".into(),
                r.used_max.to_string(),
                r.same_pages.to_string(),
                r.pages_compacted.to_string(),
                r.huge_pages.to_string(),
            ]
        })
        .collect();
    section.write_csv(ctx, "seed000-mm_stat.csv", &csv(&header, &csv_rows))?;
    section.json["mm_stat"] = serde_json::to_value(
        taken
            .iter()
            .map(|t| serde_json::json!({"chain": t.chain, "run": t.run, "row": t.row}))
            .collect::<Vec<_>>(),
    )?;
    Ok(())
}
