//! The only module of this crate with `unsafe` code: the CPU time used so far, from
//! `getrusage(2)`, for the figures that say what a pass cost (wall time alone would count
//! waiting as work and miss work done on other threads).
//!
//! # Safety
//!
//! `getrusage` writes one `struct rusage` through the pointer it is given and keeps
//! nothing: the pointer is to a zeroed local of that type, valid for the call.

/// CPU seconds (user and system) used by `who`: `RUSAGE_SELF` or `RUSAGE_THREAD`; `None`
/// where the call fails.
fn cpu_seconds(who: libc::c_int) -> Option<f64> {
    let mut usage: libc::rusage = zeroed_rusage();
    // SAFETY: `usage` is a valid, writable `rusage` for the whole call (module contract).
    let rc = unsafe { libc::getrusage(who, &raw mut usage) };
    if rc != 0 {
        return None;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(secs(usage.ru_utime) + secs(usage.ru_stime))
}

/// A zeroed `rusage` (all of its fields are plain integers, for which zero is valid).
fn zeroed_rusage() -> libc::rusage {
    // SAFETY: `rusage` is a C struct of integers and `timeval`s of integers: all-zero bytes
    // are a valid value of it.
    unsafe { std::mem::zeroed() }
}

/// CPU seconds this process has used, all of its threads together.
pub fn process_cpu_seconds() -> Option<f64> {
    cpu_seconds(libc::RUSAGE_SELF)
}

/// CPU seconds the calling thread has used.
pub fn thread_cpu_seconds() -> Option<f64> {
    cpu_seconds(libc::RUSAGE_THREAD)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_grows_with_work() {
        let (p0, t0) = (
            process_cpu_seconds().unwrap(),
            thread_cpu_seconds().unwrap(),
        );
        let mut x = 1u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(200) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let (p1, t1) = (
            process_cpu_seconds().unwrap(),
            thread_cpu_seconds().unwrap(),
        );
        assert!(
            t1 > t0 && p1 > p0,
            "thread {t0} -> {t1}, process {p0} -> {p1}"
        );
        assert!(
            p1 - p0 >= t1 - t0 - 0.01,
            "the process counts the thread's time"
        );
    }
}
