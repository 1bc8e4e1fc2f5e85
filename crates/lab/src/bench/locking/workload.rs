//! The two workloads of seed 001, run on a mounted filesystem: fs_mark (the `fs_mark`
//! program, or the lab's equivalent where it is missing) and the build of a Debian source
//! package with `make -jN`; and fetching that package's source with apt.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, bail};

use super::report::BuildTime;
use crate::bench::untar::side::sh;

/// An fs_mark run's shape (`-t`, `-n`, `-s`).
#[derive(Debug, Clone, Copy)]
pub struct FsMark {
    /// Threads (`-t`).
    pub threads: usize,
    /// Files per thread (`-n`).
    pub files: usize,
    /// Bytes per file (`-s`).
    pub size: usize,
    /// The lab's equivalent rather than the `fs_mark` program.
    pub builtin: bool,
}

impl FsMark {
    /// The command a run runs, as the report shows it.
    pub fn describe(&self) -> String {
        let cmd = format!(
            "fs_mark -d DIR -s {} -n {} -t {} -k",
            self.size, self.files, self.threads
        );
        if self.builtin {
            format!("{cmd} (the lab's equivalent: write and fsync each file, as fs_mark does)")
        } else {
            cmd
        }
    }

    /// Runs once into a new directory of `mnt`, then deletes what it made, syncs and trims;
    /// returns files/s.
    pub fn run(&self, mnt: &Path, run: usize) -> anyhow::Result<f64> {
        let dir = mnt.join(format!("fsmark-{run}"));
        std::fs::create_dir_all(&dir)?;
        let rate = if self.builtin {
            self.builtin_run(&dir)
        } else {
            self.program_run(mnt, &format!("fsmark-{run}"))
        };
        std::fs::remove_dir_all(&dir).with_context(|| format!("rm -rf {}", dir.display()))?;
        settle_fs(mnt)?;
        rate
    }

    /// fs_mark in `mnt`, into its directory `dir` (a relative path: fs_mark takes
    /// directory names of under 40 bytes).
    fn program_run(&self, mnt: &Path, dir: &str) -> anyhow::Result<f64> {
        let out = Command::new("fs_mark")
            .current_dir(mnt)
            .args(["-d", dir])
            .args(["-s", &self.size.to_string()])
            .args(["-n", &self.files.to_string()])
            .args(["-t", &self.threads.to_string()])
            .arg("-k")
            .output()
            .context("run fs_mark")?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!(
                "fs_mark failed: {}{}",
                stdout.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        files_per_s(&stdout).with_context(|| format!("no files/s in fs_mark's output: {stdout}"))
    }

    /// The lab's fs_mark: `threads` threads each create `files` files of `size` bytes in a
    /// directory of their own, each written, fsynced and closed (fs_mark's default sync
    /// method); files/s over the whole run.
    fn builtin_run(&self, dir: &Path) -> anyhow::Result<f64> {
        // Compressible but not same-filled, so that the devices compress every page.
        let data: Vec<u8> = b"fs_mark equivalent of the zramd lab "
            .iter()
            .copied()
            .cycle()
            .take(self.size)
            .collect();
        let start = Instant::now();
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..self.threads)
                .map(|t| {
                    let (dir, data) = (dir.join(format!("{t:02}")), &data);
                    s.spawn(move || -> std::io::Result<()> {
                        std::fs::create_dir_all(&dir)?;
                        for i in 0..self.files {
                            let mut f = std::fs::File::create(dir.join(format!("f{i:06}")))?;
                            f.write_all(data)?;
                            f.sync_all()?;
                        }
                        Ok(())
                    })
                })
                .collect();
            workers.into_iter().try_for_each(|w| {
                w.join()
                    .map_err(|_| anyhow::anyhow!("an fs_mark thread panicked"))?
                    .context("fs_mark equivalent")
            })
        })?;
        Ok((self.threads * self.files) as f64 / start.elapsed().as_secs_f64())
    }
}

/// Files/s from fs_mark's output: the fourth column of the last line of figures
/// (`FSUse% Count Size Files/sec App Overhead`).
pub fn files_per_s(stdout: &str) -> Option<f64> {
    stdout
        .lines()
        .filter_map(|l| {
            let cols: Vec<f64> = l
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?;
            (cols.len() >= 4).then(|| cols[3])
        })
        .next_back()
}

/// Syncs and trims the filesystem at `mnt`, so that each run starts from the same device.
fn settle_fs(mnt: &Path) -> anyhow::Result<()> {
    sh(Command::new("sync").arg("-f").arg(mnt))?;
    sh(Command::new("fstrim").arg(mnt))
}

/// A build: a source tree, copied onto the filesystem before each run, and its make.
#[derive(Debug, Clone)]
pub struct Build {
    /// The tree.
    pub tree: PathBuf,
    /// `make -j`.
    pub jobs: usize,
    /// The make target (empty: the default).
    pub target: String,
}

impl Build {
    /// The command a run times.
    pub fn describe(&self, what: &str) -> String {
        format!(
            "make -j{} {} && sync -f . in {what}",
            self.jobs, self.target
        )
    }

    /// Copies the tree into a new directory of `mnt` and syncs (untimed), then times `make`
    /// and a sync of the filesystem (so that what the build wrote reaches the device), then
    /// deletes the copy, syncs and trims.
    pub fn run(&self, mnt: &Path, run: usize) -> anyhow::Result<BuildTime> {
        let dir = mnt.join(format!("build-{run}"));
        sh(Command::new("cp").arg("-a").arg(&self.tree).arg(&dir))?;
        sh(Command::new("sync").arg("-f").arg(mnt))?;
        let out = Command::new("bash")
            .arg("-c")
            .arg(
                "TIMEFORMAT='%R %U %S'; \
                 time { make -j\"$1\" $2 >make.log 2>&1 && sync -f .; }",
            )
            .args(["build", &self.jobs.to_string(), &self.target])
            .current_dir(&dir)
            .output()
            .context("run bash")?;
        if !out.status.success() {
            let log = std::fs::read_to_string(dir.join("make.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(10).collect();
            bail!(
                "make failed in {}: {}",
                dir.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        let time = build_time(&stderr).with_context(|| format!("no times from bash: {stderr}"))?;
        std::fs::remove_dir_all(&dir).with_context(|| format!("rm -rf {}", dir.display()))?;
        settle_fs(mnt)?;
        Ok(time)
    }
}

/// `real user sys` (bash's `time` with `TIMEFORMAT='%R %U %S'`): the last line of three
/// numbers.
pub fn build_time(stderr: &str) -> Option<BuildTime> {
    stderr.lines().rev().find_map(|l| {
        let v: Vec<f64> = l
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        match v[..] {
            [real, user, sys] => Some(BuildTime { real, user, sys }),
            _ => None,
        }
    })
}

/// Fetches the source of Debian package `package` into `work` and unpacks its upstream
/// tarball; returns the tree and the tarball's name. deb-src need not be configured: the
/// system's apt sources are copied with `deb` turned into `deb-src` into a private sources
/// directory, and apt-get runs with it, private lists and a private cache (`-o Dir::…`),
/// leaving the system's apt state untouched.
pub fn fetch_source(package: &str, work: &Path) -> anyhow::Result<(PathBuf, String)> {
    let parts = work.join("sources.list.d");
    for d in [
        parts.clone(),
        work.join("lists/partial"),
        work.join("cache/archives/partial"),
        work.join("src"),
    ] {
        std::fs::create_dir_all(&d)?;
    }
    let mut any = false;
    for (from, to) in source_files()? {
        let text = std::fs::read_to_string(&from)?;
        std::fs::write(parts.join(to), deb_src(&text))?;
        any = true;
    }
    if !any {
        bail!("no apt sources on this machine");
    }
    let opts = |cmd: &mut Command| {
        for (k, v) in [
            ("Dir::Etc::SourceParts", parts.clone()),
            ("Dir::Etc::SourceList", PathBuf::from("/dev/null")),
            ("Dir::State::Lists", work.join("lists")),
            ("Dir::Cache", work.join("cache")),
        ] {
            cmd.arg("-o").arg(format!("{k}={}", v.display()));
        }
        cmd.args(["-o", "APT::Sandbox::User=root", "-qq"]);
    };
    let mut update = Command::new("apt-get");
    opts(&mut update);
    sh(update.arg("update")).context("apt-get update (deb-src)")?;
    let mut source = Command::new("apt-get");
    opts(&mut source);
    sh(source
        .args(["source", "--download-only", package])
        .current_dir(work.join("src")))
    .with_context(|| format!("apt-get source {package}"))?;
    let tarball = std::fs::read_dir(work.join("src"))?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tar.") && !n.contains(".debian.tar."))
        .min_by_key(|n| !n.contains(".orig.tar."))
        .with_context(|| format!("apt-get source {package} fetched no tarball"))?;
    let tree = work.join("tree");
    std::fs::create_dir_all(&tree)?;
    sh(Command::new("tar")
        .arg("xf")
        .arg(work.join("src").join(&tarball))
        .arg("-C")
        .arg(&tree))?;
    let mut top = std::fs::read_dir(&tree)?
        .filter_map(Result::ok)
        .map(|e| e.path());
    match (top.next(), top.next()) {
        (Some(dir), None) if dir.is_dir() => Ok((dir, tarball)),
        _ => Ok((tree, tarball)),
    }
}

/// The system's apt source files and the names their deb-src copies get.
fn source_files() -> anyhow::Result<Vec<(PathBuf, String)>> {
    let mut files = Vec::new();
    let list = Path::new("/etc/apt/sources.list");
    if list.is_file() {
        files.push((list.to_owned(), "system.list".to_owned()));
    }
    if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
        for e in dir.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".list") || name.ends_with(".sources") {
                files.push((e.path(), name));
            }
        }
    }
    Ok(files)
}

/// An apt source file with every binary source made a source-package one: one-line
/// entries `deb …` become `deb-src …`, deb822 stanzas' `Types: deb` become `Types: deb-src`.
pub fn deb_src(text: &str) -> String {
    text.lines()
        .map(|l| {
            if let Some(rest) = l.strip_prefix("deb ") {
                format!("deb-src {rest}")
            } else if l.trim_start().starts_with("Types:") {
                "Types: deb-src".to_owned()
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fs_mark_output_gives_files_per_s() {
        let out = "#  fs_mark  -d d -s 100000 -n 40 -t 32 -k\n\
                   \tFSUse%        Count         Size    Files/sec     App Overhead\n\
                   \t     3         1280       100000        812.5          9871234\n";
        assert_eq!(files_per_s(out), Some(812.5));
        assert_eq!(files_per_s("no figures here\n"), None);
    }

    #[test]
    fn bash_time_gives_real_user_sys() {
        let t = build_time("warning: x\n10.51 6.04 0.60\n").unwrap();
        assert_eq!((t.real, t.user, t.sys), (10.51, 6.04, 0.60));
        assert!(build_time("1 2\n").is_none());
    }

    #[test]
    fn sources_become_deb_src() {
        assert_eq!(
            deb_src("deb http://m/debian bookworm main\n# deb x\n"),
            "deb-src http://m/debian bookworm main\n# deb x\n"
        );
        assert_eq!(
            deb_src("Types: deb\nURIs: http://m/debian\n"),
            "Types: deb-src\nURIs: http://m/debian\n"
        );
    }
}
