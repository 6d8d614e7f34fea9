//! Seed 002: the page counter's padded layout against the packed one under
//! concurrent charging.
//!
//! The seed moved `usage` onto its own cache line and the read-mostly
//! fields (`min`, `low`, `high`, `max`, `parent`) onto another, and measured
//! +18.4% netperf throughput on 72 CPUs with a three-level hierarchy. Here:
//!
//! - a three-level tree: a root, two middle counters, one leaf per thread
//!   (leaves alternate between the two middles), so every charge writes the
//!   root's `usage`, half of them each middle's;
//! - 2 × nr_cpus threads, each charging and uncharging 1 unit at its own
//!   leaf with no per-CPU stock, doing what the kernel's memcg charge path
//!   does per batch: `try_charge` (per level: add to `usage`, read `max`,
//!   `min`, `low`, the watermark and `parent`), then for each level compare
//!   `usage` with `high`, then `uncharge`;
//! - limits set but never reached, so no charge fails;
//! - the *same* generic code instantiated for [`Packed`] (usage on the line
//!   the limits and parent are read from: each charge elsewhere invalidates
//!   it) and [`Padded`] (the limits' line stays clean and shared);
//! - rounds of one short run of each layout back to back, packed first in
//!   even rounds and padded first in odd ones. Background load drifts
//!   between rounds far more than within one, so the gain is the median of
//!   the per-round ratios (each compares runs a few tens of milliseconds
//!   apart); the throughputs reported are each layout's median run.

pub mod experiment;

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use rstat::page_counter::{Layout, Packed, Padded, PageCounter};
use rstat::percpu::cpu::possible_cpus;
use rstat::percpu::CachePadded;

/// The seed's measured improvement (netperf TCP_SENDFILE, 72 CPUs).
pub const SEED_GAIN_PCT: f64 = 18.4;

/// Operations between two checks of the stop flag.
const BATCH: u64 = 256;

/// Limits high enough never to refuse a charge, but set (so `max`/`high`
/// are real values read from memory, as in a configured hierarchy).
const MAX: u64 = 1 << 40;
const HIGH: u64 = 1 << 39;

/// The benchmark's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// Median throughput with the packed layout, millions of
    /// charge + high check + uncharge operations per second, all threads.
    pub packed_mops: f64,
    /// The same with the padded layout.
    pub padded_mops: f64,
    /// Median over rounds of `(padded / packed − 1) × 100`, each round's
    /// two runs back to back (more robust to drifting background load than
    /// the ratio of the two medians, which it need not equal).
    pub gain_pct: f64,
    /// Charging threads (2 × `nr_cpus`).
    pub threads: usize,
    /// CPUs loaded (possible CPUs of the machine unless set).
    pub nr_cpus: usize,
    /// Total measured time, both layouts, seconds.
    pub seconds: f64,
    /// The seed's improvement, for comparison.
    pub seed_gain_pct: f64,
    /// One sentence on what this measures.
    pub what: String,
}

/// How long to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Total measured time, split evenly over both layouts' rounds.
    pub seconds: f64,
    /// CPUs to load, two threads each (`None`: every possible CPU).
    pub cpus: Option<usize>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            seconds: 2.0,
            cpus: None,
        }
    }
}

/// Run the benchmark: both layouts, alternating rounds, median of each.
pub fn run(cfg: &Config) -> Report {
    let nr_cpus = cfg.cpus.unwrap_or_else(possible_cpus).max(1);
    let threads = 2 * nr_cpus;
    let seconds = if cfg.seconds.is_finite() && cfg.seconds > 0.0 {
        cfg.seconds
    } else {
        2.0
    };
    // Runs of about 50 ms, at least 3 rounds (a median needs them).
    let rounds = ((seconds / 0.1).round() as usize).clamp(3, 200);
    let per_run = Duration::from_secs_f64(seconds / (2 * rounds) as f64);

    let packed = leaves::<Packed>(threads);
    let padded = leaves::<Padded>(threads);
    // Warm-up: fault in stacks and counters, wake up the cores.
    let warm = per_run.min(Duration::from_millis(20));
    measure(&packed, warm);
    measure(&padded, warm);

    let (mut pk, mut pd, mut gains, mut measured) = (Vec::new(), Vec::new(), Vec::new(), 0.0);
    for round in 0..rounds {
        let (a, b) = if round % 2 == 0 {
            let a = measure(&packed, per_run);
            (a, measure(&padded, per_run))
        } else {
            let b = measure(&padded, per_run);
            (measure(&packed, per_run), b)
        };
        measured += a.1 + b.1;
        pk.push(a.0);
        pd.push(b.0);
        if a.0 > 0.0 {
            gains.push((b.0 / a.0 - 1.0) * 100.0);
        }
    }
    let (packed_mops, padded_mops, gain_pct) =
        (median(&mut pk), median(&mut pd), median(&mut gains));
    Report {
        packed_mops,
        padded_mops,
        gain_pct,
        threads,
        nr_cpus,
        seconds: measured,
        seed_gain_pct: SEED_GAIN_PCT,
        what: format!(
            "Throughput of {threads} threads each charging and uncharging 1 unit at its own leaf of \
             a 3-level page-counter tree (root, 2 middles, {threads} leaves; per charge: add to \
             usage and read max at every level, then compare usage with high at every level), \
             with usage sharing its cache line with max/high/parent (packed) or alone on its \
             line (padded), in {rounds} rounds of back-to-back runs."
        ),
    }
}

/// A text table of the report.
pub fn table(r: &Report) -> String {
    let ratio = if r.packed_mops > 0.0 {
        r.padded_mops / r.packed_mops
    } else {
        0.0
    };
    let mut s = String::new();
    s.push_str("page_counter layout (seed 002): padded vs packed under concurrent charge\n");
    s.push_str(&format!(
        "machine: {} possible CPUs; {} threads; {:.2} s measured\n",
        r.nr_cpus, r.threads, r.seconds
    ));
    s.push_str(&format!(
        "{:<8} {:>14} {:>10}\n",
        "layout", "median Mops/s", "vs packed"
    ));
    s.push_str(&format!(
        "{:<8} {:>14.2} {:>9.3}x\n",
        "packed", r.packed_mops, 1.0
    ));
    s.push_str(&format!(
        "{:<8} {:>14.2} {:>9.3}x\n",
        "padded", r.padded_mops, ratio
    ));
    s.push_str(&format!(
        "gain of padded, median of paired rounds: {:+.1}% (seed: {:+.1}%, netperf on 72 CPUs)\n",
        r.gain_pct, r.seed_gain_pct
    ));
    s.push_str(&r.what);
    s.push('\n');
    s
}

/// The leaves of a fresh root → 2 middles → `n` leaves tree, with limits.
fn leaves<L: Layout>(n: usize) -> Vec<Arc<PageCounter<L>>> {
    let root = Arc::new(PageCounter::<L>::new(None));
    let mids: Vec<_> = (0..2)
        .map(|_| Arc::new(PageCounter::new(Some(root.clone()))))
        .collect();
    let leaves: Vec<_> = (0..n)
        .map(|i| Arc::new(PageCounter::new(Some(mids[i % 2].clone()))))
        .collect();
    for c in std::iter::once(&root).chain(&mids).chain(&leaves) {
        // Cannot fail: usage is 0.
        let _ = c.set_max(MAX);
        c.set_high(HIGH);
    }
    leaves
}

/// One charge as the memcg charge path does it without a stock: charge,
/// check `high` at every level, and (to keep usage bounded) uncharge.
/// Returns (refused, levels over high) for `black_box`.
#[inline(always)]
fn one_op<L: Layout>(leaf: &PageCounter<L>) -> (u64, u64) {
    if leaf.try_charge(1).is_err() {
        return (1, 0);
    }
    let mut over = 0;
    let mut c = leaf;
    loop {
        over += u64::from(c.usage() > c.high());
        match c.parent() {
            Some(p) => c = p,
            None => break,
        }
    }
    let _ = leaf.uncharge(1);
    (0, over)
}

/// Run one thread per leaf for `dur`; (Mops/s over all threads, seconds).
fn measure<L: Layout>(leaves: &[Arc<PageCounter<L>>], dur: Duration) -> (f64, f64) {
    let stop = Arc::new(CachePadded::new(AtomicBool::new(false)));
    let start = Arc::new(Barrier::new(leaves.len() + 1));
    let workers: Vec<_> = leaves
        .iter()
        .map(|leaf| {
            let (leaf, stop, start) = (leaf.clone(), stop.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let (mut ops, mut refused, mut over) = (0u64, 0u64, 0u64);
                // Relaxed: a stop request; the join publishes the counts.
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..BATCH {
                        let (r, o) = one_op(black_box(&*leaf));
                        refused += r;
                        over += o;
                    }
                    ops += BATCH;
                }
                black_box((refused, over));
                ops
            })
        })
        .collect();
    start.wait();
    let t0 = Instant::now();
    std::thread::sleep(dur);
    stop.store(true, Ordering::Relaxed);
    let ops: u64 = workers.into_iter().map(|w| w.join().unwrap_or(0)).sum();
    let secs = t0.elapsed().as_secs_f64();
    (ops as f64 / secs / 1e6, secs)
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_run_reports_consistent_figures() {
        let r = run(&Config {
            seconds: 0.06,
            cpus: None,
        });
        assert!(r.packed_mops > 0.0 && r.padded_mops > 0.0, "{r:?}");
        assert!(r.gain_pct.is_finite() && r.gain_pct > -100.0, "{r:?}");
        assert_eq!(r.threads, 2 * r.nr_cpus);
        assert!(r.seconds > 0.03, "{r:?}");
        let t = table(&r);
        assert!(
            t.contains("packed") && t.contains("padded") && t.contains("+18.4%"),
            "{t}"
        );
    }

    #[test]
    fn counters_return_to_zero_after_a_run() {
        let leaves = leaves::<Packed>(3);
        measure(&leaves, Duration::from_millis(5));
        for l in &leaves {
            let root = l.hierarchy_root();
            assert_eq!((l.usage(), root.usage(), root.failcnt()), (0, 0, 0));
        }
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }
}
