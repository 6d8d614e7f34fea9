//! `rstat bench update`: the cost of one stat update, side by side with a
//! shared atomic counter and a per-thread plain counter, at 1 and 2 threads.
//!
//! The rstat figure is a counter-set update through a [`rstat::StatItem`]
//! (a [`rstat::StatHandle`] item checked once, so the update has no range
//! check and no result) under the engine's default settings: what users get.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;

use crate::machine::{median, per_thread, round, unpin, Machine};

/// Settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Updates per thread per sample.
    pub iters: u64,
    /// Samples per figure (the median is reported).
    pub samples: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            iters: 20_000_000,
            samples: 5,
        }
    }
}

/// Results (field names are the issue's).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// ns per rstat update, 1 thread.
    pub ns_per_update_1t: f64,
    /// ns per `fetch_add` on one uncontended shared atomic, 1 thread.
    pub shared_atomic_ns_1t: f64,
    /// ns per increment of a per-thread plain counter, 1 thread.
    pub plain_thread_local_ns_1t: f64,
    /// Million rstat updates per second, 2 threads on one group.
    pub rstat_mops_2t: f64,
    /// Million `fetch_add`s per second, 2 threads on one shared atomic.
    pub shared_atomic_mops_2t: f64,
    /// Reference: ns per update of a bare per-CPU counter (rseq CPU id, one
    /// relaxed `fetch_add` on a cache-padded per-CPU slot, nothing else), 1t.
    pub bare_percpu_ns_1t: f64,
    /// Reference: the bare per-CPU counter, 2 threads, Mops/s.
    pub bare_percpu_mops_2t: f64,
    /// `bare_percpu_mops_2t / shared_atomic_mops_2t`: the ceiling this
    /// machine allows for the rstat ratio.
    pub bare_ratio_vs_shared_atomic_2t: f64,
    /// `rstat_mops_2t / shared_atomic_mops_2t` (target >= 8).
    pub ratio_vs_shared_atomic_2t: f64,
    /// `ns_per_update_1t / shared_atomic_ns_1t` (target <= 2).
    pub ratio_vs_shared_atomic_1t: f64,
    /// Where CPU ids came from.
    pub cpu_id_source: String,
    /// The engine's flush policy during the run.
    pub flush_policy: String,
    /// Updates per thread per sample.
    pub iters: u64,
    /// The machine.
    pub machine: Machine,
}

#[repr(align(128))]
struct Padded(AtomicU64);

/// Run the benchmark.
pub fn run(cfg: &Config) -> Report {
    let rs = rstat::Rstat::new();
    let ctl = match rs.register_counters("bench", &["ops"]) {
        Ok(c) => c,
        Err(e) => panic!("registering the bench controller: {e}"),
    };
    let g = match rs.root().create_child("g") {
        Ok(g) => g,
        Err(e) => panic!("creating the bench group: {e}"),
    };
    let handle = match ctl.stat_handle(&g).and_then(|h| h.item(0)) {
        Ok(h) => h,
        Err(e) => panic!("{e}"),
    };
    let n = cfg.iters;
    let mops_to_ns = |mops: f64| 1e3 / mops;

    let mut r1 = Vec::new();
    let mut a1 = Vec::new();
    let mut p1 = Vec::new();
    let mut r2 = Vec::new();
    let mut a2 = Vec::new();
    let mut b1 = Vec::new();
    let mut b2 = Vec::new();
    let nr = rstat::percpu::cpu::possible_cpus();
    let bare: Arc<Vec<Padded>> = Arc::new((0..nr).map(|_| Padded(AtomicU64::new(0))).collect());
    let bare_loop = |bare: Arc<Vec<Padded>>| {
        move || {
            let b = black_box(&bare[..]);
            for _ in 0..n {
                let c = rstat::percpu::cpu::fold(rstat::percpu::cpu::current(), b.len());
                b[c].0.fetch_add(black_box(1), Ordering::Relaxed);
            }
        }
    };
    let shared = Arc::new(AtomicU64::new(0));
    for _ in 0..cfg.samples {
        let h = handle.clone();
        r1.push(mops_to_ns(per_thread(1, n, |_| {
            let h = h.clone();
            move || {
                for _ in 0..n {
                    h.add(black_box(1));
                }
            }
        })));
        a1.push(mops_to_ns(per_thread(1, n, |_| {
            let s = Arc::clone(&shared);
            move || {
                let s = black_box(&*s);
                for _ in 0..n {
                    s.fetch_add(black_box(1), Ordering::Relaxed);
                }
            }
        })));
        p1.push(mops_to_ns(per_thread(1, n, |_| {
            move || {
                let mut x = 0u64;
                for _ in 0..n {
                    x = black_box(x) + black_box(1);
                }
                black_box(x);
            }
        })));
        b1.push(mops_to_ns(per_thread(1, n, |_| {
            bare_loop(Arc::clone(&bare))
        })));
        b2.push(per_thread(2, n, |_| bare_loop(Arc::clone(&bare))));
        r2.push(per_thread(2, n, |_| {
            let h = h.clone();
            move || {
                for _ in 0..n {
                    h.add(black_box(1));
                }
            }
        }));
        a2.push(per_thread(2, n, |_| {
            let s = Arc::clone(&shared);
            move || {
                let s = black_box(&*s);
                for _ in 0..n {
                    s.fetch_add(black_box(1), Ordering::Relaxed);
                }
            }
        }));
    }
    unpin();
    // Honesty check: every update landed.
    let want = cfg.samples as i64 * 3 * n as i64;
    let got = ctl.read_exact(&g).map(|s| s.local()[0]).unwrap_or(-1);
    assert_eq!(got, want, "rstat lost updates during the benchmark");

    let (ns1, at1, pl1, m2, am2) = (median(r1), median(a1), median(p1), median(r2), median(a2));
    let (bn1, bm2) = (median(b1), median(b2));
    Report {
        ns_per_update_1t: round(ns1, 3),
        shared_atomic_ns_1t: round(at1, 3),
        plain_thread_local_ns_1t: round(pl1, 3),
        rstat_mops_2t: round(m2, 1),
        shared_atomic_mops_2t: round(am2, 1),
        bare_percpu_ns_1t: round(bn1, 3),
        bare_percpu_mops_2t: round(bm2, 1),
        bare_ratio_vs_shared_atomic_2t: round(bm2 / am2, 2),
        ratio_vs_shared_atomic_2t: round(m2 / am2, 2),
        ratio_vs_shared_atomic_1t: round(ns1 / at1, 2),
        cpu_id_source: rs.cpu_id_source().to_string(),
        flush_policy: "always (exact subtree flush on read)".into(),
        iters: n,
        machine: Machine::detect(),
    }
}

/// Human-readable table.
pub fn table(r: &Report) -> String {
    format!(
        "rstat bench update ({} updates per thread per sample, median)\n{}\n\n\
         {:<34} {:>12}\n{:<34} {:>12.2} ns\n{:<34} {:>12.2} ns\n{:<34} {:>12.2} ns\n\
         {:<34} {:>12.1} Mops/s\n{:<34} {:>12.1} Mops/s\n\
         {:<34} {:>12.2} ns\n{:<34} {:>12.1} Mops/s\n\n\
         ratio vs shared atomic, 2 threads: {:.2}x (target >= 8; bare per-CPU counter: {:.2}x)\n\
         1-thread cost vs shared atomic:    {:.2}x (target <= 2)\n",
        r.iters,
        r.machine.line(),
        "case",
        "value",
        "rstat update, 1 thread",
        r.ns_per_update_1t,
        "shared AtomicU64::fetch_add, 1t",
        r.shared_atomic_ns_1t,
        "per-thread plain counter, 1t",
        r.plain_thread_local_ns_1t,
        "rstat update, 2 threads",
        r.rstat_mops_2t,
        "shared AtomicU64::fetch_add, 2t",
        r.shared_atomic_mops_2t,
        "reference: bare per-CPU counter, 1t",
        r.bare_percpu_ns_1t,
        "reference: bare per-CPU counter, 2t",
        r.bare_percpu_mops_2t,
        r.ratio_vs_shared_atomic_2t,
        r.bare_ratio_vs_shared_atomic_2t,
        r.ratio_vs_shared_atomic_1t,
    )
}
