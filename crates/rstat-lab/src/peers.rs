//! `rstat bench peers`: rstat on its default settings against the crates
//! a Rust service would pick instead, on that service's workload, all
//! measured in the same run.
//!
//! **The workload** ("spread"): 64 tenants x 4 services, one leaf group per
//! service at depth 3 (root / tenant / service / leaf: 256 leaves); T
//! writer threads (T = 1 and 2, thread i pinned to CPU i) add byte counts
//! of 1 B to 16 KiB to leaves drawn at random (a xorshift generator, see
//! [`workload`]), while a reader thread reads every tenant's total every
//! 10 ms. Its variants: 16 tenants x 4 services (64 leaves) and 256
//! tenants x 4 services (1,024 leaves), at 1 and 2 threads; the hot leaf
//! (2 threads, every add on one leaf, the reader as before); and a group
//! per request ([`request`]: 2 threads, each request creates a group under
//! a tenant drawn at random, adds to it 3 times and removes it).
//!
//! **The contenders** ([`contenders`]): rstat built by
//! `Rstat::builder().build()` with a byte counter declared in pages (as
//! the README declares one) and a `StatItem` per leaf, read with the
//! default `read()`; `prometheus`'s `IntCounterVec` (labels tenant,
//! service; children cached; a tenant is the sum of its 4 series);
//! `metrics` + `metrics-util`'s registry with atomic storage (a
//! `metrics::Counter` per leaf; read from the registry's atomics); the
//! eager tracker users hand-roll (an atomic per group, each add a
//! `fetch_add` on the leaf and on every ancestor).
//!
//! **How it is measured.** Each variant's contenders run one after the
//! other, sample by sample, the order rotating each sample (A B C D, B C D
//! A, ...); each figure is the median of its samples (`--samples N`,
//! default 7; 2 with `--quick`, whose samples are also shorter). Every
//! contender is checked in every sample: while the writers run, no
//! tenant's total may go down between two reads; after the join, each
//! tenant's total must be exactly what the writers added to it (a
//! contender without the history of removed groups instead reads each
//! request's value back before removing it). A failed check fails the
//! run, naming the contender, the tenant and both numbers.
//!
//! **rstat's own costs**, same run: a tenant's `read()` and, in a phase of
//! its own (2 writers, 256 leaves), its `read_exact()` while writers run;
//! the cost of one `membarrier` (the command rstat's restartable sections
//! use, timed in that phase: the fence an exact read on the rseq path
//! pays); creating and removing a group and the heap bytes one holds with
//! 2, 16 and 64 CPU slots ([`costs`]).

pub mod contenders;
pub mod costs;
pub mod experiment;
pub mod request;
pub mod workload;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::lab::host;
use crate::machine::{median, round, Machine};
use contenders::{Contender, EagerC, ExactReads, MetricsC, PerRequest, PromC, RstatC, Shape};
use costs::Membarrier;
use workload::Load;

/// Settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Samples per figure (the median is reported).
    pub samples: usize,
    /// How long the writers of one sample run.
    pub sample: Duration,
    /// The reader's period.
    pub period: Duration,
    /// How long the exact-read phase's writers run.
    pub exact_phase: Duration,
    /// Groups per create/remove sample and per bytes measurement.
    pub groups: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            samples: 7,
            sample: Duration::from_millis(200),
            period: Duration::from_millis(10),
            exact_phase: Duration::from_secs(1),
            groups: 1000,
        }
    }
}

impl Config {
    /// `--quick`: fewer and shorter samples, fewer groups.
    pub fn quick() -> Self {
        Config {
            samples: 2,
            sample: Duration::from_millis(25),
            period: Duration::from_millis(10),
            exact_phase: Duration::from_millis(150),
            groups: 200,
        }
    }
}

/// The contenders, in the order of every per-contender list of the report.
pub const CONTENDERS: [&str; 4] = ["rstat", "prometheus", "metrics", "eager"];

/// A variant of the update workload.
struct Variant {
    name: &'static str,
    tenants: usize,
    threads: usize,
    hot: bool,
}

/// The variants, in report order.
const VARIANTS: [Variant; 7] = [
    Variant {
        name: "spread_2t",
        tenants: 64,
        threads: 2,
        hot: false,
    },
    Variant {
        name: "spread_1t",
        tenants: 64,
        threads: 1,
        hot: false,
    },
    Variant {
        name: "spread_1024_leaves_2t",
        tenants: 256,
        threads: 2,
        hot: false,
    },
    Variant {
        name: "spread_1024_leaves_1t",
        tenants: 256,
        threads: 1,
        hot: false,
    },
    Variant {
        name: "spread_64_leaves_2t",
        tenants: 16,
        threads: 2,
        hot: false,
    },
    Variant {
        name: "spread_64_leaves_1t",
        tenants: 16,
        threads: 1,
        hot: false,
    },
    Variant {
        name: "hot_2t",
        tenants: 64,
        threads: 2,
        hot: true,
    },
];

/// Threads of the group-per-request workload.
pub const REQUEST_THREADS: usize = 2;

/// The CPU slots of the create/remove and bytes measurements.
pub const SLOTS: [usize; 3] = [2, 16, 64];

/// One contender's figures in one variant.
#[derive(Clone, Debug, Serialize)]
pub struct Figures {
    /// Which contender.
    pub contender: &'static str,
    /// Million adds per second, all writers (median).
    pub mops: f64,
    /// ns per tenant total read by the reader while writers ran (median
    /// over sweeps of every tenant).
    pub read_ns: f64,
    /// How many writers really ran at once (median; see
    /// [`workload::Sample::parallel`]).
    pub parallel: f64,
}

/// One variant of the update workload.
#[derive(Clone, Debug, Serialize)]
pub struct VariantRow {
    /// Its name (`spread_2t`, ..., `hot_2t`).
    pub name: &'static str,
    /// Tenants (x 4 services, one leaf each).
    pub tenants: usize,
    /// Leaves.
    pub leaves: usize,
    /// Writer threads.
    pub threads: usize,
    /// Every add on one leaf.
    pub hot: bool,
    /// Each contender, in [`CONTENDERS`] order.
    pub contenders: Vec<Figures>,
    /// The peer with the most Mops/s.
    pub best_peer: &'static str,
    /// rstat's Mops/s over the best peer's.
    pub rstat_vs_best_peer: f64,
}

/// One contender's group-per-request figure.
#[derive(Clone, Debug, Serialize)]
pub struct RequestFigures {
    /// Which contender.
    pub contender: &'static str,
    /// Requests per second, all threads (median).
    pub requests_per_sec: f64,
}

/// A contender's guarantees and what it does for a request.
#[derive(Clone, Debug, Serialize)]
pub struct Guarantees {
    /// Which contender.
    pub contender: &'static str,
    /// A group's total includes its descendants' without the reader
    /// adding them up.
    pub hierarchy: bool,
    /// A read of several groups can be one state of the counters.
    pub consistent_snapshot: bool,
    /// A removed group's counts stay in its ancestors' totals.
    pub history: bool,
    /// What one request does with it.
    pub per_request: &'static str,
}

/// The contenders' guarantees, in [`CONTENDERS`] order.
pub fn guarantees() -> Vec<Guarantees> {
    vec![
        Guarantees {
            contender: "rstat",
            hierarchy: true,
            consistent_snapshot: true,
            history: true,
            per_request: "create_child under the tenant, a StatItem, 3 adds, remove \
                          (its counts fold into the tenant)",
        },
        Guarantees {
            contender: "prometheus",
            hierarchy: false,
            consistent_snapshot: false,
            history: false,
            per_request: "with_label_values (tenant, request) on a second IntCounterVec, 3 \
                          inc_by, the value read back, remove_label_values (its counts are gone)",
        },
        Guarantees {
            contender: "metrics",
            hierarchy: false,
            consistent_snapshot: false,
            history: false,
            per_request: "get_or_create_counter for a key (tenant, request), 3 increments, the \
                          value read back, delete_counter (its counts are gone)",
        },
        Guarantees {
            contender: "eager",
            hierarchy: true,
            consistent_snapshot: false,
            history: true,
            per_request: "a new atomic inserted in a map under one lock, 3 adds to it and every \
                          ancestor, removed from the map (the ancestors keep its counts)",
        },
    ]
}

/// Results. The `*_vs_best_peer` ratios are rstat's Mops/s over the best
/// peer's; `spread_*` without a leaf count is the 256-leaf workload.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// 256 leaves, 2 threads (target >= 1.2).
    pub spread_2t_vs_best_peer: f64,
    /// 256 leaves, 1 thread (target >= 1.0).
    pub spread_1t_vs_best_peer: f64,
    /// 1,024 leaves, 2 threads.
    pub spread_1024_leaves_2t_vs_best_peer: f64,
    /// 1,024 leaves, 1 thread.
    pub spread_1024_leaves_1t_vs_best_peer: f64,
    /// 64 leaves, 2 threads.
    pub spread_64_leaves_2t_vs_best_peer: f64,
    /// 64 leaves, 1 thread.
    pub spread_64_leaves_1t_vs_best_peer: f64,
    /// One hot leaf, 2 threads (target >= 1.5).
    pub hot_2t_vs_best_peer: f64,
    /// A group per request: rstat's requests/s over the best peer's.
    pub per_request_2t_vs_best_peer: f64,
    /// rstat: ns per tenant `read()` while 2 writers run on 256 leaves
    /// (target <= 200).
    pub bounded_read_ns: f64,
    /// rstat: ns per tenant `read_exact()` while 2 writers run on 256
    /// leaves (the exact-read phase).
    pub exact_read_ns: f64,
    /// ns per `membarrier` call, timed during the exact-read phase.
    pub membarrier_ns: Option<f64>,
    /// The command timed (`null` where the kernel offers none).
    pub membarrier_cmd: Option<&'static str>,
    /// `exact_read_ns - membarrier_ns` (target <= 1000).
    pub exact_read_minus_membarrier_ns: Option<f64>,
    /// ns to create a group and remove it, 2 CPU slots (target <= 1000).
    pub create_remove_ns_2: f64,
    /// The same with 16 slots.
    pub create_remove_ns_16: f64,
    /// The same with 64 slots (target <= 2000).
    pub create_remove_ns_64: f64,
    /// Heap bytes per group with cpu, memory and a 4-item counter set, 2
    /// slots (`null` without glibc).
    pub bytes_per_group_2: Option<f64>,
    /// The same with 16 slots.
    pub bytes_per_group_16: Option<f64>,
    /// The same with 64 slots.
    pub bytes_per_group_64: Option<f64>,
    /// Of `bytes_per_group_2`, the per-CPU bytes.
    pub percpu_bytes_per_group_2: Option<f64>,
    /// Of `bytes_per_group_16`, the per-CPU bytes.
    pub percpu_bytes_per_group_16: Option<f64>,
    /// Of `bytes_per_group_64`, the per-CPU bytes.
    pub percpu_bytes_per_group_64: Option<f64>,
    /// How the bytes were counted.
    pub bytes_method: &'static str,
    /// The default engine's update path (`UpdatePath::name`).
    pub default_update_path: &'static str,
    /// The default flush policy of the measured counter.
    pub default_flush_policy: String,
    /// Every variant of the update workload.
    pub variants: Vec<VariantRow>,
    /// The group-per-request workload, in [`CONTENDERS`] order.
    pub per_request: Vec<RequestFigures>,
    /// Threads of the group-per-request workload.
    pub per_request_threads: usize,
    /// Each contender's guarantees.
    pub guarantees: Vec<Guarantees>,
    /// Tenant totals compared exactly after a join (all equal, or the run
    /// failed).
    pub exact_checks: u64,
    /// Samples per figure.
    pub samples: usize,
    /// ms the writers of one sample run.
    pub sample_ms: f64,
    /// ms between the reader's sweeps.
    pub read_period_ms: f64,
    /// ms of the exact-read phase.
    pub exact_phase_ms: f64,
    /// Groups per create/remove sample and per bytes measurement.
    pub groups: usize,
    /// The machine.
    pub machine: Machine,
    /// The machine's load during the run.
    pub load: host::Load,
}

/// How the bytes per group are counted (see [`costs`]).
pub const BYTES_METHOD: &str = "glibc mallinfo2 (in-use arena bytes + mmapped blocks, malloc's \
    per-block overhead included) before and after creating the groups, less the per-CPU arena's \
    new chunks, plus the arena's bytes in use per unit x units";

/// Per-contender sample lists of one variant.
#[derive(Default)]
struct Series {
    mops: Vec<f64>,
    read_ns: Vec<f64>,
    parallel: Vec<f64>,
}

/// The four contenders over one shape, each with its expected totals.
struct Set {
    rstat: Arc<RstatC>,
    prom: Arc<PromC>,
    metrics: Arc<MetricsC>,
    eager: Arc<EagerC>,
    expected: [Vec<u64>; 4],
}

impl Set {
    fn new(shape: Shape) -> Result<Self, String> {
        Ok(Set {
            rstat: Arc::new(RstatC::new(shape)?),
            prom: Arc::new(PromC::new(shape)?),
            metrics: Arc::new(MetricsC::new(shape)),
            eager: Arc::new(EagerC::new(shape)),
            expected: std::array::from_fn(|_| vec![0; shape.tenants]),
        })
    }

    /// One sample of contender `k` ([`CONTENDERS`] order).
    fn sample(&mut self, k: usize, load: &Load, no: u64) -> Result<workload::Sample, String> {
        fn one<C: Contender>(
            c: &Arc<C>,
            k: usize,
            load: &Load,
            no: u64,
            e: &mut [u64],
        ) -> Result<workload::Sample, String> {
            workload::sample(c, CONTENDERS[k], load, no, e, || {})
        }
        let e = &mut self.expected[k];
        match k {
            0 => one(&self.rstat, k, load, no, e),
            1 => one(&self.prom, k, load, no, e),
            2 => one(&self.metrics, k, load, no, e),
            _ => one(&self.eager, k, load, no, e),
        }
    }

    /// One group-per-request sample of contender `k`.
    fn request(&mut self, k: usize, d: Duration, no: u64) -> Result<(f64, u64), String> {
        fn one<C: PerRequest>(
            c: &Arc<C>,
            k: usize,
            d: Duration,
            no: u64,
            e: &mut [u64],
        ) -> Result<(f64, u64), String> {
            request::sample(c, CONTENDERS[k], REQUEST_THREADS, d, no, e)
        }
        let e = &mut self.expected[k];
        match k {
            0 => one(&self.rstat, k, d, no, e),
            1 => one(&self.prom, k, d, no, e),
            2 => one(&self.metrics, k, d, no, e),
            _ => one(&self.eager, k, d, no, e),
        }
    }
}

/// The contender order of sample `s`: [`CONTENDERS`] rotated by `s`.
fn order(s: usize) -> impl Iterator<Item = usize> {
    (0..CONTENDERS.len()).map(move |i| (i + s) % CONTENDERS.len())
}

/// rstat's figure over the best peer's, and that peer.
fn vs_best_peer(figs: &[f64]) -> (f64, &'static str) {
    let (best, k) = figs
        .iter()
        .enumerate()
        .skip(1)
        .map(|(k, &v)| (v, k))
        .fold((f64::NEG_INFINITY, 1), |a, b| if b.0 > a.0 { b } else { a });
    let ratio = if best > 0.0 { figs[0] / best } else { 0.0 };
    (round(ratio, 3), CONTENDERS[k])
}

fn run_variant(v: &Variant, cfg: &Config, checks: &mut u64) -> Result<VariantRow, String> {
    let shape = Shape { tenants: v.tenants };
    let load = Load {
        shape,
        threads: v.threads,
        hot: v.hot,
        duration: cfg.sample,
        period: cfg.period,
    };
    let mut set = Set::new(shape)?;
    let mut series: [Series; 4] = Default::default();
    for s in 0..cfg.samples {
        for k in order(s) {
            let r = set
                .sample(k, &load, s as u64)
                .map_err(|e| format!("{} (sample {s}): {e}", v.name))?;
            *checks += r.exact_checks;
            series[k].mops.push(r.mops);
            series[k].parallel.push(r.parallel);
            series[k].read_ns.extend(r.read_ns);
        }
    }
    let contenders: Vec<Figures> = series
        .into_iter()
        .enumerate()
        .map(|(k, s)| Figures {
            contender: CONTENDERS[k],
            mops: round(median(s.mops), 2),
            read_ns: round(median(s.read_ns), 1),
            parallel: round(median(s.parallel), 2),
        })
        .collect();
    let mops: Vec<f64> = contenders.iter().map(|f| f.mops).collect();
    let (ratio, best) = vs_best_peer(&mops);
    Ok(VariantRow {
        name: v.name,
        tenants: v.tenants,
        leaves: shape.leaves(),
        threads: v.threads,
        hot: v.hot,
        contenders,
        best_peer: best,
        rstat_vs_best_peer: ratio,
    })
}

/// What the exact-read phase measured.
struct ExactPhase {
    /// Median ns per tenant `read_exact`.
    read_ns: f64,
    /// Median ns per membarrier, and the command, if the kernel has one.
    fence: Option<(f64, &'static str)>,
}

/// The exact-read phase: rstat's `read_exact` of every tenant per reader
/// period while 2 writers run on 256 leaves, and 4 membarriers timed by
/// the main thread per period.
fn exact_phase(cfg: &Config, checks: &mut u64) -> Result<ExactPhase, String> {
    let shape = Shape { tenants: 64 };
    let c = Arc::new(ExactReads(RstatC::new(shape)?));
    let load = Load {
        shape,
        threads: 2,
        hot: false,
        duration: cfg.exact_phase,
        period: cfg.period,
    };
    let fence = Membarrier::register();
    let mut fences = Vec::new();
    let mut expected = vec![0; shape.tenants];
    let r = workload::sample(&c, "rstat read_exact", &load, 0, &mut expected, || {
        if let Some(m) = fence {
            fences.extend((0..4).filter_map(|_| m.call()));
        }
    })?;
    *checks += r.exact_checks;
    Ok(ExactPhase {
        read_ns: round(median(r.read_ns), 1),
        fence: fence
            .filter(|_| !fences.is_empty())
            .map(|m| (round(median(fences), 1), m.name)),
    })
}

/// Run the benchmark.
pub fn run(cfg: &Config) -> Result<Report, String> {
    let clock = host::now();
    let mut checks = 0u64;
    let mut variants = Vec::with_capacity(VARIANTS.len());
    for v in &VARIANTS {
        variants.push(run_variant(v, cfg, &mut checks)?);
    }
    let (default_update_path, default_flush_policy) = {
        let r = RstatC::new(Shape { tenants: 1 })?;
        (r.update_path(), r.flush_policy())
    };

    let mut set = Set::new(Shape { tenants: 64 })?;
    let mut rps: [Vec<f64>; 4] = Default::default();
    for s in 0..cfg.samples {
        for k in order(s) {
            let (r, c) = set
                .request(k, cfg.sample, s as u64)
                .map_err(|e| format!("per_request (sample {s}): {e}"))?;
            rps[k].push(r);
            checks += c;
        }
    }
    drop(set);
    let per_request: Vec<RequestFigures> = rps
        .into_iter()
        .enumerate()
        .map(|(k, v)| RequestFigures {
            contender: CONTENDERS[k],
            requests_per_sec: round(median(v), 0),
        })
        .collect();

    let ExactPhase {
        read_ns: exact_read_ns,
        fence,
    } = exact_phase(cfg, &mut checks)?;
    let membarrier_ns = fence.map(|f| f.0);

    let mut create_remove = [0.0; 3];
    let mut bytes = [None; 3];
    for (i, &slots) in SLOTS.iter().enumerate() {
        create_remove[i] = round(costs::create_remove_ns(slots, cfg.groups, cfg.samples)?, 1);
        bytes[i] = costs::bytes_per_group(slots, cfg.groups)?;
    }

    let ratio = |name: &str| {
        variants
            .iter()
            .find(|v| v.name == name)
            .map_or(0.0, |v| v.rstat_vs_best_peer)
    };
    let bounded_read_ns = variants
        .iter()
        .find(|v| v.name == "spread_2t")
        .map_or(f64::NAN, |v| v.contenders[0].read_ns);
    let rps_figs: Vec<f64> = per_request.iter().map(|r| r.requests_per_sec).collect();
    let total = |i: usize| bytes[i].map(|b| round(b.total, 0));
    let percpu = |i: usize| bytes[i].map(|b| round(b.percpu, 0));
    Ok(Report {
        spread_2t_vs_best_peer: ratio("spread_2t"),
        spread_1t_vs_best_peer: ratio("spread_1t"),
        spread_1024_leaves_2t_vs_best_peer: ratio("spread_1024_leaves_2t"),
        spread_1024_leaves_1t_vs_best_peer: ratio("spread_1024_leaves_1t"),
        spread_64_leaves_2t_vs_best_peer: ratio("spread_64_leaves_2t"),
        spread_64_leaves_1t_vs_best_peer: ratio("spread_64_leaves_1t"),
        hot_2t_vs_best_peer: ratio("hot_2t"),
        per_request_2t_vs_best_peer: vs_best_peer(&rps_figs).0,
        bounded_read_ns,
        exact_read_ns,
        membarrier_ns,
        membarrier_cmd: fence.map(|f| f.1),
        exact_read_minus_membarrier_ns: membarrier_ns.map(|m| round(exact_read_ns - m, 1)),
        create_remove_ns_2: create_remove[0],
        create_remove_ns_16: create_remove[1],
        create_remove_ns_64: create_remove[2],
        bytes_per_group_2: total(0),
        bytes_per_group_16: total(1),
        bytes_per_group_64: total(2),
        percpu_bytes_per_group_2: percpu(0),
        percpu_bytes_per_group_16: percpu(1),
        percpu_bytes_per_group_64: percpu(2),
        bytes_method: BYTES_METHOD,
        default_update_path,
        default_flush_policy,
        variants,
        per_request,
        per_request_threads: REQUEST_THREADS,
        guarantees: guarantees(),
        exact_checks: checks,
        samples: cfg.samples,
        sample_ms: cfg.sample.as_secs_f64() * 1e3,
        read_period_ms: cfg.period.as_secs_f64() * 1e3,
        exact_phase_ms: cfg.exact_phase.as_secs_f64() * 1e3,
        groups: cfg.groups,
        machine: Machine::detect(),
        load: host::between(&clock, &host::now()),
    })
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// Human-readable table.
pub fn table(r: &Report) -> String {
    let mut s = format!(
        "rstat bench peers: rstat on its default settings (update path {}, flush policy {}) \
         against the crates users pick instead; median of {} interleaved samples of {} ms, \
         a reader sweeping every tenant every {} ms; {} tenant totals checked exact\n{}\n\n",
        r.default_update_path,
        r.default_flush_policy,
        r.samples,
        r.sample_ms,
        r.read_period_ms,
        r.exact_checks,
        r.machine.line()
    );
    s += &format!(
        "{:<24} {:>8} {:>10} {:>10} {:>10} {:>10}  {:>8} {:<10}\n",
        "Mops/s", "leaves", "rstat", "prometheus", "metrics", "eager", "vs best", "best peer"
    );
    for v in &r.variants {
        s += &format!("{:<24} {:>8}", v.name, v.leaves);
        for f in &v.contenders {
            s += &format!(" {:>10.1}", f.mops);
        }
        s += &format!("  {:>7.2}x {:<10}\n", v.rstat_vs_best_peer, v.best_peer);
    }
    s += &format!("\n{:<24} {:>8}", "tenant read ns (load)", "");
    if let Some(v) = r.variants.iter().find(|v| v.name == "spread_2t") {
        for f in &v.contenders {
            s += &format!(" {:>10.1}", f.read_ns);
        }
    }
    s += &format!(
        "\n{:<24} {:>8}",
        format!("requests/s ({}t)", r.per_request_threads),
        ""
    );
    for f in &r.per_request {
        s += &format!(" {:>10.0}", f.requests_per_sec);
    }
    s += &format!("  {:>7.2}x\n", r.per_request_2t_vs_best_peer);
    type Pick = fn(&Guarantees) -> bool;
    let rows: [(&str, Pick); 3] = [
        ("hierarchy", |g| g.hierarchy),
        ("consistent snapshot", |g| g.consistent_snapshot),
        ("history of removed", |g| g.history),
    ];
    for (label, pick) in rows {
        s += &format!("{label:<24} {:>8}", "");
        for g in &r.guarantees {
            s += &format!(" {:>10}", yes(pick(g)));
        }
        s.push('\n');
    }
    s += "\na group per request:\n";
    for g in &r.guarantees {
        s += &format!("  {:<11} {}\n", g.contender, g.per_request);
    }
    let opt = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |x| format!("{x:.0}"));
    s += &format!(
        "\nrstat, 2 writers on 256 leaves: tenant read() {:.0} ns, read_exact() {:.0} ns; one \
         membarrier ({}) {} ns\n",
        r.bounded_read_ns,
        r.exact_read_ns,
        r.membarrier_cmd.unwrap_or("none"),
        opt(r.membarrier_ns)
    );
    s += &format!(
        "create + remove a group: {:.0} ns (2 slots), {:.0} ns (16), {:.0} ns (64)\n\
         bytes per group (cpu, memory, 4 counters): {} (2 slots), {} (16), {} (64); per-CPU \
         part {} / {} / {}\n",
        r.create_remove_ns_2,
        r.create_remove_ns_16,
        r.create_remove_ns_64,
        opt(r.bytes_per_group_2),
        opt(r.bytes_per_group_16),
        opt(r.bytes_per_group_64),
        opt(r.percpu_bytes_per_group_2),
        opt(r.percpu_bytes_per_group_16),
        opt(r.percpu_bytes_per_group_64),
    );
    s
}
