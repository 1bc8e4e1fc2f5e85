//! Threads racing malloc, write, read and free on one backend (bounded loops), each checking
//! that its objects always read back what it wrote.

use zsmalloc::{Backend, Handle};

/// The bytes thread `t` writes into its `i`-th object of `len` bytes.
fn pattern(t: usize, i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (t * 31 + i * 7 + k) as u8 ^ (len as u8))
        .collect()
}

/// `threads` threads each allocate, fill and check objects, keeping up to 32 live and
/// freeing the oldest, `iters` times; `compact` also compacts now and then. Everything is
/// freed at the end; the backend's invariants must hold and it must hold nothing.
pub fn churn(b: &dyn Backend, threads: usize, iters: usize, compact: bool) {
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let mut live: Vec<(Handle, Vec<u8>)> = Vec::new();
                for i in 0..iters {
                    let len = 1 + (i * 997 + t * 131) % 4096;
                    let h = b.malloc(len).unwrap();
                    let data = pattern(t, i, len);
                    b.write(h, &data).unwrap();
                    live.push((h, data));
                    if live.len() > 32 {
                        let (h, data) = live.remove(0);
                        let mut out = vec![0u8; data.len()];
                        b.read(h, &mut out).unwrap();
                        assert!(out == data, "thread {t}: object {h} changed");
                        b.free(h).unwrap();
                    }
                    if compact && i % 64 == 0 {
                        b.compact();
                    }
                    let (h, data) = &live[i % live.len()];
                    b.read_with(*h, data.len(), &mut |bytes| {
                        assert!(bytes == &data[..], "thread {t}: object {h} changed")
                    })
                    .unwrap();
                }
                for (h, data) in live {
                    let mut out = vec![0u8; data.len()];
                    b.read(h, &mut out).unwrap();
                    assert!(out == data, "thread {t}: object {h} changed");
                    b.free(h).unwrap();
                }
            });
        }
    });
    b.check_invariants().unwrap();
    assert_eq!(b.objects(), 0);
    b.trim();
    assert_eq!(b.total_pages(), 0);
}
