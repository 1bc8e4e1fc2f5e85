//! The kernel's own zram, for side-by-side measurements: a device hot-added through
//! `/sys/class/zram-control`, always reset and removed again when dropped.

use std::fs;
use std::path::PathBuf;

use anyhow::{Context as _, bail};

const CONTROL: &str = "/sys/class/zram-control";

/// A kernel zram device this process added.
#[derive(Debug)]
pub struct KernelZram {
    id: u32,
}

/// Why the kernel's zram cannot be used here, or `None` if it can.
pub fn unavailable_reason(algorithm: &str) -> Option<String> {
    // The effective uid is the third field of the Uid: line.
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2))
        == Some("0");
    if !root {
        return Some("not running as root".into());
    }
    if !std::path::Path::new(CONTROL).join("hot_add").exists() {
        return Some(format!("{CONTROL} does not exist (no zram module?)"));
    }
    None.or_else(|| {
        let probe = KernelZram::add().ok()?;
        let algs = fs::read_to_string(probe.attr("comp_algorithm")).ok()?;
        let offered = algs
            .split_whitespace()
            .any(|a| a.trim_matches(|c| c == '[' || c == ']') == algorithm);
        (!offered).then(|| {
            format!(
                "the kernel's zram does not offer {algorithm} (it has: {})",
                algs.trim()
            )
        })
    })
}

impl KernelZram {
    /// Hot-adds an unconfigured device.
    pub fn add() -> anyhow::Result<Self> {
        let id: u32 = fs::read_to_string(format!("{CONTROL}/hot_add"))
            .context("hot_add a kernel zram device")?
            .trim()
            .parse()
            .context("hot_add printed no device number")?;
        Ok(Self { id })
    }

    /// Hot-adds a device and sets it up.
    pub fn with(algorithm: &str, disksize: u64) -> anyhow::Result<Self> {
        let dev = Self::add()?;
        dev.set("comp_algorithm", algorithm)?;
        dev.set("disksize", &disksize.to_string())?;
        Ok(dev)
    }

    /// `/sys/block/zramN/<name>`.
    pub fn attr(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/sys/block/zram{}/{name}", self.id))
    }

    /// `/dev/zramN`.
    pub fn dev_path(&self) -> PathBuf {
        PathBuf::from(format!("/dev/zram{}", self.id))
    }

    /// Writes an attribute.
    pub fn set(&self, name: &str, value: &str) -> anyhow::Result<()> {
        fs::write(self.attr(name), value)
            .with_context(|| format!("set zram{} {name} = {value}", self.id))
    }

    /// The `mm_stat` fields.
    pub fn mm_stat(&self) -> anyhow::Result<Vec<u64>> {
        let text = fs::read_to_string(self.attr("mm_stat"))?;
        let fields: Result<Vec<u64>, _> = text.split_whitespace().map(str::parse).collect();
        let fields = fields.context("parse kernel mm_stat")?;
        if fields.len() < 9 {
            bail!("kernel mm_stat has {} fields: {text:?}", fields.len());
        }
        Ok(fields)
    }
}

impl Drop for KernelZram {
    fn drop(&mut self) {
        let _ = fs::write(self.attr("reset"), "1");
        let _ = fs::write(format!("{CONTROL}/hot_remove"), self.id.to_string());
    }
}
