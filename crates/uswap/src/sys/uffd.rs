//! The userfaultfd: handshake, registration, fills, write-protection, wakes and fault reads.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use linux_raw_sys::general as uapi;
use linux_raw_sys::ioctl as nr;
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::ioctl::{Opcode, Updater};
use rustix::mm::UserfaultfdFlags;

use super::{Mapping, PAGE_SIZE, page_range};

/// `UFFDIO_WRITEPROTECT_MODE_WP` (`linux/userfaultfd.h`: `(1 << 0)`), absent from linux-raw-sys.
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;

/// Size of `struct uffd_msg`, the unit read from a userfaultfd.
const MSG_SIZE: usize = size_of::<uapi::uffd_msg>();
const _: () = assert!(MSG_SIZE == 32, "struct uffd_msg is 32 bytes in the uapi");

/// An ioctl number from linux-raw-sys as rustix's opcode type (`c_uint` or `c_ulong`).
const fn op(number: u32) -> Opcode {
    number as Opcode
}

/// Features the kernel offers and this descriptor enabled (`UFFDIO_API`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// Every `UFFD_FEATURE_*` bit the kernel offers.
    pub offered: u64,
    /// The bits requested and enabled on this descriptor.
    pub enabled: u64,
    /// Write-protect faults on anonymous memory (`UFFD_FEATURE_PAGEFAULT_FLAG_WP`) enabled.
    pub write_protect: bool,
    /// Faults raise SIGBUS in the faulting thread instead of waiting (`UFFD_FEATURE_SIGBUS`).
    pub sigbus: bool,
    /// Created with `UFFD_USER_MODE_ONLY` (the kernel refused a full descriptor).
    pub user_mode_only: bool,
}

/// How one `UFFDIO_COPY` or `UFFDIO_ZEROPAGE` ended, short of an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// The page was filled (and the faulting threads woken unless asked not to).
    Filled,
    /// The page was already present (`EEXIST`): another fill or a write got there first.
    Exists,
    /// The mapping changed under the call (`EAGAIN`); `done` bytes were filled. Retry.
    Again {
        /// Bytes filled before the kernel stopped.
        done: u64,
    },
}

/// One page fault read from a userfaultfd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// The faulting address (page-aligned unless `UFFD_FEATURE_EXACT_ADDRESS`).
    pub address: u64,
    /// The fault was a write (`UFFD_PAGEFAULT_FLAG_WRITE`).
    pub write: bool,
    /// The fault was on a write-protected page (`UFFD_PAGEFAULT_FLAG_WP`).
    pub wp: bool,
}

/// A userfaultfd: faults on its registered ranges wait for this process to resolve them.
#[derive(Debug)]
pub struct Uffd {
    fd: OwnedFd,
    features: Features,
}

/// Issues one userfaultfd ioctl whose argument is updated in place.
///
/// # Safety
///
/// `T` must be the argument structure that uapi number `OP` names.
unsafe fn uffd_ioctl<const OP: Opcode, T>(fd: BorrowedFd<'_>, arg: &mut T) -> io::Result<()> {
    // SAFETY: the caller pairs `OP` with its structure; `arg` is a live exclusive borrow.
    unsafe { rustix::ioctl::ioctl(fd, Updater::<OP, T>::new(arg)) }?;
    Ok(())
}

/// Opens a userfaultfd (non-blocking, close-on-exec), falling back to user-mode-only
/// faults where the kernel refuses a full one (`vm.unprivileged_userfaultfd = 0`).
fn open_fd() -> io::Result<(OwnedFd, bool)> {
    let flags = UserfaultfdFlags::CLOEXEC | UserfaultfdFlags::NONBLOCK;
    // SAFETY: creating a descriptor affects no memory; it is owned by the `OwnedFd`.
    match unsafe { rustix::mm::userfaultfd(flags) } {
        Ok(fd) => Ok((fd, false)),
        Err(rustix::io::Errno::PERM) => {
            let user = flags | UserfaultfdFlags::from_bits_retain(uapi::UFFD_USER_MODE_ONLY);
            // SAFETY: as above.
            let fd = unsafe { rustix::mm::userfaultfd(user) }?;
            Ok((fd, true))
        }
        Err(e) => Err(e.into()),
    }
}

/// The `UFFDIO_API` handshake, asking for `features`; returns what the kernel offers.
fn handshake(fd: BorrowedFd<'_>, features: u64) -> io::Result<u64> {
    let mut api = uapi::uffdio_api {
        api: u64::from(uapi::UFFD_API),
        features,
        ioctls: 0,
    };
    // SAFETY: `UFFDIO_API` takes a `struct uffdio_api`.
    unsafe { uffd_ioctl::<{ op(nr::UFFDIO_API) }, _>(fd, &mut api) }?;
    Ok(api.features)
}

impl Uffd {
    /// Opens a userfaultfd for missing faults, with write-protect faults if offered: faults
    /// wait, queued on the descriptor, until a reader serves them.
    pub fn new() -> io::Result<Self> {
        Self::open(false)
    }

    /// Opens a userfaultfd, with write-protect faults if offered, whose faults are not
    /// queued: the faulting thread gets SIGBUS instead (`UFFD_FEATURE_SIGBUS`), and a system
    /// call that meets a missing page fails with `EFAULT`. For faults served in the faulting
    /// thread (`signal`).
    pub fn with_sigbus() -> io::Result<Self> {
        Self::open(true)
    }

    fn open(sigbus: bool) -> io::Result<Self> {
        // The handshake is once per descriptor: probe what is offered on a throwaway one.
        let offered = {
            let (probe, _) = open_fd()?;
            handshake(probe.as_fd(), 0)?
        };
        let wp = u64::from(uapi::UFFD_FEATURE_PAGEFAULT_FLAG_WP);
        let bus = u64::from(uapi::UFFD_FEATURE_SIGBUS);
        if sigbus && offered & bus == 0 {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the kernel offers no UFFD_FEATURE_SIGBUS",
            ));
        }
        let wanted = offered & wp | if sigbus { bus } else { 0 };
        let (fd, user_mode_only) = open_fd()?;
        handshake(fd.as_fd(), wanted)?;
        Ok(Self {
            fd,
            features: Features {
                offered,
                enabled: wanted,
                write_protect: wanted & wp != 0,
                sigbus,
                user_mode_only,
            },
        })
    }

    /// What the kernel offered and what this descriptor enabled.
    pub fn features(&self) -> Features {
        self.features
    }

    /// Registers pages `offset..offset+len` of `mapping` for missing faults, and for
    /// write-protect faults too when `wp` (which needs [`Features::write_protect`]).
    /// Returns the bitmask of range ioctls the kernel allows there (`1 << _UFFDIO_*`).
    pub fn register(
        &self,
        mapping: &Mapping,
        offset: usize,
        len: usize,
        wp: bool,
    ) -> io::Result<u64> {
        mapping.check(offset, len)?;
        let range = page_range(mapping.addr() + offset, len)?;
        let mut mode = u64::from(uapi::UFFDIO_REGISTER_MODE_MISSING);
        if wp {
            mode |= u64::from(uapi::UFFDIO_REGISTER_MODE_WP);
        }
        let mut reg = uapi::uffdio_register {
            range,
            mode,
            ioctls: 0,
        };
        // SAFETY: `UFFDIO_REGISTER` takes a `struct uffdio_register`; the range lies in a
        // live mapping (module contract).
        unsafe { uffd_ioctl::<{ op(nr::UFFDIO_REGISTER) }, _>(self.fd.as_fd(), &mut reg) }?;
        Ok(reg.ioctls)
    }

    /// Fills the missing page at `dst` with the first page of `src` (`UFFDIO_COPY`),
    /// waking the threads faulting on it when `wake`.
    pub fn copy(&self, dst: usize, src: &[u8], wake: bool) -> io::Result<Fill> {
        let range = page_range(dst, PAGE_SIZE)?;
        if src.len() < PAGE_SIZE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "source is under a page",
            ));
        }
        let mode = if wake {
            0
        } else {
            u64::from(uapi::UFFDIO_COPY_MODE_DONTWAKE)
        };
        let mut arg = uapi::uffdio_copy {
            dst: range.start,
            src: src.as_ptr() as u64,
            len: range.len,
            mode,
            copy: 0,
        };
        // SAFETY: `UFFDIO_COPY` takes a `struct uffdio_copy`; `src` is a live page the kernel
        // only reads during the call, `dst` only fills a missing registered page.
        let res = unsafe { uffd_ioctl::<{ op(nr::UFFDIO_COPY) }, _>(self.fd.as_fd(), &mut arg) };
        fill_result(res, arg.copy)
    }

    /// Maps the shared zero page at the missing page `dst` (`UFFDIO_ZEROPAGE`), waking the
    /// faulting threads.
    pub fn zeropage(&self, dst: usize) -> io::Result<Fill> {
        let range = page_range(dst, PAGE_SIZE)?;
        let mut arg = uapi::uffdio_zeropage {
            range,
            mode: 0,
            zeropage: 0,
        };
        // SAFETY: `UFFDIO_ZEROPAGE` takes a `struct uffdio_zeropage`; it fills only a
        // missing registered page.
        let res =
            unsafe { uffd_ioctl::<{ op(nr::UFFDIO_ZEROPAGE) }, _>(self.fd.as_fd(), &mut arg) };
        fill_result(res, arg.zeropage)
    }

    /// Write-protects (`on`) or unprotects `start..start+len` (`UFFDIO_WRITEPROTECT`);
    /// unprotecting wakes the threads blocked on it.
    pub fn write_protect(&self, start: usize, len: usize, on: bool) -> io::Result<()> {
        let range = page_range(start, len)?;
        let mode = if on { UFFDIO_WRITEPROTECT_MODE_WP } else { 0 };
        let mut arg = uapi::uffdio_writeprotect { range, mode };
        // SAFETY: `UFFDIO_WRITEPROTECT` takes a `struct uffdio_writeprotect`; it changes
        // protection only, no byte.
        unsafe { uffd_ioctl::<{ op(nr::UFFDIO_WRITEPROTECT) }, _>(self.fd.as_fd(), &mut arg) }
    }

    /// Wakes the threads blocked on faults in `start..start+len` (`UFFDIO_WAKE`), after
    /// fills made with `wake = false`.
    pub fn wake(&self, start: usize, len: usize) -> io::Result<()> {
        let mut range = page_range(start, len)?;
        // SAFETY: `UFFDIO_WAKE` takes a `struct uffdio_range`; waking changes no memory.
        unsafe { uffd_ioctl::<{ op(nr::UFFDIO_WAKE) }, _>(self.fd.as_fd(), &mut range) }
    }

    /// Waits up to `timeout` for one fault and reads it; `Ok(None)` when none came (or
    /// another reader took it). Events other than page faults are not enabled here and
    /// are reported as `InvalidData`.
    pub fn read_fault(&self, timeout: Duration) -> io::Result<Option<Fault>> {
        let mut out = Vec::with_capacity(1);
        self.read_faults(Some(timeout), 1, &mut out)?;
        Ok(out.pop())
    }

    /// Reads up to `max` pending faults into `out` (appended). With `timeout`, first waits up
    /// to that long for one to be pending; without, only takes what is pending now (one
    /// `read`, no `poll`: for spinning on the descriptor).
    pub fn read_faults(
        &self,
        timeout: Option<Duration>,
        max: usize,
        out: &mut Vec<Fault>,
    ) -> io::Result<()> {
        if let Some(timeout) = timeout {
            let ts = Timespec::try_from(timeout)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "timeout too long"))?;
            let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
            match rustix::event::poll(&mut fds, Some(&ts)) {
                Ok(0) | Err(rustix::io::Errno::INTR) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let mut buf = [0u8; MSG_SIZE * MAX_BATCH];
        let want = max.clamp(1, MAX_BATCH) * MSG_SIZE;
        let n = match rustix::io::read(&self.fd, &mut buf[..want]) {
            Ok(n) => n,
            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if n % MSG_SIZE != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("short uffd_msg: {n}"),
            ));
        }
        for msg in buf[..n].chunks_exact(MSG_SIZE) {
            let msg: &[u8; MSG_SIZE] = msg.try_into().map_err(|_| io::ErrorKind::InvalidData)?;
            out.push(parse_msg(msg)?);
        }
        Ok(())
    }
}

/// Most messages taken by one `read`.
pub const MAX_BATCH: usize = 16;

impl AsFd for Uffd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Turns a fill ioctl's outcome into a [`Fill`]: `EEXIST` and `EAGAIN` are results.
fn fill_result(res: io::Result<()>, done: i64) -> io::Result<Fill> {
    match res {
        Ok(()) => Ok(Fill::Filled),
        Err(e) => match rustix::io::Errno::from_io_error(&e) {
            Some(rustix::io::Errno::EXIST) => Ok(Fill::Exists),
            Some(rustix::io::Errno::AGAIN) => Ok(Fill::Again {
                done: u64::try_from(done).unwrap_or(0),
            }),
            _ => Err(e),
        },
    }
}

/// Parses a `struct uffd_msg` (packed): `event` at 0, then for a page fault `flags` at 8,
/// `address` at 16.
fn parse_msg(buf: &[u8; MSG_SIZE]) -> io::Result<Fault> {
    let word = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&buf[at..at + 8]);
        u64::from_ne_bytes(b)
    };
    if u32::from(buf[0]) != uapi::UFFD_EVENT_PAGEFAULT {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected userfaultfd event {:#x}", buf[0]),
        ));
    }
    let flags = word(8);
    Ok(Fault {
        address: word(16),
        write: flags & u64::from(uapi::UFFD_PAGEFAULT_FLAG_WRITE) != 0,
        wp: flags & u64::from(uapi::UFFD_PAGEFAULT_FLAG_WP) != 0,
    })
}
