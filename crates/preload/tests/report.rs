//! The figures' wire shape, which `zramd run` and `zramd stat` read (crate `zramd`,
//! `run.rs`), as the shim writes it (`uswap::ProgramFigures`): one line of JSON, `{"pid":P,"uswap":[RegionStats…],"served":N,
//! "passed_through":M}`, plus `unavailable` only when mappings could not be served.
//!
//! Being an integration test, it also makes `cargo test --workspace` build the library, so
//! `libzramd_uswap.so` lies in `deps/` beside `zramd`, where `zramd run`'s tests find it.

use serde_json::Value;
// The shim itself is linked too: that is what builds `libzramd_uswap.so` here.
use uswap::ProgramFigures as Report;
use zramd_uswap as _;

#[test]
fn the_figures_are_one_line_of_json_with_the_documented_keys() {
    let report = Report {
        pid: 42,
        uswap: vec![uswap::RegionStats {
            len: 1 << 20,
            pswpout: 3,
            ..Default::default()
        }],
        served: 1,
        passed_through: 5,
        unavailable: None,
    };
    let line = report.line();
    assert_eq!(line.last(), Some(&b'\n'));
    assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
    let v: Value = serde_json::from_slice(&line).unwrap();
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["passed_through", "pid", "served", "uswap"]);
    assert_eq!(v["uswap"][0]["pswpout"], 3);
    assert_eq!(v["uswap"][0]["len"], 1 << 20);
    let back: Report = serde_json::from_slice(&line).unwrap();
    assert_eq!(back, report);

    let refused = Report {
        unavailable: Some("no userfaultfd".into()),
        ..Report::default()
    };
    let v: Value = serde_json::from_slice(&refused.line()).unwrap();
    assert_eq!(v["unavailable"], "no userfaultfd");
}
