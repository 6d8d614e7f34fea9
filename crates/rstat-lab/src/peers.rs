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
//! the README declares one) and a `StatItem` per leaf, each tenant read
//! with the default `read()` through a `StatHandle` held per tenant (as
//! the `prometheus` user holds its children); `prometheus`'s
//! `IntCounterVec` (labels tenant, service; children cached; a tenant is the sum of its 4 series);
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
mod run;
pub mod workload;

pub use run::run;

#[cfg(test)]
mod tests;

use std::time::Duration;

use serde::Serialize;

use crate::lab::host;
use crate::machine::Machine;

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
    /// ns per `membarrier` call, timed during the exact-read phase by the
    /// reader thread right after each of its sweeps: the state its reads'
    /// own fences run in.
    pub membarrier_ns: Option<f64>,
    /// ns per `membarrier` call timed by another thread between the
    /// reader's sweeps (the reader asleep: one busy CPU fewer to
    /// interrupt), for comparison.
    pub membarrier_between_sweeps_ns: Option<f64>,
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
    /// Bytes the system holds per group with cpu, memory and a 4-item
    /// counter set, each used once on one thread (see [`costs`]), 2 slots
    /// (`null` without glibc).
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
    /// The per-CPU address space a group reserves with 2 slots (every
    /// slot's share, used or not; resident only where written).
    pub reserved_percpu_bytes_per_group_2: Option<f64>,
    /// The same with 16 slots.
    pub reserved_percpu_bytes_per_group_16: Option<f64>,
    /// The same with 64 slots.
    pub reserved_percpu_bytes_per_group_64: Option<f64>,
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
pub const BYTES_METHOD: &str = "each group created and used once on one thread (a counter add, \
    a memory charge and uncharge, an enter and exit); glibc mallinfo2 (in-use arena bytes + \
    mmapped blocks, malloc's per-block overhead included) before and after (the per-CPU arena's \
    chunks are mappings of their own, outside malloc), plus the arena pages the groups made resident (mincore); the per-CPU \
    address space reserved in every slot (bytes in use per unit x units) beside it";

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
         membarrier ({}) {} ns by the reader after its sweeps, {} ns by another thread between \
         them\n",
        r.bounded_read_ns,
        r.exact_read_ns,
        r.membarrier_cmd.unwrap_or("none"),
        opt(r.membarrier_ns),
        opt(r.membarrier_between_sweeps_ns)
    );
    s += &format!(
        "create + remove a group: {:.0} ns (2 slots), {:.0} ns (16), {:.0} ns (64)\n\
         bytes per group (cpu, memory, 4 counters, used once): {} (2 slots), {} (16), {} (64); \
         per-CPU part {} / {} / {}, reserving {} / {} / {}\n",
        r.create_remove_ns_2,
        r.create_remove_ns_16,
        r.create_remove_ns_64,
        opt(r.bytes_per_group_2),
        opt(r.bytes_per_group_16),
        opt(r.bytes_per_group_64),
        opt(r.percpu_bytes_per_group_2),
        opt(r.percpu_bytes_per_group_16),
        opt(r.percpu_bytes_per_group_64),
        opt(r.reserved_percpu_bytes_per_group_2),
        opt(r.reserved_percpu_bytes_per_group_16),
        opt(r.reserved_percpu_bytes_per_group_64),
    );
    s
}
