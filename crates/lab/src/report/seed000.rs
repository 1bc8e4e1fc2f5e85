//! Seed 000 (zspage chain size, "turn zspage order into runtime variable"): the class
//! tables of chain sizes 4, 8 and 16 (the seed's orders 2, 3, 4) in the seed's layout and in
//! zramd's default one — the 1568-byte class's waste, the unique classes, the huge-class
//! watermark and the table's tail — and `mm_stat` after the untar at each chain size
//! ([`super::seed000_runs`]).

use zram::{ClassStats, Geometry, Pool, PoolConfig};

use super::plot::{Chart, Series, lines};
use super::published::{S000_HUGE, S000_UNIQUE, S000_WASTE_1568};
use super::section::{Ctx, Plot, Section, Table, block, csv, md_table};

/// The chain sizes of the seed's orders 2, 3 and 4.
pub const CHAINS: [usize; 3] = [4, 8, 16];

const PAGE: usize = 4096;

/// The seed's object size of its worked example.
const EXAMPLE: usize = 1568;

/// A pool layout the report compares.
#[derive(Debug, Clone, Copy)]
struct Layout {
    name: &'static str,
    config: fn(usize) -> PoolConfig,
}

const LAYOUTS: [Layout; 2] = [
    Layout {
        name: "seed layout",
        config: PoolConfig::seed,
    },
    Layout {
        name: "zramd default",
        config: default_layout,
    },
];

fn default_layout(chain_size: usize) -> PoolConfig {
    PoolConfig {
        chain_size,
        geometry: Geometry::default(),
        ..PoolConfig::default()
    }
}

/// The class table of an empty pool of `config`.
fn classes(config: PoolConfig) -> anyhow::Result<Vec<ClassStats>> {
    let pool = Pool::with_config(PoolConfig {
        populate: false,
        ..config
    })?;
    Ok(pool.class_stats())
}

fn objs(c: &ClassStats) -> usize {
    c.pages_per_zspage * PAGE / c.size.max(1)
}

/// Percent of a zspage that objects of `size` fill in class `c`.
fn used_pct(c: &ClassStats, size: usize) -> f64 {
    (objs(c) * size) as f64 * 100.0 / (c.pages_per_zspage * PAGE) as f64
}

/// The largest class whose zspages hold more than one object.
fn watermark(table: &[ClassStats]) -> usize {
    table
        .iter()
        .filter(|c| objs(c) > 1)
        .map(|c| c.size)
        .max()
        .unwrap_or(0)
}

/// The class serving objects of `size`.
fn serving(table: &[ClassStats], size: usize) -> Option<&ClassStats> {
    table
        .iter()
        .filter(|c| c.size >= size)
        .min_by_key(|c| c.size)
}

/// The tables of every layout and chain size.
type Tables = Vec<(Layout, usize, Vec<ClassStats>)>;

fn waste_table(tables: &Tables) -> Table {
    let seed_rows: Vec<Vec<String>> = S000_WASTE_1568
        .iter()
        .map(|(p, w, u)| vec![p.to_string(), w.to_string(), u.to_string()])
        .collect();
    let mut rows = Vec::new();
    let mut verdict = String::new();
    for (layout, chain, t) in tables {
        let Some(c) = serving(t, EXAMPLE) else {
            continue;
        };
        let n = objs(c);
        let wasted = c.pages_per_zspage * PAGE - n * EXAMPLE;
        let used = used_pct(c, EXAMPLE);
        rows.push(vec![
            layout.name.to_owned(),
            chain.to_string(),
            c.size.to_string(),
            c.pages_per_zspage.to_string(),
            n.to_string(),
            wasted.to_string(),
            format!("{used:.0}"),
        ]);
        if layout.name == "zramd default" && *chain == 8 {
            verdict = format!(
                "at chain 8 zramd stores {EXAMPLE}-byte objects in its {}-byte class, {} pages \
                 per zspage, {used:.0}% used (the seed's order 3 picks 5 pages, 99%; order 2 \
                 merged them into the 1632-byte class, 95% used at best)",
                c.size, c.pages_per_zspage
            );
        }
    }
    let header = [
        "layout",
        "chain",
        "class size",
        "pages per zspage",
        "objects",
        "wasted bytes",
        "used%",
    ];
    Table {
        title: format!("The {EXAMPLE}-byte class: pages per zspage, wasted bytes, used%"),
        markdown: format!(
            "{}zramd, measured now (the class serving {EXAMPLE}-byte objects):\n\n{}",
            block(
                "Seed (get_pages_per_zspage for class #96)",
                &format!(
                    "    pages per zspage      wasted bytes     used%\n{}",
                    seed_rows
                        .iter()
                        .map(|r| format!("{:>16} {:>18} {:>9}", r[0], r[1], r[2]))
                        .collect::<Vec<_>>()
                        .join("\n")
                )
            ),
            md_table(&header, &rows)
        ),
        verdict,
    }
}

fn unique_table(tables: &Tables) -> (Table, Table) {
    let count = |name: &str, chain: usize| {
        tables
            .iter()
            .find(|(l, c, _)| l.name == name && *c == chain)
            .map(|(_, _, t)| t)
    };
    let mut unique_rows = Vec::new();
    let mut huge_rows = Vec::new();
    let mut same = true;
    for ((order, seed_unique), (_, seed_huge)) in S000_UNIQUE.iter().zip(S000_HUGE) {
        let chain = 1usize << order;
        let (Some(s), Some(d)) = (count("seed layout", chain), count("zramd default", chain))
        else {
            continue;
        };
        same &= s.len() == *seed_unique && watermark(s) == seed_huge;
        unique_rows.push(vec![
            order.to_string(),
            seed_unique.to_string(),
            s.len().to_string(),
            d.len().to_string(),
        ]);
        huge_rows.push(vec![
            order.to_string(),
            seed_huge.to_string(),
            watermark(s).to_string(),
            watermark(d).to_string(),
        ]);
    }
    let d16 = count("zramd default", 16).map_or(0, |t| t.len());
    let unique = Table {
        title: "zspage order and unique size classes".into(),
        markdown: md_table(
            &[
                "zspage order (chain 2^order)",
                "# unique size classes (seed)",
                "zramd, seed layout",
                "zramd default",
            ],
            &unique_rows,
        ),
        verdict: format!(
            "zramd's seed layout gives {} the seed's counts; its default layout (the \
             least-waste rule of kernels 6.3+, no in-object handle) has {d16} classes at chain 16",
            if same { "exactly" } else { "NOT" }
        ),
    };
    let w16 = count("zramd default", 16).map_or(0, |t| watermark(t));
    let huge = Table {
        title: "The huge-class watermark (largest class sharing pages)".into(),
        markdown: md_table(
            &[
                "zspage order",
                "watermark (seed)",
                "zramd, seed layout",
                "zramd default",
            ],
            &huge_rows,
        ),
        verdict: format!(
            "objects up to {w16} bytes share pages in zramd's default layout at chain 16 \
             (seed, order 4: 3840)"
        ),
    };
    (unique, huge)
}

/// The tail of a class table (sizes from 3264) in the seed's columns.
fn tail(table: &[ClassStats]) -> String {
    let mut out = format!(
        "{:>5} {:>5} {:>11} {:>12} {:>13} {:>10} {:>10} {:>16} {:>8}\n...\n",
        "class",
        "size",
        "almost_full",
        "almost_empty",
        "obj_allocated",
        "obj_used",
        "pages_used",
        "pages_per_zspage",
        "freeable"
    );
    for c in table.iter().filter(|c| c.size >= 3264) {
        out.push_str(&format!(
            "{:>5} {:>5} {:>11} {:>12} {:>13} {:>10} {:>10} {:>16} {:>8}\n",
            c.index,
            c.size,
            c.almost_full,
            c.almost_empty,
            c.obj_allocated,
            c.obj_used,
            c.pages_used,
            c.pages_per_zspage,
            c.freeable
        ));
    }
    out
}

fn plot(ctx: &Ctx, tables: &Tables) -> anyhow::Result<Plot> {
    // For every object size (16-byte steps), the share of its zspages that objects of
    // exactly that size fill, in the class that serves it: merged classes show as dips.
    let series: Vec<Series> = tables
        .iter()
        .map(|(l, chain, t)| {
            let points = (32..PAGE)
                .step_by(16)
                .filter_map(|size| serving(t, size).map(|c| (size as f64, used_pct(c, size))))
                .collect();
            (format!("{}, chain {chain}", l.name), points)
        })
        .collect();
    let file = "seed000-chain-size.png";
    lines(
        &Chart {
            title: "zspage space objects of each size fill, by chain size",
            x_desc: "object size (bytes)",
            y_desc: "used% of their zspages",
            x_label: &|x| format!("{x:.0}"),
        },
        &series,
        &ctx.out.join(file),
    )?;
    Ok(Plot {
        file: file.into(),
        title: "used% of the zspages per object size, chain 4/8/16".into(),
    })
}

/// The class-table part of seed 000's section.
pub fn class_tables(ctx: &Ctx, section: &mut Section) -> anyhow::Result<()> {
    let mut tables: Tables = Vec::new();
    for layout in LAYOUTS {
        for chain in CHAINS {
            tables.push((layout, chain, classes((layout.config)(chain))?));
        }
    }
    section.tables.push(waste_table(&tables));
    let (unique, huge) = unique_table(&tables);
    section.tables.push(unique);
    let mut huge = huge;
    if let Some((_, _, t)) = tables
        .iter()
        .find(|(l, c, _)| l.name == "zramd default" && *c == 16)
    {
        huge.markdown.push('\n');
        huge.markdown.push_str(&block(
            "zramd's default layout at chain 16, the table's tail in the seed's columns (an \
             empty pool)",
            &tail(t),
        ));
    }
    section.tables.push(huge);
    let mut rows = Vec::new();
    for (l, chain, t) in &tables {
        for c in t {
            rows.push(vec![
                l.name.to_owned(),
                chain.to_string(),
                c.index.to_string(),
                c.size.to_string(),
                c.pages_per_zspage.to_string(),
                objs(c).to_string(),
                format!("{:.3}", used_pct(c, c.size)),
            ]);
        }
    }
    let header = [
        "layout",
        "chain",
        "index",
        "size",
        "pages_per_zspage",
        "objs_per_zspage",
        "used_pct",
    ];
    section.write_csv(ctx, "seed000-classes.csv", &csv(&header, &rows))?;
    section.plots.push(plot(ctx, &tables)?);
    section.json["classes"] = serde_json::to_value(
        tables
            .iter()
            .map(|(l, chain, t)| {
                serde_json::json!({
                    "layout": l.name,
                    "chain": chain,
                    "unique_classes": t.len(),
                    "huge_watermark": watermark(t),
                })
            })
            .collect::<Vec<_>>(),
    )?;
    Ok(())
}
