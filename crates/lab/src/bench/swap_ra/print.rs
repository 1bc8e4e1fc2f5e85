//! `bench uswap`'s text output.

use super::Report;
use super::source::Source;
use super::tier::Tier;
use super::workload;

/// Prints `r` as text tables.
pub(super) fn report(r: &Report) {
    let s = &r.settings;
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    println!(
        "region {:.0} MiB, budget {:.0} MiB, {} timed rounds per readahead setting after a \
         writing round, in each of {} runs per workload (readahead switched every eighth of a \
         round: on, off, off, on, ...), {} measured threads (+{} random in combined), {} us of work per page, {}, \
         vma_ra_max_order {}, faults served {}",
        mib(s.size),
        mib(s.budget),
        s.rounds,
        s.runs,
        s.threads,
        s.noise_threads,
        s.work_us,
        s.algorithm,
        s.max_order,
        s.faults.name()
    );
    println!(
        "\nprogram-observed latency of each page's first touch per round (us), measured threads"
    );
    println!(
        "{:<34} {:>9} {:>8} {:>9} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
        "workload",
        "samples",
        "avg",
        "max",
        "p50",
        "p60",
        "p70",
        "p80",
        "p90",
        "p95",
        "p99",
        "secs"
    );
    let row = |name: String, l: &uswap::histogram::Summary, secs: f64| {
        println!(
            "{name:<34} {:>9} {:>8.2} {:>9.1} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>7.1}",
            l.samples,
            l.avg_us,
            l.max_us,
            l.p50_us,
            l.p60_us,
            l.p70_us,
            l.p80_us,
            l.p90_us,
            l.p95_us,
            l.p99_us,
            secs
        );
    };
    for run in &r.runs {
        row(run.label(), &run.latency, run.seconds);
    }
    for t in &r.tiers {
        row(t.label(), &t.latency, f64::NAN);
    }
    for f in &r.floors {
        row(f.wait.name().to_owned(), &f.latency, f64::NAN);
    }
    for f in &r.floors {
        row(format!("{}: UFFDIO_COPY", f.wait.name()), &f.copy, f64::NAN);
        row(format!("{}: UFFDIO_WAKE", f.wait.name()), &f.wake, f64::NAN);
    }
    println!(
        "\nfirst touches that took 2 us or more (measured threads); region counters over the \
         timed rounds (all threads); handler time per fault (us)"
    );
    println!(
        "{:<34} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>7} {:>7} {:>7}",
        "workload",
        "waited",
        "pgfault",
        "majfault",
        "swap_ra",
        "ra_hit",
        "pswpin",
        "pswpout",
        "h.avg",
        "h.p50",
        "h.p90",
        "h.p99"
    );
    let counts = |name: String,
                  waited: u64,
                  c: &workload::Counts,
                  f: &uswap::histogram::Summary| {
        println!(
            "{name:<34} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8.2} {:>7.2} {:>7.2} {:>7.2}",
            waited,
            c.pgfault,
            c.pgmajfault,
            c.swap_ra,
            c.swap_ra_hit,
            c.pswpin,
            c.pswpout,
            f.avg_us,
            f.p50_us,
            f.p90_us,
            f.p99_us
        );
    };
    for run in &r.runs {
        counts(run.label(), run.waited, &run.counts, &run.fault_latency);
    }
    for t in &r.tiers {
        counts(t.label(), t.waited, &t.counts, &t.fault_latency);
    }
    for run in &r.runs {
        if let Some(n) = &run.noise_latency {
            println!(
                "\n{}: {} random background samples, avg {:.2} us, p90 {:.2} us (not a target)",
                run.label(),
                n.samples,
                n.avg_us,
                n.p90_us
            );
        }
    }
    for run in r.runs.iter().filter(|r| r.source == Source::WrittenBack) {
        println!(
            "\n{}: {} pages written back in its runs (both settings), {} read back from the file",
            run.label(),
            run.written_back_pages,
            run.bd_reads
        );
    }
    for t in &r.tiers {
        if t.tier == Tier::WrittenBack {
            println!(
                "\nwritten-back tier: {} pages written back in all, {} read back from {}",
                t.written_back_pages,
                t.bd_reads,
                t.backing_dev
                    .as_ref()
                    .map_or_else(String::new, |p| p.display().to_string())
            );
        }
    }
    println!("\nissue 14's targets (information, not assertions)");
    for t in &r.targets {
        println!(
            "  {:<46} {:>8.3}  target {:<15} {}",
            t.name,
            t.value,
            t.target,
            if t.met { "met" } else { "NOT met" }
        );
    }
}
