//! `rstat bench update`: the cost of one stat update, side by side with a
//! shared atomic counter and a per-thread plain counter, at 1 and 2 threads.
//!
//! The rstat figure is a counter-set update through a [`rstat::StatItem`]
//! (a [`rstat::StatHandle`] item checked once, so the update has no range
//! check and no result) under the engine's default settings: what users get.
//! Beside it, on the same engine and policy:
//!
//! - **deep, large**: a byte counter declared in units of 4096
//!   ([`rstat::Rstat::register_counters_with_units`]) at depth 5, charged
//!   4096 per update: the `Threshold` counting walks the five ancestors once
//!   per 64 updates per CPU, not on each (the cost must not depend on the
//!   delta or the depth: at most 1.25x the shallow unit update on one
//!   thread, at least 0.8x its throughput on two);
//! - **`ControllerHandle::add`**: the same update through the controller
//!   handle, which finds the group's state on each call (at most 1.5x);
//! - **`StatHandle::add`**: the same update through the group's resolved
//!   handle, with its item range check: the other yardstick of
//!   `ControllerHandle::add`, which caches its lookups to stay within 1.5x
//!   of it;
//! - **locked**: the same update on an engine built with
//!   [`rstat::UpdatePath::Locked`] (a locked RMW instead of a restartable
//!   section), for comparison with the path the default engine took
//!   (`update_path`).
//!
//! The sweep (`shapes`) measures the same update at depths 1, 2, 4 and 8
//! with deltas 1, 64 and 4096 on an item in unit 1: a delta of 64 or more
//! crosses the `Threshold` count on every update, so it shows what the
//! walk over the ancestors costs as the tree deepens.
//!
//! Beside a *memory-bound neighbour* (`*_1t_neighbour`, machines with two
//! CPUs or more): the one-thread rstat update, shared atomic and bare
//! per-CPU counter again, on CPU 0, while [`crate::machine::Neighbour`]
//! runs on CPU 1. Where the two are hyperthreads of one core this is the
//! VM state in which the section's extra memory accesses cost the most.
//!
//! The multi-thread figures (`*_2t`) run on `Config::threads` pinned
//! threads: 2 unless `rstat bench update --cpus N` says otherwise (the
//! names say `2t` for that default whatever ran; `threads` in the report
//! says how many did).
//!
//! Every engine's totals are checked after the run: an exact read must
//! equal the sum of every update made (the honesty check).

mod engines;
pub mod experiment;
mod sweep;

pub use sweep::{ShapeRow, SWEEP_DELTAS, SWEEP_DEPTHS};

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rstat::percpu::CachePadded;
use serde::Serialize;

use crate::machine::{median, per_thread, round, unpin, Machine};
use engines::{item_loop, Bench};
use sweep::sweep;

/// Settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Updates per thread per sample.
    pub iters: u64,
    /// Samples per figure (the median is reported).
    pub samples: usize,
    /// Threads of the multi-thread figures (`*_2t`), one pinned per CPU.
    pub threads: usize,
    /// Run the depth x delta sweep (`shapes`), `iters / 8` updates per
    /// thread per cell.
    pub sweep: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            iters: 20_000_000,
            samples: 5,
            threads: 2,
            sweep: true,
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
    /// Million rstat updates per second, `threads` threads on one group.
    pub rstat_mops_2t: f64,
    /// Million `fetch_add`s per second, `threads` threads on one shared
    /// atomic.
    pub shared_atomic_mops_2t: f64,
    /// Reference: ns per update of a bare per-CPU counter (rseq CPU id, one
    /// relaxed `fetch_add` on a cache-padded per-CPU slot, nothing else), 1t.
    pub bare_percpu_ns_1t: f64,
    /// Reference: the bare per-CPU counter, `threads` threads, Mops/s.
    pub bare_percpu_mops_2t: f64,
    /// Reference: ns per add of a bare restartable section on this CPU's
    /// slot, one slot per CPU and nothing around it
    /// ([`rstat::testing::BareSectionCounter`]), 1 thread: the floor under
    /// every update on the rseq path (`None` where sections are not
    /// available).
    pub bare_section_ns_1t: Option<f64>,
    /// `ns_per_update_1t / bare_section_ns_1t`: near 1 when the section
    /// itself (the chain through one slot) bounds an update, higher when
    /// the instructions around it do.
    pub update_vs_bare_section_1t: Option<f64>,
    /// `bare_percpu_mops_2t / shared_atomic_mops_2t`: the ceiling this
    /// machine allows for the rstat ratio.
    pub bare_ratio_vs_shared_atomic_2t: f64,
    /// `rstat_mops_2t / shared_atomic_mops_2t` (target >= 8).
    pub ratio_vs_shared_atomic_2t: f64,
    /// `ns_per_update_1t / shared_atomic_ns_1t` (target <= 1).
    pub ratio_vs_shared_atomic_1t: f64,
    /// `ns_per_update_1t` beside a memory-bound neighbour on CPU 1 (`None`
    /// on one CPU).
    pub ns_per_update_1t_neighbour: Option<f64>,
    /// `shared_atomic_ns_1t` beside the neighbour.
    pub shared_atomic_ns_1t_neighbour: Option<f64>,
    /// `bare_percpu_ns_1t` beside the neighbour.
    pub bare_percpu_ns_1t_neighbour: Option<f64>,
    /// `ns_per_update_1t_neighbour / shared_atomic_ns_1t_neighbour`.
    pub ratio_vs_shared_atomic_1t_neighbour: Option<f64>,
    /// ns per update of a 4096-unit item of a group at depth 5, delta 4096,
    /// 1 thread (same engine and policy).
    pub deep_large_ns_1t: f64,
    /// The depth-5, delta-4096 update, 2 threads on one group, Mops/s.
    pub deep_large_mops_2t: f64,
    /// ns per [`rstat::ControllerHandle::add`] (delta 1, the shallow group),
    /// 1 thread.
    pub controller_handle_ns_1t: f64,
    /// ns per [`rstat::StatHandle::add`] (item 0, delta 1, the shallow
    /// group), 1 thread.
    pub stat_handle_ns_1t: f64,
    /// ns per update on an engine built with the locked update path, 1t.
    pub locked_ns_1t: f64,
    /// The locked path, 2 threads on one group, Mops/s.
    pub locked_mops_2t: f64,
    /// `deep_large_ns_1t / ns_per_update_1t` (target <= 1.25).
    pub deep_large_vs_update_1t: f64,
    /// `deep_large_mops_2t / rstat_mops_2t` (target >= 0.8).
    pub deep_large_vs_update_2t: f64,
    /// `controller_handle_ns_1t / ns_per_update_1t` (target <= 1.5).
    pub controller_handle_vs_update_1t: f64,
    /// `controller_handle_ns_1t / stat_handle_ns_1t` (target <= 1.5:
    /// `ControllerHandle::add` within 1.5x of `StatHandle::add`).
    pub controller_handle_vs_stat_handle_1t: f64,
    /// `rstat_mops_2t / bare_percpu_mops_2t` (target >= 0.9).
    pub ratio_vs_bare_percpu_2t: f64,
    /// Where CPU ids came from.
    pub cpu_id_source: String,
    /// How the default engine's updates reach their slot: `rseq` or
    /// `locked` ([`rstat::Rstat::update_path`]).
    pub update_path: String,
    /// The flush policy of the measured controllers during the run.
    pub flush_policy: String,
    /// Updates per thread per sample.
    pub iters: u64,
    /// Threads of the multi-thread (`*_2t`) figures.
    pub threads: usize,
    /// The depth x delta sweep (empty if not run).
    pub shapes: Vec<ShapeRow>,
    /// The machine.
    pub machine: Machine,
}

/// Run the benchmark.
pub fn run(cfg: &Config) -> Report {
    // The rseq path where available (the default; see
    // `Builder::update_path`), beside the locked one.
    let main = Bench::new(rstat::Rstat::builder().update_path(rstat::UpdatePath::Rseq));
    let locked = Bench::new(rstat::Rstat::builder().update_path(rstat::UpdatePath::Locked));
    let n = cfg.iters;
    let t = cfg.threads.max(1);
    let mops_to_ns = |mops: f64| 1e3 / mops;

    // One vector of samples per series: `_1t` in ns per update on one
    // thread, `_nt` in Mops/s over `t` threads.
    let mut rstat_update_1t = Vec::new();
    let mut shared_atomic_1t = Vec::new();
    let mut plain_counter_1t = Vec::new();
    let mut rstat_update_nt = Vec::new();
    let mut shared_atomic_nt = Vec::new();
    let mut bare_percpu_1t = Vec::new();
    let mut bare_percpu_nt = Vec::new();
    let mut deep_large_1t = Vec::new();
    let mut deep_large_nt = Vec::new();
    let mut controller_handle_1t = Vec::new();
    let mut stat_handle_1t = Vec::new();
    let mut locked_1t = Vec::new();
    let mut locked_nt = Vec::new();
    let mut bare_section_1t = Vec::new();
    let section = rstat::testing::BareSectionCounter::new().map(Arc::new);
    let nr = rstat::percpu::cpu::possible_cpus();
    let bare: Arc<Vec<CachePadded<AtomicU64>>> = Arc::new(
        (0..nr)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect(),
    );
    let bare_loop = |bare: Arc<Vec<CachePadded<AtomicU64>>>| {
        move || {
            let b = black_box(&bare[..]);
            for _ in 0..n {
                let c = rstat::percpu::cpu::fold(rstat::percpu::cpu::current(), b.len());
                b[c].fetch_add(black_box(1), Ordering::Relaxed);
            }
        }
    };
    let shared = Arc::new(AtomicU64::new(0));
    let atomic_loop = |shared: Arc<AtomicU64>| {
        move || {
            let s = black_box(&*shared);
            for _ in 0..n {
                s.fetch_add(black_box(1), Ordering::Relaxed);
            }
        }
    };
    for _ in 0..cfg.samples {
        rstat_update_1t.push(mops_to_ns(item_loop(1, n, &main.item, 1)));
        shared_atomic_1t.push(mops_to_ns(per_thread(1, n, |_| {
            atomic_loop(Arc::clone(&shared))
        })));
        plain_counter_1t.push(mops_to_ns(per_thread(1, n, |_| {
            move || {
                let mut x = 0u64;
                for _ in 0..n {
                    x = black_box(x) + black_box(1);
                }
                black_box(x);
            }
        })));
        bare_percpu_1t.push(mops_to_ns(per_thread(1, n, |_| {
            bare_loop(Arc::clone(&bare))
        })));
        bare_percpu_nt.push(per_thread(t, n, |_| bare_loop(Arc::clone(&bare))));
        rstat_update_nt.push(item_loop(t, n, &main.item, 1));
        shared_atomic_nt.push(per_thread(t, n, |_| atomic_loop(Arc::clone(&shared))));
        deep_large_1t.push(mops_to_ns(item_loop(1, n, &main.deep_item, 4096)));
        deep_large_nt.push(item_loop(t, n, &main.deep_item, 4096));
        controller_handle_1t.push(mops_to_ns(per_thread(1, n, |_| {
            let (c, g) = (main.ctl.clone(), main.g.clone());
            move || {
                for _ in 0..n {
                    if c.add(&g, black_box(0), black_box(1)).is_err() {
                        panic!("ControllerHandle::add refused the bench group");
                    }
                }
            }
        })));
        stat_handle_1t.push(mops_to_ns(per_thread(1, n, |_| {
            let h = main.handle.clone();
            move || {
                for _ in 0..n {
                    if h.add(black_box(0), black_box(1)).is_err() {
                        panic!("StatHandle::add refused item 0");
                    }
                }
            }
        })));
        locked_1t.push(mops_to_ns(item_loop(1, n, &locked.item, 1)));
        if let Some(section) = &section {
            bare_section_1t.push(mops_to_ns(per_thread(1, n, |_| {
                let c = Arc::clone(section);
                move || {
                    let c = black_box(&*c);
                    for _ in 0..n {
                        c.add(black_box(1));
                    }
                }
            })));
        }
        locked_nt.push(item_loop(t, n, &locked.item, 1));
    }
    // The one-thread figures again beside the neighbour, interleaved.
    let (
        mut rstat_update_1t_neighbour,
        mut shared_atomic_1t_neighbour,
        mut bare_percpu_1t_neighbour,
    ) = (Vec::new(), Vec::new(), Vec::new());
    if crate::machine::online_cpus() >= 2 {
        let neighbour = crate::machine::Neighbour::start();
        for _ in 0..cfg.samples {
            rstat_update_1t_neighbour.push(mops_to_ns(item_loop(1, n, &main.item, 1)));
            shared_atomic_1t_neighbour.push(mops_to_ns(per_thread(1, n, |_| {
                atomic_loop(Arc::clone(&shared))
            })));
            bare_percpu_1t_neighbour.push(mops_to_ns(per_thread(1, n, |_| {
                bare_loop(Arc::clone(&bare))
            })));
        }
        assert!(neighbour.stop() > 0, "the memory-bound neighbour never ran");
    }
    let shapes = if cfg.sweep {
        sweep(&main.rs, n / 8, cfg.samples, t)
    } else {
        Vec::new()
    };
    unpin();
    // Honesty check, on every engine and controller measured: per sample,
    // the unit item took 1 + `t` threads' updates (plus the controller
    // handle's and the stat handle's on the default engine, and one more
    // beside the neighbour when it ran), the deep item 1 + `t` threads'
    // 4096s; the bare section counter one thread's 1s per sample.
    let (samples, n_i, t_i) = (cfg.samples as i64, n as i64, t as i64);
    let beside = rstat_update_1t_neighbour.len() as i64;
    main.check(
        &main.ctl,
        &main.g,
        samples * (3 + t_i) * n_i + beside * n_i,
        "default engine, unit item",
    );
    main.check(
        &main.bytes,
        &main.deep,
        samples * (1 + t_i) * n_i * 4096,
        "default engine, deep 4096-unit item",
    );
    locked.check(
        &locked.ctl,
        &locked.g,
        samples * (1 + t_i) * n_i,
        "locked engine",
    );

    if let Some(section) = &section {
        assert_eq!(
            section.sum(),
            bare_section_1t.len() as i64 * n_i,
            "the bare section counter lost adds"
        );
    }
    // The medians, each under its series' name.
    let optional = |v: Vec<f64>| (!v.is_empty()).then(|| median(v));
    let bare_section_1t = optional(bare_section_1t);
    let rstat_update_1t = median(rstat_update_1t);
    let shared_atomic_1t = median(shared_atomic_1t);
    let plain_counter_1t = median(plain_counter_1t);
    let rstat_update_nt = median(rstat_update_nt);
    let shared_atomic_nt = median(shared_atomic_nt);
    let bare_percpu_1t = median(bare_percpu_1t);
    let bare_percpu_nt = median(bare_percpu_nt);
    let deep_large_1t = median(deep_large_1t);
    let deep_large_nt = median(deep_large_nt);
    let controller_handle_1t = median(controller_handle_1t);
    let stat_handle_1t = median(stat_handle_1t);
    let locked_1t = median(locked_1t);
    let locked_nt = median(locked_nt);
    let rstat_update_1t_neighbour = optional(rstat_update_1t_neighbour);
    let shared_atomic_1t_neighbour = optional(shared_atomic_1t_neighbour);
    let bare_percpu_1t_neighbour = optional(bare_percpu_1t_neighbour);
    Report {
        ns_per_update_1t: round(rstat_update_1t, 3),
        shared_atomic_ns_1t: round(shared_atomic_1t, 3),
        plain_thread_local_ns_1t: round(plain_counter_1t, 3),
        rstat_mops_2t: round(rstat_update_nt, 1),
        shared_atomic_mops_2t: round(shared_atomic_nt, 1),
        bare_percpu_ns_1t: round(bare_percpu_1t, 3),
        bare_percpu_mops_2t: round(bare_percpu_nt, 1),
        bare_section_ns_1t: bare_section_1t.map(|x| round(x, 3)),
        update_vs_bare_section_1t: bare_section_1t.map(|x| round(rstat_update_1t / x, 2)),
        bare_ratio_vs_shared_atomic_2t: round(bare_percpu_nt / shared_atomic_nt, 2),
        ratio_vs_shared_atomic_2t: round(rstat_update_nt / shared_atomic_nt, 2),
        ratio_vs_shared_atomic_1t: round(rstat_update_1t / shared_atomic_1t, 2),
        ns_per_update_1t_neighbour: rstat_update_1t_neighbour.map(|x| round(x, 3)),
        shared_atomic_ns_1t_neighbour: shared_atomic_1t_neighbour.map(|x| round(x, 3)),
        bare_percpu_ns_1t_neighbour: bare_percpu_1t_neighbour.map(|x| round(x, 3)),
        ratio_vs_shared_atomic_1t_neighbour: rstat_update_1t_neighbour
            .zip(shared_atomic_1t_neighbour)
            .map(|(r, a)| round(r / a, 2)),
        deep_large_ns_1t: round(deep_large_1t, 3),
        deep_large_mops_2t: round(deep_large_nt, 1),
        controller_handle_ns_1t: round(controller_handle_1t, 3),
        stat_handle_ns_1t: round(stat_handle_1t, 3),
        locked_ns_1t: round(locked_1t, 3),
        locked_mops_2t: round(locked_nt, 1),
        deep_large_vs_update_1t: round(deep_large_1t / rstat_update_1t, 2),
        deep_large_vs_update_2t: round(deep_large_nt / rstat_update_nt, 2),
        controller_handle_vs_update_1t: round(controller_handle_1t / rstat_update_1t, 2),
        controller_handle_vs_stat_handle_1t: round(controller_handle_1t / stat_handle_1t, 2),
        ratio_vs_bare_percpu_2t: round(rstat_update_nt / bare_percpu_nt, 2),
        cpu_id_source: main.rs.cpu_id_source().to_string(),
        update_path: main.rs.update_path().to_string(),
        flush_policy: policy_of(&[&main.ctl, &main.bytes]),
        iters: n,
        threads: t,
        shapes,
        machine: Machine::detect(),
    }
}

/// The measured controllers' flush policy (they share the engine default;
/// if one was changed, all are listed).
fn policy_of(ctls: &[&rstat::ControllerHandle]) -> String {
    let mut names: Vec<&str> = ctls.iter().map(|c| c.flush_policy().name()).collect();
    names.dedup();
    names.join(", ")
}

/// Human-readable table.
pub fn table(r: &Report) -> String {
    let row_ns = |name: &str, v: f64| format!("{name:<40} {v:>12.2} ns\n");
    let row_mops = |name: &str, v: f64| format!("{name:<40} {v:>12.1} Mops/s\n");
    let t = r.threads;
    let mut s = format!(
        "rstat bench update ({} updates per thread per sample, median)\n{}\n\
         update path: {}; flush policy: {}\n\n{:<40} {:>12}\n",
        r.iters,
        r.machine.line(),
        r.update_path,
        r.flush_policy,
        "case",
        "value"
    );
    s += &row_ns("rstat update, 1 thread", r.ns_per_update_1t);
    s += &row_ns("shared AtomicU64::fetch_add, 1t", r.shared_atomic_ns_1t);
    s += &row_ns("per-thread plain counter, 1t", r.plain_thread_local_ns_1t);
    s += &row_mops(&format!("rstat update, {t} threads"), r.rstat_mops_2t);
    s += &row_mops(
        &format!("shared AtomicU64::fetch_add, {t}t"),
        r.shared_atomic_mops_2t,
    );
    s += &row_ns("reference: bare per-CPU counter, 1t", r.bare_percpu_ns_1t);
    s += &row_mops(
        &format!("reference: bare per-CPU counter, {t}t"),
        r.bare_percpu_mops_2t,
    );
    if let Some(x) = r.bare_section_ns_1t {
        s += &row_ns("reference: bare restartable section, 1t", x);
    }
    s += &row_ns("depth 5, delta 4096 (unit 4096), 1t", r.deep_large_ns_1t);
    s += &row_mops(
        &format!("depth 5, delta 4096 (unit 4096), {t}t"),
        r.deep_large_mops_2t,
    );
    s += &row_ns("ControllerHandle::add, 1t", r.controller_handle_ns_1t);
    s += &row_ns("StatHandle::add, 1t", r.stat_handle_ns_1t);
    s += &row_ns("locked update path, 1t", r.locked_ns_1t);
    s += &row_mops(&format!("locked update path, {t}t"), r.locked_mops_2t);
    if let (Some(u), Some(a), Some(b), Some(ratio)) = (
        r.ns_per_update_1t_neighbour,
        r.shared_atomic_ns_1t_neighbour,
        r.bare_percpu_ns_1t_neighbour,
        r.ratio_vs_shared_atomic_1t_neighbour,
    ) {
        s += "
beside a memory-bound neighbour on CPU 1 (the measured thread on CPU 0):
";
        s += &row_ns("rstat update, 1t", u);
        s += &row_ns("shared AtomicU64::fetch_add, 1t", a);
        s += &row_ns("reference: bare per-CPU counter, 1t", b);
        s += &format!("1-thread cost vs shared atomic there: {ratio:.2}x\n");
    }
    let check = |ok: bool| if ok { "ok" } else { "MISSED" };
    s += &format!(
        "\nratio vs shared atomic, {t} threads: {:.2}x (target >= 8; bare per-CPU counter: {:.2}x)\n\
         1-thread cost vs shared atomic:    {:.2}x (target <= 1) {}\n\
         {t}-thread rate vs bare per-CPU:     {:.2}x (target >= 0.9) {}\n\
         deep large vs update, 1 thread:    {:.2}x (target <= 1.25) {}\n\
         deep large vs update, {t} threads:   {:.2}x (target >= 0.8) {}\n\
         ControllerHandle::add vs update:   {:.2}x (target <= 1.5) {}\n\
         ControllerHandle vs StatHandle:    {:.2}x (target <= 1.5) {}\n",
        r.ratio_vs_shared_atomic_2t,
        r.bare_ratio_vs_shared_atomic_2t,
        r.ratio_vs_shared_atomic_1t,
        check(r.ratio_vs_shared_atomic_1t <= 1.0),
        r.ratio_vs_bare_percpu_2t,
        check(r.ratio_vs_bare_percpu_2t >= 0.9),
        r.deep_large_vs_update_1t,
        check(r.deep_large_vs_update_1t <= 1.25),
        r.deep_large_vs_update_2t,
        check(r.deep_large_vs_update_2t >= 0.8),
        r.controller_handle_vs_update_1t,
        check(r.controller_handle_vs_update_1t <= 1.5),
        r.controller_handle_vs_stat_handle_1t,
        check(r.controller_handle_vs_stat_handle_1t <= 1.5),
    );
    if !r.shapes.is_empty() {
        s += &format!("\nsweep (item unit 1):  depth  delta     ns 1t   Mops/s {t}t\n");
        for c in &r.shapes {
            s += &format!(
                "                     {:>5} {:>6} {:>9.2} {:>10.1}\n",
                c.depth, c.delta, c.ns_1t, c.mops_nt
            );
        }
    }
    s
}
