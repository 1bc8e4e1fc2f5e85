//! A small source tree made up for the quick report (no Linux tarball needed): one top
//! directory holding `drivers`, `arch`, `fs`, `sound`, `include` and a few more, in about
//! the Linux tree's proportions, of C-like text files of 100 B to 64 KiB (words drawn from
//! a fixed vocabulary, so it compresses about as source does, ~3x with lzo-rle), with a
//! shared licence header (duplicate pages for folding to find) and a few incompressible
//! blobs (huge objects). Deterministic: the same size gives the same bytes.

use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, bail};
use rand::rngs::SmallRng;
use rand::{Rng as _, SeedableRng as _};

/// The top directories and their shares of the bytes, percent.
const DIRS: [(&str, u32); 9] = [
    ("drivers", 45),
    ("arch", 20),
    ("fs", 8),
    ("sound", 5),
    ("include", 6),
    ("kernel", 5),
    ("net", 6),
    ("mm", 2),
    ("Documentation", 3),
];

const WORDS: [&str; 48] = [
    "static",
    "int",
    "struct",
    "return",
    "if",
    "else",
    "for",
    "while",
    "unsigned",
    "long",
    "void",
    "const",
    "char",
    "u32",
    "u64",
    "size_t",
    "NULL",
    "err",
    "ret",
    "dev",
    "page",
    "buf",
    "len",
    "offset",
    "lock",
    "unlock",
    "spin_lock",
    "mutex",
    "kfree",
    "kmalloc",
    "GFP_KERNEL",
    "EINVAL",
    "ENOMEM",
    "goto",
    "out",
    "sizeof",
    "flags",
    "data",
    "count",
    "struct device",
    "pr_err",
    "list_head",
    "atomic_t",
    "case",
    "break",
    "switch",
    "inline",
    "#define",
];

const LICENCE: &str = "// SPDX-License-Identifier: GPL-2.0-only\n/*\n * Made up for zramd's lab \
report: a header every file shares, as a source tree's licence headers are shared.\n */\n\n";

/// One file of about `len` bytes.
fn file(rng: &mut SmallRng, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 64);
    out.extend_from_slice(LICENCE.as_bytes());
    let mut indent = 0usize;
    while out.len() < len {
        out.extend(std::iter::repeat_n(b'\t', indent));
        for _ in 0..rng.gen_range(2..9) {
            out.extend_from_slice(WORDS[rng.gen_range(0..WORDS.len())].as_bytes());
            out.push(b' ');
        }
        // Identifiers and numbers make each line differ a little, as real code does.
        out.extend_from_slice(format!("x{:x};\n", rng.gen_range(0..0x10000u32)).as_bytes());
        indent = match rng.gen_range(0..4) {
            0 => indent.saturating_sub(1),
            1 => (indent + 1).min(4),
            _ => indent,
        };
    }
    out.truncate(len.max(LICENCE.len()));
    out
}

/// Writes the tree of about `bytes` bytes under `dir/linux-lab`.
fn tree(dir: &Path, bytes: u64) -> anyhow::Result<()> {
    let mut rng = SmallRng::seed_from_u64(0x007a_7261_6d64);
    let top = dir.join("linux-lab");
    for (name, share) in DIRS {
        let budget = bytes * u64::from(share) / 100;
        let mut written = 0u64;
        let mut n = 0usize;
        while written < budget {
            let sub = top.join(name).join(format!("sub{}", n / 40));
            std::fs::create_dir_all(&sub)?;
            // Sizes spread over 100 B .. 64 KiB, most of a few KiB (log-uniform).
            let len = 2f64.powf(rng.gen_range(6.6..16.0)) as usize;
            let (ext, data) = if n % 97 == 96 {
                let mut blob = vec![0u8; len];
                rng.fill(blob.as_mut_slice());
                ("bin", blob)
            } else {
                ("c", file(&mut rng, len))
            };
            std::fs::write(sub.join(format!("f{n}.{ext}")), &data)?;
            written += data.len() as u64;
            n += 1;
        }
    }
    Ok(())
}

/// Makes `dir/linux-lab.tar` of about `bytes` bytes of files and returns its path.
pub fn make(dir: &Path, bytes: u64) -> anyhow::Result<std::path::PathBuf> {
    let src = dir.join("tree");
    std::fs::create_dir_all(&src).with_context(|| format!("create {}", src.display()))?;
    tree(&src, bytes)?;
    let tar = dir.join("linux-lab.tar");
    let status = Command::new("tar")
        .arg("cf")
        .arg(&tar)
        .arg("-C")
        .arg(&src)
        .arg("linux-lab")
        .status()
        .context("run tar")?;
    if !status.success() {
        bail!("tar cf {} failed: {status}", tar.display());
    }
    std::fs::remove_dir_all(&src)?;
    Ok(tar)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_has_the_deleted_directories_and_its_size() {
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path(), 2 << 20).unwrap();
        let mut total = 0u64;
        for (name, _) in DIRS {
            let d = dir.path().join("linux-lab").join(name);
            assert!(d.is_dir(), "{name} missing");
            for sub in std::fs::read_dir(&d).unwrap() {
                for f in std::fs::read_dir(sub.unwrap().path()).unwrap() {
                    total += f.unwrap().metadata().unwrap().len();
                }
            }
        }
        assert!((2 << 20..3 << 20).contains(&total), "{total} bytes");
        // Deterministic.
        let again = tempfile::tempdir().unwrap();
        tree(again.path(), 2 << 20).unwrap();
        let f = "linux-lab/drivers/sub0/f0.c";
        assert_eq!(
            std::fs::read(dir.path().join(f)).unwrap(),
            std::fs::read(again.path().join(f)).unwrap()
        );
    }
}
