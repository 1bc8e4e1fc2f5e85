//! The NBD server's parsers on arbitrary bytes: client flags, option headers, `INFO`/`GO`
//! and meta context option data, request headers, the request rules and block status
//! extents (`zramd::nbd::rules::exercise_parsers`, which the test suite's smoke test also
//! drives). No input may panic, allocate in proportion to a length it claims, or parse
//! into something that does not encode back to the same bytes.
//!
//! Run: `cargo +nightly fuzz run nbd_parse` from `fuzz/`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    zramd::nbd::rules::exercise_parsers(data);
});
