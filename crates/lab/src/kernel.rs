//! The kernel's own zram, for side-by-side measurements and parity tests: a device
//! hot-added through `/sys/class/zram-control`, always reset and removed again when dropped.
//! Devices this process did not add (`zram0`, `zram1`, …) are never touched.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use zram::PAGE_SIZE;

const CONTROL: &str = "/sys/class/zram-control";

/// Is the effective user root?
pub fn is_root() -> bool {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2))
        == Some("0")
}

/// Why no kernel zram device can be hot-added here (not root, no zram in the kernel), or
/// `None` if one can.
pub fn absent_reason() -> Option<String> {
    if !is_root() {
        return Some("not running as root (hot-adding a zram device needs it)".into());
    }
    if !Path::new(CONTROL).join("hot_add").exists() {
        return Some(format!(
            "{CONTROL} does not exist (no zram in this kernel?)"
        ));
    }
    None
}

/// Why the kernel's zram cannot be used here with `algorithm` and its `level` (set through
/// `algorithm_params`, which kernels before 6.12 lack), or `None` if it can.
pub fn unavailable_reason(algorithm: &str, level: Option<i32>) -> Option<String> {
    if let Some(why) = absent_reason() {
        return Some(why);
    }
    let probe = match KernelZram::add() {
        Ok(p) => p,
        Err(e) => return Some(format!("hot_add failed: {e}")),
    };
    if level.is_some() && !probe.attr("algorithm_params").exists() {
        return Some("the kernel's zram has no algorithm_params to take a level".into());
    }
    match probe.algorithms() {
        Ok(algs) if algs.iter().any(|a| a == algorithm) => None,
        Ok(algs) => Some(format!(
            "the kernel's zram does not offer {algorithm} (it has: {})",
            algs.join(" ")
        )),
        Err(e) => Some(format!("read comp_algorithm: {e}")),
    }
}

/// A kernel zram device this process hot-added.
#[derive(Debug)]
pub struct KernelZram {
    id: u32,
}

impl KernelZram {
    /// Hot-adds an unconfigured device.
    pub fn add() -> io::Result<Self> {
        let text = fs::read_to_string(format!("{CONTROL}/hot_add"))?;
        let id = text
            .trim()
            .parse()
            .map_err(|e| io::Error::other(format!("hot_add printed {text:?}: {e}")))?;
        Ok(Self { id })
    }

    /// Hot-adds a device and sets its algorithm, the algorithm's level if given (as zramd's:
    /// zstd's level, lz4's acceleration) and its size.
    pub fn with(algorithm: &str, level: Option<i32>, disksize: u64) -> io::Result<Self> {
        let dev = Self::add()?;
        dev.set("comp_algorithm", algorithm)?;
        if let Some(level) = level {
            dev.set(
                "algorithm_params",
                &format!("algo={algorithm} level={level}"),
            )?;
        }
        dev.set("disksize", &disksize.to_string())?;
        Ok(dev)
    }

    /// The device number.
    pub fn id(&self) -> u32 {
        self.id
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
    pub fn set(&self, name: &str, value: &str) -> io::Result<()> {
        fs::write(self.attr(name), value)
            .map_err(|e| io::Error::new(e.kind(), format!("zram{} {name} = {value}: {e}", self.id)))
    }

    /// Reads an attribute.
    pub fn get(&self, name: &str) -> io::Result<String> {
        fs::read_to_string(self.attr(name))
    }

    /// The algorithms `comp_algorithm` offers.
    pub fn algorithms(&self) -> io::Result<Vec<String>> {
        Ok(self
            .get("comp_algorithm")?
            .split_whitespace()
            .map(|a| a.trim_matches(['[', ']']).to_owned())
            .collect())
    }

    /// The `mm_stat` fields (at least the kernel's nine).
    pub fn mm_stat(&self) -> io::Result<Vec<u64>> {
        let text = self.get("mm_stat")?;
        let fields = text
            .split_whitespace()
            .map(|x| {
                x.parse()
                    .map_err(|e| io::Error::other(format!("mm_stat {text:?}: {e}")))
            })
            .collect::<io::Result<Vec<u64>>>()?;
        if fields.len() < 9 {
            return Err(io::Error::other(format!("short mm_stat: {text:?}")));
        }
        Ok(fields)
    }

    /// Opens `/dev/zramN` for direct I/O, waiting briefly for the node to appear.
    pub fn open_direct(&self) -> io::Result<File> {
        let path = self.dev_path();
        for _ in 0..100 {
            if path.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
    }
}

impl Drop for KernelZram {
    fn drop(&mut self) {
        let _ = fs::write(self.attr("reset"), "1");
        let _ = fs::write(format!("{CONTROL}/hot_remove"), self.id.to_string());
    }
}

/// A page-aligned buffer (an aligned window of an ordinary `Vec`), for direct I/O.
#[derive(Debug)]
pub struct AlignedBuf {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes starting on a page boundary.
    pub fn zeroed(len: usize) -> Self {
        let buf = vec![0u8; len + PAGE_SIZE];
        let start = buf.as_ptr().align_offset(PAGE_SIZE).min(PAGE_SIZE);
        Self { buf, start, len }
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }

    /// The bytes, mutably.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

/// Bytes moved per direct-I/O call by [`write_direct`] and [`read_direct`].
const DIRECT_CHUNK: usize = 64 * PAGE_SIZE;

/// Writes `data` at `offset` (page-aligned) through an aligned buffer, then syncs.
pub fn write_direct(dev: &File, offset: u64, data: &[u8]) -> io::Result<()> {
    let mut buf = AlignedBuf::zeroed(DIRECT_CHUNK);
    for (i, chunk) in data.chunks(DIRECT_CHUNK).enumerate() {
        let b = &mut buf.bytes_mut()[..chunk.len()];
        b.copy_from_slice(chunk);
        dev.write_all_at(b, offset + (i * DIRECT_CHUNK) as u64)?;
    }
    dev.sync_all()
}

/// Reads `len` bytes at `offset` (page-aligned) through an aligned buffer.
pub fn read_direct(dev: &File, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = AlignedBuf::zeroed(DIRECT_CHUNK);
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let n = DIRECT_CHUNK.min(len - out.len());
        let b = &mut buf.bytes_mut()[..n];
        dev.read_exact_at(b, offset + out.len() as u64)?;
        out.extend_from_slice(b);
    }
    Ok(out)
}
