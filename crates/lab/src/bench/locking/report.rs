//! The locking bench's results and their renderings: every run's figures per
//! configuration, summarised as the seed does (`Average`, `Median`, `Stddev` over runs),
//! as Markdown (a table per workload and the seed's own lines) and as CSV (every run).

use std::fmt::Write as _;

use serde::Serialize;
use zsmalloc::Locking;

/// Mean, median and sample standard deviation of a set of runs (the seed's figures).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// The mean.
    pub mean: f64,
    /// The median (the mean of the middle two for an even count).
    pub median: f64,
    /// The sample standard deviation (n - 1; 0 for a single run).
    pub stddev: f64,
    /// How many runs.
    pub runs: usize,
}

impl Summary {
    /// The summary of `values`; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Self> {
        let n = values.len();
        if n == 0 {
            return None;
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        let stddev = if n < 2 {
            0.0
        } else {
            (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        };
        Some(Self {
            mean,
            median,
            stddev,
            runs: n,
        })
    }

    /// The seed's line: `Average: A, Median: M, Stddev: S`.
    pub fn seed_line(&self) -> String {
        format!(
            "Average: {:.1}, Median: {:.1}, Stddev: {:.2}",
            self.mean, self.median, self.stddev
        )
    }
}

/// The times of one build, in seconds (as `time` reports them).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BuildTime {
    /// Wall-clock seconds.
    pub real: f64,
    /// User CPU seconds of make and what it ran.
    pub user: f64,
    /// System CPU seconds of make and what it ran.
    pub sys: f64,
}

/// One configuration's runs: a zramd device in one locking mode, or the kernel's zram.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigResult {
    /// `zramd pool`, `zramd class`, `zramd sharded` or `kernel`.
    pub name: String,
    /// The locking mode (`None`: the kernel's zram).
    pub locking: Option<Locking>,
    /// fs_mark's files/s, one per run.
    pub files_per_s: Vec<f64>,
    /// The build's times, one per run (empty when the build was skipped).
    pub builds: Vec<BuildTime>,
}

impl ConfigResult {
    /// The build's figure `metric` (`real`, `user` or `sys`) of every run.
    pub fn build_metric(&self, metric: &str) -> Vec<f64> {
        self.builds
            .iter()
            .map(|b| match metric {
                "real" => b.real,
                "user" => b.user,
                _ => b.sys,
            })
            .collect()
    }
}

/// What the locking bench measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LockingReport {
    /// The fs_mark command each run ran (or the lab's equivalent, said so).
    pub fs_mark: String,
    /// The build each run ran, or `None` when it was skipped.
    pub build: Option<String>,
    /// The configurations, zramd's modes first, the kernel's zram last.
    pub configs: Vec<ConfigResult>,
    /// What was skipped and why, and the load conditions.
    pub notes: Vec<String>,
}

const BUILD_METRICS: [&str; 3] = ["real", "user", "sys"];

impl LockingReport {
    /// The kernel's configuration, if it ran.
    fn kernel(&self) -> Option<&ConfigResult> {
        self.configs.iter().find(|c| c.locking.is_none())
    }

    /// A Markdown rendering: per workload, a table (with each mean relative to the
    /// kernel's) and the figures in the seed's own format.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let kernel_fs = self.kernel().and_then(|k| Summary::of(&k.files_per_s));
        let _ = writeln!(s, "#### fs_mark on ext4 (files/s)\n\n`{}`\n", self.fs_mark);
        let _ = writeln!(
            s,
            "| configuration | Average | Median | Stddev | runs | mean / kernel's |\n|---|---:|---:|---:|---:|---:|"
        );
        for c in &self.configs {
            if let Some(m) = Summary::of(&c.files_per_s) {
                let _ = writeln!(
                    s,
                    "| {} | {:.1} | {:.1} | {:.2} | {} | {} |",
                    c.name,
                    m.mean,
                    m.median,
                    m.stddev,
                    m.runs,
                    ratio(m.mean, kernel_fs.map(|k| k.mean))
                );
            }
        }
        s.push_str("\nIn the seed's format:\n\n```text\n");
        for c in &self.configs {
            if let Some(m) = Summary::of(&c.files_per_s) {
                let _ = writeln!(s, "{} (ext4):\n{}", c.name, m.seed_line());
            }
        }
        s.push_str("```\n");
        let Some(build) = &self.build else {
            s.push_str("\nBuild: skipped.\n");
            return s;
        };
        let _ = writeln!(s, "\n#### Build on ext4 (seconds)\n\n`{build}`\n");
        let _ = writeln!(
            s,
            "| configuration | real Average | real Median | real Stddev | user Average | sys Average | runs | real mean / kernel's |\n|---|---:|---:|---:|---:|---:|---:|---:|"
        );
        let kernel_real = self
            .kernel()
            .and_then(|k| Summary::of(&k.build_metric("real")));
        for c in &self.configs {
            let [Some(real), Some(user), Some(sys)] =
                BUILD_METRICS.map(|m| Summary::of(&c.build_metric(m)))
            else {
                continue;
            };
            let _ = writeln!(
                s,
                "| {} | {:.2} | {:.2} | {:.3} | {:.2} | {:.2} | {} | {} |",
                c.name,
                real.mean,
                real.median,
                real.stddev,
                user.mean,
                sys.mean,
                real.runs,
                ratio(real.mean, kernel_real.map(|k| k.mean))
            );
        }
        s.push_str("\nIn the seed's format:\n\n```text\n");
        for c in self.configs.iter().filter(|c| !c.builds.is_empty()) {
            let _ = writeln!(s, "{} (ext4):", c.name);
            for metric in BUILD_METRICS {
                if let Some(m) = Summary::of(&c.build_metric(metric)) {
                    let _ = writeln!(s, "{metric}\n{}", m.seed_line());
                }
            }
        }
        s.push_str("```\n");
        s
    }

    /// Every run's figures as CSV: `workload,configuration,metric,run,value`.
    pub fn csv(&self) -> String {
        let mut s = String::from("workload,configuration,metric,run,value\n");
        for c in &self.configs {
            for (i, v) in c.files_per_s.iter().enumerate() {
                let _ = writeln!(s, "fs_mark,{},files_per_s,{},{v:.3}", c.name, i + 1);
            }
            for metric in BUILD_METRICS {
                for (i, v) in c.build_metric(metric).iter().enumerate() {
                    let _ = writeln!(s, "build,{},{metric}_s,{},{v:.3}", c.name, i + 1);
                }
            }
        }
        s
    }
}

/// `a / b` to three places, or `–` without a kernel figure.
fn ratio(a: f64, b: Option<f64>) -> String {
    match b {
        Some(b) if b > 0.0 => format!("{:.3}", a / b),
        _ => "–".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_is_the_seeds() {
        // The seed's btrfs "real" with lock consolidation: 319.6, 320, 0.894…
        let s = Summary::of(&[320.0, 319.0, 320.0, 321.0, 318.0]).unwrap();
        assert!((s.mean - 319.6).abs() < 1e-9);
        assert_eq!(s.median, 320.0);
        assert!((s.stddev - 1.140_175_425).abs() < 1e-6);
        assert_eq!(Summary::of(&[2.0, 4.0]).unwrap().median, 3.0);
        assert_eq!(Summary::of(&[5.0]).unwrap().stddev, 0.0);
        assert!(Summary::of(&[]).is_none());
    }

    #[test]
    fn renderings_have_a_row_per_configuration() {
        let config = |name: &str, locking, fs: f64| ConfigResult {
            name: name.into(),
            locking,
            files_per_s: vec![fs, fs + 2.0],
            builds: vec![BuildTime {
                real: 10.0,
                user: 15.0,
                sys: 2.0,
            }],
        };
        let r = LockingReport {
            fs_mark: "fs_mark -d DIR".into(),
            build: Some("make -j2".into()),
            configs: vec![
                config("zramd pool", Some(Locking::Pool), 100.0),
                config("kernel", None, 200.0),
            ],
            notes: Vec::new(),
        };
        let md = r.markdown();
        assert!(
            md.contains("| zramd pool | 101.0 | 101.0 | 1.41 | 2 | 0.502 |"),
            "{md}"
        );
        assert!(
            md.contains("zramd pool (ext4):\nreal\nAverage: 10.0"),
            "{md}"
        );
        let csv = r.csv();
        // A header, 2 fs_mark runs and 3 build figures per configuration.
        assert_eq!(csv.lines().count(), 1 + 2 * 5, "{csv}");
        assert!(csv.contains("fs_mark,kernel,files_per_s,2,202.000"));
    }
}
