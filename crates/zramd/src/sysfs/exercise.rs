//! The attribute files on arbitrary input, interleaved with I/O: the entry point that the
//! fuzz target (`fuzz/fuzz_targets/sysfs_write.rs`) and the test suite's random-input test
//! (`tests/sysfs_exercise.rs`) both drive.
//!
//! The input is read as a list of steps: writes of any writable attribute with any bytes,
//! and writes, reads and discards of the device's first pages. A model of those pages (the
//! byte each one's contents were made from) says what every read must return, so a
//! sequence of settings, passes and triggers (`idle`, `writeback`, `recompress`, `compact`,
//! `fold`, `policy run`, a memory limit) that loses or changes the data of those pages is
//! caught, besides any panic: every page is checked after each accepted attribute write and
//! at the end, and where a read step asks. Only a memory limit may refuse a page write (`ENOSPC`, the page
//! keeping its data), and only `writeback` may answer `EIO` (its limit spent: elsewhere it
//! means corrupt data or a failing file). After each step every readable attribute must
//! read, line-terminated.
//!
//! Paths are not taken from the input: a `backing_dev` path becomes the caller's scratch
//! file, and an `algorithm_params` write naming a dictionary file is left out (reading
//! dictionaries safely is `dict.rs`'s, with its own tests).

use std::collections::{BTreeSet, HashMap};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use zram::{Zram, ZramConfig};

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
    /// Did `block_state` ever show a recompressed slot?
    pub recompressed: bool,
    /// Page writes refused under a memory limit (`ENOSPC`: the page keeps its data).
    pub refused_writes: usize,
}

/// What a page of the model holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// The contents [`contents`] makes of this page and byte (0: never written, or
    /// discarded).
    Filled(u8),
    /// A discard refused under a memory limit left it unknown (with units larger than a
    /// page, the pages of a unit are zeroed by storing the unit again, which may fail after
    /// some of them were).
    Unknown,
}

/// The first byte of each kind of step (any other byte reads as one of these: see
/// [`exercise_attributes`]).
const SET: u8 = 0;
const WRITE: u8 = 2;
const READ: u8 = 3;
const DISCARD: u8 = 4;

/// One step, for callers that build inputs from steps rather than bytes.
#[derive(Debug, Clone, Copy)]
pub enum Step<'a> {
    /// Writes `value` (its first 255 bytes) to the writable attribute `name`.
    Set(&'a str, &'a [u8]),
    /// Writes page `page` (of 64) with the contents made from `fill` (0: zeroes; by its low
    /// two bits, same-filled, text-like or noise; with bit 2, the page's number in it).
    Write { page: u8, fill: u8 },
    /// Reads page `page` (an access, as a client's) and checks it.
    Read { page: u8 },
    /// Discards `pages` (1..=4) pages from page `page`.
    Discard { page: u8, pages: u8 },
}

impl Step<'_> {
    /// Appends the step's bytes to `out`. Panics on a name that is not a writable
    /// attribute or a discard of other than 1..=4 pages.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Step::Set(name, value) => {
                let index = writable()
                    .position(|a| a.name == name)
                    .unwrap_or_else(|| panic!("{name} is not a writable attribute"));
                let value = &value[..value.len().min(255)];
                out.extend_from_slice(&[SET, index as u8, value.len() as u8]);
                out.extend_from_slice(value);
            }
            Step::Write { page, fill } => out.extend_from_slice(&[WRITE, page, fill]),
            Step::Read { page } => out.extend_from_slice(&[READ, page]),
            Step::Discard { page, pages } => {
                assert!((1..=4).contains(&pages), "a discard of {pages} pages");
                out.extend_from_slice(&[DISCARD, page, pages - 1]);
            }
        }
    }
}

/// The writable attributes, numbered as [`Step::Set`] numbers them.
fn writable() -> impl Iterator<Item = Attr> {
    ATTRS.into_iter().filter(Attr::writable)
}

/// Runs the steps in `data` on a fresh device, with `backing` as the only file a
/// `backing_dev` write may name, and says what they reached. Panics when a read differs
/// from what was written, an error carries no errno, or a readable attribute fails to
/// read.
pub fn exercise_attributes(data: &[u8], backing: &Path) -> Exercised {
    let dev = Device::new("zram0", ZramConfig::default());
    let mut seen = Exercised::default();
    let writable: Vec<Attr> = writable().collect();
    let mut model: HashMap<u64, Held> = HashMap::new();
    let mut input = Input(data);
    while let Some(op) = input.byte() {
        match op % 5 {
            SET | 1 => {
                let attr = writable[usize::from(input.byte().unwrap_or(0)) % writable.len()];
                let len = usize::from(input.byte().unwrap_or(0));
                let value = input.take(len);
                if write_attribute(&dev, attr.name, value, backing, &mut model) {
                    seen.accepted.insert(attr.name);
                    // Whatever it set or ran, every page must still hold its data.
                    check_all(&dev, &model, &mut seen);
                }
            }
            WRITE => {
                let page = u64::from(input.byte().unwrap_or(0)) % PAGES;
                let fill = input.byte().unwrap_or(0);
                if let Some(z) = dev.open().filter(|z| fits(z.disksize(), page)) {
                    // Only a memory limit may refuse a write, and the page then keeps its
                    // data, as the kernel's does.
                    match z.write(page * PAGE as u64, &contents(page, fill)) {
                        Ok(()) => {
                            model.insert(page, Held::Filled(fill));
                        }
                        Err(e) => {
                            assert!(
                                e.errno() == libc::ENOSPC && z.mm_stat().mem_limit > 0,
                                "page {page}: write failed without a memory limit: {e}"
                            );
                            seen.refused_writes += 1;
                        }
                    }
                }
            }
            READ => {
                let page = u64::from(input.byte().unwrap_or(0)) % PAGES;
                if let Some(z) = dev.open() {
                    check(&z, &model, page, true, &mut seen);
                }
            }
            _ => {
                let page = u64::from(input.byte().unwrap_or(0)) % PAGES;
                let pages = u64::from(input.byte().unwrap_or(0) % 4) + 1;
                if let Some(z) = dev.open().filter(|z| fits(z.disksize(), page + pages - 1)) {
                    let held = match z.discard(page * PAGE as u64, pages * PAGE as u64) {
                        Ok(()) => Held::Filled(0),
                        Err(e) => {
                            assert!(
                                e.errno() == libc::ENOSPC
                                    && z.mm_stat().mem_limit > 0
                                    && z.unit_size() > PAGE,
                                "pages {page}+{pages}: discard failed: {e}"
                            );
                            Held::Unknown
                        }
                    };
                    for p in page..page + pages {
                        model.insert(p, held);
                    }
                }
            }
        }
        read_every_attribute(&dev);
        if let Some(z) = dev.zram() {
            seen.max_backed_pages = seen.max_backed_pages.max(z.bd_stat().bd_count);
            seen.recompressed |= z
                .format_block_state()
                .lines()
                .any(|l| l.ends_with("r.") || l.ends_with("rn"));
        }
    }
    // Whatever the last steps did, every page still holds its data.
    check_all(&dev, &model, &mut seen);
    // The device's threads (compaction, policy) end with it: reset makes it go now.
    let _ = dev.reset();
    seen
}

/// Reads page `page` (when the device has it) and compares it with the model: a page the
/// model knows must read back as written; any page must read. With `access`, a read as a
/// client's (it makes the page not idle); without, one that leaves no trace
/// ([`Zram::inspect`]), so checking does not change what the passes see.
fn check(z: &Zram, model: &HashMap<u64, Held>, page: u64, access: bool, seen: &mut Exercised) {
    if !fits(z.disksize(), page) {
        return;
    }
    let mut buf = vec![0xa5u8; PAGE];
    let at = page * PAGE as u64;
    let read = if access {
        z.read(at, &mut buf)
    } else {
        z.inspect(at, &mut buf)
    };
    assert!(read.is_ok(), "page {page}: read failed: {read:?}");
    if let Held::Filled(fill) = model.get(&page).copied().unwrap_or(Held::Filled(0)) {
        assert!(
            buf == contents(page, fill),
            "page {page}: read back differs from what was written ({fill:#x})"
        );
        seen.checked_reads += 1;
    }
}

/// [`check`] on every page the steps touch, leaving no trace.
fn check_all(dev: &Device, model: &HashMap<u64, Held>, seen: &mut Exercised) {
    if let Some(z) = dev.open() {
        for page in 0..PAGES {
            check(&z, model, page, false, seen);
        }
    }
}

/// A page's contents for a model byte: 0 is zeroes; otherwise, by the low two bits, the
/// byte repeated (a same-filled page), text-like bytes (compressible), or noise that does
/// not compress (a huge page). Different bytes make different contents; with bit 2 set the
/// page's number is written in too (its first four bytes, so such a page is never
/// same-filled), so that a slot mixed up with another shows, while pages without it may
/// hold the same bytes (which deduplication and folding share).
fn contents(page: u64, fill: u8) -> Vec<u8> {
    let salt = if fill & 4 != 0 { page as u32 + 1 } else { 0 };
    let mut x = (u32::from(fill) | salt << 8).wrapping_mul(0x9e37_79b9) | 1;
    let mut noise = move || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x
    };
    let mut bytes = match fill & 3 {
        _ if fill == 0 => return vec![0; PAGE],
        1 => vec![fill; PAGE],
        2 => (0..PAGE)
            .map(|i| b"zramd keeps pages compressed "[i % 29] ^ fill ^ (i / 512) as u8)
            .collect(),
        _ => (0..PAGE).map(|_| noise() as u8).collect(),
    };
    if salt != 0 {
        bytes[..4].copy_from_slice(&salt.to_le_bytes());
    }
    bytes
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
        // EIO is corrupt data, an allocator's bug or the backing file failing; on these
        // steps only `writeback` may answer it (its limit spent).
        assert!(
            errno != libc::EIO || name == "writeback",
            "{name}: EIO for {:?}",
            String::from_utf8_lossy(value)
        );
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
