//! Shared by the kernel-parity tests: a corpus of real bytes from this machine's files.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Regular files under `dir` (symlinks skipped), sorted, depth first.
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        match fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => files_under(&p, out),
            Ok(m) if m.is_file() => out.push(p),
            _ => {}
        }
    }
}

/// Up to `per_file` bytes of each file under `dir` whose name ends in `suffix`, until
/// `budget` bytes.
pub fn files(dir: &str, suffix: &str, per_file: u64, budget: usize) -> Vec<u8> {
    let mut list = Vec::new();
    files_under(Path::new(dir), &mut list);
    let mut out = Vec::new();
    for f in list {
        if out.len() >= budget {
            break;
        }
        if !f.to_string_lossy().ends_with(suffix) {
            continue;
        }
        if let Ok(file) = File::open(&f) {
            let _ = file.take(per_file).read_to_end(&mut out);
        }
    }
    out.truncate(budget);
    out
}
