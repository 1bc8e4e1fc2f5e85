//! The attribute files on arbitrary input, interleaved with I/O: the entry point that the
//! fuzz target (`fuzz/fuzz_targets/sysfs_write.rs`) and the test suite's random-input test
//! (`tests/sysfs_exercise.rs`) both drive.
//!
//! The input is read as a list of steps: writes of any writable attribute with any bytes,
//! and writes, reads and discards of the device's first pages. A model of those pages (the
//! byte each one's contents were made from) says what every read must return, so any
//! sequence of settings, passes and triggers (`idle`, `writeback`, `recompress`, `compact`,
//! `fold`, `policy run`, a memory limit) that loses or changes data is caught, besides any
//! panic. After each step every readable attribute must read, line-terminated.
//!
//! Paths are not taken from the input: a `backing_dev` path becomes the caller's scratch
//! file, and an `algorithm_params` write naming a dictionary file is left out (reading
//! dictionaries safely is `dict.rs`'s, with its own tests).

use std::collections::{BTreeSet, HashMap};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use zram::ZramConfig;

use super::{ATTRS, Attr, read, write};
use crate::device::Device;

const PAGE: usize = 4096;
/// Pages the steps' I/O touches: the device's first ones.
const PAGES: u64 = 64;
/// The largest device the steps make: a larger `disksize` is cut to this, so that a run
/// holds little memory whatever it is given (smaller values reach the file as given).
const MAX_DISKSIZE: u64 = 64 << 20;

/// What a run of the steps reached, so that a test can tell that it exercised something.
#[derive(Debug, Default)]
pub struct Exercised {
    /// Attributes that took at least one write.
    pub accepted: BTreeSet<&'static str>,
    /// Reads checked against the model.
    pub checked_reads: usize,
    /// The most pages on the backing file at once (`bd_stat`'s first field).
    pub max_backed_pages: u64,
}

/// What a page of the model holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// The contents [`contents`] makes of this byte (0: never written, or discarded).
    Filled(u8),
    /// A failed discard left it unknown (with units larger than a page, it may have
    /// zeroed some of its pages before failing).
    Unknown,
}

/// Runs the steps in `data` on a fresh device, with `backing` as the only file a
/// `backing_dev` write may name, and says what they reached. Panics when a read differs
/// from what was written, an error carries no errno, or a readable attribute fails to
/// read.
pub fn exercise_attributes(data: &[u8], backing: &Path) -> Exercised {
    let dev = Device::new("zram0", ZramConfig::default());
    let mut seen = Exercised::default();
    let writable: Vec<Attr> = ATTRS.into_iter().filter(Attr::writable).collect();
    let mut model: HashMap<u64, Held> = HashMap::new();
    let mut input = Input(data);
    while let Some(op) = input.byte() {
        match op % 5 {
            0 | 1 => {
                let attr = writable[usize::from(input.byte().unwrap_or(0)) % writable.len()];
                let len = usize::from(input.byte().unwrap_or(0));
                let value = input.take(len);
                if write_attribute(&dev, attr.name, value, backing, &mut model) {
                    seen.accepted.insert(attr.name);
                }
            }
            2 => {
                let page = u64::from(input.byte().unwrap_or(0)) % PAGES;
                let fill = input.byte().unwrap_or(0);
                if let Some(z) = dev.open().filter(|z| fits(z.disksize(), page)) {
                    // A failed write (a memory limit reached) leaves the page as it was,
                    // as the kernel's does.
                    if z.write(page * PAGE as u64, &contents(fill)).is_ok() {
                        model.insert(page, Held::Filled(fill));
                    }
                }
            }
            3 => {
                let page = u64::from(input.byte().unwrap_or(0)) % PAGES;
                if let Some(z) = dev.open().filter(|z| fits(z.disksize(), page)) {
                    let mut buf = vec![0xa5u8; PAGE];
                    let read = z.read(page * PAGE as u64, &mut buf);
                    match model.get(&page).copied().unwrap_or(Held::Filled(0)) {
                        Held::Filled(fill) => {
                            assert!(read.is_ok(), "page {page}: read failed: {read:?}");
                            assert!(
                                buf == contents(fill),
                                "page {page}: read back differs from what was written ({fill:#x})"
                            );
                            seen.checked_reads += 1;
                        }
                        Held::Unknown => {}
                    }
                }
            }
            _ => {
                let page = u64::from(input.byte().unwrap_or(0)) % PAGES;
                let pages = u64::from(input.byte().unwrap_or(0) % 4) + 1;
                if let Some(z) = dev.open().filter(|z| fits(z.disksize(), page + pages - 1)) {
                    if z.discard(page * PAGE as u64, pages * PAGE as u64).is_ok() {
                        for p in page..page + pages {
                            model.insert(p, Held::Filled(0));
                        }
                    } else {
                        for p in page..page + pages {
                            model.insert(p, Held::Unknown);
                        }
                    }
                }
            }
        }
        read_every_attribute(&dev);
        if let Some(z) = dev.zram() {
            seen.max_backed_pages = seen.max_backed_pages.max(z.bd_stat().bd_count);
        }
    }
    // The device's threads (compaction, policy) end with it: reset makes it go now.
    let _ = dev.reset();
    seen
}

/// A page's contents for a model byte: 0 is zeroes; otherwise, by the low two bits, the
/// byte repeated (a same-filled page), text-like bytes (compressible), or noise that does
/// not compress (a huge page), each different for different bytes.
fn contents(fill: u8) -> Vec<u8> {
    let mut x = u32::from(fill).wrapping_mul(0x9e37_79b9) | 1;
    let mut noise = move || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x
    };
    match fill & 3 {
        _ if fill == 0 => vec![0; PAGE],
        1 => vec![fill; PAGE],
        2 => (0..PAGE)
            .map(|i| {
                b"zramd keeps pages compressed "[(i + usize::from(fill)) % 29] ^ (i / 512) as u8
            })
            .collect(),
        _ => (0..PAGE).map(|_| noise() as u8).collect(),
    }
}

/// Does page `page` lie within a device of `disksize` bytes?
fn fits(disksize: u64, page: u64) -> bool {
    (page + 1) * PAGE as u64 <= disksize
}

/// Writes `value` to `name` (paths and sizes bounded as the module says) and brings the
/// model along: a device made or reset starts empty.
fn write_attribute(
    dev: &Device,
    name: &str,
    value: &[u8],
    backing: &Path,
    model: &mut HashMap<u64, Held>,
) -> bool {
    let owned: Vec<u8>;
    let value = match name {
        "backing_dev" => {
            let word = value.strip_suffix(b"\n").unwrap_or(value);
            if word.is_empty() || word == b"none" {
                value
            } else {
                owned = backing.as_os_str().as_bytes().to_vec();
                &owned
            }
        }
        "algorithm_params" if value.windows(5).any(|w| w == b"dict=") => return false,
        "disksize" => {
            let (bytes, _) = super::memparse(value);
            if bytes > MAX_DISKSIZE {
                owned = format!("{MAX_DISKSIZE}").into_bytes();
                &owned
            } else {
                value
            }
        }
        _ => value,
    };
    let before = dev.zram();
    let result = write(dev, name, value);
    if let Err(errno) = result {
        assert!(errno > 0, "{name}: an error without an errno: {errno}");
    }
    let after = dev.zram();
    let same = match (&before, &after) {
        (Some(a), Some(b)) => std::sync::Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    };
    if !same {
        model.clear();
    }
    result.is_ok()
}

/// Every readable attribute reads, and what it reads is empty or ends its last line.
fn read_every_attribute(dev: &Device) {
    for attr in ATTRS.into_iter().filter(Attr::readable) {
        let text = read(dev, attr.name)
            .unwrap_or_else(|errno| panic!("{}: read failed with errno {errno}", attr.name));
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "{}: {text:?} does not end its line",
            attr.name
        );
    }
}

/// The input, consumed from the front.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        head
    }
}
