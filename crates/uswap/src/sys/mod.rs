//! The only module of this crate with `unsafe` code: anonymous mappings, the userfaultfd
//! that serves their missing pages (`userfaultfd(2)`, `ioctl_userfaultfd(2)`), the SIGBUS
//! handler that serves them in the faulting thread, and the signal mask of the crate's
//! threads.
//!
//! The uapi structures, ioctl numbers and flag values come from `linux-raw-sys`
//! (`linux/userfaultfd.h`, generated), except `UFFDIO_WRITEPROTECT_MODE_WP`, which it lacks
//! and which is declared in `uffd.rs` with the header's value. Calls go through `rustix`
//! (`mmap`, `mprotect`, `madvise`, `poll`, `read`, `ioctl`) and `libc` (`mincore`,
//! `pthread_sigmask`, which rustix lacks); nothing here panics on a failed syscall: every
//! failure is an [`std::io::Error`].
//!
//! # Safety
//!
//! Contract upheld here, relied on by the rest of the crate (which is `unsafe`-free):
//! - A [`Mapping`] is one private anonymous `mmap` of whole pages (plus, for a region, one
//!   inaccessible guard page after it), unmapped exactly once, when the last of the
//!   `Mapping` and its [`Pager`]s is dropped, and never remapped while it lives. So no
//!   address any of them hands to the kernel can belong to another mapping.
//! - Program bytes are reached only through methods: reads (`&self`) copy out; writes need
//!   `&mut Mapping` or a [`Span`] (made by [`Mapping::split_mut`]: disjoint ranges, each
//!   borrowing the mapping mutably), so no two threads race on the same bytes through this
//!   module's program-side methods.
//! - A [`Pager`] (the fault handler's and evictor's view) never writes program bytes. It
//!   reads a page only in [`Pager::snapshot`], *after* write-protecting it through the
//!   userfaultfd in the same call: once `UFFDIO_WRITEPROTECT` has returned, every store to
//!   the page blocks in the kernel until it is unprotected or dropped, so the copy cannot
//!   race a writer; pages `mincore` reports absent are not read (reading them would fault
//!   on the caller's own userfaultfd), and the copy goes through `process_vm_readv`, so a
//!   page the program made inaccessible is an error to report, not a signal. Its other calls change what the next access faults
//!   on (`MADV_DONTNEED`, `mprotect(PROT_NONE)`), never bytes a Rust reference can see:
//!   a dropped page faults and is filled again by the handler with the bytes it had.
//! - A [`Uffd`] owns its file descriptor; a range is registered with it only through
//!   [`Uffd::register`], which takes a `&Mapping`, so every registered range lies inside a
//!   live mapping (unmapping unregisters it in the kernel).
//! - The range ioctls ([`Uffd::copy`], [`Uffd::zeropage`], [`Uffd::write_protect`],
//!   [`Uffd::wake`]) take plain addresses: the kernel acts only on ranges registered with
//!   this descriptor and rejects anything else (`EINVAL`/`ENOENT`). `UFFDIO_COPY` and
//!   `UFFDIO_ZEROPAGE` only ever fill *missing* pages (a present page gives `EEXIST` and is
//!   left as it was), write-protection changes no byte, and waking resumes a blocked thread:
//!   none of them changes memory a Rust reference may be reading. The source of a copy is a
//!   borrowed `&[u8]` of at least one page, read by the kernel during the call only.
//! - The SIGBUS handler (`signal`) reads only the registry's atomics and calls a
//!   registered [`InThread`] server for an address inside its range; a server is freed only
//!   after its registration is dropped and no handler is inside it. It saves and restores
//!   `errno`, and hands every other SIGBUS to the action it replaced. What a server does in
//!   the faulting thread is safe Rust bound by the trait's contract (no unwinding out, no
//!   wait on what the faulting thread may hold).
//! - Each ioctl is given the argument structure its uapi number names (one wrapper per
//!   number), and reading the descriptor fills a byte buffer parsed field by field.

use std::io;

use linux_raw_sys::general as uapi;

mod mapping;
mod signal;
mod uffd;

pub use mapping::{Mapping, Pager, Snap, Span};
pub use signal::{Access, InThread, Registration, register as serve_in_thread};
pub use uffd::{Fault, Features, Fill, MAX_BATCH, Uffd};

/// Bytes in one page (x86-64 and the other 4 KiB-page targets this crate runs on).
pub const PAGE_SIZE: usize = 4096;

/// Checks that `start..start+len` is whole pages and returns the uapi range.
fn page_range(start: usize, len: usize) -> io::Result<uapi::uffdio_range> {
    if !start.is_multiple_of(PAGE_SIZE) || !len.is_multiple_of(PAGE_SIZE) || len == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("range {start:#x}+{len:#x} is not whole pages"),
        ));
    }
    start
        .checked_add(len)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "range wraps around"))?;
    Ok(uapi::uffdio_range {
        start: start as u64,
        len: len as u64,
    })
}

/// Blocks every blockable signal in the calling thread, so that the program's signals go
/// to its own threads, never to the region's handler threads.
pub fn block_signals() -> io::Result<()> {
    // SAFETY: `sigfillset` and `pthread_sigmask` only read and write the local set; the
    // calling thread's mask is its own to change.
    let rc = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut())
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// Lowers the calling thread's scheduling priority to `nice` (Linux applies `nice` per
/// thread): for the evictor, so that when CPUs are short the fault handlers and the program
/// run first and eviction takes the idle time.
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    // SAFETY: `gettid` has no preconditions; `setpriority` on this thread's own id only
    // changes its scheduling priority.
    let rc = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Puts the calling thread in the `SCHED_IDLE` policy: it runs only when nothing else
/// wants the CPU, and any other thread that wakes takes the CPU from it at once (with only
/// a lower `nice`, a woken thread may wait for the scheduler's next decision).
pub fn set_thread_idle() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `sched_setscheduler` on thread id 0 (the caller) reads `param` during the call
    // and only changes the caller's scheduling policy.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The CPU the calling thread runs on now (it may move at any time unless pinned).
pub fn current_cpu() -> usize {
    rustix::thread::sched_getcpu()
}

/// Pins the calling thread to CPU `cpu`.
pub fn pin_thread(cpu: usize) -> io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set)?;
    Ok(())
}
