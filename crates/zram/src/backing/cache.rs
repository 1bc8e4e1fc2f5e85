//! The file store's read-ahead cache: a few windows of the file, least recently used out.
//!
//! # Representation
//!
//! `windows` holds at most `capacity` windows, each bytes `[start, start + data.len())` of
//! the file as read (a window cut short by the end of the file is kept short). Windows may
//! overlap; they agree, since each is a copy of the file.
//!
//! # Staleness
//!
//! Whoever changes bytes of the file (an append writing, a free, a punch) calls
//! [`Cache::invalidate`] on them once the change is made; that drops the windows overlapping
//! them and bumps `generation`. A reader takes the generation before its read and inserts
//! its window only if it is unchanged: a window read while some change was under way is
//! never kept, and one kept before a change is dropped by it. (Any change anywhere stops the
//! insert: simple, and a lost insert costs only a later miss.)

/// One window of the file.
#[derive(Debug)]
struct Window {
    start: u64,
    data: Vec<u8>,
    /// When it was last used (the cache's clock).
    used: u64,
}

impl Window {
    fn end(&self) -> u64 {
        self.start + self.data.len() as u64
    }
}

/// The cache (see the module's doc).
#[derive(Debug)]
pub(super) struct Cache {
    capacity: usize,
    windows: Vec<Window>,
    clock: u64,
    generation: u64,
}

impl Cache {
    /// An empty cache of at most `capacity` windows.
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            windows: Vec::with_capacity(capacity),
            clock: 0,
            generation: 0,
        }
    }

    /// Copies the bytes at `offset` into `out` if one window holds them all.
    pub(super) fn get(&mut self, offset: u64, out: &mut [u8]) -> bool {
        let end = offset + out.len() as u64;
        let Some(w) = self
            .windows
            .iter_mut()
            .find(|w| w.start <= offset && end <= w.end())
        else {
            return false;
        };
        self.clock += 1;
        w.used = self.clock;
        let at = (offset - w.start) as usize;
        out.copy_from_slice(&w.data[at..at + out.len()]);
        true
    }

    /// The generation a reader takes before reading a window.
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// Keeps `data`, read at `start` when the generation was `generation`, unless something
    /// changed since; the least recently used window goes if the cache is full.
    pub(super) fn insert(&mut self, generation: u64, start: u64, data: Vec<u8>) {
        if generation != self.generation || self.capacity == 0 || data.is_empty() {
            return;
        }
        // Another reader may have read the same window meanwhile.
        self.windows.retain(|w| w.start != start);
        if self.windows.len() == self.capacity
            && let Some(oldest) = (0..self.windows.len()).min_by_key(|&i| self.windows[i].used)
        {
            self.windows.swap_remove(oldest);
        }
        self.clock += 1;
        self.windows.push(Window {
            start,
            data,
            used: self.clock,
        });
    }

    /// Forgets the bytes `[start, end)`: they changed.
    pub(super) fn invalidate(&mut self, start: u64, end: u64) {
        self.generation += 1;
        self.windows.retain(|w| w.end() <= start || end <= w.start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_only_inside_one_window() {
        let mut c = Cache::new(2);
        c.insert(c.generation(), 100, (0..50).collect());
        let mut out = [0u8; 10];
        assert!(c.get(110, &mut out));
        assert_eq!(out, [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]);
        assert!(c.get(140, &mut out));
        assert!(!c.get(141, &mut out), "past the window's end");
        assert!(!c.get(95, &mut out), "before its start");
    }

    #[test]
    fn least_recently_used_goes() {
        let mut c = Cache::new(2);
        c.insert(c.generation(), 0, vec![1; 10]);
        c.insert(c.generation(), 100, vec![2; 10]);
        let mut out = [0u8; 1];
        assert!(c.get(0, &mut out));
        c.insert(c.generation(), 200, vec![3; 10]);
        assert!(c.get(0, &mut out) && out == [1]);
        assert!(!c.get(100, &mut out));
        assert!(c.get(200, &mut out) && out == [3]);
    }

    #[test]
    fn changes_drop_windows_and_stop_reads_under_way() {
        let mut c = Cache::new(4);
        c.insert(c.generation(), 0, vec![1; 100]);
        c.insert(c.generation(), 100, vec![2; 100]);
        let before = c.generation();
        c.invalidate(150, 160);
        let mut out = [0u8; 1];
        assert!(c.get(50, &mut out), "no overlap");
        assert!(!c.get(100, &mut out), "overlaps");
        c.insert(before, 300, vec![3; 100]);
        assert!(!c.get(300, &mut out), "read before the change: not kept");
        c.invalidate(99, 100);
        assert!(!c.get(50, &mut out));
    }
}
