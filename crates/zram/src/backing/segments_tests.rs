//! The tests of `segments.rs`: its bookkeeping, without I/O.

use super::*;

const SEG: u64 = 1000;

fn sparse(range: Range<u64>, live: u64) -> Sparse {
    Sparse { range, live }
}

#[test]
fn objects_pack_and_never_straddle() {
    let mut s = Segments::new(SEG, None);
    let res = s.reserve(&[400, 400, 300, 100], false).unwrap();
    assert_eq!(res.offsets, [0, 400, 1000, 1300]);
    let run = |offset, first, count, len| Run {
        offset,
        first,
        count,
        len,
    };
    assert_eq!(res.runs, [run(0, 0, 2, 800), run(1000, 2, 2, 400)]);
    assert!(res.punch.is_empty());
    assert_eq!(s.live_bytes(), 1200);
    assert_eq!(s.file_bytes(), SEG + 400);
    assert_eq!(s.used_span(1300), Some((1000, 1400)));
    assert_eq!(s.used_span(200), Some((0, 800)));
}

#[test]
fn pages_no_live_object_lies_on_are_given_back_in_sealed_segments() {
    const P: u64 = crate::PAGE_SIZE as u64;
    let mut s = Segments::new(4 * P, None);
    // 0..3000 on page 0, 3000..6000 on 0-1, 6000..9000 on 1-2, 9000..12000 on 2,
    // 12000..15000 on 2-3.
    let res = s.reserve(&[3000; 5], false).unwrap();
    assert_eq!(res.offsets, [0, 3000, 6000, 9000, 12000]);
    // Open: nothing is given back while objects may still be added.
    assert_eq!(s.release(3000, 3000), Freed::default());
    s.reserve(&[3000], false).unwrap(); // seals segment 0
    assert_eq!(s.release(6000, 3000).pages, [(P, P)], "page 1 is free");
    assert_eq!(s.release(0, 3000).pages, [(0, P)]);
    assert_eq!(
        s.release(9000, 3000),
        Freed::default(),
        "page 2 holds 12000.."
    );
    assert_eq!(s.release(12000, 3000).segment, Some(0));
}

#[test]
fn a_cut_loses_only_what_lies_past_it_and_seals_the_open_segment() {
    let mut s = Segments::new(SEG, None);
    // Segments 0 and 1 full, 2 open with 500 bytes.
    s.reserve(&[1000, 1000, 500], false).unwrap();
    assert!(s.cut(1400).is_empty());
    assert!(!s.lost(0, 1000));
    assert!(!s.lost(1000, 400), "the bytes before the cut are there");
    assert!(s.lost(1000, 401) && s.lost(1500, 10) && s.lost(2000, 500));
    // The open segment was sealed: the next object goes to a new one, and is not lost.
    let res = s.reserve(&[100], false).unwrap();
    assert_eq!(res.offsets, [3000]);
    assert!(!s.lost(3000, 100));
    // A lost segment freed whole is forgotten.
    assert_eq!(s.release(2000, 500).segment, Some(2));
    s.punched(2);
    assert_eq!(s.reserve(&[950], false).unwrap().offsets, [2000]);
    assert!(!s.lost(2000, 950));
}

#[test]
fn empty_sealed_segments_are_punched_then_reused_lowest_first() {
    let mut s = Segments::new(SEG, None);
    let res = s.reserve(&[600, 600, 600, 600], false).unwrap();
    assert_eq!(res.offsets, [0, 1000, 2000, 3000]);
    // Segment 3 is open: emptying it does not free it.
    assert_eq!(s.release(3000, 600).segment, None);
    assert_eq!(s.release(2000, 600).segment, Some(2));
    assert_eq!(s.release(0, 600).segment, Some(0));
    assert_eq!(
        s.file_bytes(),
        3 * SEG + 600,
        "punching segments still count"
    );
    s.punched(2);
    s.punched(0);
    assert_eq!(s.file_bytes(), SEG + 600);
    assert_eq!(s.used_span(0), None);
    // The open segment first (empty but used to 600), then segment 0, then 2, then 4.
    let res = s.reserve(&[400, 700, 700, 700], false).unwrap();
    assert_eq!(res.offsets, [3600, 0, 2000, 4000]);
    assert_eq!(res.punch, Vec::<usize>::new(), "segment 3 holds 400 bytes");
}

#[test]
fn a_fixed_size_store_refuses_whole_appends_it_cannot_hold() {
    let mut s = Segments::new(SEG, Some(2));
    s.reserve(&[900], false).unwrap();
    assert!(s.reserve(&[50, 200, 900], false).is_none());
    assert_eq!(
        (s.live_bytes(), s.file_bytes()),
        (900, 900),
        "nothing taken"
    );
    let res = s.reserve(&[50, 200], false).unwrap();
    assert_eq!(res.offsets, [900, 1000]);
    assert!(s.reserve(&[900], false).is_none());
    assert_eq!(s.release(0, 900).segment, None);
    assert_eq!(s.release(900, 50).segment, Some(0));
    s.punched(0);
    assert_eq!(s.reserve(&[900], false).unwrap().offsets, [0]);
    assert_eq!(s.live_bytes(), 1100);
}

#[test]
fn sparse_segments_come_sparsest_first_and_a_bounded_store_keeps_one_for_them() {
    let mut s = Segments::new(SEG, Some(KEEP_FROM));
    // Segments 0-2 full of 250-byte objects, segment 3 kept back.
    s.reserve(&[250; 11], false).unwrap();
    assert!(
        s.reserve(&[500], false).is_none(),
        "the last segment is kept"
    );
    s.reserve(&[250], false)
        .expect("the open segment's rest is not kept");
    assert!(
        s.reserve(&[250], false).is_none(),
        "the last segment is kept"
    );
    // Open segment 2 is not listed, however empty; sealed 0 (half live) and 1 are.
    for offset in [0, 250, 1000, 1250, 1500, 2000, 2250, 2500] {
        s.release(offset, 250);
    }
    assert_eq!(s.sparse(), [sparse(1000..2000, 250), sparse(0..1000, 500)]);
    assert_eq!(
        (s.live_in(1000..2000), s.live_in(1000..1500)),
        (Some(250), None)
    );
    assert_eq!(s.live_in(2000..3000), None, "open");
    // Moved objects may take the kept segment; a cut segment is not worth cleaning.
    assert_eq!(s.reserve(&[250, 250], true).unwrap().offsets, [3000, 3250]);
    // With no segment left, an append that fits in the open segment's rest still goes in.
    assert_eq!(s.reserve(&[250], false).unwrap().offsets, [3500]);
    assert!(s.reserve(&[500], false).is_none());
    assert!(s.cut(1600).is_empty());
    assert_eq!(s.sparse(), [sparse(0..1000, 500)]);
    // Unbounded and small stores keep nothing back.
    let mut s = Segments::new(SEG, Some(KEEP_FROM - 1));
    assert!(s.reserve(&[1000; KEEP_FROM - 1], false).is_some());
    let mut s = Segments::new(SEG, None);
    assert!(s.reserve(&[1000; 64], false).is_some());
}

#[test]
fn a_failed_append_gives_everything_back() {
    let mut s = Segments::new(SEG, None);
    s.reserve(&[300], false).unwrap();
    let lens = [500, 600, 100];
    let res = s.reserve(&lens, false).unwrap();
    assert_eq!(res.offsets, [300, 1000, 1600]);
    assert!(
        s.unreserve(&res, &lens).is_empty(),
        "segment 0 keeps its first object"
    );
    assert_eq!((s.live_bytes(), s.file_bytes()), (300, SEG));
    assert_eq!(s.reserve(&[100], false).unwrap().offsets, [1000]);

    let mut s = Segments::new(SEG, None);
    let lens = [900, 900];
    let res = s.reserve(&lens, false).unwrap();
    assert_eq!(
        s.unreserve(&res, &lens),
        [0],
        "segment 0 is sealed and empty"
    );
    s.punched(0);
    assert_eq!((s.live_bytes(), s.file_bytes()), (0, 0));
}

#[test]
fn a_failed_append_in_the_open_segment_pulls_its_end_back() {
    let mut s = Segments::new(SEG, None);
    s.reserve(&[300], false).unwrap();
    let lens = [200, 100];
    let res = s.reserve(&lens, false).unwrap();
    assert!(s.unreserve(&res, &lens).is_empty());
    assert_eq!((s.live_bytes(), s.file_bytes()), (300, 300));
    assert_eq!(s.reserve(&[10], false).unwrap().offsets, [300]);
}

#[test]
#[should_panic(expected = "does not hold")]
fn freeing_what_is_not_there_is_a_bug() {
    let mut s = Segments::new(SEG, None);
    s.reserve(&[300], false).unwrap();
    s.release(0, 301);
}
