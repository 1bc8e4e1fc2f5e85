//! Progress bars of the long benches (`indicatif`): on stderr, and drawn only when stderr
//! is a terminal (indicatif's default target), so the figures on stdout, tests and CI logs
//! stay as they were. One bar at a time: [`bar`] shows it until the [`Bar`] is dropped,
//! [`tick`] advances it from anywhere in the bench, and lines printed while it is shown go
//! through [`print()`] (or [`outln!`](crate::outln)) so that the bar never overdraws them.

use std::sync::{Mutex, PoisonError};

use indicatif::{ProgressBar, ProgressStyle};

/// The bar shown now, if any.
static SHOWN: Mutex<Option<ProgressBar>> = Mutex::new(None);

fn shown() -> Option<ProgressBar> {
    SHOWN.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// A shown bar; dropping it clears it.
#[derive(Debug)]
#[must_use = "the bar is cleared when dropped"]
pub struct Bar(ProgressBar);

/// Shows a bar of `steps` steps named `what` (replacing any bar shown).
pub fn bar(what: &str, steps: u64) -> Bar {
    let bar = ProgressBar::new(steps);
    let style = ProgressStyle::with_template(
        "{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} (eta {eta}) {msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(what.to_owned());
    *SHOWN.lock().unwrap_or_else(PoisonError::into_inner) = Some(bar.clone());
    Bar(bar)
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
        let mut shown = SHOWN.lock().unwrap_or_else(PoisonError::into_inner);
        if shown.as_ref().is_some_and(|b| b.is_finished()) {
            *shown = None;
        }
    }
}

/// Advances the bar shown (if any) by one step, saying what runs next.
pub fn tick(next: &str) {
    if let Some(bar) = shown() {
        bar.inc(1);
        bar.set_message(next.to_owned());
    }
}

/// Says what runs now on the bar shown (if any).
pub fn doing(what: &str) {
    if let Some(bar) = shown() {
        bar.set_message(what.to_owned());
    }
}

/// Runs `f` (which prints) with the bar shown hidden meanwhile.
pub fn print<R>(f: impl FnOnce() -> R) -> R {
    match shown() {
        Some(bar) => bar.suspend(f),
        None => f(),
    }
}

/// `println!` that hides the progress bar while it prints.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::progress::print(|| println!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_counts_its_steps_and_goes_when_dropped() {
        let b = bar("test", 3);
        tick("two");
        tick("three");
        assert_eq!(b.0.position(), 2);
        assert_eq!(print(|| 7), 7);
        drop(b);
        assert!(shown().is_none());
        // With no bar, ticking and printing still work.
        tick("none");
        assert_eq!(print(|| 8), 8);
    }
}
