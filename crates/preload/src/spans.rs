//! Address ranges as half-open `(start, end)` pairs: the parts of a request outside the
//! served regions, and the parts of a region the program has unmapped.

/// The parts of `start..end` that none of `taken` covers, in address order.
pub fn gaps(start: usize, end: usize, taken: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut taken: Vec<(usize, usize)> = taken
        .iter()
        .map(|&(s, e)| (s.max(start), e.min(end)))
        .filter(|&(s, e)| s < e)
        .collect();
    taken.sort_unstable();
    let mut out = Vec::new();
    let mut at = start;
    for (s, e) in taken {
        if s > at {
            out.push((at, s));
        }
        at = at.max(e);
    }
    if at < end {
        out.push((at, end));
    }
    out
}

/// Adds `start..end` to `set` (sorted, disjoint, merged).
pub fn add(set: &mut Vec<(usize, usize)>, start: usize, end: usize) {
    if start >= end {
        return;
    }
    set.push((start, end));
    set.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(set.len());
    for &(s, e) in set.iter() {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    *set = merged;
}

/// Does `set` (as [`add`] keeps it) cover all of `0..len`?
pub fn covers(set: &[(usize, usize)], len: usize) -> bool {
    len == 0 || set.first().is_some_and(|&(s, e)| s == 0 && e >= len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_leave_out_what_is_taken() {
        assert_eq!(gaps(0, 100, &[]), vec![(0, 100)]);
        assert_eq!(
            gaps(0, 100, &[(10, 20), (50, 200)]),
            vec![(0, 10), (20, 50)]
        );
        assert_eq!(gaps(10, 20, &[(0, 15), (12, 30)]), vec![]);
        assert_eq!(gaps(0, 10, &[(20, 30)]), vec![(0, 10)]);
    }

    #[test]
    fn added_ranges_merge_until_they_cover() {
        let mut set = Vec::new();
        add(&mut set, 50, 100);
        assert!(!covers(&set, 100));
        add(&mut set, 0, 20);
        add(&mut set, 20, 30);
        assert_eq!(set, vec![(0, 30), (50, 100)]);
        add(&mut set, 25, 60);
        assert_eq!(set, vec![(0, 100)]);
        assert!(covers(&set, 100));
        assert!(!covers(&set, 101));
    }
}
