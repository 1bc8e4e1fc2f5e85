//! `zramd serve --zram-generator FILE`: the devices of a zram-generator.conf (the systemd
//! zram generator's file), as the same [`DeviceSpec`]s a `--config` file makes.
//!
//! Each `[zramN]` section is a device named `zramN`: `zram-size` (an expression in MiB over
//! `ram`, the machine's memory in MiB; default `min(ram / 2, 4096)`, or the old
//! `zram-fraction`/`max-zram-size`), `compression-algorithm` (a name, or a space-separated
//! list whose first entry is the algorithm and the others the recompression algorithms by
//! priority, each optionally with `(level=N)`), `recompression-algorithm` (the secondary
//! algorithms alone), `writeback-device` (the backing file), `zram-resident-limit`
//! (`mem_limit`, 0 = none) and `host-memory-limit` (no device on a machine with more RAM).
//! Keys about the swap area or file system made on the device are ignored with a warning.

pub mod expr;

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use zram::config::RecompAlgorithm;
use zram::{Algorithm, AlgorithmParams, Size, ZramConfig};

use crate::serve::DeviceSpec;

/// `zram-size` when a section gives none.
pub const DEFAULT_SIZE: &str = "min(ram / 2, 4096)";

/// Keys about what the generator makes on the device (swap, a file system), which zramd
/// does not do: ignored with a warning.
const IGNORED: [&str; 5] = [
    "swap-priority",
    "mount-point",
    "fs-type",
    "fs-create-options",
    "options",
];

/// What a file gives: the devices, and warnings on what it says that zramd ignores.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Generated {
    /// The devices, in the order of their sections.
    pub devices: Vec<DeviceSpec>,
    /// One line per ignored key or skipped device.
    pub warnings: Vec<String>,
}

/// One `[zramN]` section: its keys with their values and line numbers (a later key wins).
#[derive(Debug)]
struct Section {
    name: String,
    keys: Vec<(String, String, usize)>,
}

impl Section {
    fn get(&self, key: &str) -> Option<&str> {
        self.keys
            .iter()
            .rev()
            .find(|(k, ..)| k == key)
            .map(|(_, v, _)| v.as_str())
    }
}

/// The machine's memory in MiB (`MemTotal` of `/proc/meminfo`), the expressions' `ram`.
pub fn ram_mib() -> anyhow::Result<f64> {
    let text = std::fs::read_to_string("/proc/meminfo").context("read /proc/meminfo")?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .context("no MemTotal in /proc/meminfo")?;
    Ok(kib as f64 / 1024.0)
}

/// Reads a zram-generator.conf and makes its devices, logging the warnings.
pub fn load(path: &Path) -> anyhow::Result<Vec<DeviceSpec>> {
    let text = crate::serve::read_config(path)?;
    let generated = parse(&text, ram_mib()?).with_context(|| format!("{}", path.display()))?;
    for w in &generated.warnings {
        tracing::warn!("{}: {w}", path.display());
    }
    if generated.devices.is_empty() {
        bail!("{}: no devices to serve", path.display());
    }
    Ok(generated.devices)
}

/// Parses a zram-generator.conf's text on a machine with `ram_mib` MiB of memory.
pub fn parse(text: &str, ram_mib: f64) -> anyhow::Result<Generated> {
    let mut generated = Generated::default();
    for section in sections(text)? {
        let name = section.name.clone();
        match device(&section, ram_mib, &mut generated.warnings) {
            Ok(Some(spec)) => generated.devices.push(spec),
            Ok(None) => {}
            Err(e) => bail!("[{name}] {e:#}"),
        }
    }
    Ok(generated)
}

/// The sections of a systemd-style INI text (`#` and `;` comments); a section given twice
/// is one section.
fn sections(text: &str) -> anyhow::Result<Vec<Section>> {
    let mut sections: Vec<Section> = Vec::new();
    let mut current: Option<usize> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let name = rest
                .strip_suffix(']')
                .with_context(|| format!("line {n}: {line:?} is not a [section] line"))?;
            let digits = name.strip_prefix("zram").unwrap_or("");
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                bail!("line {n}: unknown section [{name}] (only [zramN] sections)");
            }
            current = Some(match sections.iter().position(|s| s.name == name) {
                Some(at) => at,
                None => {
                    sections.push(Section {
                        name: name.to_owned(),
                        keys: Vec::new(),
                    });
                    sections.len() - 1
                }
            });
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .with_context(|| format!("line {n}: {line:?} is not key = value"))?;
        let key = key.trim();
        let Some(at) = current else {
            if key.starts_with("set!") {
                bail!("line {n}: {key}: set! directives (running programs) are not supported");
            }
            bail!("line {n}: {key:?} outside a [zramN] section");
        };
        sections[at]
            .keys
            .push((key.to_owned(), value.trim().to_owned(), n));
    }
    Ok(sections)
}

/// A section's device; `None` when the section makes none (size 0, host-memory-limit).
fn device(
    s: &Section,
    ram_mib: f64,
    warnings: &mut Vec<String>,
) -> anyhow::Result<Option<DeviceSpec>> {
    let mut seen: Vec<&str> = Vec::new();
    for (key, _, line) in &s.keys {
        if seen.contains(&key.as_str()) {
            continue;
        }
        seen.push(key);
        if IGNORED.contains(&key.as_str()) {
            warnings.push(format!(
                "[{}] line {line}: {key} ignored (zramd serves the device; \
                 making swap or a file system on it is up to you)",
                s.name
            ));
        } else if !KNOWN.contains(&key.as_str()) {
            bail!("line {line}: unknown key {key:?}");
        }
    }
    if let Some(limit) = s.get("host-memory-limit")
        && limit != "none"
    {
        let limit: f64 = limit
            .parse()
            .ok()
            .filter(|l: &f64| l.is_finite() && *l >= 0.0)
            .with_context(|| format!("host-memory-limit: {limit:?} is not a number of MiB"))?;
        if ram_mib > limit {
            warnings.push(format!(
                "[{}] not made: {ram_mib:.0} MiB of RAM is over its host-memory-limit",
                s.name
            ));
            return Ok(None);
        }
    }
    let size = mib(s, "zram-size", &size_expression(s)?, ram_mib)?;
    if size == 0 {
        warnings.push(format!("[{}] not made: its zram-size is 0", s.name));
        return Ok(None);
    }
    let mut config = ZramConfig::default();
    if let Some(list) = s.get("compression-algorithm") {
        let (primary, secondary) =
            algorithms(list, true, warnings, &s.name).context("compression-algorithm")?;
        if let Some((algorithm, params)) = primary {
            config.algorithm = algorithm;
            config.params = params;
        }
        config.recomp_algorithm = secondary;
    }
    if let Some(list) = s.get("recompression-algorithm") {
        if !config.recomp_algorithm.is_empty() {
            bail!(
                "recompression-algorithm given beside recompression algorithms in compression-algorithm"
            );
        }
        let (_, secondary) =
            algorithms(list, false, warnings, &s.name).context("recompression-algorithm")?;
        config.recomp_algorithm = secondary;
    }
    config.check_post_processing()?;
    if let Some(dev) = s.get("writeback-device").filter(|d| !d.is_empty()) {
        config.backing_dev = Some(PathBuf::from(dev));
    }
    if s.get("zram-resident-limit").is_some() {
        config.mem_limit = Size(mib(s, "zram-resident-limit", "0", ram_mib)?);
    }
    Ok(Some(DeviceSpec {
        name: s.name.clone(),
        size: Size(size),
        read_only: false,
        image: None,
        config,
    }))
}

/// The keys a section may have.
const KNOWN: [&str; 8] = [
    "zram-size",
    "zram-fraction",
    "max-zram-size",
    "zram-resident-limit",
    "compression-algorithm",
    "recompression-algorithm",
    "writeback-device",
    "host-memory-limit",
];

/// The size expression: `zram-size`, else the old `zram-fraction`/`max-zram-size` pair, else
/// the default.
fn size_expression(s: &Section) -> anyhow::Result<String> {
    let (fraction, max) = (s.get("zram-fraction"), s.get("max-zram-size"));
    if s.get("zram-size").is_some() || (fraction.is_none() && max.is_none()) {
        return Ok(DEFAULT_SIZE.to_owned());
    }
    // Numbers, as the generator takes them (not expressions to paste into one).
    let number = |key: &str, text: &str| match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(anyhow::anyhow!("{key} = {text}: not a number of 0 or more")),
    };
    let share = format!(
        "ram * {}",
        number("zram-fraction", fraction.unwrap_or("0.5"))?
    );
    Ok(match max.unwrap_or("4096") {
        "none" => share,
        max => format!("min({share}, {})", number("max-zram-size", max)?),
    })
}

/// A key's expression in MiB (`default` when absent) as bytes, whole pages.
fn mib(s: &Section, key: &str, default: &str, ram_mib: f64) -> anyhow::Result<u64> {
    let text = s.get(key).unwrap_or(default);
    let value = expr::eval(text, ram_mib).map_err(|e| anyhow::anyhow!("{key} = {text}: {e}"))?;
    if value < 0.0 {
        bail!("{key} = {text}: {value} MiB is negative");
    }
    let bytes = value * 1024.0 * 1024.0;
    if bytes >= u64::MAX as f64 {
        bail!("{key} = {text}: {value} MiB is too large");
    }
    let bytes = bytes as u64;
    Ok(bytes / 4096 * 4096)
}

/// The primary algorithm (when `with_primary`) and the recompression algorithms of a list
/// like `lz4 zstd(level=9) (type=idle)`. A bare parameter list (the generator's global
/// recompression parameters) is ignored with a warning: zramd recompresses on request or by
/// its policy.
type Algorithms = (Option<(Algorithm, AlgorithmParams)>, Vec<RecompAlgorithm>);

fn algorithms(
    list: &str,
    with_primary: bool,
    warnings: &mut Vec<String>,
    section: &str,
) -> anyhow::Result<Algorithms> {
    let mut primary = None;
    let mut secondary = Vec::new();
    let mut rest = list.trim();
    while !rest.is_empty() {
        let end = rest
            .find(|c: char| c.is_whitespace() || c == '(')
            .unwrap_or(rest.len());
        let (name, after) = rest.split_at(end);
        let (params, after) = match after.strip_prefix('(') {
            Some(inner) => {
                let close = inner
                    .find(')')
                    .with_context(|| format!("{list:?}: a '(' without its ')'"))?;
                (Some(&inner[..close]), &inner[close + 1..])
            }
            None => (None, after),
        };
        rest = after.trim_start();
        if name.is_empty() {
            warnings.push(format!(
                "[{section}] recompression parameters ({}) ignored: zramd recompresses on \
                 `zramd recompress` or by its policy",
                params.unwrap_or("")
            ));
            continue;
        }
        let algorithm: Algorithm = name.parse()?;
        let params = algorithm_params(params.unwrap_or(""))?;
        if with_primary && primary.is_none() {
            primary = Some((algorithm, params));
        } else {
            let priority = u8::try_from(secondary.len() + 1).unwrap_or(u8::MAX);
            secondary.push(RecompAlgorithm {
                priority,
                algorithm,
                params,
            });
        }
    }
    Ok((primary, secondary))
}

/// `level=N` and `dict=PATH` (comma-separated, as the generator writes them); the
/// dictionary is read as `algorithm_params dict=` reads it (a regular file of at most 1 MiB).
fn algorithm_params(text: &str) -> anyhow::Result<AlgorithmParams> {
    let mut params = AlgorithmParams::default();
    for kv in text.split(',').map(str::trim).filter(|kv| !kv.is_empty()) {
        match kv.split_once('=').map(|(k, v)| (k.trim(), v.trim())) {
            Some(("level", v)) => {
                params.level = Some(
                    v.parse()
                        .with_context(|| format!("level {v:?} is not a number"))?,
                );
            }
            Some(("dict", v)) if !v.is_empty() => {
                let bytes = crate::sysfs::read_dictionary(v.as_bytes())?;
                params.dictionary = Some(std::sync::Arc::new(bytes));
            }
            _ => bail!("algorithm parameter {kv:?} is not supported (only level=N, dict=PATH)"),
        }
    }
    Ok(params)
}

#[cfg(test)]
mod tests;
