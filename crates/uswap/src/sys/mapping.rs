//! Anonymous mappings: the owner's view ([`Mapping`], [`Span`]) and the handler's
//! ([`Pager`]).

use std::io;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;

use rustix::mm::{Advice, MapFlags, MprotectFlags, ProtFlags};

use super::{PAGE_SIZE, Uffd, page_range};

/// The mapping itself, unmapped when the last holder drops it.
#[derive(Debug)]
struct Raw {
    base: NonNull<u8>,
    /// Usable bytes.
    len: usize,
    /// Mapped bytes: `len` plus the guard page, if any.
    mapped: usize,
}

// SAFETY: plain anonymous memory; byte access follows the module contract (owner-side
// writes are exclusive, the pager reads only write-protected pages), not thread identity.
unsafe impl Send for Raw {}
// SAFETY: as above: every method reachable through `&Raw` holders is a copy-out of bytes no
// one can be writing, or a kernel call.
unsafe impl Sync for Raw {}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `Mapping::map`, unmapped once, by its last
        // holder; no borrow of its bytes outlives the holders. An error cannot happen for a
        // valid mapping and is ignored rather than panicking.
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.mapped) };
    }
}

impl Raw {
    fn check(&self, offset: usize, len: usize) -> io::Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{offset:#x}+{len:#x} is outside a mapping of {:#x}",
                    self.len
                ),
            )),
        }
    }

    fn addr(&self) -> usize {
        self.base.as_ptr() as usize
    }

    fn advise(&self, offset: usize, len: usize, advice: Advice) -> io::Result<()> {
        page_range(offset, len)?;
        self.check(offset, len)?;
        // SAFETY: a page-aligned range inside this mapping; advice changes what the next
        // access faults on, never bytes a Rust reference can see (module contract).
        unsafe { rustix::mm::madvise(self.base.as_ptr().add(offset).cast(), len, advice) }?;
        Ok(())
    }

    /// Copies bytes out. The caller guarantees no one writes them meanwhile.
    fn copy_out(&self, offset: usize, buf: &mut [u8]) -> io::Result<()> {
        self.check(offset, buf.len())?;
        // SAFETY: in bounds (checked); per the module contract no write to these bytes is in
        // flight, and `buf` is a distinct Rust allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.base.as_ptr().add(offset),
                buf.as_mut_ptr(),
                buf.len(),
            );
        }
        Ok(())
    }

    /// Copies bytes in. The caller holds exclusive access to them.
    fn copy_in(&self, offset: usize, data: &[u8]) -> io::Result<()> {
        self.check(offset, data.len())?;
        // SAFETY: in bounds (checked); the caller's `&mut` (Mapping or Span) makes this the
        // only program-side access to the bytes, and the pager only reads write-protected
        // pages, whose stores block in the kernel.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.base.as_ptr().add(offset),
                data.len(),
            );
        }
        Ok(())
    }
}

/// A private anonymous mapping of whole pages, unmapped when it and its pagers are dropped.
#[derive(Debug)]
pub struct Mapping {
    raw: Arc<Raw>,
}

impl Mapping {
    /// Maps `pages` fresh pages, readable and writable, reading as zeroes until written.
    pub fn new(pages: usize) -> io::Result<Self> {
        Self::map(pages, false)
    }

    /// Maps `pages` fresh pages for a region: one inaccessible guard page follows them (a
    /// touch just past the end is a SIGSEGV, never someone else's memory), transparent huge
    /// pages are off (faults and fills are per 4 KiB page) and a forked child gets no copy
    /// (`MADV_DONTFORK`: its touches are SIGSEGV, rather than reading evicted pages as
    /// zeroes with no handler behind them).
    pub fn for_region(pages: usize) -> io::Result<Self> {
        let map = Self::map(pages, true)?;
        let len = map.raw.len;
        map.raw.advise(0, len, Advice::LinuxNoHugepage)?;
        map.raw.advise(0, len, Advice::LinuxDontFork)?;
        Ok(map)
    }

    fn map(pages: usize, guard: bool) -> io::Result<Self> {
        let len = pages
            .checked_mul(PAGE_SIZE)
            .filter(|&l| l > 0)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "bad page count"))?;
        let mapped = if guard {
            len.checked_add(PAGE_SIZE)
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "bad page count"))?
        } else {
            len
        };
        // SAFETY: a fresh private anonymous mapping at an address the kernel chooses; no
        // existing memory is affected.
        let ptr = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                mapped,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }?;
        let base = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
        let raw = Arc::new(Raw { base, len, mapped });
        if guard {
            // SAFETY: the last page of the mapping just made, which nothing references.
            unsafe {
                rustix::mm::mprotect(
                    base.as_ptr().add(len).cast(),
                    PAGE_SIZE,
                    MprotectFlags::empty(),
                )
            }?;
        }
        Ok(Self { raw })
    }

    /// First byte of the mapping, as an address for [`Uffd`] calls.
    pub fn as_ptr(&self) -> *const u8 {
        self.raw.base.as_ptr()
    }

    /// First byte of the mapping, for code outside Rust that owns the bytes (the preload
    /// shim hands it to the program as its mapping).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.raw.base.as_ptr()
    }

    /// First byte of the mapping as an integer address.
    pub fn addr(&self) -> usize {
        self.raw.addr()
    }

    /// Length in bytes (whole pages, the guard page not counted).
    pub fn len(&self) -> usize {
        self.raw.len
    }

    /// Always false: a mapping has at least one page.
    pub fn is_empty(&self) -> bool {
        self.raw.len == 0
    }

    /// Length in pages.
    pub fn pages(&self) -> usize {
        self.raw.len / PAGE_SIZE
    }

    pub(super) fn check(&self, offset: usize, len: usize) -> io::Result<()> {
        self.raw.check(offset, len)
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`. Touching a missing page of a
    /// registered range blocks this thread until a handler resolves the fault.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> io::Result<()> {
        // No `&mut self` or `Span` is alive while `&self` is, so no program write is in
        // flight; the pager writes nothing.
        self.raw.copy_out(offset, buf)
    }

    /// Copies `data` into the mapping at `offset` (may fault, as [`Mapping::read`]).
    pub fn write(&mut self, offset: usize, data: &[u8]) -> io::Result<()> {
        self.raw.copy_in(offset, data)
    }

    /// Drops the pages of `offset..offset+len` (`MADV_DONTNEED`): they are missing again,
    /// so the next touch faults (or reads zeroes where no userfaultfd is registered).
    pub fn madvise_dontneed(&mut self, offset: usize, len: usize) -> io::Result<()> {
        self.raw.advise(offset, len, Advice::LinuxDontNeed)
    }

    /// Splits the mapping into consecutive spans of `chunk` bytes (the last one shorter if
    /// need be), each writable on its own: hand them to different threads.
    pub fn split_mut(&mut self, chunk: usize) -> Vec<Span<'_>> {
        let chunk = chunk.max(1);
        (0..self.raw.len)
            .step_by(chunk)
            .map(|offset| Span {
                raw: &self.raw,
                offset,
                len: chunk.min(self.raw.len - offset),
                _exclusive: PhantomData,
            })
            .collect()
    }

    /// The handler's view of this mapping, keeping it mapped while it lives.
    pub fn pager(&self) -> Pager {
        Pager {
            raw: Arc::clone(&self.raw),
        }
    }
}

/// A part of a [`Mapping`] that one thread may read and write (offsets are relative to the
/// span).
#[derive(Debug)]
pub struct Span<'a> {
    raw: &'a Raw,
    offset: usize,
    len: usize,
    _exclusive: PhantomData<&'a mut Mapping>,
}

impl Span<'_> {
    /// Where the span starts in the mapping, bytes.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the span is empty (never: spans have at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, offset: usize, len: usize) -> io::Result<usize> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.offset + offset),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{offset:#x}+{len:#x} is outside a span of {:#x}", self.len),
            )),
        }
    }

    /// Copies bytes at `offset` of the span into `buf` (may fault).
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> io::Result<()> {
        let at = self.check(offset, buf.len())?;
        // Spans are disjoint and this one is borrowed shared: no write is in flight here.
        self.raw.copy_out(at, buf)
    }

    /// Copies `data` into the span at `offset` (may fault).
    pub fn write(&mut self, offset: usize, data: &[u8]) -> io::Result<()> {
        let at = self.check(offset, data.len())?;
        self.raw.copy_in(at, data)
    }
}

/// What [`Pager::snapshot`] did with one page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Snap {
    /// Copied out; it stays write-protected until dropped or unprotected.
    Copied,
    /// Not in the mapping: nothing to copy or protect.
    Absent,
    /// In the mapping, but the program made it unreadable (`mprotect`): not copied.
    Unreadable,
}

/// The fault handler's and evictor's view of a mapping: snapshots of write-protected pages,
/// dropping pages, and tearing the mapping down. Keeps the mapping mapped while it lives.
#[derive(Debug, Clone)]
pub struct Pager {
    raw: Arc<Raw>,
}

impl Pager {
    /// First byte of the mapping as an integer address.
    pub fn addr(&self) -> usize {
        self.raw.addr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.raw.len
    }

    /// Always false: a mapping has at least one page.
    pub fn is_empty(&self) -> bool {
        self.raw.len == 0
    }

    /// Write-protects pages `first..first+count` through `uffd` (their range must be
    /// registered for write-protect faults), then copies each one that is present into
    /// `out` (page `first + i` at `out[i * PAGE_SIZE..]`). Returns what became of each page.
    ///
    /// The copy goes through the kernel (`process_vm_readv` on this process), not a plain
    /// load: a page the program made unreadable itself (`mprotect(PROT_NONE)`) is reported
    /// [`Snap::Unreadable`] instead of faulting this thread.
    pub fn snapshot(
        &self,
        uffd: &Uffd,
        first: usize,
        count: usize,
        out: &mut [u8],
    ) -> io::Result<Vec<Snap>> {
        let (offset, len) = self.pages(first, count)?;
        if out.len() < len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "snapshot buffer too small",
            ));
        }
        uffd.write_protect(self.addr() + offset, len, true)?;
        let present = self.present(offset, count)?;
        let mut snaps: Vec<Snap> = present
            .iter()
            .map(|&p| if p { Snap::Copied } else { Snap::Absent })
            .collect();
        // Write-protected above and present: no store can land on these pages until they
        // are unprotected or dropped (module contract). Read them in as few calls as
        // possible; a call stops at the first page it cannot read.
        let mut i = 0;
        while i < count {
            if snaps[i] != Snap::Copied {
                i += 1;
                continue;
            }
            let run = snaps[i..]
                .iter()
                .take_while(|&&s| s == Snap::Copied)
                .count();
            let at = i * PAGE_SIZE;
            let read = self.read_via_kernel(offset + at, &mut out[at..at + run * PAGE_SIZE])?;
            let whole = read / PAGE_SIZE;
            if whole < run {
                snaps[i + whole] = Snap::Unreadable;
            }
            i += whole + 1;
        }
        Ok(snaps)
    }

    /// Copies mapping bytes at `offset` into `buf` (whole pages) through `process_vm_readv`
    /// on this process; returns the bytes read, short at the first page the program cannot
    /// read (one remote element per page: the call stops between elements, never inside).
    fn read_via_kernel(&self, offset: usize, buf: &mut [u8]) -> io::Result<usize> {
        self.raw.check(offset, buf.len())?;
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let remote: Vec<libc::iovec> = (0..buf.len() / PAGE_SIZE)
            .map(|i| libc::iovec {
                // SAFETY: in bounds (checked); only an address handed to the kernel.
                iov_base: unsafe { self.raw.base.as_ptr().add(offset + i * PAGE_SIZE) }.cast(),
                iov_len: PAGE_SIZE,
            })
            .collect();
        // SAFETY: `local` describes `buf`, which the kernel writes during the call only;
        // `remote` lies in this live mapping, read (not written) by the kernel. Runs are at
        // most an eviction batch, far under `IOV_MAX`.
        let n = unsafe {
            libc::process_vm_readv(
                libc::getpid(),
                &local,
                1,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EFAULT) {
            Ok(0)
        } else {
            Err(e)
        }
    }

    /// Whether page `page` is in the mapping (`mincore`).
    pub fn is_present(&self, page: usize) -> io::Result<bool> {
        let (offset, _) = self.pages(page, 1)?;
        Ok(self.present(offset, 1)?[0])
    }

    /// Which pages from `offset` are present (`mincore`).
    fn present(&self, offset: usize, count: usize) -> io::Result<Vec<bool>> {
        let mut vec = vec![0u8; count];
        // SAFETY: a page-aligned range inside the mapping (checked by the caller through
        // `pages`), and `vec` has one byte per page, as `mincore` writes.
        let rc = unsafe {
            libc::mincore(
                self.raw.base.as_ptr().add(offset).cast(),
                count * PAGE_SIZE,
                vec.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(vec.iter().map(|b| b & 1 != 0).collect())
    }

    /// Write-protects pages `first..first+count` (a writer then faults until
    /// [`Self::unprotect`]).
    pub fn protect(&self, uffd: &Uffd, first: usize, count: usize) -> io::Result<()> {
        let (offset, len) = self.pages(first, count)?;
        uffd.write_protect(self.addr() + offset, len, true)
    }

    /// Removes write-protection from pages `first..first+count`, waking blocked writers.
    pub fn unprotect(&self, uffd: &Uffd, first: usize, count: usize) -> io::Result<()> {
        let (offset, len) = self.pages(first, count)?;
        uffd.write_protect(self.addr() + offset, len, false)
    }

    /// Drops pages `first..first+count` (`MADV_DONTNEED`): the next touch faults.
    pub fn discard(&self, first: usize, count: usize) -> io::Result<()> {
        let (offset, len) = self.pages(first, count)?;
        self.raw.advise(offset, len, Advice::LinuxDontNeed)
    }

    /// Drops every run `(first, count)` of pages (`MADV_DONTNEED`) in one call where the
    /// kernel takes it, else one `madvise` per run ([`zsmalloc::sys::dont_need_ranges`]:
    /// one TLB shootdown for all of them on Linux 6.16+).
    pub fn discard_runs(&self, runs: &[(usize, usize)]) -> io::Result<()> {
        let mut ranges = Vec::with_capacity(runs.len());
        for &(first, count) in runs {
            let (offset, len) = self.pages(first, count)?;
            ranges.push((self.addr() + offset, len));
        }
        // SAFETY: in this live mapping (checked above); `MADV_DONTNEED` changes what the
        // next access faults on, never bytes a Rust reference can see (module contract).
        unsafe { zsmalloc::sys::dont_need_ranges(&ranges) }
    }

    /// Makes the whole mapping inaccessible (`PROT_NONE`): every later touch, and every
    /// blocked one once woken, is a SIGSEGV. For tearing a region down after its handler
    /// failed, so that no thread waits forever on a fault nobody will serve.
    pub fn poison(&self) -> io::Result<()> {
        // SAFETY: the mapping's own pages; protection changes no byte, and a Rust reader
        // that touches them afterwards gets a signal, not different bytes.
        unsafe {
            rustix::mm::mprotect(
                self.raw.base.as_ptr().cast(),
                self.raw.len,
                MprotectFlags::empty(),
            )
        }?;
        Ok(())
    }

    /// The byte range of pages `first..first+count`, checked to lie in the mapping.
    fn pages(&self, first: usize, count: usize) -> io::Result<(usize, usize)> {
        let bad = || io::Error::new(io::ErrorKind::InvalidInput, "page range overflows");
        let offset = first.checked_mul(PAGE_SIZE).ok_or_else(bad)?;
        let len = count.checked_mul(PAGE_SIZE).ok_or_else(bad)?;
        page_range(offset, len)?;
        self.raw.check(offset, len)?;
        Ok((offset, len))
    }
}
