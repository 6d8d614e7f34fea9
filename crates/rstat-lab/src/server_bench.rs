//! `rstat bench server`: what rstat costs a server, end to end.
//!
//! A tokio multi-thread runtime (2 workers) serves in-process requests for
//! [`TENANTS`] tenants over [`Config::in_flight`] connections, each a task
//! that serves its requests one after another (a closed loop, as a
//! keep-alive connection does). A request allocates a few objects, yields,
//! burns `W` µs of CPU work (an iteration count calibrated once at start,
//! the same in every variant), counts, and frees its objects, one of them
//! through a shared queue: freed by a later request, often on the other
//! worker (see [`workload`] for the exact steps). `W` is 5, 20 and
//! 100 µs. Four variants, interleaved sample by sample in a rotating
//! order:
//!
//! - **bare** (the baseline): no accounting; objects from mimalloc;
//! - **tenant**: rstat as a service already instrumented with `tracing`
//!   would use it: a span per request with `tenant = name`, which
//!   `rstat_tracing::GroupLayer::children_of` turns into the tenant's
//!   group (the future is `Instrument`ed, so the group is current during
//!   each of its polls and the CPU time is charged in the library's
//!   default mode: monotonic-clock segments reconciled with the thread's
//!   CPU clock); objects from `rstat::alloc::Accounted<mimalloc>`; three
//!   counter updates per request on the tenant's cached `StatItem`s;
//! - **request**: a group per request under its tenant (`create_child`,
//!   the future `scope`d in it, `remove` after), the same allocator, the
//!   three counters updated on the request's group;
//! - **peers**: what services run today: a `tokio-metrics` `TaskMonitor`
//!   per tenant instrumenting the request, `prometheus` `IntCounterVec`s
//!   (children cached per tenant), and a per-tenant counting allocator
//!   (an owner word and one shared atomic per tenant, set per poll by
//!   a wrapper as allocation trackers do).
//!
//! The allocators are called through their `GlobalAlloc` methods, not
//! installed as the process's `#[global_allocator]`, so all four run in
//! one process: only the requests' objects are charged (see
//! [`workload`]).
//!
//! **Cost.** A sample serves the same requests (same tenants, sizes and
//! seeds) in each variant; its cost per request is the process's CPU time
//! (`CLOCK_PROCESS_CPUTIME_ID`: the workers, and rstat's background
//! charger and flusher) over the requests served, which a machine shared
//! with other work disturbs less than the wall clock. The overhead of a
//! variant is the median over samples of its cost over the bare one's in
//! the same sample (in % and ns per request); requests/s are by the wall
//! clock (median), with the wall-clock overhead beside them.
//!
//! **Correctness, in the same run.** After the timed samples, each rstat
//! variant serves a check batch per `W` with the worker's thread CPU clock
//! read around each synchronous stretch of every request's body (both
//! stretches, inside the group; a read's own cost, measured by a second
//! read at once, added to each, as in `rstat bench enter`). That sum per
//! tenant is the truth; what rstat charged is the tenant group's
//! `usage_usec` (an exact read after `charge_all_threads`) less what it
//! held before the batch. The truth leaves out what the group is current
//! for outside the body: the part of each poll's entering and leaving
//! after and before their clock reads (the span's enter and exit, the
//! scope's), so rstat's charge is expected a little above it, by a fixed
//! amount per poll (more, relatively, at small `W`). So the batch also
//! reads the clock around each whole poll of the wrapped request, outside
//! the span or scope, and around dropping it: an upper bound on what the
//! group was current for. `cpu_error_pct_max` is the strict figure
//! against the body's time; `cpu_outside_bounds_pct_max` says how far a
//! charge fell outside [body, whole polls]. The requests'
//! counters are checked against the batch's requests. At the end every
//! tenant's `heap` and `heap_overhead` (`memory.stat`, exact read) and
//! `memory.current`, after draining the stocks, must equal what its live
//! objects (those still in the queues) hold, and zero once they are freed:
//! `heap_exact`.

pub mod experiment;
mod workload;

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use mimalloc::MiMalloc;
use rstat::alloc::{heap_config, overhead, Accounted};
use rstat::attach::{charge_all_threads, thread_cpu_time};
use rstat::memory::Memory;
use rstat::{ControllerHandle, Group, Rstat};
use rstat_tracing::GroupLayer;
use serde::Serialize;
use tracing_subscriber::layer::SubscriberExt;

use crate::alloc_bench::trackers::{Eager, Node};
use crate::machine::{median, round, Machine};
use workload::{connection, drain_queue, spin, Ctx, Ledger, COUNTERS, TENANT_NAMES};
pub use workload::{Variant, HANDED, OBJECTS, TENANTS, VARIANTS};

/// Worker threads of the runtime (the lab's machine has 2 CPUs).
pub const WORKERS: usize = 2;

/// Settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The CPU work per request, µs.
    pub works_us: Vec<u64>,
    /// Samples per work (each runs every variant once; medians).
    pub samples: usize,
    /// µs of CPU work per variant per sample: a sample serves
    /// `sample_work_us / W` requests (so every `W` takes about as long).
    pub sample_work_us: u64,
    /// Connections (requests in flight).
    pub in_flight: usize,
    /// Requests of each correctness check batch (per rstat variant per
    /// work).
    pub check_requests: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            works_us: vec![5, 20, 100],
            samples: 15,
            sample_work_us: 200_000,
            in_flight: 64,
            check_requests: 4000,
        }
    }
}

/// Results.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The tenant variant's CPU time per request over the bare one's, in
    /// percent, at W = 5 µs (median of per-sample ratios).
    pub overhead_pct_tenant_w5: f64,
    /// The same at W = 20 µs (target: at most 2).
    pub overhead_pct_tenant_w20: f64,
    /// The same at W = 100 µs.
    pub overhead_pct_tenant_w100: f64,
    /// The group-per-request variant's, at W = 5 µs.
    pub overhead_pct_request_w5: f64,
    /// The same at W = 20 µs (target: at most 7).
    pub overhead_pct_request_w20: f64,
    /// The same at W = 100 µs.
    pub overhead_pct_request_w100: f64,
    /// The peers' (tokio-metrics, prometheus, a counting allocator), at
    /// W = 5 µs.
    pub peers_overhead_pct_w5: f64,
    /// The same at W = 20 µs.
    pub peers_overhead_pct_w20: f64,
    /// The same at W = 100 µs.
    pub peers_overhead_pct_w100: f64,
    /// The tenant variant's extra CPU time per request, ns, at W = 5 µs
    /// (median of per-sample differences).
    pub overhead_ns_tenant_w5: f64,
    /// The same at W = 20 µs.
    pub overhead_ns_tenant_w20: f64,
    /// The same at W = 100 µs.
    pub overhead_ns_tenant_w100: f64,
    /// The group-per-request variant's, ns, at W = 5 µs.
    pub overhead_ns_request_w5: f64,
    /// The same at W = 20 µs.
    pub overhead_ns_request_w20: f64,
    /// The same at W = 100 µs.
    pub overhead_ns_request_w100: f64,
    /// The peers', ns, at W = 5 µs.
    pub peers_overhead_ns_w5: f64,
    /// The same at W = 20 µs.
    pub peers_overhead_ns_w20: f64,
    /// The same at W = 100 µs.
    pub peers_overhead_ns_w100: f64,
    /// (tenant − peers) CPU time per request over the bare one's, percent,
    /// at W = 20 µs: median of per-sample values (target: at most 0, the
    /// tenant variant costs no more than the peers).
    pub tenant_minus_peers_pct_w20: f64,
    /// The largest |charged − truth| / truth over the tenants of every
    /// check batch (both rstat variants, every W), percent (target: at
    /// most 1).
    pub cpu_error_pct_max: f64,
    /// The largest distance of a tenant's charge outside [truth, the
    /// clocks around each whole wrapped poll] over its truth, percent, in
    /// any check batch (0: every charge between the body's time and the
    /// whole polls'; see the module docs).
    pub cpu_outside_bounds_pct_max: f64,
    /// Every tenant's heap, heap overhead and memory.current matched its
    /// live objects after draining, and were zero once they were freed.
    pub heap_exact: bool,
    /// Tenants (of both rstat variants, at both points) whose heap did
    /// not match (0 when `heap_exact`).
    pub heap_mismatches: u64,
    /// Every tenant's `requests` counter grew by its requests in every
    /// check batch.
    pub counters_exact: bool,
    /// Per W: requests/s, CPU time per request and overheads of each
    /// variant.
    pub rows: Vec<Row>,
    /// Per rstat variant and W: the CPU check.
    pub checks: Vec<Check>,
    /// The heap check, per (variant, point, tenant) that did not match.
    pub heap_mismatch_list: Vec<String>,
    /// Calibrated work: iterations of the spin loop per µs of CPU time.
    pub spin_iters_per_us: f64,
    /// Worker threads.
    pub workers: usize,
    /// Connections (requests in flight).
    pub in_flight: usize,
    /// Tenants.
    pub tenants: usize,
    /// Samples per W.
    pub samples: usize,
    /// Failed allocations, group creations or removals, panicked tasks
    /// (must be 0).
    pub errors: u64,
    /// What was measured.
    pub what: String,
    /// The 1-minute load average when the run ended (above the online
    /// CPUs: the machine was busy and the figures are noisy).
    pub loadavg_1m: f64,
    /// The machine.
    pub machine: Machine,
}

/// One W's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// CPU work per request, µs.
    pub work_us: u64,
    /// Requests per sample per variant.
    pub requests: usize,
    /// Requests per second by the wall clock (median), per variant.
    pub bare_rps: f64,
    /// See `bare_rps`.
    pub tenant_rps: f64,
    /// See `bare_rps`.
    pub request_rps: f64,
    /// See `bare_rps`.
    pub peers_rps: f64,
    /// Process CPU time per request, ns (median), per variant.
    pub bare_cpu_ns: f64,
    /// See `bare_cpu_ns`.
    pub tenant_cpu_ns: f64,
    /// See `bare_cpu_ns`.
    pub request_cpu_ns: f64,
    /// See `bare_cpu_ns`.
    pub peers_cpu_ns: f64,
    /// Extra CPU time per request over bare, ns (median of per-sample
    /// differences).
    pub tenant_overhead_ns: f64,
    /// See `tenant_overhead_ns`.
    pub request_overhead_ns: f64,
    /// See `tenant_overhead_ns`.
    pub peers_overhead_ns: f64,
    /// CPU time per request over bare, percent (median of per-sample
    /// ratios).
    pub tenant_overhead_pct: f64,
    /// See `tenant_overhead_pct`.
    pub request_overhead_pct: f64,
    /// See `tenant_overhead_pct`.
    pub peers_overhead_pct: f64,
    /// Wall time per sample over bare, percent (median of per-sample
    /// ratios; disturbed by other work on the machine).
    pub tenant_wall_overhead_pct: f64,
    /// See `tenant_wall_overhead_pct`.
    pub request_wall_overhead_pct: f64,
    /// See `tenant_wall_overhead_pct`.
    pub peers_wall_overhead_pct: f64,
}

/// The CPU check of one rstat variant at one W.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// `tenant` or `request`.
    pub variant: String,
    /// CPU work per request, µs.
    pub work_us: u64,
    /// Requests in the batch.
    pub requests: u64,
    /// The mean body time per request by the workers' clocks, µs (the
    /// calibrated work plus the allocations, counting and clock reads).
    pub body_us_mean: f64,
    /// The truth over all tenants, µs.
    pub truth_usec: u64,
    /// What rstat charged them, µs.
    pub charged_usec: i64,
    /// (charged − truth) / truth over all tenants, percent (signed).
    pub error_pct_total: f64,
    /// The largest |charged − truth| / truth of one tenant, percent.
    pub error_pct_max: f64,
    /// The upper bound over all tenants, µs: the workers' clocks around
    /// each whole poll of the wrapped requests (and their drop).
    pub outer_usec: u64,
    /// The largest distance of one tenant's charge outside [truth, upper
    /// bound], over its truth, percent (0: every charge inside).
    pub outside_bounds_pct_max: f64,
    /// That tenant.
    pub worst_tenant: String,
}

/// The process's CPU time (every thread).
fn process_cputime() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec pointer; the clock id is a constant.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Spin iterations per µs of this thread's CPU time: the fastest of a few
/// tries (the least disturbed).
fn calibrate() -> f64 {
    let iters = 2_000_000u64;
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = thread_cpu_time();
        spin(iters, 7);
        let ns = (thread_cpu_time() - t).as_nanos() as f64;
        best = best.min(ns);
    }
    if best.is_finite() && best > 0.0 {
        iters as f64 / (best / 1000.0)
    } else {
        1000.0
    }
}

thread_local! {
    /// A worker's tracing default (the tenant variant's subscriber), set
    /// when the worker starts and dropped when it stops.
    static DISPATCH: RefCell<Option<tracing::dispatcher::DefaultGuard>> =
        const { RefCell::new(None) };
}

/// The runtime: `WORKERS` workers, each with `dispatch` as its tracing
/// default (as a global default would be, without setting the process's
/// one).
fn runtime(dispatch: tracing::Dispatch) -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .on_thread_start(move || {
            let g = tracing::dispatcher::set_default(&dispatch);
            DISPATCH.with(|d| *d.borrow_mut() = Some(g));
        })
        .on_thread_stop(|| {
            let g = DISPATCH.with(|d| d.borrow_mut().take());
            drop(g);
        })
        .build()
        .map_err(|e| format!("building the tokio runtime: {e}"))
}

/// One batch: `conns` connections of `per_conn` requests of variant `v`.
/// Returns the process's CPU time and the wall time it took.
#[allow(clippy::too_many_arguments)]
fn batch(
    rt: &tokio::runtime::Runtime,
    ctx: &Arc<Ctx>,
    v: Variant,
    conns: usize,
    per_conn: usize,
    iters: u64,
    seed: u64,
    first_id: u64,
    ledger: Option<Arc<Ledger>>,
) -> (Duration, Duration) {
    let (c0, t0) = (process_cputime(), Instant::now());
    rt.block_on(async {
        let tasks: Vec<_> = (0..conns)
            .map(|c| {
                tokio::spawn(connection(
                    Arc::clone(ctx),
                    v,
                    per_conn,
                    iters,
                    seed ^ (c as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                    first_id + (c * per_conn) as u64,
                    ledger.clone(),
                ))
            })
            .collect();
        for t in tasks {
            if t.await.is_err() {
                ctx.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    (process_cputime().saturating_sub(c0), t0.elapsed())
}

fn rstat_err(what: &str) -> impl Fn(rstat::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Each tenant's `usage_usec` and `requests` (exact reads), after charging
/// every attached thread's CPU time.
fn tenant_totals(
    tenants: &[Group],
    cpu: &ControllerHandle,
    counters: &ControllerHandle,
) -> Result<Vec<(i64, i64)>, String> {
    charge_all_threads();
    tenants
        .iter()
        .map(|g| {
            let u = cpu.read_exact(g).map_err(rstat_err("reading cpu.stat"))?;
            let r = counters
                .read_exact(g)
                .map_err(rstat_err("reading the counters"))?;
            Ok((
                u.get("usage_usec").unwrap_or(0),
                r.get("requests").unwrap_or(0),
            ))
        })
        .collect()
}

/// The medians of one W's samples; `cpu[v][s]`, `wall[v][s]` in
/// [`VARIANTS`] order.
fn row(work_us: u64, requests: usize, cpu: &[Vec<f64>; 4], wall: &[Vec<f64>; 4]) -> Row {
    let n = cpu[0].len();
    let per = |f: &dyn Fn(usize) -> f64| median((0..n).map(f).collect());
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let pct =
        |x: &[Vec<f64>; 4], v: usize| round((per(&|s| ratio(x[v][s], x[0][s])) - 1.0) * 100.0, 2);
    let ns = |v: usize| round(per(&|s| cpu[v][s] - cpu[0][s]), 1);
    let rps = |v: usize| round(per(&|s| ratio(requests as f64, wall[v][s] / 1e9)), 0);
    let cpu_ns = |v: usize| round(median(cpu[v].clone()), 1);
    Row {
        work_us,
        requests,
        bare_rps: rps(0),
        tenant_rps: rps(1),
        request_rps: rps(2),
        peers_rps: rps(3),
        bare_cpu_ns: cpu_ns(0),
        tenant_cpu_ns: cpu_ns(1),
        request_cpu_ns: cpu_ns(2),
        peers_cpu_ns: cpu_ns(3),
        tenant_overhead_ns: ns(1),
        request_overhead_ns: ns(2),
        peers_overhead_ns: ns(3),
        tenant_overhead_pct: pct(cpu, 1),
        request_overhead_pct: pct(cpu, 2),
        peers_overhead_pct: pct(cpu, 3),
        tenant_wall_overhead_pct: pct(wall, 1),
        request_wall_overhead_pct: pct(wall, 2),
        peers_wall_overhead_pct: pct(wall, 3),
    }
}

/// The heap check of one rstat variant's tenants against the live objects
/// in its queue; appends what did not match.
fn heap_check(
    mem: &Memory,
    parent: &Group,
    tenants: &[Group],
    live: &[workload::Obj],
    label: &str,
    out: &mut Vec<String>,
) -> Result<(), String> {
    let mut want = [(0i64, 0i64); TENANTS];
    for o in live {
        let w = &mut want[o.tenant as usize % TENANTS];
        w.0 += o.size() as i64;
        w.1 += overhead(o.size()) as i64;
    }
    mem.drain_stocks(parent)
        .map_err(|e| format!("draining the stocks: {e}"))?;
    for (t, g) in tenants.iter().enumerate() {
        let s = mem
            .read_exact(g)
            .map_err(|e| format!("reading memory.stat: {e}"))?;
        let cur = mem
            .current(g)
            .map_err(|e| format!("reading memory.current: {e}"))? as i64;
        let (heap, over) = (
            s.get("heap").unwrap_or(-1),
            s.get("heap_overhead").unwrap_or(-1),
        );
        let (wh, wo) = want[t];
        if heap != wh || over != wo || cur != wh + wo {
            out.push(format!(
                "{label} {}: heap {heap} (live {wh}), heap_overhead {over} (live {wo}), \
                 memory.current {cur} (live {})",
                TENANT_NAMES[t],
                wh + wo
            ));
        }
    }
    Ok(())
}

/// Run the benchmark.
pub fn run(cfg: &Config) -> Result<Report, String> {
    let samples = cfg.samples.max(1);
    let conns = cfg.in_flight.max(1);
    // The library's defaults: periodic flush, Threshold reads, the
    // default CPU mode and charge period.
    let rs = Rstat::new();
    let mem = Memory::register_with(&rs, heap_config())
        .map_err(|e| format!("registering the memory controller: {e}"))?;
    let counters = rs
        .register_counters("server", &COUNTERS)
        .map_err(rstat_err("registering the counters"))?;
    let cpu = rs
        .cpu()
        .cloned()
        .ok_or("the engine has no cpu controller")?;
    // Leaked: a bound allocator keeps its binding for as long as objects
    // charged through it may be freed.
    let accounted: &'static Accounted<MiMalloc> = Box::leak(Box::new(Accounted::new(MiMalloc)));
    accounted
        .install(&rs, &mem)
        .map_err(|e| format!("binding the accounting allocator: {e}"))?;
    let span_parent = rs
        .root()
        .create_child("tenant-spans")
        .map_err(rstat_err("creating a group"))?;
    let req_parent = rs
        .root()
        .create_child("group-per-request")
        .map_err(rstat_err("creating a group"))?;
    let mut span_tenants = Vec::new();
    let mut req_tenants = Vec::new();
    let mut tenant_items = Vec::new();
    for name in TENANT_NAMES {
        let g = span_parent
            .create_child(name)
            .map_err(rstat_err("creating a tenant"))?;
        let h = counters
            .stat_handle(&g)
            .map_err(rstat_err("resolving counters"))?;
        let item = |i| h.item(i).map_err(rstat_err("resolving a counter"));
        tenant_items.push([item(0)?, item(1)?, item(2)?]);
        span_tenants.push(g);
        req_tenants.push(
            req_parent
                .create_child(name)
                .map_err(rstat_err("creating a tenant"))?,
        );
    }
    // The peers: prometheus counters in a registry, children cached.
    let perr = |e: prometheus::Error| format!("prometheus: {e}");
    let registry = prometheus::Registry::new();
    let mut vecs = Vec::new();
    for name in COUNTERS {
        let v = prometheus::IntCounterVec::new(
            prometheus::Opts::new(format!("server_{name}_total"), format!("{name} by tenant")),
            &["tenant"],
        )
        .map_err(perr)?;
        registry.register(Box::new(v.clone())).map_err(perr)?;
        vecs.push(v);
    }
    let prom: Vec<[prometheus::IntCounter; 3]> = TENANT_NAMES
        .iter()
        .map(|t| std::array::from_fn(|i| vecs[i].with_label_values(&[*t])))
        .collect();
    let ctx = Arc::new(Ctx {
        bare: Box::leak(Box::new(MiMalloc)),
        accounted,
        eager: Box::leak(Box::new(Eager::new(MiMalloc))),
        queues: Default::default(),
        tenant_items,
        request_tenants: req_tenants.clone(),
        counters: counters.clone(),
        monitors: (0..TENANTS)
            .map(|_| tokio_metrics::TaskMonitor::new())
            .collect(),
        prom,
        nodes: (0..TENANTS).map(|_| Node::leak(None)).collect(),
        errors: Default::default(),
    });
    let dispatch = tracing::Dispatch::new(
        tracing_subscriber::registry().with(GroupLayer::children_of("tenant", span_parent.clone())),
    );
    let rt = runtime(dispatch)?;
    let per_us = calibrate();
    let iters_of = |w: u64| (w as f64 * per_us).round() as u64;
    let mut next_id = 0u64;
    let mut id_block = |n: usize| {
        let id = next_id;
        next_id += n as u64;
        id
    };

    // Warm up every variant (arenas, span slabs, threads' records).
    for v in VARIANTS {
        let per_conn = 20;
        batch(
            &rt,
            &ctx,
            v,
            conns,
            per_conn,
            iters_of(5),
            1,
            id_block(conns * per_conn),
            None,
        );
    }

    // The timed samples.
    let mut rows = Vec::new();
    let mut minus_peers_w20 = f64::NAN;
    for (wi, &w) in cfg.works_us.iter().enumerate() {
        let w = w.max(1);
        let per_conn = ((cfg.sample_work_us / w) as usize).div_ceil(conns).max(1);
        let requests = per_conn * conns;
        let mut cpu_ns: [Vec<f64>; 4] = Default::default();
        let mut wall_ns: [Vec<f64>; 4] = Default::default();
        for s in 0..samples {
            let seed = 0x2545_f491_4f6c_dd1d
                ^ ((wi * 1000 + s) as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            for r in 0..VARIANTS.len() {
                // Rotate: no variant always runs first or after the same one.
                let vi = (r + s) % VARIANTS.len();
                let (c, wall) = batch(
                    &rt,
                    &ctx,
                    VARIANTS[vi],
                    conns,
                    per_conn,
                    iters_of(w),
                    seed,
                    id_block(requests),
                    None,
                );
                cpu_ns[vi].push(c.as_nanos() as f64 / requests as f64);
                wall_ns[vi].push(wall.as_nanos() as f64);
            }
        }
        if w == 20 {
            minus_peers_w20 = round(
                median(
                    (0..samples)
                        .map(|s| (cpu_ns[1][s] - cpu_ns[3][s]) / cpu_ns[0][s] * 100.0)
                        .collect(),
                ),
                2,
            );
        }
        rows.push(row(w, requests, &cpu_ns, &wall_ns));
    }

    // The CPU and counter checks, per rstat variant and W.
    let mut checks = Vec::new();
    let mut counters_exact = true;
    let check_per_conn = cfg.check_requests.div_ceil(conns).max(1);
    for &w in &cfg.works_us {
        let w = w.max(1);
        for (v, tenants) in [
            (Variant::Tenant, &span_tenants),
            (Variant::Request, &req_tenants),
        ] {
            let before = tenant_totals(tenants, &cpu, &counters)?;
            let ledger = Arc::new(Ledger::new());
            let n = check_per_conn * conns;
            batch(
                &rt,
                &ctx,
                v,
                conns,
                check_per_conn,
                iters_of(w),
                0x5851_f42d_4c95_7f2d ^ w,
                id_block(n),
                Some(Arc::clone(&ledger)),
            );
            let after = tenant_totals(tenants, &cpu, &counters)?;
            let (mut truth_all, mut charged_all, mut outer_all) = (0u64, 0i64, 0u64);
            let (mut worst, mut worst_t, mut outside) = (0.0f64, 0usize, 0.0f64);
            for t in 0..TENANTS {
                let truth = ledger.cpu_ns[t].load(Ordering::Relaxed) / 1000;
                let outer = ledger.outer_ns[t].load(Ordering::Relaxed).div_ceil(1000);
                outer_all += outer;
                let charged = after[t].0 - before[t].0;
                let reqs = ledger.requests[t].load(Ordering::Relaxed) as i64;
                counters_exact &= after[t].1 - before[t].1 == reqs;
                truth_all += truth;
                charged_all += charged;
                let err = if truth == 0 {
                    if charged == 0 {
                        0.0
                    } else {
                        f64::INFINITY
                    }
                } else {
                    (charged - truth as i64).unsigned_abs() as f64 / truth as f64 * 100.0
                };
                let beyond = if charged < truth as i64 {
                    truth as i64 - charged
                } else {
                    (charged - outer as i64).max(0)
                };
                outside = outside.max(beyond as f64 / truth.max(1) as f64 * 100.0);
                if err > worst || err.is_nan() {
                    worst = err;
                    worst_t = t;
                }
            }
            let body_ns: u64 = ledger
                .cpu_ns
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .sum();
            checks.push(Check {
                variant: match v {
                    Variant::Tenant => "tenant".into(),
                    _ => "request".into(),
                },
                work_us: w,
                requests: n as u64,
                body_us_mean: round(body_ns as f64 / n as f64 / 1000.0, 2),
                truth_usec: truth_all,
                charged_usec: charged_all,
                error_pct_total: round(
                    (charged_all - truth_all as i64) as f64 / truth_all.max(1) as f64 * 100.0,
                    3,
                ),
                error_pct_max: round(worst, 3),
                worst_tenant: TENANT_NAMES[worst_t].into(),
                outer_usec: outer_all,
                outside_bounds_pct_max: round(outside, 3),
            });
        }
    }
    let cpu_error_pct_max = checks.iter().map(|c| c.error_pct_max).fold(0.0f64, |m, e| {
        if e.is_nan() {
            f64::NAN
        } else {
            m.max(e)
        }
    });

    // The heap check: live objects, then none.
    drop(rt);
    charge_all_threads();
    let live = |v: Variant| -> Vec<workload::Obj> {
        ctx.queue(v)
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .copied()
            .collect()
    };
    let mut mismatches = Vec::new();
    let (span_live, req_live) = (live(Variant::Tenant), live(Variant::Request));
    heap_check(
        &mem,
        &span_parent,
        &span_tenants,
        &span_live,
        "tenant, live",
        &mut mismatches,
    )?;
    heap_check(
        &mem,
        &req_parent,
        &req_tenants,
        &req_live,
        "request, live",
        &mut mismatches,
    )?;
    // SAFETY: each queue holds only objects of its variant's allocator,
    // and no request runs any more (the runtime is dropped).
    unsafe {
        drain_queue(ctx.bare, ctx.queue(Variant::Bare));
        drain_queue(ctx.accounted, ctx.queue(Variant::Tenant));
        drain_queue(ctx.accounted, ctx.queue(Variant::Request));
        drain_queue(ctx.eager, ctx.queue(Variant::Peers));
    }
    heap_check(
        &mem,
        &span_parent,
        &span_tenants,
        &[],
        "tenant, freed",
        &mut mismatches,
    )?;
    heap_check(
        &mem,
        &req_parent,
        &req_tenants,
        &[],
        "request, freed",
        &mut mismatches,
    )?;
    let live_objects = span_live.len() + req_live.len();

    let by_w =
        |w: u64, f: fn(&Row) -> f64| rows.iter().find(|r| r.work_us == w).map_or(f64::NAN, f);
    Ok(Report {
        overhead_pct_tenant_w5: by_w(5, |r| r.tenant_overhead_pct),
        overhead_pct_tenant_w20: by_w(20, |r| r.tenant_overhead_pct),
        overhead_pct_tenant_w100: by_w(100, |r| r.tenant_overhead_pct),
        overhead_pct_request_w5: by_w(5, |r| r.request_overhead_pct),
        overhead_pct_request_w20: by_w(20, |r| r.request_overhead_pct),
        overhead_pct_request_w100: by_w(100, |r| r.request_overhead_pct),
        peers_overhead_pct_w5: by_w(5, |r| r.peers_overhead_pct),
        peers_overhead_pct_w20: by_w(20, |r| r.peers_overhead_pct),
        peers_overhead_pct_w100: by_w(100, |r| r.peers_overhead_pct),
        overhead_ns_tenant_w5: by_w(5, |r| r.tenant_overhead_ns),
        overhead_ns_tenant_w20: by_w(20, |r| r.tenant_overhead_ns),
        overhead_ns_tenant_w100: by_w(100, |r| r.tenant_overhead_ns),
        overhead_ns_request_w5: by_w(5, |r| r.request_overhead_ns),
        overhead_ns_request_w20: by_w(20, |r| r.request_overhead_ns),
        overhead_ns_request_w100: by_w(100, |r| r.request_overhead_ns),
        peers_overhead_ns_w5: by_w(5, |r| r.peers_overhead_ns),
        peers_overhead_ns_w20: by_w(20, |r| r.peers_overhead_ns),
        peers_overhead_ns_w100: by_w(100, |r| r.peers_overhead_ns),
        tenant_minus_peers_pct_w20: minus_peers_w20,
        cpu_error_pct_max: round(cpu_error_pct_max, 3),
        cpu_outside_bounds_pct_max: checks
            .iter()
            .map(|c| c.outside_bounds_pct_max)
            .fold(0.0, f64::max),
        heap_exact: mismatches.is_empty(),
        heap_mismatches: mismatches.len() as u64,
        counters_exact,
        rows,
        checks,
        heap_mismatch_list: mismatches,
        spin_iters_per_us: round(per_us, 1),
        workers: WORKERS,
        in_flight: conns,
        tenants: TENANTS,
        samples,
        errors: ctx.errors.load(Ordering::Relaxed),
        what: format!(
            "A tokio runtime with {WORKERS} workers serving {conns} connections (closed loop) of \
             requests for {TENANTS} tenants; a request allocates {OBJECTS} objects of 32-2048 \
             bytes, yields, burns W µs of CPU, counts 3 counters and frees its objects, one \
             through a queue of {HANDED} freed by a later request. Overheads: process CPU \
             time per request over the bare variant's, median of {samples} interleaved samples \
             (rotating order); requests/s by the wall clock. Checks: per-tenant usage_usec \
             against the workers' thread clocks around each request's body; heap and \
             memory.current of every tenant against its live objects ({live_objects} at the \
             end) after draining the stocks, then 0 after freeing them."
        ),
        loadavg_1m: loadavg(),
        machine: Machine::detect(),
    })
}

/// Human-readable table.
pub fn table(r: &Report) -> String {
    let mut s = format!("rstat bench server\n{}\n{}\n\n", r.machine.line(), r.what);
    s += &format!(
        "{:>5} {:>8} | {:>9} {:>9} {:>9} {:>9} | {:>16} {:>16} {:>16}\n",
        "W µs",
        "req",
        "bare r/s",
        "tenant",
        "request",
        "peers",
        "tenant ns / %",
        "request ns / %",
        "peers ns / %"
    );
    for w in &r.rows {
        s += &format!(
            "{:>5} {:>8} | {:>9.0} {:>9.0} {:>9.0} {:>9.0} | {:>8.1} {:>6.2}% {:>8.1} {:>6.2}% {:>8.1} {:>6.2}%\n",
            w.work_us,
            w.requests,
            w.bare_rps,
            w.tenant_rps,
            w.request_rps,
            w.peers_rps,
            w.tenant_overhead_ns,
            w.tenant_overhead_pct,
            w.request_overhead_ns,
            w.request_overhead_pct,
            w.peers_overhead_ns,
            w.peers_overhead_pct
        );
    }
    s += &format!(
        "\ntargets at W = 20 µs: tenant {:.2}% (<= 2), request {:.2}% (<= 7), tenant - peers {:.2} points (<= 0)\n\n",
        r.overhead_pct_tenant_w20, r.overhead_pct_request_w20, r.tenant_minus_peers_pct_w20
    );
    s += &format!(
        "{:<8} {:>5} {:>7} {:>9} {:>11} {:>11} {:>11} {:>9} {:>9}\n",
        "check",
        "W µs",
        "req",
        "body µs",
        "truth µs",
        "charged µs",
        "bound µs",
        "total %",
        "worst %"
    );
    for c in &r.checks {
        s += &format!(
            "{:<8} {:>5} {:>7} {:>9.2} {:>11} {:>11} {:>11} {:>9.3} {:>9.3} ({})\n",
            c.variant,
            c.work_us,
            c.requests,
            c.body_us_mean,
            c.truth_usec,
            c.charged_usec,
            c.outer_usec,
            c.error_pct_total,
            c.error_pct_max,
            c.worst_tenant
        );
    }
    s += &format!(
        "\ncpu_error_pct_max {:.3} (<= 1); outside [truth, bound]: {:.3}%; heap exact: {} \
         ({} mismatches); counters exact: {}; errors: {}\n",
        r.cpu_error_pct_max,
        r.cpu_outside_bounds_pct_max,
        r.heap_exact,
        r.heap_mismatches,
        r.counters_exact,
        r.errors
    );
    for m in &r.heap_mismatch_list {
        s += &format!("  heap mismatch: {m}\n");
    }
    if r.loadavg_1m > r.machine.online_cpus as f64 {
        s += &format!(
            "the machine was busy (load {:.1} on {} CPUs): figures are noisy\n",
            r.loadavg_1m, r.machine.online_cpus
        );
    }
    s
}
