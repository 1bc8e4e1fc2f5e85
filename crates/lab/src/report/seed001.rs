//! Seed 001 (one pool lock instead of the pool's migrate lock and per-class locks, measured
//! with fs_mark and a kernel build on zram): `bench locking` (fs_mark and a `make -jN`
//! build on ext4 over a zramd device per `locking` mode and over the kernel's zram), its
//! tables in the seed's format beside the seed's published ext4 figures.

use crate::bench::locking::{self, LockingReport, Summary};
use crate::kernel::is_root;

use super::section::{Ctx, Section, Table, md_table};

/// The seed's ext4 fs_mark files/s (Average, Median, Stddev): with lock consolidation (one
/// pool lock), then without (the kernel's class locks).
const SEED_FS_MARK: [(&str, f64, f64, f64); 2] = [
    ("with lock consolidation", 16824.4, 16839.0, 89.97),
    ("without lock consolidation", 16958.0, 16986.0, 194.74),
];

/// The seed's ext4 kernel build, real seconds (Average, Median, Stddev), same order.
const SEED_BUILD_REAL: [(&str, f64, f64, f64); 2] = [
    ("with lock consolidation", 320.0, 319.0, 1.41),
    ("without lock consolidation", 319.6, 319.0, 0.89),
];

/// The mean of `name`'s figures `pick` gives, if it ran.
fn mean(
    r: &LockingReport,
    name: &str,
    pick: fn(&locking::ConfigResult) -> Vec<f64>,
) -> Option<f64> {
    r.configs
        .iter()
        .find(|c| c.name == name)
        .and_then(|c| Summary::of(&pick(c)))
        .map(|s| s.mean)
}

/// "pool/class X (seed: Y); zramd at A–B of the kernel's" for one workload.
fn verdict(
    r: &LockingReport,
    what: &str,
    seed: &[(&str, f64, f64, f64); 2],
    pick: fn(&locking::ConfigResult) -> Vec<f64>,
) -> String {
    let seed_ratio = seed[0].1 / seed[1].1;
    let pool_class = match (mean(r, "zramd pool", pick), mean(r, "zramd class", pick)) {
        (Some(p), Some(c)) if c > 0.0 => format!("{:.3}", p / c),
        _ => "—".into(),
    };
    let kernel = r
        .configs
        .iter()
        .find(|c| c.locking.is_none())
        .and_then(|c| Summary::of(&pick(c)))
        .map(|s| s.mean);
    let ratios: Vec<f64> = r
        .configs
        .iter()
        .filter(|c| c.locking.is_some())
        .filter_map(|c| Some(Summary::of(&pick(c))?.mean / kernel.filter(|k| *k > 0.0)?))
        .collect();
    let vs_kernel = match (
        ratios.iter().copied().reduce(f64::min),
        ratios.iter().copied().reduce(f64::max),
    ) {
        (Some(lo), Some(hi)) => {
            format!("the zramd modes' means are {lo:.2}–{hi:.2}x the kernel zram's")
        }
        _ => "the kernel's zram was not run".into(),
    };
    format!(
        "{what}: one pool lock / class locks = {pool_class} (seed: {seed_ratio:.3}); {vs_kernel}"
    )
}

/// The seed's published figures for `seed` as a Markdown table.
fn seed_table(seed: &[(&str, f64, f64, f64); 2]) -> String {
    let rows: Vec<Vec<String>> = seed
        .iter()
        .map(|(name, avg, med, sd)| {
            vec![
                (*name).to_owned(),
                format!("{avg:.1}"),
                format!("{med:.1}"),
                format!("{sd:.2}"),
            ]
        })
        .collect();
    md_table(
        &["seed (ext4, 36 cores)", "Average", "Median", "Stddev"],
        &rows,
    )
}

/// Seed 001's section.
pub fn run(ctx: &Ctx) -> anyhow::Result<Section> {
    let mut section = Section::new(
        "001",
        "one pool lock against class locks (fs_mark, a build)",
    );
    section.notes.push(
        "The seed ran `fs_mark -d DIR -s 100000 -n 2500 -t 32 -k` and a kernel build on ext4 \
         and btrfs over zram, with and without lock consolidation. Here: ext4 over a zramd \
         device per `locking` mode (pool: the seed's one lock; class: the kernel's per-class \
         locks; sharded: zramd's default), exported through FUSE with a direct-I/O loop \
         device, and over the kernel's zram; fs_mark scaled to this machine and a Debian \
         source package's build instead of the kernel's."
            .into(),
    );
    if !is_root() {
        section
            .skip("the locking bench needs root (loop devices, mkfs.ext4, mount) and FUSE".into());
        return Ok(section);
    }
    let args = locking::Args {
        quick: ctx.quick,
        no_kernel: ctx.no_kernel,
        ..locking::Args::default()
    };
    section.commands.push(format!(
        "zramd bench locking{}{}",
        if ctx.quick { " --quick" } else { "" },
        if ctx.no_kernel { " --no-kernel" } else { "" }
    ));
    let report = locking::run(&args)?;
    section.write_csv(ctx, "seed001-locking.csv", &report.csv())?;
    section.tables.push(Table {
        title: "fs_mark files/s and the build's seconds, per locking mode and the kernel's zram"
            .into(),
        markdown: format!(
            "The seed's fs_mark (files/s):\n\n{}\nThe seed's kernel build (real, s):\n\n{}\n{}",
            seed_table(&SEED_FS_MARK),
            seed_table(&SEED_BUILD_REAL),
            report.markdown()
        ),
        verdict: {
            let mut v = verdict(&report, "fs_mark", &SEED_FS_MARK, |c| c.files_per_s.clone());
            if report.build.is_some() {
                v.push_str("; ");
                v.push_str(&verdict(&report, "build real", &SEED_BUILD_REAL, |c| {
                    c.build_metric("real")
                }));
            }
            v
        },
    });
    section.notes.extend(report.notes.iter().cloned());
    section.json = serde_json::to_value(&report)?;
    Ok(section)
}
