//! `rstat bench limits`: limits that slow a tenant, not the process.
//!
//! Two measurements on one tokio runtime (2 workers), each with two
//! tenants side by side:
//!
//! - **`cpu.max`**: tenants A and B each run [`Config::tasks`] scoped
//!   tasks that burn [`Config::burn_us`] of CPU and yield, for
//!   [`Config::cpu_secs`]; A has `cpu.max` "20000 100000" (20% of a CPU).
//!   Reported: each tenant's CPU use over the run (its `usage_usec`, an
//!   exact read, over the wall time) in CPUs; A's error against 0.2 of a
//!   CPU; B's use against what A left of the machine's CPUs; A's
//!   `nr_periods`, `nr_throttled`, `throttled_usec`.
//! - **`memory.high`**: tenants A and B each allocate 64 KiB buffers
//!   through `Accounted<System>` (called explicitly, not installed as the
//!   process's allocator) into a cache that an evictor thread empties at a
//!   fixed rate (the work reclaim would do: written-back pages, expired
//!   entries), for [`Config::mem_secs`]; A has `memory.high` 8 MiB, both a
//!   cap of 128 MiB on their caches. Without throttling an allocator
//!   outruns the evictor and its usage runs to the cap; with it, A is
//!   held back while it is over `high`, so its usage stays near `high`.
//!   Reported: each tenant's allocation rate, A's slowdown against B, and
//!   each one's peak `memory.current` against A's `high`.

pub mod experiment;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rstat::alloc::{heap_config, Accounted};
use rstat::memory::{Limit, Memory};
use rstat::{Group, Rstat};
use serde::Serialize;

use crate::machine::{round, Machine};

/// Settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Length of the `cpu.max` run, seconds.
    pub cpu_secs: f64,
    /// Length of the `memory.high` run, seconds.
    pub mem_secs: f64,
    /// Burning tasks per tenant.
    pub tasks: usize,
    /// CPU burned per poll, µs.
    pub burn_us: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cpu_secs: 10.0,
            mem_secs: 3.0,
            tasks: 4,
            burn_us: 200,
        }
    }
}

/// The `cpu.max` given to tenant A.
pub const CPU_MAX: &str = "20000 100000";
/// Tenant A's share of a CPU by [`CPU_MAX`].
pub const CPU_MAX_SHARE: f64 = 0.2;
/// Tenant A's `memory.high`, bytes.
pub const HIGH: u64 = 8 << 20;
/// Each tenant's cache stops growing here, bytes.
pub const CAP: u64 = 128 << 20;
/// The buffer size, bytes.
pub const BUF: usize = 64 << 10;
/// The evictor's rate, bytes per second (per tenant).
pub const EVICT_RATE: u64 = 32 << 20;

/// Results.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// A's `cpu.max`.
    pub cpu_max: String,
    /// A's CPU use over the run, in CPUs.
    pub a_cpus: f64,
    /// B's.
    pub b_cpus: f64,
    /// |a_cpus - 0.2| / 0.2, percent (target: at most 10).
    pub a_share_error_pct: f64,
    /// b_cpus / (online CPUs - a_cpus): how much of what A left B used
    /// (target: at least 0.9).
    pub b_cpus_vs_rest: f64,
    /// A's `cpu.stat` bandwidth lines.
    pub a_nr_periods: u64,
    /// See `a_nr_periods`.
    pub a_nr_throttled: u64,
    /// See `a_nr_periods`.
    pub a_throttled_usec: u64,
    /// A's `memory.high`, bytes.
    pub high_bytes: u64,
    /// MiB/s A allocated.
    pub a_alloc_mib_s: f64,
    /// MiB/s B allocated.
    pub b_alloc_mib_s: f64,
    /// b_alloc_mib_s / a_alloc_mib_s (target: at least 2: A is slowed).
    pub a_slowdown: f64,
    /// A's `memory.peak` / its `high` (target: at most 1.5: usage stays
    /// near `high`).
    pub a_peak_vs_high: f64,
    /// B's `memory.peak` / A's `high` (B is not held: it runs to its cap).
    pub b_peak_vs_high: f64,
    /// The machine's 1-minute load average at the end.
    pub loadavg_1m: f64,
    /// The machine.
    pub machine: Machine,
}

/// Burn `us` of the thread's CPU time (its clock read every few thousand
/// iterations: mostly user time, not system calls).
fn burn(us: u64) {
    let t = rstat::attach::thread_cpu_time();
    let mut x = 0u64;
    while rstat::attach::thread_cpu_time() - t < Duration::from_micros(us) {
        for i in 0..2000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
    }
}

fn cpu_usage_us(rs: &Rstat, g: &Group) -> f64 {
    rs.cpu()
        .and_then(|c| c.read_exact(g).ok())
        .and_then(|s| s.get("usage_usec"))
        .unwrap_or(0) as f64
}

/// The `cpu.max` run: (a_cpus, b_cpus, a's stat).
fn cpu_run(cfg: &Config) -> (f64, f64, rstat::CpuMaxStat) {
    let rs = Rstat::new();
    let a = rs.root().create_child("a").expect("group");
    let b = rs.root().create_child("b").expect("group");
    a.write_cpu_max(CPU_MAX).expect("cpu.max");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime");
    let secs = cfg.cpu_secs.max(0.1);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let burn_us = cfg.burn_us.max(1);
    let (ua, ub) = rt.block_on(async {
        let mut hs = Vec::new();
        for g in [&a, &b] {
            for _ in 0..cfg.tasks.max(1) {
                hs.push(tokio::spawn(g.scope(async move {
                    while Instant::now() < deadline {
                        burn(burn_us);
                        tokio::task::yield_now().await;
                    }
                })));
            }
        }
        // Read at the deadline, while the tasks run (a held task may sleep
        // past it).
        tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)).await;
        rstat::attach::charge_all_threads();
        let read = (cpu_usage_us(&rs, &a), cpu_usage_us(&rs, &b));
        for h in hs {
            let _ = h.await;
        }
        read
    });
    drop(rt);
    let wall = secs * 1e6;
    (ua / wall, ub / wall, a.cpu_max_stat())
}

/// One tenant's cache: buffers, and their total.
#[derive(Default)]
struct Cache {
    bufs: VecDeque<usize>,
    bytes: u64,
}

/// The `memory.high` run: (a MiB/s, b MiB/s, a peak, b peak).
fn mem_run(cfg: &Config) -> (f64, f64, u64, u64) {
    let rs = Rstat::builder().build().expect("engine");
    let mem = Memory::register_with(&rs, heap_config()).expect("memory controller");
    let acc: &'static Accounted<System> = Box::leak(Box::new(Accounted::new(System)));
    acc.install(&rs, &mem).expect("bind");
    let a = rs.root().create_child("a").expect("group");
    let b = rs.root().create_child("b").expect("group");
    mem.set_limit(&a, Limit::High, HIGH).expect("memory.high");
    let layout = Layout::from_size_align(BUF, 16).expect("layout");
    let caches: [Arc<Mutex<Cache>>; 2] = Default::default();
    let allocated = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let stop = Arc::new(AtomicBool::new(false));
    // The evictors: each frees its tenant's oldest buffers at EVICT_RATE.
    let evictors: Vec<_> = caches
        .iter()
        .map(|c| {
            let (c, stop) = (Arc::clone(c), Arc::clone(&stop));
            std::thread::spawn(move || {
                let per_ms = EVICT_RATE / 1000;
                let mut owed = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                    owed += per_ms;
                    let mut c = c.lock().unwrap_or_else(|p| p.into_inner());
                    while owed >= BUF as u64 {
                        let Some(p) = c.bufs.pop_front() else {
                            owed = 0;
                            break;
                        };
                        c.bytes -= BUF as u64;
                        owed -= BUF as u64;
                        // SAFETY: allocated by `acc` with `layout` below.
                        unsafe { acc.dealloc(p as *mut u8, layout) };
                    }
                }
            })
        })
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let secs = cfg.mem_secs.max(0.1);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    rt.block_on(async {
        let mut hs = Vec::new();
        for (i, g) in [&a, &b].into_iter().enumerate() {
            let (cache, n) = (Arc::clone(&caches[i]), Arc::clone(&allocated[i]));
            hs.push(tokio::spawn(g.scope(async move {
                while Instant::now() < deadline {
                    let full = cache.lock().unwrap_or_else(|p| p.into_inner()).bytes >= CAP;
                    if !full {
                        // SAFETY: non-zero size; freed by the evictor or below.
                        let p = unsafe { acc.alloc(layout) };
                        if !p.is_null() {
                            let mut c = cache.lock().unwrap_or_else(|p| p.into_inner());
                            c.bufs.push_back(p as usize);
                            c.bytes += BUF as u64;
                            n.fetch_add(BUF as u64, Ordering::Relaxed);
                        }
                    }
                    tokio::task::yield_now().await;
                }
            })));
        }
        for h in hs {
            let _ = h.await;
        }
    });
    drop(rt);
    stop.store(true, Ordering::Relaxed);
    for e in evictors {
        let _ = e.join();
    }
    let peaks = (mem.peak(&a).unwrap_or(0), mem.peak(&b).unwrap_or(0));
    for c in &caches {
        let mut c = c.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(p) = c.bufs.pop_front() {
            // SAFETY: as above.
            unsafe { acc.dealloc(p as *mut u8, layout) };
        }
    }
    let rate = |n: &AtomicU64| n.load(Ordering::Relaxed) as f64 / secs / (1 << 20) as f64;
    (rate(&allocated[0]), rate(&allocated[1]), peaks.0, peaks.1)
}

fn loadavg() -> f64 {
    crate::lab::host::loadavg().unwrap_or(f64::NAN)
}

/// Run both measurements.
pub fn run(cfg: &Config) -> Report {
    let machine = Machine::detect();
    let (a_cpus, b_cpus, st) = cpu_run(cfg);
    let (a_rate, b_rate, a_peak, b_peak) = mem_run(cfg);
    let rest = machine.online_cpus as f64 - a_cpus;
    Report {
        cpu_max: CPU_MAX.to_owned(),
        a_cpus: round(a_cpus, 3),
        b_cpus: round(b_cpus, 3),
        a_share_error_pct: round((a_cpus - CPU_MAX_SHARE).abs() / CPU_MAX_SHARE * 100.0, 2),
        b_cpus_vs_rest: round(if rest > 0.0 { b_cpus / rest } else { f64::NAN }, 3),
        a_nr_periods: st.nr_periods,
        a_nr_throttled: st.nr_throttled,
        a_throttled_usec: st.throttled_usec,
        high_bytes: HIGH,
        a_alloc_mib_s: round(a_rate, 1),
        b_alloc_mib_s: round(b_rate, 1),
        a_slowdown: round(
            if a_rate > 0.0 {
                b_rate / a_rate
            } else {
                f64::INFINITY
            },
            2,
        ),
        a_peak_vs_high: round(a_peak as f64 / HIGH as f64, 3),
        b_peak_vs_high: round(b_peak as f64 / HIGH as f64, 3),
        loadavg_1m: round(loadavg(), 2),
        machine,
    }
}

/// Human-readable table.
pub fn table(r: &Report) -> String {
    format!(
        "rstat bench limits\n{}\n\n\
         cpu.max: tenant A at \"{}\" (0.2 of a CPU) beside tenant B (no limit), both busy\n\
         {:<34} {:>10}\n{:<34} {:>10}\n{:<34} {:>10}\n{:<34} {:>10}\n\
         {:<34} {:>10}\n{:<34} {:>10}\n{:<34} {:>10}\n\n\
         memory.high: tenant A at {} MiB beside tenant B (none), evictors freeing {} MiB/s each\n\
         {:<34} {:>10}\n{:<34} {:>10}\n{:<34} {:>10}\n{:<34} {:>10}\n{:<34} {:>10}\n",
        r.machine.line(),
        r.cpu_max,
        "A CPUs",
        r.a_cpus,
        "A error vs 0.2, %",
        r.a_share_error_pct,
        "B CPUs",
        r.b_cpus,
        "B / what A left",
        r.b_cpus_vs_rest,
        "A nr_periods",
        r.a_nr_periods,
        "A nr_throttled",
        r.a_nr_throttled,
        "A throttled_usec",
        r.a_throttled_usec,
        r.high_bytes >> 20,
        EVICT_RATE >> 20,
        "A allocated, MiB/s",
        r.a_alloc_mib_s,
        "B allocated, MiB/s",
        r.b_alloc_mib_s,
        "A slowdown (B / A)",
        r.a_slowdown,
        "A peak / its high",
        r.a_peak_vs_high,
        "B peak / A's high",
        r.b_peak_vs_high,
    )
}
