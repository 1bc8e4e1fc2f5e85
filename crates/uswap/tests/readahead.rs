//! The readahead window's rule (seed 002), fault by fault.

use uswap::readahead::{DEFAULT_MAX_ORDER, MAX_ORDER_CEILING};
use uswap::{Direction, PageState, Plan, ReadaheadConfig, ReadaheadStats, Window};

const RANGE: std::ops::Range<u64> = 1000..1_000_000;

fn cfg(max_order: u32) -> ReadaheadConfig {
    ReadaheadConfig::new(true, max_order)
}

/// Faults on consecutive pages (as the kernel sees them: read-ahead pages still fault).
fn windows_of(
    window: &mut Window,
    pages: impl IntoIterator<Item = u64>,
    c: &ReadaheadConfig,
) -> Vec<u64> {
    pages
        .into_iter()
        .map(|p| window.on_fault(p, false, RANGE, c).window)
        .collect()
}

#[test]
fn sequential_faults_grow_to_max_order_and_stay() {
    let mut w = Window::new();
    let got = windows_of(&mut w, 5000..5012, &cfg(3));
    // The first fault has no predecessor (a miss); then one more hit per fault, the order is
    // hits / 2, capped at 3.
    assert_eq!(got, [1, 1, 2, 2, 4, 4, 8, 8, 8, 8, 8, 8]);
    assert_eq!(w.hits(), 6);
}

#[test]
fn sequential_faults_past_installed_windows_grow_too() {
    // uswap's case: read-ahead pages are installed and do not fault, so the next fault lands
    // just past the previous window and the caller vouches for the pages in between.
    let c = cfg(4);
    let mut w = Window::new();
    let mut page = 2000;
    let mut seen = Vec::new();
    for _ in 0..20 {
        let plan = w.on_fault(page, true, RANGE, &c);
        assert_eq!(plan.direction, Direction::Forward);
        let read = plan.select(|_| PageState::Evicted);
        // The whole span: what the kernel's pipeline holds ahead in a steady stream.
        let want = if plan.window == 1 {
            0
        } else {
            2 * plan.window - 1
        };
        assert_eq!(read.len() as u64, want);
        assert!(read.iter().all(|&p| p > page));
        seen.push(plan.window);
        page += 1 + read.len() as u64;
    }
    assert_eq!(&seen[..10], &[1, 1, 2, 2, 4, 4, 8, 8, 16, 16]);
    assert!(seen[8..].iter().all(|&w| w == 16));
}

#[test]
fn random_faults_keep_the_minimum() {
    let c = ReadaheadConfig::default();
    let mut w = Window::new();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..10_000 {
        // xorshift64: far-apart pages in the range.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let page = RANGE.start + x % (RANGE.end - RANGE.start);
        let plan = w.on_fault(page, false, RANGE, &c);
        assert_eq!(plan.window, 1);
        assert!(plan.is_empty());
        assert!(plan.select(|_| PageState::Evicted).is_empty());
    }
    assert_eq!(w.stats().windows, 0);
}

#[test]
fn a_random_fault_halves_and_the_run_regrows() {
    let c = cfg(3);
    let mut w = Window::new();
    windows_of(&mut w, 5000..5010, &c);
    assert_eq!(
        (w.hits(), w.on_fault(5010, false, RANGE, &c).window),
        (6, 8)
    );
    // One far fault: hits 6 -> 3, order 1.
    assert_eq!(w.on_fault(900_000, false, RANGE, &c).window, 2);
    assert_eq!(w.hits(), 3);
    // Back to the run: another miss (3 -> 1), then regrowth one hit per fault.
    let got = windows_of(&mut w, 5011..5018, &c);
    assert_eq!(got, [1, 2, 2, 4, 4, 8, 8]);
}

#[test]
fn a_gap_without_resident_pages_is_a_miss() {
    let c = cfg(3);
    let mut w = Window::new();
    windows_of(&mut w, 5000..5008, &c);
    assert_eq!(w.hits(), 6);
    // Two pages ahead, but the page between was not resident: a stride, not a run.
    w.on_fault(5009, false, RANGE, &c);
    assert_eq!(w.hits(), 3);
    // The same page again is neutral.
    w.on_fault(5009, false, RANGE, &c);
    assert_eq!(w.hits(), 3);
    // Beyond the detection distance even a resident gap is a miss.
    w.on_fault(5009 + (1 << 4) + 1, true, RANGE, &c);
    assert_eq!(w.hits(), 1);
}

#[test]
fn backward_sequential_reads_ahead_downward() {
    let c = cfg(3);
    let mut w = Window::new();
    let got = windows_of(&mut w, (6000..6012).rev(), &c);
    assert_eq!(got, [1, 1, 2, 2, 4, 4, 8, 8, 8, 8, 8, 8]);
    let plan = w.on_fault(5999, false, RANGE, &c);
    assert_eq!(plan.direction, Direction::Backward);
    assert_eq!(plan.span, 5999 - 15..5999);
    assert_eq!(plan.budget, 15);
    let pages: Vec<u64> = plan.pages().collect();
    assert_eq!(pages.first(), Some(&5998));
    assert_eq!(pages.last(), Some(&5984));
    assert_eq!(
        plan.select(|_| PageState::Evicted),
        (5984..5999).rev().collect::<Vec<_>>()
    );
}

#[test]
fn select_skips_resident_pages_and_stops_at_untouched_ones() {
    let c = cfg(2);
    let mut w = Window::new();
    windows_of(&mut w, 5100..5200, &c);
    let plan = w.on_fault(5200, false, RANGE, &c);
    assert_eq!(
        (plan.window, plan.span.clone(), plan.budget),
        (4, 5201..5208, 7)
    );
    let resident = |p: u64| {
        if p % 2 == 1 {
            PageState::Resident
        } else {
            PageState::Evicted
        }
    };
    assert_eq!(plan.select(resident), [5202, 5204, 5206]);
    let stop = |p: u64| {
        if p == 5203 {
            PageState::Untouched
        } else {
            PageState::Evicted
        }
    };
    assert_eq!(plan.select(stop), [5201, 5202]);
}

#[test]
fn windows_never_leave_the_range() {
    let c = cfg(MAX_ORDER_CEILING);
    for (range, pages, backward) in [
        (10..40u64, 10..40u64, false),
        (10..40, 10..40, true),
        (0..3, 0..3, false),
        (u64::MAX - 50..u64::MAX, u64::MAX - 50..u64::MAX, false),
    ] {
        let mut w = Window::new();
        let order: Vec<u64> = if backward {
            pages.rev().collect()
        } else {
            pages.collect()
        };
        for p in order {
            let plan = w.on_fault(p, false, range.clone(), &c);
            assert!(!plan.span.contains(&p), "{plan:?} holds the fault {p}");
            if !plan.span.is_empty() {
                assert!(
                    range.start <= plan.span.start && plan.span.end <= range.end,
                    "{plan:?}"
                );
            }
            assert!(plan.budget <= plan.span.end - plan.span.start);
            for q in plan.select(|_| PageState::Evicted) {
                assert!(range.contains(&q) && q != p);
            }
        }
    }
    // A fault outside the range plans nothing and leaves the state alone.
    let mut w = Window::new();
    windows_of(&mut w, 5000..5008, &c);
    let before = (w.prev_fault(), w.hits());
    assert!(w.on_fault(5, false, RANGE, &c).is_empty());
    assert_eq!((w.prev_fault(), w.hits()), before);
}

#[test]
fn max_order_zero_and_disabled_read_nothing_ahead() {
    for c in [cfg(0), ReadaheadConfig::new(false, 5)] {
        let mut w = Window::new();
        for p in 5000..5100 {
            let plan = w.on_fault(p, true, RANGE, &c);
            assert!(
                plan.is_empty() && plan.window == 1 && plan.span.is_empty(),
                "{c:?}"
            );
        }
        assert_eq!(w.stats().faults, 100);
        assert_eq!(w.stats().windows, 0);
        assert_eq!(c.max_window(), 1);
    }
    // Disabled leaves the state untouched; enabling again continues from it.
    let mut w = Window::new();
    windows_of(&mut w, 5000..5008, &cfg(3));
    w.on_fault(7000, false, RANGE, &ReadaheadConfig::new(false, 3));
    assert_eq!((w.prev_fault(), w.hits()), (Some(5007), 6));
}

#[test]
fn max_order_above_the_ceiling_is_clamped() {
    assert_eq!(ReadaheadConfig::new(true, 40).max_order, MAX_ORDER_CEILING);
    let raw = ReadaheadConfig {
        enabled: true,
        max_order: 40,
    };
    assert_eq!(raw.effective_max_order(), MAX_ORDER_CEILING);
    let mut w = Window::new();
    let got = windows_of(&mut w, 5000..5100, &raw);
    assert_eq!(got.last(), Some(&(1 << MAX_ORDER_CEILING)));
    assert_eq!(w.hits(), 2 * MAX_ORDER_CEILING);

    let parsed: ReadaheadConfig =
        serde_json::from_str(r#"{"vma_ra_enabled": false, "vma_ra_max_order": 12}"#).unwrap();
    assert_eq!(parsed, ReadaheadConfig::new(false, MAX_ORDER_CEILING));
    let short: ReadaheadConfig = serde_json::from_str(r#"{"max_order": 99}"#).unwrap();
    assert_eq!(short, ReadaheadConfig::new(true, MAX_ORDER_CEILING));
    let default: ReadaheadConfig = serde_json::from_str("{}").unwrap();
    assert_eq!(default, ReadaheadConfig::default());
    assert_eq!(default, ReadaheadConfig::new(true, DEFAULT_MAX_ORDER));
    assert_eq!(
        serde_json::to_string(&default).unwrap(),
        r#"{"vma_ra_enabled":true,"vma_ra_max_order":3}"#
    );
}

#[test]
fn lowering_max_order_caps_the_window_at_once() {
    let mut w = Window::new();
    windows_of(&mut w, 5000..5020, &cfg(5));
    assert_eq!(w.hits(), 10);
    assert_eq!(w.on_fault(5020, false, RANGE, &cfg(2)).window, 4);
    assert_eq!(w.hits(), 4);
}

#[test]
fn counters_add_up() {
    let c = cfg(3);
    let mut w = Window::new();
    let mut plans: Vec<Plan> = Vec::new();
    for p in (5000..5040).chain([900_000, 20_000]).chain(5040..5060) {
        plans.push(w.on_fault(p, false, RANGE, &c));
    }
    let s = *w.stats();
    assert_eq!(s.faults, plans.len() as u64);
    assert_eq!(
        s.windows,
        plans.iter().filter(|p| !p.is_empty()).count() as u64
    );
    assert_eq!(s.pages_planned, plans.iter().map(|p| p.budget).sum::<u64>());
    assert!(s.windows <= s.faults);
    assert_eq!(s.hits, 0);
    for _ in 0..5 {
        w.record_hit();
    }
    assert_eq!(w.stats().hits, 5);

    let mut total = ReadaheadStats::default();
    total.merge(w.stats());
    total.merge(w.stats());
    assert_eq!(total.faults, 2 * s.faults);
    assert_eq!(total.pages_planned, 2 * s.pages_planned);
    assert_eq!(total.hits, 10);
}
