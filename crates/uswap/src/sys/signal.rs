//! Faults served in the faulting thread: the process-wide SIGBUS handler and the registry of
//! the address ranges it serves.
//!
//! A userfaultfd opened with `UFFD_FEATURE_SIGBUS` ([`super::Uffd::with_sigbus`]) does not
//! queue its faults: the kernel raises SIGBUS (`BUS_ADRERR`, `si_addr` the faulting address)
//! in the thread that touched a missing or write-protected page. The handler installed here
//! looks the address up among the registered ranges and calls that range's [`InThread`]
//! server in the faulting thread, on its own stack; the server fills the page (or removes
//! the write-protection) through the userfaultfd and returns, and the thread retries the
//! access, which now succeeds. Addresses outside every range go to the handler this one
//! replaced (Rust's own, which reports stack overflows), or, where that was the default
//! action, the default action is restored so that the retried access ends the process as
//! it would have without us.
//!
//! The registry is a fixed array of slots read with atomics only: the handler takes no lock
//! and allocates nothing to find a range. A slot's server is unregistered by nulling its
//! pointer and waiting until no handler is inside it; only then is it freed.

use std::ffi::c_void;
use std::io;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock};

/// What the CPU reported about a faulting access, where the architecture tells (x86-64's
/// page-fault error code); `None` where it does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// The access was a write.
    pub write: Option<bool>,
    /// The page was present: a write-protect fault, not a missing page.
    pub present: Option<bool>,
}

/// Serves faults of a registered range in the faulting thread.
pub trait InThread: Send + Sync {
    /// Serves a fault at `address`; returns false when the address is not this server's
    /// (the fault then goes to the replaced handler). It runs inside a signal handler, in
    /// the thread that faulted: it must not panic (unwinding out of a signal handler is
    /// undefined), and it must not wait for anything the faulting thread may hold.
    fn serve(&self, address: usize, access: Access) -> bool;
}

/// Ranges served at once, process-wide.
const SLOTS: usize = 64;

struct Slot {
    /// Taken by a registration (set before the range is published).
    claimed: AtomicBool,
    start: AtomicUsize,
    end: AtomicUsize,
    /// The server, published last; null while the slot is free or going away.
    server: AtomicPtr<Arc<dyn InThread>>,
    /// Handlers inside this slot's server now.
    active: AtomicUsize,
}

impl Slot {
    const fn new() -> Self {
        Self {
            claimed: AtomicBool::new(false),
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            server: AtomicPtr::new(std::ptr::null_mut()),
            active: AtomicUsize::new(0),
        }
    }
}

static REGISTRY: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];

/// The SIGBUS action this crate's handler replaced.
static OLD: OnceLock<libc::sigaction> = OnceLock::new();

/// Serialises installing the handler.
static INSTALL: Mutex<()> = Mutex::new(());

/// A registered range: its faults are served by its server until this is dropped, which
/// waits for the handlers inside the server to leave.
#[derive(Debug)]
pub struct Registration {
    slot: usize,
}

/// Registers `start..start+len` to be served by `server` in the faulting thread, installing
/// the process-wide SIGBUS handler first if it is not yet.
pub fn register(start: usize, len: usize, server: Arc<dyn InThread>) -> io::Result<Registration> {
    install()?;
    let end = start
        .checked_add(len)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "range wraps around"))?;
    let slot = REGISTRY
        .iter()
        .position(|s| {
            s.claimed
                .compare_exchange(false, true, SeqCst, SeqCst)
                .is_ok()
        })
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("{SLOTS} regions already serve faults in their threads"),
            )
        })?;
    let s = &REGISTRY[slot];
    s.start.store(start, SeqCst);
    s.end.store(end, SeqCst);
    s.server.store(Box::into_raw(Box::new(server)), SeqCst);
    Ok(Registration { slot })
}

impl Drop for Registration {
    fn drop(&mut self) {
        let s = &REGISTRY[self.slot];
        let server = s.server.swap(std::ptr::null_mut(), SeqCst);
        // A handler that loaded the pointer before the swap either raised `active` before
        // this load (and is waited for) or sees the null when it checks again after raising
        // it (and leaves without using it).
        while s.active.load(SeqCst) != 0 {
            std::thread::yield_now();
        }
        s.start.store(0, SeqCst);
        s.end.store(0, SeqCst);
        if !server.is_null() {
            // SAFETY: the pointer came from `Box::into_raw` in `register`, was swapped out
            // exactly once (here), and no handler uses it any more (`active` is 0 and new
            // ones find null).
            drop(unsafe { Box::from_raw(server) });
        }
        s.claimed.store(false, SeqCst);
    }
}

/// Installs the handler once per process, keeping the action it replaces.
fn install() -> io::Result<()> {
    let _guard = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    if OLD.get().is_some() {
        return Ok(());
    }
    // SAFETY: `sigaction` reads `new` and writes `old`, both live locals; `on_sigbus` has
    // the `SA_SIGINFO` signature. No `SA_ONSTACK`: the handler decompresses a page on the
    // faulting thread's own stack, not on a small alternate one. No `SA_NODEFER`: a SIGBUS
    // inside the handler (it touches no registered page) ends the process rather than
    // recursing.
    let old = unsafe {
        let mut new: libc::sigaction = std::mem::zeroed();
        new.sa_sigaction = on_sigbus as *const () as usize;
        new.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut new.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, &new, &mut old) != 0 {
            return Err(io::Error::last_os_error());
        }
        old
    };
    let _ = OLD.set(old);
    Ok(())
}

/// The SIGBUS handler.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid `siginfo_t` and `ucontext_t` to an `SA_SIGINFO`
    // handler; `__errno_location` is this thread's errno, saved and restored so that the
    // interrupted code sees it unchanged.
    unsafe {
        let errno = *libc::__errno_location();
        let code = (*info).si_code;
        let address = (*info).si_addr() as usize;
        if code == libc::BUS_ADRERR && dispatch(address, access(ctx)) {
            *libc::__errno_location() = errno;
            return;
        }
        chain(sig, info, ctx);
        *libc::__errno_location() = errno;
    }
}

/// Serves `address` if a registered range holds it.
fn dispatch(address: usize, access: Access) -> bool {
    for s in &REGISTRY {
        let server = s.server.load(SeqCst);
        if server.is_null() {
            continue;
        }
        s.active.fetch_add(1, SeqCst);
        let inside = (s.start.load(SeqCst)..s.end.load(SeqCst)).contains(&address);
        let served = inside && s.server.load(SeqCst) == server && {
            // SAFETY: the slot still holds this pointer after `active` was raised, so
            // `Registration::drop` waits for this handler before freeing it.
            let server = unsafe { &*server };
            server.serve(address, access)
        };
        s.active.fetch_sub(1, SeqCst);
        if served {
            return true;
        }
    }
    false
}

/// The access as the CPU reported it: x86-64 puts the page-fault error code in the signal
/// context (bit 0: the page was present, bit 1: a write).
#[cfg(target_arch = "x86_64")]
fn access(ctx: *mut c_void) -> Access {
    if ctx.is_null() {
        return Access {
            write: None,
            present: None,
        };
    }
    // SAFETY: a non-null context of an `SA_SIGINFO` handler is the interrupted thread's
    // `ucontext_t`, readable for the handler's duration.
    let err =
        unsafe { (*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs[libc::REG_ERR as usize] };
    Access {
        write: Some(err & 2 != 0),
        present: Some(err & 1 != 0),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn access(_ctx: *mut c_void) -> Access {
    Access {
        write: None,
        present: None,
    }
}

/// Passes a SIGBUS that is not a region's to the action this handler replaced.
///
/// # Safety
///
/// The arguments are the ones the kernel passed to [`on_sigbus`].
unsafe fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let old = OLD.get();
    let handler = old.map_or(libc::SIG_DFL, |o| o.sa_sigaction);
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // SAFETY: restoring the default action with a zeroed, then filled, `sigaction`;
        // `raise` of a signal sent by a process (not a fault) delivers it again under the
        // default action. A fault is simply retried on return and ends the process.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigemptyset(&mut dfl.sa_mask);
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
            if (*info).si_code <= 0 {
                libc::raise(sig);
            }
        }
        return;
    }
    let Some(old) = old else { return };
    if old.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: an `SA_SIGINFO` action's handler has this signature; it gets what the
        // kernel gave this one.
        unsafe {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
                std::mem::transmute(handler);
            f(sig, info, ctx);
        }
    } else {
        // SAFETY: a plain action's handler takes the signal number alone.
        unsafe {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
            f(sig);
        }
    }
}
