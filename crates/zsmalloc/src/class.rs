//! Size-class geometry, computed exactly as the kernel's `zs_create_pool` does.
//!
//! There are 255 nominal classes, `32 + 16 * i` bytes for `i` in `0..255` (the last one capped
//! at 4096). Each class gets the `pages_per_zspage` in `1..=chain_size` that maximises the used
//! percentage of the zspage (integer percent, first maximum wins, as in
//! `get_pages_per_zspage()` of the seed), and `objs_per_zspage = pages * 4096 / size`.
//! Walking from the largest class down, a class whose `(pages_per_zspage, objs_per_zspage)`
//! equals that of the previously created (larger) class is merged into it: its index then
//! points at the larger class. The first class (from the top) that is not a one-page,
//! one-object class sets the huge watermark: `huge_class_size = size - (HANDLE_SIZE - 1)`.
//!
//! The header is a choice ([`Header`]): the kernel keeps each object's handle in its first
//! 8 bytes and adds them to every request before the lookup; with [`Header::Omitted`] the
//! object holds the caller's bytes alone (the pool finds an object's handle through its
//! handle table instead), so a request of `size` bytes lands in the class for `size` and
//! `huge_class_size = size + 1`. The classes themselves are the same either way.
//!
//! Invariants: `index_map[i] >= i`; `index_map[index_map[i]] == index_map[i]`; classes named
//! by `index_map` are exactly the distinct classes the kernel prints.

use crate::sys::{MAX_RUN_PAGES, PAGE_SIZE};

/// Smallest object size (bytes, handle included) — the kernel's `ZS_MIN_ALLOC_SIZE`.
pub const MIN_ALLOC_SIZE: usize = 32;
/// Largest object size (bytes, handle included) — the kernel's `ZS_MAX_ALLOC_SIZE`.
pub const MAX_ALLOC_SIZE: usize = PAGE_SIZE;
/// Distance between two nominal classes — the kernel's `ZS_SIZE_CLASS_DELTA`.
pub const CLASS_DELTA: usize = 16;
/// Number of nominal classes: `ceil((4096 - 32) / 16) + 1`.
pub const NUM_CLASSES: usize = (MAX_ALLOC_SIZE - MIN_ALLOC_SIZE).div_ceil(CLASS_DELTA) + 1;
/// Bytes of the in-object handle header that `zs_malloc` adds before the class lookup.
pub const HANDLE_SIZE: usize = 8;
/// Smallest and largest chain size accepted (the kernel allows 4..=16; we allow 1..=16).
pub const MIN_CHAIN_SIZE: usize = 1;
/// See [`MIN_CHAIN_SIZE`].
pub const MAX_CHAIN_SIZE: usize = 16;
// A zspage is one run of the page source.
const _: () = assert!(MAX_CHAIN_SIZE <= MAX_RUN_PAGES);
/// The kernel's default `CONFIG_ZSMALLOC_CHAIN_SIZE`.
pub const DEFAULT_CHAIN_SIZE: usize = 8;

/// Where an object's handle is kept. The default is zram devices' (and so zramd's):
/// [`Header::Omitted`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Header {
    /// In the first [`HANDLE_SIZE`] bytes of every object of a non-huge class, as the
    /// kernel's zsmalloc does: each request is 8 bytes larger before the class lookup.
    Handle,
    /// Nowhere in the object: compaction finds an object's handle through the class's
    /// handle table. Every object is 8 bytes smaller than the kernel's.
    #[default]
    Omitted,
}

impl Header {
    /// Bytes this layout adds to a request before the class lookup.
    pub fn bytes(self) -> usize {
        match self {
            Header::Handle => HANDLE_SIZE,
            Header::Omitted => 0,
        }
    }
}

/// The geometry of one distinct size class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassGeometry {
    /// The class index the kernel prints (its largest nominal index).
    pub index: usize,
    /// Object size in bytes, handle header included.
    pub size: usize,
    /// Pages in one zspage of this class.
    pub pages_per_zspage: usize,
    /// Objects one zspage holds.
    pub objs_per_zspage: usize,
    /// Bytes of in-object handle header (0 for huge classes and [`Header::Omitted`]).
    pub header: usize,
}

impl ClassGeometry {
    /// A huge class stores one object per one-page zspage, with no in-object header.
    pub fn is_huge(&self) -> bool {
        self.pages_per_zspage == 1 && self.objs_per_zspage == 1
    }

    /// Bytes of caller data one object of this class can hold.
    pub fn capacity(&self) -> usize {
        self.size - self.header
    }
}

/// How the zspage length of a class is chosen. The default is the current kernel's
/// ([`Geometry::MinWaste`]), so that side-by-side runs against the kernel's zram compare
/// like with like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Geometry {
    /// The seed's rule (kernels up to 6.2, `get_pages_per_zspage`): the highest integer
    /// used-percentage, first maximum wins. Chain sizes 4, 8, 16 give 69, 123, 191 classes.
    Seed,
    /// The rule of kernels 6.3 and later (`calculate_zspage_chain_size`): the length with the
    /// least wasted bytes, one page for power-of-two sizes. Packs small objects tighter.
    #[default]
    MinWaste,
}

impl Geometry {
    /// The zspage length for a class size under this rule.
    pub fn pages_per_zspage(self, class_size: usize, chain_size: usize) -> usize {
        match self {
            Geometry::Seed => pages_per_zspage(class_size, chain_size),
            Geometry::MinWaste => pages_per_zspage_min_waste(class_size, chain_size),
        }
    }
}

/// Kernel 6.3+'s rule: the zspage length (up to `chain_size`) wasting the fewest bytes;
/// the first such length wins; power-of-two sizes take one page.
pub fn pages_per_zspage_min_waste(class_size: usize, chain_size: usize) -> usize {
    if class_size.is_power_of_two() {
        return 1;
    }
    (1..=chain_size)
        .min_by_key(|&pages| (pages * PAGE_SIZE) % class_size)
        .unwrap_or(1)
}

/// The seed's rule: the zspage length (in pages, up to `chain_size`) with the highest
/// integer used-percentage; the first such length wins.
pub fn pages_per_zspage(class_size: usize, chain_size: usize) -> usize {
    let mut best_pct = 0;
    let mut best = 1;
    for pages in 1..=chain_size {
        let zspage_size = pages * PAGE_SIZE;
        let waste = zspage_size % class_size;
        let used_pct = (zspage_size - waste) * 100 / zspage_size;
        if used_pct > best_pct {
            best_pct = used_pct;
            best = pages;
        }
    }
    best
}

/// The kernel's `get_size_class_index`: the nominal class for an object of `size` bytes
/// (handle header already added), capped at the last class.
pub fn nominal_index(size: usize) -> usize {
    let idx = if size > MIN_ALLOC_SIZE {
        (size - MIN_ALLOC_SIZE).div_ceil(CLASS_DELTA)
    } else {
        0
    };
    idx.min(NUM_CLASSES - 1)
}

/// All classes of a pool with a given chain size.
#[derive(Debug, Clone)]
pub struct ClassTable {
    chain_size: usize,
    header: Header,
    /// Distinct classes, in ascending index order.
    classes: Vec<ClassGeometry>,
    /// Nominal index -> position in `classes`.
    position: Vec<usize>,
    huge_class_size: usize,
}

impl ClassTable {
    /// The seed kernel's table (6.2, seed 000) for zspages of at most `chain_size` pages:
    /// its zspage-length rule ([`Geometry::Seed`]) and its object layout, the handle in
    /// every object ([`Header::Handle`]), so its classes, class counts and huge watermark are
    /// the ones seed 000 prints. A pool builds its table from its `PoolConfig` instead
    /// ([`with_layout`](Self::with_layout)), by default in the zram device's layout.
    ///
    /// `chain_size` must be in `MIN_CHAIN_SIZE..=MAX_CHAIN_SIZE`; callers validate first.
    pub fn new(chain_size: usize) -> Self {
        Self::with_layout(chain_size, Geometry::Seed, Header::Handle)
    }

    /// Builds the table for `chain_size` with a zspage-length rule and an object layout.
    pub fn with_layout(chain_size: usize, geometry: Geometry, header: Header) -> Self {
        debug_assert!((MIN_CHAIN_SIZE..=MAX_CHAIN_SIZE).contains(&chain_size));
        let mut index_map = vec![0; NUM_CLASSES];
        let mut desc: Vec<ClassGeometry> = Vec::new();
        let mut huge_class_size = 0;
        for i in (0..NUM_CLASSES).rev() {
            let size = (MIN_ALLOC_SIZE + i * CLASS_DELTA).min(MAX_ALLOC_SIZE);
            let pages = geometry.pages_per_zspage(size, chain_size);
            let objs = pages * PAGE_SIZE / size;
            if huge_class_size == 0 && !(pages == 1 && objs == 1) {
                huge_class_size = size + 1 - header.bytes();
            }
            if let Some(prev) = desc.last()
                && prev.pages_per_zspage == pages
                && prev.objs_per_zspage == objs
            {
                index_map[i] = prev.index;
                continue;
            }
            desc.push(ClassGeometry {
                index: i,
                size,
                pages_per_zspage: pages,
                objs_per_zspage: objs,
                header: if pages == 1 && objs == 1 {
                    0
                } else {
                    header.bytes()
                },
            });
            index_map[i] = i;
        }
        desc.reverse();
        let mut position = vec![0; NUM_CLASSES];
        for (i, pos) in position.iter_mut().enumerate() {
            let target = index_map[i];
            *pos = desc
                .iter()
                .position(|c| c.index == target)
                .unwrap_or_default();
        }
        Self {
            chain_size,
            header,
            classes: desc,
            position,
            huge_class_size,
        }
    }

    /// The chain size this table was built for.
    pub fn chain_size(&self) -> usize {
        self.chain_size
    }

    /// Where objects keep their handle.
    pub fn header(&self) -> Header {
        self.header
    }

    /// Distinct classes, ascending.
    pub fn classes(&self) -> &[ClassGeometry] {
        &self.classes
    }

    /// Smallest caller size (bytes, before any handle header) that lands in the huge class.
    pub fn huge_class_size(&self) -> usize {
        self.huge_class_size
    }

    /// Position (in [`classes`](Self::classes)) of the class serving a `zs_malloc(size)`;
    /// the handle header (if any) is added here, as the kernel does. `size` must be in
    /// `1..=4096`.
    pub fn position_for(&self, size: usize) -> usize {
        self.position[nominal_index(size + self.header.bytes())]
    }

    /// The class serving a `zs_malloc(size)` (the kernel's `zs_lookup_class_index`).
    pub fn class_for(&self, size: usize) -> &ClassGeometry {
        &self.classes[self.position_for(size)]
    }

    /// The class at a kernel class index, following merges.
    pub fn class_at_index(&self, index: usize) -> Option<&ClassGeometry> {
        self.position.get(index).map(|&p| &self.classes[p])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_counts_of_distinct_classes() {
        assert_eq!(ClassTable::new(4).classes().len(), 69);
        assert_eq!(ClassTable::new(8).classes().len(), 123);
        assert_eq!(ClassTable::new(16).classes().len(), 191);
    }

    #[test]
    fn min_waste_geometry_is_the_current_kernels() {
        // Kernel 6.3+ on chain 8 (its default): 119 distinct classes; 208-byte objects take
        // 3-page zspages of 59 objects (16 bytes wasted) instead of 2 pages of 39 (80).
        let t = ClassTable::with_layout(8, Geometry::MinWaste, Header::Handle);
        assert_eq!(t.classes().len(), 119);
        let c = t.class_at_index(11).unwrap();
        assert_eq!(
            (c.size, c.pages_per_zspage, c.objs_per_zspage),
            (208, 3, 59)
        );
        assert_eq!(pages_per_zspage_min_waste(2048, 8), 1);
    }

    #[test]
    fn seed_class_96_trace() {
        // The seed traces class #96 (1568 bytes): 5 pages is the best zspage.
        assert_eq!(pages_per_zspage(1568, 4), 2);
        assert_eq!(pages_per_zspage(1568, 5), 5);
    }

    #[test]
    fn seed_huge_watermarks() {
        assert_eq!(ClassTable::new(4).huge_class_size(), 3264 - 7);
        assert_eq!(ClassTable::new(8).huge_class_size(), 3632 - 7);
        assert_eq!(ClassTable::new(16).huge_class_size(), 3840 - 7);
    }

    #[test]
    fn seed_lookup_adds_handle_and_follows_merges() {
        let t = ClassTable::new(4);
        // 1560 + 8 = 1568 -> nominal 96, merged into class 100 (1632 bytes) with chain 4.
        assert_eq!(t.class_for(1560).index, 100);
        assert_eq!(t.class_for(4096).index, 254);
        assert_eq!(t.class_for(1).index, 0);
        assert_eq!(t.class_for(24).index, 0);
        assert_eq!(t.class_for(25).index, 1);
        assert!(t.class_for(t.huge_class_size()).is_huge());
        assert!(!t.class_for(t.huge_class_size() - 1).is_huge());
    }

    #[test]
    fn omitted_header_shifts_lookup_by_eight_bytes_only() {
        for chain in [4, 8, 16] {
            let kernel = ClassTable::with_layout(chain, Geometry::MinWaste, Header::Handle);
            let ours = ClassTable::with_layout(chain, Geometry::MinWaste, Header::Omitted);
            // Same classes (the header is not part of the geometry) ...
            let strip = |t: &ClassTable| -> Vec<_> {
                t.classes()
                    .iter()
                    .map(|c| (c.index, c.size, c.pages_per_zspage, c.objs_per_zspage))
                    .collect()
            };
            assert_eq!(strip(&kernel), strip(&ours));
            // ... each request 8 bytes smaller in ours, the huge watermark 8 bytes higher.
            assert_eq!(
                ours.huge_class_size(),
                kernel.huge_class_size() + HANDLE_SIZE
            );
            for size in 1..=4096 - HANDLE_SIZE {
                assert_eq!(
                    ours.class_for(size + HANDLE_SIZE).index,
                    kernel.class_for(size).index
                );
            }
            assert!(ours.class_for(ours.huge_class_size()).is_huge());
            assert!(!ours.class_for(ours.huge_class_size() - 1).is_huge());
            for c in ours.classes() {
                assert_eq!(c.capacity(), c.size);
            }
        }
    }
}
