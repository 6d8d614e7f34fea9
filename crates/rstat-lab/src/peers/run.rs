//! The run of `rstat bench peers`: each variant's interleaved samples of
//! every contender, the exact-read phase, and the assembly of the
//! [`Report`] (the workload itself is in `workload.rs`, the
//! contenders in `contenders.rs`, rstat's own costs in `costs.rs`).

use std::sync::Arc;
use std::time::Duration;

use super::contenders::{
    Contender, EagerC, ExactReads, MetricsC, PerRequest, PromC, RstatC, Shape,
};
use super::costs::Membarrier;
use super::workload::Load;
use super::*;
use crate::lab::host;
use crate::machine::{median, round, Machine};
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
    /// Median ns per membarrier timed by the reader after its sweeps, and
    /// the command, if the kernel has one.
    fence: Option<(f64, &'static str)>,
    /// Median ns per membarrier timed by the main thread between sweeps
    /// (the reader asleep).
    fence_between: Option<f64>,
}

/// The exact-read phase: rstat's `read_exact` of every tenant per reader
/// period while 2 writers run on 256 leaves; after each sweep the reader
/// times a few membarriers (`ExactReads`), and the main thread times 4
/// per period, between the sweeps.
fn exact_phase(cfg: &Config, checks: &mut u64) -> Result<ExactPhase, String> {
    let shape = Shape { tenants: 64 };
    let fence = Membarrier::register();
    let c = Arc::new(ExactReads::new(shape, fence)?);
    let load = Load {
        shape,
        threads: 2,
        hot: false,
        duration: cfg.exact_phase,
        period: cfg.period,
    };
    let mut between = Vec::new();
    let mut expected = vec![0; shape.tenants];
    let r = workload::sample(&c, "rstat read_exact", &load, 0, &mut expected, || {
        if let Some(m) = fence {
            between.extend((0..4).filter_map(|_| m.call()));
        }
    })?;
    *checks += r.exact_checks;
    let by_reader = c.fences();
    Ok(ExactPhase {
        read_ns: round(median(r.read_ns), 1),
        fence: fence
            .filter(|_| !by_reader.is_empty())
            .map(|m| (round(median(by_reader), 1), m.name)),
        fence_between: (!between.is_empty()).then(|| round(median(between), 1)),
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
        fence_between,
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
    let reserved = |i: usize| bytes[i].map(|b| round(b.reserved_percpu, 0));
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
        membarrier_between_sweeps_ns: fence_between,
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
        reserved_percpu_bytes_per_group_2: reserved(0),
        reserved_percpu_bytes_per_group_16: reserved(1),
        reserved_percpu_bytes_per_group_64: reserved(2),
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
