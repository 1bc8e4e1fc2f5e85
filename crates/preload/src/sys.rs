//! The shim's only `unsafe` code: the interposed `mmap`, `mmap64`, `munmap`, `mremap` and
//! `madvise`, the kernel's versions found with `dlsym(RTLD_NEXT, …)`, the constructor that
//! turns the shim on, the exit handler, and the signal mask of the control threads.
//!
//! # Safety
//!
//! Contract upheld here:
//! - Each interposed function has the C prototype of the libc function it replaces
//!   (`mremap`'s variadic fifth argument is taken as a plain pointer: on the Linux C ABIs
//!   it is passed as a fixed one would be, and it is only handed on, to the real
//!   `mremap`, declared variadic, which reads it only for `MREMAP_FIXED`/`MREMAP_DONTUNMAP`).
//! - A call the registry does not claim goes to the real function with its arguments
//!   unchanged, so the program sees the kernel's behaviour. A claimed `mmap` returns the
//!   first byte of a live uswap region of at least the requested length; the region stays
//!   mapped until the program unmaps all of it (or the process ends).
//! - Region memory is never unmapped or remapped here: partial `munmap`s only discard and
//!   `mprotect(PROT_NONE)` pages inside a region; a `MAP_FIXED` `mmap` or an `mremap`
//!   touching a region fails with `ENOMEM` before the kernel sees it.
//! - Calls made by the shim's own code come back here too: inside this library, the
//!   allocator's `libc::mmap` (zsmalloc's arenas), `munmap` and `madvise` bind to these
//!   definitions. They go straight to the real functions, never to the registry: a call
//!   is the shim's own when this thread is inside the shim (a [`Reentry`] is held) or is
//!   one of the threads regions, devices and the control socket start (named `uswap-…` or
//!   `zram-…`; a program thread named so is taken for one, and its calls pass through).
//! - No lock of the registry is held while calling into code that may come back here
//!   (making or dropping a region starts or joins threads, whose signal stacks Rust maps
//!   with `mmap`): see `registry`. Functions called before the constructor ran (another
//!   library's constructor) find the shim off and pass everything through.
//! - Function pointers from `dlsym` are stored only when non-null and are transmuted to
//!   the prototype of the symbol looked up.
//! - The inherited stats descriptor is used only if it is a pipe, through a close-on-exec
//!   copy made at load time, and only if that copy is still the same pipe at exit, so the
//!   figures never go to a file the program opened under the same number; it is written only by the process that read the settings,
//!   not a forked child (which has no regions and whose calls all pass through).

use std::cell::Cell;
use std::ffi::{CStr, c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, Ordering};

use libc::{off_t, size_t};

use crate::config::Settings;
use crate::control;
use crate::registry::{self, Plan};

type MmapFn = unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void;
type MunmapFn = unsafe extern "C" fn(*mut c_void, size_t) -> c_int;
type MadviseFn = unsafe extern "C" fn(*mut c_void, size_t, c_int) -> c_int;
type MremapFn = unsafe extern "C" fn(*mut c_void, size_t, size_t, c_int, ...) -> *mut c_void;

static REAL_MMAP: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static REAL_MMAP64: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static REAL_MUNMAP: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static REAL_MADVISE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static REAL_MREMAP: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// The process that read the settings (a forked child is another, and reports nothing).
static OWNER: AtomicU32 = AtomicU32::new(0);
/// This library's own copy of the stats descriptor (close-on-exec; -1: none).
static STATS_FD: AtomicI32 = AtomicI32::new(-1);
/// The stats pipe's (device, inode), to check at exit that the copy is still that pipe.
static STATS_PIPE: OnceLock<(u64, u64)> = OnceLock::new();

thread_local! {
    /// This thread is inside the shim's own code now.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
    /// 2 once this thread is known to be one of the shim's.
    static THREAD: Cell<u8> = const { Cell::new(0) };
}

/// Is this one of the threads the shim's regions, devices or control socket started? Only a
/// yes is remembered: a thread's first call may come before it has its name.
fn shim_thread() -> bool {
    if THREAD.with(Cell::get) == 2 {
        return true;
    }
    let mut name = [0u8; 17];
    // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL included, into the buffer.
    let rc = unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
    let ours = rc == 0 && (name.starts_with(b"uswap-") || name.starts_with(b"zram-"));
    if ours {
        THREAD.with(|t| t.set(2));
    }
    ours
}

/// Marks this thread as inside the shim until dropped, so that the calls the shim's code
/// makes pass straight through.
struct Reentry(bool);

impl Reentry {
    fn enter() -> Self {
        Self(INSIDE.with(|i| i.replace(true)))
    }
}

impl Drop for Reentry {
    fn drop(&mut self) {
        INSIDE.with(|i| i.set(self.0));
    }
}

/// The shim, for a call made by the program (`None`: pass it through), and the mark that
/// this thread is inside the shim while it handles the call. A forked child (no exec) is
/// not served: its copy of the registry names regions it has no mapping or threads of.
fn shim_for_program() -> Option<(&'static registry::Shim, Reentry)> {
    let shim = registry::active()?;
    if INSIDE.with(Cell::get)
        || shim_thread()
        || std::process::id() != OWNER.load(Ordering::Relaxed)
    {
        return None;
    }
    Some((shim, Reentry::enter()))
}

/// The next definition of `name` after this library's (libc's), cached in `slot`; null if
/// there is none.
fn next(slot: &AtomicPtr<c_void>, name: &CStr) -> *mut c_void {
    let p = slot.load(Ordering::Acquire);
    if !p.is_null() {
        return p;
    }
    // SAFETY: `name` is a NUL-terminated string; RTLD_NEXT looks the symbol up in the
    // libraries loaded after this one. A race stores the same pointer twice.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    slot.store(p, Ordering::Release);
    p
}

fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// The real `mmap` (or `mmap64`) with the program's arguments.
fn real_mmap(
    slot: &AtomicPtr<c_void>,
    name: &CStr,
    args: (*mut c_void, size_t, c_int, c_int, c_int, off_t),
) -> *mut c_void {
    let f = next(slot, name);
    if f.is_null() {
        set_errno(libc::ENOSYS);
        return libc::MAP_FAILED;
    }
    // SAFETY: `f` is libc's `mmap`/`mmap64`, of this prototype; the arguments are the
    // program's own, so the call is what it asked for.
    unsafe {
        let f: MmapFn = std::mem::transmute::<*mut c_void, MmapFn>(f);
        f(args.0, args.1, args.2, args.3, args.4, args.5)
    }
}

fn real_munmap(addr: usize, len: usize) -> c_int {
    let f = next(&REAL_MUNMAP, c"munmap");
    if f.is_null() {
        set_errno(libc::ENOSYS);
        return -1;
    }
    // SAFETY: libc's `munmap`; the range is the program's own request, or the part of it
    // outside every region (`registry::Plan::real`).
    unsafe { std::mem::transmute::<*mut c_void, MunmapFn>(f)(addr as *mut c_void, len) }
}

fn real_madvise(addr: usize, len: usize, advice: c_int) -> c_int {
    let f = next(&REAL_MADVISE, c"madvise");
    if f.is_null() {
        set_errno(libc::ENOSYS);
        return -1;
    }
    // SAFETY: libc's `madvise`, on the program's range or its part outside every region.
    unsafe { std::mem::transmute::<*mut c_void, MadviseFn>(f)(addr as *mut c_void, len, advice) }
}

/// Shared by `mmap` and `mmap64`.
fn map(
    slot: &AtomicPtr<c_void>,
    name: &CStr,
    args: (*mut c_void, size_t, c_int, c_int, c_int, off_t),
) -> *mut c_void {
    let (addr, len, prot, flags, fd, _) = args;
    if let Some((shim, _inside)) = shim_for_program() {
        if shim.wants(addr.is_null(), len, prot, flags, fd) {
            if let Some(p) = shim.serve(len) {
                return p.cast();
            }
        } else if flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE) != 0
            && shim.overlaps(addr as usize, len)
        {
            set_errno(libc::ENOMEM);
            return libc::MAP_FAILED;
        } else {
            shim.pass();
        }
    }
    real_mmap(slot, name, args)
}

/// `mmap(2)`, served by a uswap region when the shim wants it.
///
/// # Safety
///
/// As libc's `mmap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: off_t,
) -> *mut c_void {
    map(&REAL_MMAP, c"mmap", (addr, len, prot, flags, fd, offset))
}

/// `mmap64(2)` (the same as `mmap` on 64-bit targets).
///
/// # Safety
///
/// As libc's `mmap64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: off_t,
) -> *mut c_void {
    map(
        &REAL_MMAP64,
        c"mmap64",
        (addr, len, prot, flags, fd, offset),
    )
}

/// Applies `plan`'s kernel part with `f`; the first failure's result wins.
fn apply(plan: &Plan, f: impl Fn(usize, usize) -> c_int) -> c_int {
    plan.real
        .iter()
        .map(|&(a, b)| f(a, b - a))
        .fold(0, |rc, r| if rc == 0 { r } else { rc })
}

/// `munmap(2)`: a region unmapped whole is dropped; see `registry::Shim::unmap`.
///
/// # Safety
///
/// As libc's `munmap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    let a = addr as usize;
    let Some((shim, _inside)) =
        shim_for_program().filter(|_| a.is_multiple_of(uswap::sys::PAGE_SIZE) && len > 0)
    else {
        return real_munmap(a, len);
    };
    let plan = shim.unmap(a, len);
    for &(from, to) in &plan.hide {
        // SAFETY: pages inside a live region, already retired: no Rust reference reads
        // them (the region's threads never touch retired pages again).
        let _ = unsafe { libc::mprotect(from as *mut c_void, to - from, libc::PROT_NONE) };
    }
    if !plan.hide.is_empty() {
        shim.hidden(&plan.hide);
    }
    apply(&plan, real_munmap)
}

/// `madvise(2)`: discarding advice on region pages discards them in the region.
///
/// # Safety
///
/// As libc's `madvise`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    let a = addr as usize;
    let Some((shim, _inside)) =
        shim_for_program().filter(|_| a.is_multiple_of(uswap::sys::PAGE_SIZE))
    else {
        return real_madvise(a, len, advice);
    };
    let discards = matches!(
        advice,
        libc::MADV_DONTNEED | libc::MADV_FREE | libc::MADV_REMOVE
    );
    let plan = shim.advise(a, len, discards);
    apply(&plan, |from, n| real_madvise(from, n, advice))
}

/// `mremap(2)`: refused with `ENOMEM` when the old or (fixed) new range touches a region
/// (a region cannot move or grow); otherwise the kernel's.
///
/// # Safety
///
/// As libc's `mremap`; `new_address` is read only with `MREMAP_FIXED`/`MREMAP_DONTUNMAP`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_address: *mut c_void,
) -> *mut c_void {
    if let Some((shim, _inside)) = shim_for_program() {
        let fixed = flags & libc::MREMAP_FIXED != 0;
        if shim.overlaps(old as usize, old_len.max(1))
            || (fixed && shim.overlaps(new_address as usize, new_len.max(1)))
        {
            set_errno(libc::ENOMEM);
            return libc::MAP_FAILED;
        }
    }
    let f = next(&REAL_MREMAP, c"mremap");
    if f.is_null() {
        set_errno(libc::ENOSYS);
        return libc::MAP_FAILED;
    }
    // SAFETY: libc's `mremap`, declared variadic as it is, with the program's arguments.
    unsafe {
        std::mem::transmute::<*mut c_void, MremapFn>(f)(old, old_len, new_len, flags, new_address)
    }
}

/// Writes all of `bytes` to descriptor `fd`; gives up on an error.
fn write_fd(fd: c_int, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: writes from a live buffer of `bytes.len()` bytes to a descriptor this
        // library does not own or close.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        match n {
            n if n > 0 => bytes = &bytes[n.unsigned_abs().min(bytes.len())..],
            -1 if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => return,
        }
    }
}

/// At exit: the figures, one JSON line, on the stats descriptor.
extern "C" fn at_exit() {
    let Some(shim) = registry::active() else {
        return;
    };
    let pid = std::process::id();
    if OWNER.load(Ordering::Relaxed) != pid {
        return;
    }
    let _inside = Reentry::enter();
    let fd = STATS_FD.load(Ordering::Relaxed);
    // Still the pipe it was (a program that closes every descriptor may have reused it).
    if fd >= 0 && pipe_id(fd).is_some_and(|id| STATS_PIPE.get() == Some(&id)) {
        write_fd(fd, &shim.report(pid).line());
    }
}

/// The pipe `fd` is, as (device, inode); `None` if it is not a pipe.
fn pipe_id(fd: c_int) -> Option<(u64, u64)> {
    // SAFETY: `fstat` only fills the local structure.
    let st = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            return None;
        }
        st
    };
    (st.st_mode & libc::S_IFMT == libc::S_IFIFO).then_some((st.st_dev, st.st_ino))
}

/// A close-on-exec copy of the inherited stats descriptor `fd`, if it is a pipe, and the
/// pipe's identity: the program may close or reuse `fd` itself (the figures must never
/// land in one of its files), and the original stays open for the programs it starts.
fn private_stats_fd(fd: c_int) -> Option<(c_int, (u64, u64))> {
    let id = pipe_id(fd)?;
    // SAFETY: makes a new descriptor, which this library owns and never closes.
    let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    (copy >= 0).then_some((copy, id))
}

/// Starts `f` on a thread with every signal blocked (the mask is set before the thread
/// starts, so no signal can reach it in between, and its own threads inherit it).
fn spawn_blocked(name: &str, f: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    // SAFETY: `sigfillset` and `pthread_sigmask` only read and write the local sets and
    // the calling thread's own mask, which is restored before returning.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let r = std::thread::Builder::new().name(name.into()).spawn(f);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        r.map(drop)
    }
}

/// Binds the control socket (see `control::bind`) and serves it on a thread.
fn listen(shim: &'static registry::Shim) {
    let Some(path) = shim.settings().control.clone() else {
        return;
    };
    let listener = match control::bind(&path) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("zramd run: no control socket at {}: {e}", path.display());
            return;
        }
    };
    let started = spawn_blocked("uswap-listen", move || {
        control::serve(&listener, move || shim.report(std::process::id()));
    });
    if let Err(e) = started {
        eprintln!("zramd run: no control socket: {e}");
    }
}

/// Turns the shim on in a process started with the settings in its environment.
extern "C" fn init() {
    let settings = match Settings::from_vars(|k| std::env::var(k).ok()) {
        Ok(Some(s)) => s,
        Ok(None) => return,
        Err(e) => {
            eprintln!("zramd run: {e}; serving no mapping");
            return;
        }
    };
    let _inside = Reentry::enter();
    OWNER.store(std::process::id(), Ordering::Relaxed);
    if let Some((fd, id)) = settings.stats_fd.and_then(private_stats_fd) {
        let _ = STATS_PIPE.set(id);
        STATS_FD.store(fd, Ordering::Relaxed);
    }
    let shim = registry::init(settings);
    // SAFETY: registers a function of this library, which stays loaded until exit.
    if unsafe { libc::atexit(at_exit) } != 0 {
        eprintln!("zramd run: cannot register the exit figures");
    }
    listen(shim);
}

/// Runs [`init`] when the library is loaded.
#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = init;
