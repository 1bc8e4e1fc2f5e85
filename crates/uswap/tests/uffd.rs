//! The userfaultfd layer against the running kernel: missing faults served with copies and
//! zero pages, a timed read with nothing pending, `MADV_DONTNEED` re-faulting, `EEXIST`;
//! the pager's batched drop of scattered runs.

use std::io;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use uswap::sys::{Fault, Fill, Mapping, PAGE_SIZE, Uffd};

/// Longest any one test waits for faults before failing.
const DEADLINE: Duration = Duration::from_secs(10);

/// Opens a userfaultfd, or says why the kernel cannot give one (and the test is skipped).
fn uffd_or_skip() -> Option<Uffd> {
    match Uffd::new() {
        Ok(u) => {
            eprintln!("userfaultfd features: {:?}", u.features());
            Some(u)
        }
        Err(e)
            if [rustix::io::Errno::PERM, rustix::io::Errno::NOSYS]
                .iter()
                .any(|errno| e.raw_os_error() == Some(errno.raw_os_error())) =>
        {
            eprintln!("SKIPPED: userfaultfd unavailable: {e}");
            None
        }
        Err(e) => panic!("userfaultfd: {e}"),
    }
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..PAGE_SIZE)
        .map(|i| (i as u8).wrapping_mul(7) ^ seed)
        .collect()
}

/// Serves faults until `done` has a message or the deadline passes: page `copy_page`
/// gets `src`, any other page a zero page. Returns the faults seen and the message, or
/// `None` at the deadline. The faulting thread is never scoped to the test: if the test
/// fails, dropping its `Uffd` (also on unwinding) releases the blocked thread.
fn serve<T>(
    uffd: &Uffd,
    map_addr: usize,
    copy_page: usize,
    src: &[u8],
    done: &mpsc::Receiver<T>,
) -> Option<(Vec<Fault>, T)> {
    let start = Instant::now();
    let mut faults = Vec::new();
    while start.elapsed() < DEADLINE {
        if let Ok(v) = done.try_recv() {
            return Some((faults, v));
        }
        let Some(f) = uffd
            .read_fault(Duration::from_millis(50))
            .expect("read fault")
        else {
            continue;
        };
        faults.push(f);
        let page = (f.address as usize & !(PAGE_SIZE - 1)) - map_addr;
        let dst = map_addr + page;
        let fill = if page / PAGE_SIZE == copy_page {
            uffd.copy(dst, src, true).expect("copy")
        } else {
            uffd.zeropage(dst).expect("zeropage")
        };
        assert!(
            matches!(fill, Fill::Filled | Fill::Exists),
            "fill: {fill:?}"
        );
    }
    None
}

/// Serves faults for `thread`, then joins it; at the deadline drops the userfaultfd
/// (which releases the thread) and fails.
fn serve_and_join<T>(
    uffd: Uffd,
    map_addr: usize,
    copy_page: usize,
    src: &[u8],
    done: &mpsc::Receiver<T>,
    thread: std::thread::JoinHandle<Mapping>,
) -> (Uffd, Vec<Fault>, T, Mapping) {
    match serve(&uffd, map_addr, copy_page, src, done) {
        Some((faults, v)) => {
            let map = thread.join().expect("faulting thread");
            (uffd, faults, v, map)
        }
        None => {
            drop(uffd);
            let _ = thread.join();
            panic!("faulting thread did not finish within {DEADLINE:?}");
        }
    }
}

#[test]
fn missing_faults_are_served_by_copy_and_zeropage() {
    let Some(uffd) = uffd_or_skip() else { return };
    let mut map = Mapping::new(16).expect("mmap");
    let addr = map.addr();
    assert_eq!(map.len(), 16 * PAGE_SIZE);
    uffd.register(&map, 0, map.len(), false).expect("register");
    let src = pattern(0x5a);
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let mut seen = vec![0u8; PAGE_SIZE];
        map.read(5 * PAGE_SIZE, &mut seen).expect("read page 5");
        map.write(9 * PAGE_SIZE + 3, &[0xab; 8])
            .expect("write page 9");
        let mut after = vec![0u8; PAGE_SIZE];
        map.read(9 * PAGE_SIZE, &mut after).expect("read page 9");
        tx.send((seen, after)).expect("send");
        map
    });
    let (uffd, faults, (seen, after), map) = serve_and_join(uffd, addr, 5, &src, &rx, thread);
    assert_eq!(seen, src, "page 5 holds the copied bytes");
    let mut want9 = vec![0u8; PAGE_SIZE];
    want9[3..11].fill(0xab);
    assert_eq!(after, want9, "page 9: zero page, then the write");
    assert_eq!(faults.len(), 2, "one fault per page: {faults:?}");
    assert_eq!(faults[0].address as usize, addr + 5 * PAGE_SIZE);
    assert!(!faults[0].write);
    assert_eq!(faults[1].address as usize, addr + 9 * PAGE_SIZE);
    assert!(faults[1].write, "the write to page 9 is a write fault");
    // Nothing faults now: a timed read says so.
    assert_eq!(
        uffd.read_fault(Duration::from_millis(20)).expect("read"),
        None
    );
    // Page 5 is present: copying onto it is EEXIST, not an error or a panic.
    assert_eq!(
        uffd.copy(addr + 5 * PAGE_SIZE, &pattern(1), true)
            .expect("copy"),
        Fill::Exists
    );
    assert_eq!(
        uffd.zeropage(addr + 5 * PAGE_SIZE).expect("zeropage"),
        Fill::Exists
    );
    let mut again = vec![0u8; PAGE_SIZE];
    map.read(5 * PAGE_SIZE, &mut again).expect("read");
    assert_eq!(again, src, "EEXIST left the page as it was");
}

#[test]
fn timed_read_returns_none_without_faults() {
    let Some(uffd) = uffd_or_skip() else { return };
    let map = Mapping::new(4).expect("mmap");
    uffd.register(&map, 0, map.len(), false).expect("register");
    let t = Instant::now();
    assert_eq!(
        uffd.read_fault(Duration::from_millis(30)).expect("read"),
        None
    );
    assert!(t.elapsed() >= Duration::from_millis(25), "poll waited");
}

#[test]
fn dontneed_makes_a_page_fault_again() {
    let Some(uffd) = uffd_or_skip() else { return };
    let mut map = Mapping::new(16).expect("mmap");
    let addr = map.addr();
    uffd.register(&map, 0, map.len(), false).expect("register");
    let src = pattern(3);
    // Fill page 2 before anything touches it, then read it: no fault.
    assert_eq!(
        uffd.copy(addr + 2 * PAGE_SIZE, &src, true).expect("copy"),
        Fill::Filled
    );
    let mut buf = vec![0u8; PAGE_SIZE];
    map.read(2 * PAGE_SIZE, &mut buf).expect("read");
    assert_eq!(buf, src);
    assert_eq!(
        uffd.read_fault(Duration::from_millis(10)).expect("read"),
        None
    );
    map.madvise_dontneed(2 * PAGE_SIZE, PAGE_SIZE)
        .expect("dontneed");
    let src2 = pattern(9);
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let mut b = vec![0u8; PAGE_SIZE];
        map.read(2 * PAGE_SIZE, &mut b).expect("read");
        tx.send(b).expect("send");
        map
    });
    let (_uffd, faults, seen, _map) = serve_and_join(uffd, addr, 2, &src2, &rx, thread);
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0].address as usize, addr + 2 * PAGE_SIZE);
    assert_eq!(seen, src2, "the page came back through the handler");
}

#[test]
fn bad_ranges_are_errors() {
    let Some(uffd) = uffd_or_skip() else { return };
    let map = Mapping::new(2).expect("mmap");
    let e = uffd
        .register(&map, 0, 3 * PAGE_SIZE, false)
        .expect_err("past the end");
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let e = uffd
        .copy(map.addr() + 1, &pattern(0), true)
        .expect_err("unaligned");
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    // Not registered: the kernel refuses, as an error.
    assert!(uffd.zeropage(map.addr()).is_err());
    assert!(Mapping::new(0).is_err());
}

#[test]
fn write_protect_when_offered() {
    let Some(uffd) = uffd_or_skip() else { return };
    if !uffd.features().write_protect {
        eprintln!("SKIPPED: kernel offers no write-protect faults on anonymous memory");
        return;
    }
    let mut map = Mapping::new(4).expect("mmap");
    let addr = map.addr();
    uffd.register(&map, 0, map.len(), true)
        .expect("register missing+wp");
    assert_eq!(
        uffd.copy(addr, &pattern(4), true).expect("copy"),
        Fill::Filled
    );
    uffd.write_protect(addr, PAGE_SIZE, true).expect("protect");
    let (tx, rx) = mpsc::channel();
    let mut thread = Some(std::thread::spawn(move || {
        map.write(10, &[1, 2, 3]).expect("write");
        tx.send(()).expect("send");
        map
    }));
    let start = Instant::now();
    let mut fault = None;
    let mut map = None;
    while start.elapsed() < DEADLINE {
        if rx.try_recv().is_ok() {
            map = thread.take().map(|t| t.join().expect("writer"));
            break;
        }
        if let Some(f) = uffd.read_fault(Duration::from_millis(50)).expect("read") {
            fault = Some(f);
            uffd.write_protect(addr, PAGE_SIZE, false)
                .expect("unprotect");
        }
    }
    let Some(map) = map else {
        drop(uffd);
        let _ = thread.take().map(std::thread::JoinHandle::join);
        panic!("write-protected writer did not finish within {DEADLINE:?}");
    };
    let f = fault.expect("a write-protect fault");
    assert!(f.wp && f.write, "{f:?}");
    let mut b = [0u8; 3];
    map.read(10, &mut b).expect("read");
    assert_eq!(b, [1, 2, 3]);
}

/// The pager's batched drop (`process_madvise`, or one `madvise` per run) drops exactly the
/// pages of the runs it is given, scattered or not, and no other. No userfaultfd involved:
/// a dropped page of a plain mapping reads back as zeroes.
#[test]
fn discard_runs_drops_exactly_the_given_runs() {
    let pages = 16;
    let mut map = Mapping::new(pages).expect("mmap");
    for p in 0..pages {
        map.write(p * PAGE_SIZE, &pattern(p as u8)).expect("write");
    }
    let pager = map.pager();
    let runs = [(1, 1), (3, 2), (8, 1), (15, 1)];
    pager.discard_runs(&runs).expect("discard runs");
    pager.discard_runs(&[(10, 1)]).expect("one run");
    pager.discard_runs(&[]).expect("no run");
    let dropped = |p: usize| runs.iter().any(|&(f, n)| (f..f + n).contains(&p)) || p == 10;
    let mut buf = vec![0u8; PAGE_SIZE];
    for p in 0..pages {
        map.read(p * PAGE_SIZE, &mut buf).expect("read");
        if dropped(p) {
            assert!(buf.iter().all(|&b| b == 0), "page {p} was not dropped");
        } else {
            assert_eq!(buf, pattern(p as u8), "page {p} lost its bytes");
        }
    }
    let e = pager
        .discard_runs(&[(2, 1), (pages, 1)])
        .expect_err("past the end");
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
}
