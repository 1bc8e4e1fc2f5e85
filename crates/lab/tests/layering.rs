//! The workspace's layering rules, checked on its sources (docs/design.md, "Map"):
//!
//! - no file of a crate imports a file that imports it back, directly or through others
//!   (a `use crate::…`/`super::…` path names the file of the module it reaches; a crate
//!   root's or a `mod.rs`'s `mod` and `pub use` lines are its table of contents, not
//!   imports);
//! - the daemon (`crates/zramd/src`) reaches the allocator only through zram and carries no
//!   benchmark code;
//! - no source file is over 600 lines, but the NBD protocol's constant tables.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest source file, in lines.
const MAX_LINES: usize = 600;
/// Files allowed to be longer: protocol constant tables.
const LONG_TABLES: [&str; 1] = ["crates/zramd/src/nbd/proto.rs"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The source directories of the workspace's crates.
fn crate_sources() -> Vec<(String, PathBuf)> {
    let mut crates: Vec<_> = std::fs::read_dir(workspace().join("crates"))
        .expect("crates/")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.join("src").is_dir())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, p.join("src"))
        })
        .collect();
    crates.sort();
    crates
}

/// The module path of a source file: `""` for a crate root, `nbd::server` for
/// `src/nbd/server.rs` and `nbd` for `src/nbd/mod.rs`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file
        .strip_prefix(src)
        .expect("under src")
        .with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
        parts.clear();
    }
    parts.join("::")
}

/// The code of a file: comments and the unit-test module left out.
fn code_of(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|l| l.trim() != "#[cfg(test)]")
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect()
}

/// Is this a table-of-contents line of a crate root or `mod.rs`?
fn toc_line(line: &str) -> bool {
    let l = line.trim_start();
    [
        "mod ",
        "pub mod ",
        "pub use ",
        "pub(crate) use ",
        "pub(crate) mod ",
    ]
    .iter()
    .any(|p| l.starts_with(p))
        || l.starts_with("#[")
}

/// The paths a line names after `crate::` or `super::`, as segment lists relative to the
/// crate root (group imports `crate::{a, b::c}` give one path per member).
fn paths_in(line: &str, module: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (anchor, base) in [("crate::", Vec::new()), ("super::", parent(module))] {
        let mut rest = line;
        while let Some(i) = rest.find(anchor) {
            let before = rest[..i].chars().next_back();
            rest = &rest[i + anchor.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let mut prefix = base.clone();
            let mut s = rest;
            loop {
                let ident: String = s
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if ident.is_empty() {
                    break;
                }
                s = &s[ident.len()..];
                if ident == "super" {
                    prefix = parent(&prefix.join("::"));
                } else {
                    prefix.push(ident);
                }
                match s.strip_prefix("::") {
                    Some(next) => s = next,
                    None => break,
                }
            }
            if let Some(group) = s.strip_prefix('{') {
                let inner = group.split('}').next().unwrap_or("");
                for member in inner.split(',') {
                    let mut p = prefix.clone();
                    p.extend(
                        member
                            .trim()
                            .split("::")
                            .map(|x| x.split_whitespace().next().unwrap_or("").to_owned())
                            .filter(|x| !x.is_empty() && x != "self"),
                    );
                    out.push(p);
                }
            } else {
                out.push(prefix);
            }
        }
    }
    out
}

fn parent(module: &str) -> Vec<String> {
    let mut parts: Vec<String> = module
        .split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    parts.pop();
    parts
}

/// The import graph of one crate: module → modules its file names.
fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<String, PathBuf> = files
        .iter()
        .map(|f| (module_of(src, f), f.clone()))
        .collect();
    // The crate root's re-exports: `pub use a::b::{X, Y}` makes `crate::X` name `a::b`.
    let mut reexports: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if let Some(root) = modules.get("") {
        let text = std::fs::read_to_string(root).expect("crate root");
        for line in code_of(&text) {
            let Some(rest) = line.trim_start().strip_prefix("pub use ") else {
                continue;
            };
            let rest = rest.trim_end_matches(';');
            let (path, names) = match rest.find("::{") {
                Some(i) => (&rest[..i], rest[i + 3..].trim_end_matches('}')),
                None => match rest.rsplit_once("::") {
                    Some((p, n)) => (p, n),
                    None => continue,
                },
            };
            for name in names.split(',') {
                let name = name.split("::").last().unwrap_or("").trim();
                if !name.is_empty() {
                    reexports.insert(
                        name.to_owned(),
                        path.split("::").map(str::to_owned).collect(),
                    );
                }
            }
        }
    }
    let resolve = |segs: &[String]| -> Option<String> {
        for k in (1..=segs.len()).rev() {
            let m = segs[..k].join("::");
            if modules.contains_key(&m) {
                return Some(m);
            }
        }
        let target = reexports.get(segs.first()?)?;
        (1..=target.len())
            .rev()
            .map(|k| target[..k].join("::"))
            .find(|m| modules.contains_key(m))
    };
    let mut graph = BTreeMap::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).expect("source file");
        let is_toc =
            file.ends_with("lib.rs") || file.ends_with("main.rs") || file.ends_with("mod.rs");
        let mut edges = BTreeSet::new();
        for line in code_of(&text) {
            if is_toc && toc_line(line) {
                continue;
            }
            for segs in paths_in(line, module) {
                if let Some(target) = resolve(&segs)
                    && &target != module
                    && !target.is_empty()
                {
                    edges.insert(target);
                }
            }
        }
        graph.insert(module.clone(), edges);
    }
    graph
}

fn reachable(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from.to_owned()];
    while let Some(m) = stack.pop() {
        for next in graph.get(&m).into_iter().flatten() {
            if seen.insert(next.clone()) {
                stack.push(next.clone());
            }
        }
    }
    seen
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let mut cycles = Vec::new();
    for (name, src) in crate_sources() {
        let graph = import_graph(&src);
        assert!(
            graph.len() > 1,
            "{name}: no modules found in {}",
            src.display()
        );
        for a in graph.keys() {
            let from_a = reachable(&graph, a);
            for b in from_a.iter().filter(|b| *b > a) {
                if reachable(&graph, b).contains(a) {
                    cycles.push(format!("{name}: {a} <-> {b}"));
                }
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_checker_sees_imports_and_cycles() {
    // The checker itself: a path, a group import, `super`, a root re-export.
    assert_eq!(
        paths_in("use crate::store::{Store, BlockState};", "device"),
        vec![
            vec!["store".to_owned(), "Store".to_owned()],
            vec!["store".to_owned(), "BlockState".to_owned()]
        ]
    );
    assert_eq!(
        paths_in("use super::proto::*;", "nbd::server"),
        vec![vec!["nbd".to_owned(), "proto".to_owned()]]
    );
    assert!(paths_in("let x = zram::Error::Corrupt;", "a").is_empty());
    let zram = import_graph(&workspace().join("crates/zram/src"));
    assert!(zram["device"].contains("store"), "{:?}", zram["device"]);
    assert!(zram["store"].contains("error"), "{:?}", zram["store"]);
    assert!(!zram["store"].contains("device"), "{:?}", zram["store"]);
}

#[test]
fn the_daemon_reaches_the_allocator_only_through_zram_and_has_no_benchmarks() {
    let zramd = workspace().join("crates/zramd");
    let manifest = std::fs::read_to_string(zramd.join("Cargo.toml")).expect("manifest");
    for dep in ["zsmalloc", "lab"] {
        assert!(
            !manifest.lines().any(|l| l.trim_start().starts_with(dep)),
            "crates/zramd depends on {dep}"
        );
    }
    let mut files = Vec::new();
    rust_files(&zramd.join("src"), &mut files);
    assert!(!zramd.join("src/bench").exists(), "benchmark code in zramd");
    for f in files {
        let text = std::fs::read_to_string(&f).expect("source");
        for line in code_of(&text) {
            assert!(
                !line.contains("zsmalloc::"),
                "{}: uses zsmalloc directly: {line}",
                f.display()
            );
        }
    }
}

#[test]
fn no_source_file_is_over_600_lines() {
    let root = workspace();
    let mut long = Vec::new();
    for (_, src) in crate_sources() {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for f in files {
            let rel = f
                .strip_prefix(&root)
                .unwrap_or(&f)
                .to_string_lossy()
                .into_owned();
            let lines = std::fs::read_to_string(&f).expect("source").lines().count();
            if lines > MAX_LINES && !LONG_TABLES.contains(&rel.as_str()) {
                long.push(format!("{rel}: {lines} lines"));
            }
        }
    }
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}
