//! Out of memory alike on every allocator: with the process's address space capped
//! (`RLIMIT_AS`), filling an allocator ends in `Error::OutOfMemory` — never a panic or an
//! abort — with everything stored before still readable; freeing lets allocation go on;
//! dropping the allocator gives its address space back for the next one. One test in the
//! file: the cap is the whole process's.

use zsmalloc::{Allocator, Error, Handle, PoolConfig, open};

const MIB: usize = 1 << 20;

/// The process's address space in bytes (`/proc/self/statm`, first field, in pages).
fn address_space() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: usize = statm
        .split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .expect("size in statm");
    pages * 4096
}

/// Caps the process's address space at `bytes` (`RLIM_INFINITY` lifts the cap).
#[expect(unsafe_code, reason = "setrlimit has no safe wrapper in libc")]
fn cap_address_space(bytes: libc::rlim_t) {
    let limit = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct we pass and nothing else.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) };
    assert_eq!(rc, 0, "setrlimit: {}", std::io::Error::last_os_error());
}

fn bytes_of(i: usize, size: usize) -> impl Iterator<Item = u8> {
    (0..size).map(move |k| (i.wrapping_mul(31) + k) as u8)
}

#[test]
fn out_of_memory_is_an_error_on_every_allocator() {
    // Everything the test keeps is allocated before the cap.
    let mut handles: Vec<(Handle, usize)> = Vec::with_capacity(1 << 20);
    let mut buf = vec![0u8; 4096];
    let mut seen: Vec<String> = Vec::with_capacity(8);
    for allocator in Allocator::ALL {
        let backend = open(PoolConfig {
            allocator,
            page_cache_pages: 0,
            ..PoolConfig::default()
        })
        .unwrap();
        handles.clear();
        // Room for a few hundred MiB of objects, whatever each allocator reserves at once.
        cap_address_space((address_space() + 600 * MIB) as libc::rlim_t);
        let mut refused = None;
        for i in 0..handles.capacity() {
            let size = 1500 + (i * 97) % 2500;
            match backend.malloc(size) {
                Ok(h) => {
                    for (b, v) in buf[..size].iter_mut().zip(bytes_of(i, size)) {
                        *b = v;
                    }
                    backend.write(h, &buf[..size]).unwrap();
                    handles.push((h, size));
                }
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        // Free half, then allocation goes on.
        let mut freed = 0;
        for (h, _) in handles.iter().skip(1).step_by(2) {
            backend.free(*h).unwrap();
            freed += 1;
        }
        let again = backend.malloc(3000);
        cap_address_space(libc::RLIM_INFINITY);
        let e = refused.unwrap_or_else(|| panic!("{allocator}: never ran out"));
        assert!(matches!(e, Error::OutOfMemory(_)), "{allocator}: {e}");
        assert!(
            handles.len() > 10_000,
            "{allocator}: only {} objects",
            handles.len()
        );
        again.unwrap_or_else(|e| panic!("{allocator}: after freeing {freed}: {e}"));
        for (i, (h, size)) in handles.iter().enumerate().step_by(2) {
            backend.read(*h, &mut buf[..*size]).unwrap();
            assert!(
                buf[..*size].iter().copied().eq(bytes_of(i, *size)),
                "{allocator}: object {i} changed"
            );
        }
        backend.check_invariants().unwrap();
        seen.push(format!("{allocator}: {} objects, then {e}", handles.len()));
    }
    for line in &seen {
        println!("{line}");
    }
}
