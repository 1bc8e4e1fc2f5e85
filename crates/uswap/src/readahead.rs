//! The readahead window of seed 002 (VMA-based swap readahead), as pure logic.
//!
//! Representation: one [`Window`] per registered sub-range (the analogue of a VMA) holds the
//! page number of the previous fault in that range and a *hits* count, `0..=2 * max_order`.
//! The window is `2^(hits / 2)` pages counting the faulting page, so a window of 1 page means
//! no readahead. Page numbers are page indices (address / page size), never bytes.
//!
//! The rule, per fault on page `f` with previous fault `p` (the seed's, in our words):
//!
//! - **Direction**: forward when `f >= p`, backward when `f < p`.
//! - **Classify the fault**:
//!   - `f == p` (the same page faulted again, e.g. by a second thread): neutral, hits unchanged;
//!   - no previous fault, or `p` outside the range: a miss;
//!   - `|f - p| == 1`: consecutive, a hit;
//!   - `1 < |f - p| <= 2^(max_order + 1)` and every page strictly between `p` and `f` is
//!     resident (the caller says so with `prev_was_readahead_hit`): consecutive, a hit;
//!   - anything else: a miss.
//! - **Scale**: a hit adds one to hits, capped at `2 * max_order`; a miss halves hits (integer
//!   division), so the window shrinks fast and regrows two hits per doubling.
//! - **Plan**: with window `w > 1`, the candidates are the `2w - 1` pages after `f` (forward)
//!   or before `f` (backward), clipped to the range and never including `f`. The caller walks
//!   them in access order ([`Plan::select`]): resident pages are skipped, a page never
//!   populated stops the walk, evicted pages are read until the whole span has been walked.
//!
//! Where we differ from the seed, and why:
//!
//! - The kernel reads at most `w` new pages per fault, but every access to a swapped-out
//!   page faults, read-ahead ones included (a minor fault on the swap cache), and each of
//!   those faults tops the read-ahead up again: in a steady sequential stream it holds the
//!   whole `2w - 1`-page span ahead of the program in flight. Here read-ahead pages are
//!   mapped and make no fault, so the only chance to top up is the next major fault, at the
//!   end of what was read: reading the whole span at once gives the program the runway the
//!   kernel's pipeline gives it (`budget` is the span, not `w - 1`).
//! - The kernel's detection distance is `|f - p| < 2^max_order`, because its read-ahead pages
//!   sit in the swap cache and still fault one by one. Here read-ahead pages are installed in
//!   the mapping and do not fault again, so the next sequential fault lands past the previous
//!   window, up to `2w` pages away: the distance is `2^(max_order + 1)`, and the caller vouches
//!   for the pages in between (it knows which pages are resident; this module does not).
//! - The kernel clamps the window to the faulting page's page table (2 MiB) and counts a
//!   consecutive fault across that boundary as neutral; both follow from walking one page
//!   table's entries. A region has no page tables to walk, so neither applies.
//! - The kernel derives the order from hits even after `vma_ra_max_order` was lowered; here the
//!   order is always capped at the current `max_order`.
//! - While `vma_ra_enabled` is false the state is left as it is, as in the kernel (its detection
//!   does not run); faults are still counted.

use std::ops::Range;

use serde::{Deserialize, Deserializer, Serialize};

/// The largest `vma_ra_max_order` on 64-bit kernels (`SWAP_RA_ORDER_CEILING`): a window of at
/// most 512 pages.
pub const MAX_ORDER_CEILING: u32 = 9;

/// The kernel's default `vma_ra_max_order` on 64-bit: a window of at most 8 pages.
pub const DEFAULT_MAX_ORDER: u32 = 3;

/// The readahead settings, with the kernel's names and meanings (`/sys/kernel/mm/swap/`).
///
/// Serialized as `vma_ra_enabled` and `vma_ra_max_order`; `enabled` and `max_order` are read
/// too. A `max_order` above [`MAX_ORDER_CEILING`] is clamped to it, as the kernel's store does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReadaheadConfig {
    /// `vma_ra_enabled`: read ahead along the faulting range at all.
    #[serde(rename = "vma_ra_enabled", alias = "enabled")]
    pub enabled: bool,
    /// `vma_ra_max_order`: the window is at most `2^max_order` pages.
    #[serde(
        rename = "vma_ra_max_order",
        alias = "max_order",
        deserialize_with = "deserialize_order"
    )]
    pub max_order: u32,
}

impl Default for ReadaheadConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_order: DEFAULT_MAX_ORDER,
        }
    }
}

impl ReadaheadConfig {
    /// Settings with `max_order` clamped to [`MAX_ORDER_CEILING`].
    pub fn new(enabled: bool, max_order: u32) -> Self {
        Self {
            enabled,
            max_order: max_order.min(MAX_ORDER_CEILING),
        }
    }

    /// The order in force: `max_order`, clamped even when the field was set directly.
    pub fn effective_max_order(&self) -> u32 {
        self.max_order.min(MAX_ORDER_CEILING)
    }

    /// The largest window in pages, counting the faulting page; 1 when disabled.
    pub fn max_window(&self) -> u64 {
        if self.enabled {
            1 << self.effective_max_order()
        } else {
            1
        }
    }
}

fn deserialize_order<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    u32::deserialize(d).map(|order| order.min(MAX_ORDER_CEILING))
}

/// The direction of access, from the previous fault to this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Toward higher pages (the fault is at or above the previous one).
    Forward,
    /// Toward lower pages.
    Backward,
}

/// What the caller knows about a candidate page, for [`Plan::select`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageState {
    /// In the mapping: skipped.
    Resident,
    /// Evicted to the compressed tier: read ahead.
    Evicted,
    /// Never populated (nothing to read): the walk stops, as the kernel's stops at an empty
    /// page table entry.
    Untouched,
}

/// The readahead planned for one fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The access direction.
    pub direction: Direction,
    /// The window in pages, counting the faulting page: `2^order`; 1 means no readahead.
    pub window: u64,
    /// The candidate pages, clipped to the range, never containing the faulting page; empty
    /// when there is no readahead.
    pub span: Range<u64>,
    /// The most pages to read ahead: the span's length (`2 * window - 1` unless clipped).
    pub budget: u64,
}

impl Plan {
    fn none(direction: Direction) -> Self {
        Self {
            direction,
            window: 1,
            span: 0..0,
            budget: 0,
        }
    }

    /// Whether this plan reads nothing ahead.
    pub fn is_empty(&self) -> bool {
        self.budget == 0
    }

    /// The candidate pages in access order: nearest the faulting page first.
    pub fn pages(&self) -> impl Iterator<Item = u64> + '_ {
        let Range { start, end } = self.span;
        let forward = self.direction == Direction::Forward;
        (0..end - start).map(move |i| if forward { start + i } else { end - 1 - i })
    }

    /// The pages to read: walks [`Self::pages`], skipping resident pages, stopping at an
    /// untouched one, taking evicted ones until `budget` are taken.
    pub fn select(&self, mut state: impl FnMut(u64) -> PageState) -> Vec<u64> {
        let mut chosen = Vec::new();
        if self.budget == 0 {
            return chosen;
        }
        for page in self.pages() {
            match state(page) {
                PageState::Resident => continue,
                PageState::Untouched => break,
                PageState::Evicted => {
                    chosen.push(page);
                    if chosen.len() as u64 == self.budget {
                        break;
                    }
                }
            }
        }
        chosen
    }
}

/// Readahead counters, summed over the windows of a region with [`ReadaheadStats::merge`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadaheadStats {
    /// Faults seen, with readahead enabled or not.
    pub faults: u64,
    /// Faults that planned a readahead (a window of more than one page).
    pub windows: u64,
    /// The pages those plans allowed to read ahead (the sum of their budgets).
    pub pages_planned: u64,
    /// Read-ahead pages that were then used, as reported by [`Self::record_hit`].
    pub hits: u64,
}

impl ReadaheadStats {
    /// Counts one fault and its plan.
    pub fn record_plan(&mut self, plan: &Plan) {
        self.faults += 1;
        if !plan.is_empty() {
            self.windows += 1;
            self.pages_planned += plan.budget;
        }
    }

    /// Counts one read-ahead page that the program then touched.
    pub fn record_hit(&mut self) {
        self.hits += 1;
    }

    /// Adds another window's counters to these.
    pub fn merge(&mut self, other: &Self) {
        self.faults += other.faults;
        self.windows += other.windows;
        self.pages_planned += other.pages_planned;
        self.hits += other.hits;
    }
}

/// The readahead state of one range (the seed keeps one per VMA): the previous fault and the
/// hits count. Invariant: `hits <= 2 * MAX_ORDER_CEILING`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Window {
    prev: Option<u64>,
    hits: u32,
    stats: ReadaheadStats,
}

impl Window {
    /// A fresh window: no previous fault, no hits.
    pub fn new() -> Self {
        Self::default()
    }

    /// The previous fault's page, if any.
    pub fn prev_fault(&self) -> Option<u64> {
        self.prev
    }

    /// The hits count.
    pub fn hits(&self) -> u32 {
        self.hits
    }

    /// This window's counters.
    pub fn stats(&self) -> &ReadaheadStats {
        &self.stats
    }

    /// Counts one read-ahead page that the program then touched.
    pub fn record_hit(&mut self) {
        self.stats.record_hit();
    }

    /// Updates the state for a fault on `fault_page` in `range` and plans the readahead.
    ///
    /// `prev_was_readahead_hit` is the caller's word that every page strictly between the
    /// previous fault and this one is resident (typically brought in by the previous window);
    /// it matters only when the two faults are more than one page apart. A fault outside
    /// `range` plans nothing and leaves the state as it is.
    pub fn on_fault(
        &mut self,
        fault_page: u64,
        prev_was_readahead_hit: bool,
        range: Range<u64>,
        cfg: &ReadaheadConfig,
    ) -> Plan {
        let direction = match self.prev {
            Some(prev) if fault_page < prev => Direction::Backward,
            _ => Direction::Forward,
        };
        if !cfg.enabled || !range.contains(&fault_page) {
            let plan = Plan::none(direction);
            self.stats.record_plan(&plan);
            return plan;
        }
        let max_order = cfg.effective_max_order();
        let max_hits = 2 * max_order;
        match self.classify(fault_page, prev_was_readahead_hit, &range, max_order) {
            Some(true) => self.hits = (self.hits + 1).min(max_hits),
            Some(false) => self.hits /= 2,
            None => self.hits = self.hits.min(max_hits),
        }
        self.prev = Some(fault_page);

        let order = (self.hits / 2).min(max_order);
        let window = 1u64 << order;
        let plan = if window == 1 {
            Plan::none(direction)
        } else {
            let reach = 2 * window - 1;
            let span = match direction {
                Direction::Forward => {
                    fault_page + 1..fault_page.saturating_add(reach + 1).min(range.end)
                }
                Direction::Backward => {
                    fault_page.saturating_sub(reach).max(range.start)..fault_page
                }
            };
            let budget = span.end - span.start;
            Plan {
                direction,
                window,
                span,
                budget,
            }
        };
        self.stats.record_plan(&plan);
        plan
    }

    /// `Some(true)` for a consecutive fault, `Some(false)` for a miss, `None` when neutral.
    fn classify(
        &self,
        fault_page: u64,
        gap_resident: bool,
        range: &Range<u64>,
        max_order: u32,
    ) -> Option<bool> {
        let Some(prev) = self.prev else {
            return Some(false);
        };
        if prev == fault_page {
            return None;
        }
        if !range.contains(&prev) {
            return Some(false);
        }
        let distance = prev.abs_diff(fault_page);
        Some(distance == 1 || (gap_resident && distance <= 1u64 << (max_order + 1)))
    }
}
