//! `rstat bench read-latency` (seed 004's stress test, scaled to this
//! machine): many readers reading random groups' stats while writers update
//! random leaves, under each flush policy. Reports the seed's latency
//! buckets, percentiles, writer throughput, each policy's documented
//! staleness bound, and the largest staleness a reader actually saw
//! (measured against a shadow counter of completed updates).

pub mod experiment;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use rstat::{FlushPolicy, Group};
use serde::Serialize;

use crate::machine::{round, Machine};

/// Settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Groups in the tree, root included.
    pub groups: usize,
    /// Writer threads.
    pub writers: usize,
    /// Reader threads.
    pub readers: usize,
    /// Each reader reads every this often.
    pub period: Duration,
    /// How long each policy runs.
    pub duration: Duration,
    /// Policies to run.
    pub policies: Vec<FlushPolicy>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            groups: 1000,
            writers: 2,
            readers: 64,
            period: Duration::from_millis(10),
            duration: Duration::from_secs(3),
            policies: FlushPolicy::ALL.to_vec(),
        }
    }
}

/// One policy's results.
#[derive(Clone, Debug, Serialize)]
pub struct PolicyRow {
    /// Policy name.
    pub name: String,
    /// Reads measured.
    pub reads: u64,
    /// % of reads under 100 µs.
    pub pct_lt_100us: f64,
    /// % of reads in [100 µs, 1 ms).
    pub pct_100us_1ms: f64,
    /// % in [1 ms, 10 ms).
    pub pct_1ms_10ms: f64,
    /// % in [10 ms, 100 ms).
    pub pct_10ms_100ms: f64,
    /// % at or above 100 ms.
    pub pct_ge_100ms: f64,
    /// Median read latency, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// Slowest read, µs.
    pub max_us: f64,
    /// Writer updates per second over all writers, millions.
    pub writer_mops: f64,
    /// The policy's documented bound for a read of the root (the largest
    /// subtree), in units; null where the policy has none.
    pub bound_units: Option<u64>,
    /// Largest (exact count when the read began - value read), floored at 0.
    pub max_error_units: i64,
    /// Mean of the same over all reads.
    pub mean_error_units: f64,
    /// The latency distribution: `[fraction of reads, µs]` pairs, the
    /// latency at or below which that fraction of the reads finished
    /// (fractions 0.01 to 0.99 in steps of 0.01, then 0.999 and 1).
    pub cdf_us: Vec<[f64; 2]>,
}

/// Results.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// One row per policy.
    pub policies: Vec<PolicyRow>,
    /// Groups in the tree.
    pub groups: usize,
    /// Writer threads.
    pub writers: usize,
    /// Reader threads.
    pub readers: usize,
    /// Read period per reader, ms.
    pub period_ms: f64,
    /// Seconds per policy.
    pub seconds_per_policy: f64,
    /// The machine.
    pub machine: Machine,
}

fn must<T>(r: rstat::Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("read-latency setup: {e}"),
    }
}

struct Tree {
    groups: Vec<Group>,
    /// Ancestors (index) of each group, itself included.
    chains: Vec<Vec<usize>>,
    leaves: Vec<usize>,
}

fn build(rs: &rstat::Rstat, total: usize) -> Tree {
    let mut groups = vec![rs.root().clone()];
    let mut chains = vec![vec![0]];
    let mut leaves = Vec::new();
    // root -> 10 -> 10 each -> the rest as leaves spread over level 2.
    let l1: Vec<usize> = (0..10)
        .map(|i| {
            groups.push(must(rs.root().create_child(&format!("t{i}"))));
            chains.push(vec![groups.len() - 1, 0]);
            groups.len() - 1
        })
        .collect();
    let mut l2 = Vec::new();
    for &p in &l1 {
        for j in 0..10 {
            let g = must(groups[p].create_child(&format!("s{j}")));
            groups.push(g);
            let mut c = vec![groups.len() - 1];
            c.extend(&chains[p]);
            chains.push(c);
            l2.push(groups.len() - 1);
        }
    }
    let mut k = 0;
    while groups.len() < total {
        let p = l2[k % l2.len()];
        let g = must(groups[p].create_child(&format!("q{k}")));
        groups.push(g);
        let mut c = vec![groups.len() - 1];
        c.extend(&chains[p]);
        chains.push(c);
        leaves.push(groups.len() - 1);
        k += 1;
    }
    Tree {
        groups,
        chains,
        leaves,
    }
}

fn pct(part: u64, all: u64) -> f64 {
    if all == 0 {
        0.0
    } else {
        round(100.0 * part as f64 / all as f64, 2)
    }
}

fn run_policy(cfg: &Config, policy: FlushPolicy) -> PolicyRow {
    // No read pace: each policy as the kernel ran it, `threshold` bounded in
    // units (the bound this experiment checks), not also in time.
    let rs = must(
        rstat::Rstat::builder()
            .flush_policy(policy)
            .read_pace(None)
            .build(),
    );
    let ctl = must(rs.register_counters("stress", &["events"]));
    let tree = Arc::new(build(&rs, cfg.groups.max(112)));
    let shadow: Arc<Vec<AtomicI64>> =
        Arc::new((0..tree.groups.len()).map(|_| AtomicI64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(cfg.writers + cfg.readers + 1));
    let writes = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..cfg.writers)
        .map(|w| {
            let (ctl, tree, shadow, stop, start, writes) = (
                ctl.clone(),
                tree.clone(),
                shadow.clone(),
                stop.clone(),
                start.clone(),
                writes.clone(),
            );
            std::thread::spawn(move || {
                let handles: Vec<_> = tree
                    .leaves
                    .iter()
                    .map(|&l| must(ctl.stat_handle(&tree.groups[l]).and_then(|h| h.item(0))))
                    .collect();
                let mut x = 0x9e3779b97f4a7c15u64 ^ (w as u64 + 1);
                let mut n = 0u64;
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let i = (x % handles.len() as u64) as usize;
                    handles[i].add(1);
                    // After the update completed: the shadow never counts
                    // an update rstat could not have seen yet.
                    for &a in &tree.chains[tree.leaves[i]] {
                        shadow[a].fetch_add(1, Ordering::Release);
                    }
                    n += 1;
                }
                writes.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    let readers: Vec<_> = (0..cfg.readers)
        .map(|r| {
            let (ctl, tree, shadow, stop, start) = (
                ctl.clone(),
                tree.clone(),
                shadow.clone(),
                stop.clone(),
                start.clone(),
            );
            let period = cfg.period;
            std::thread::spawn(move || {
                let mut lat = Vec::new();
                let mut max_err = 0i64;
                let mut sum_err = 0i64;
                let mut x = 0x2545f4914f6cdd1du64 ^ (r as u64 + 7);
                start.wait();
                // Stagger the readers over one period.
                let mut next = Instant::now() + period.mul_f64(r as f64 / 64.0 % 1.0);
                while !stop.load(Ordering::Relaxed) {
                    let now = Instant::now();
                    if now < next {
                        std::thread::sleep(next - now);
                    }
                    next += period;
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let g = (x % tree.groups.len() as u64) as usize;
                    let exact_before = shadow[g].load(Ordering::Acquire);
                    let t0 = Instant::now();
                    let s = must(ctl.read(&tree.groups[g]));
                    let el = t0.elapsed();
                    let err = (exact_before - s.hierarchical()[0]).max(0);
                    max_err = max_err.max(err);
                    sum_err += err;
                    lat.push(el.as_nanos().min(u64::MAX as u128) as u64);
                }
                (lat, max_err, sum_err)
            })
        })
        .collect();
    start.wait();
    let t0 = Instant::now();
    std::thread::sleep(cfg.duration);
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        let _ = w.join();
    }
    let elapsed = t0.elapsed();
    let mut lat = Vec::new();
    let (mut max_err, mut sum_err) = (0i64, 0i64);
    for r in readers {
        if let Ok((l, m, s)) = r.join() {
            lat.extend(l);
            max_err = max_err.max(m);
            sum_err += s;
        }
    }
    lat.sort_unstable();
    let n = lat.len() as u64;
    let count = |lo: u64, hi: u64| lat.iter().filter(|&&v| v >= lo && v < hi).count() as u64;
    let q = |p: f64| {
        if lat.is_empty() {
            0.0
        } else {
            lat[((lat.len() - 1) as f64 * p) as usize] as f64 / 1e3
        }
    };
    PolicyRow {
        name: policy.name().to_owned(),
        reads: n,
        pct_lt_100us: pct(count(0, 100_000), n),
        pct_100us_1ms: pct(count(100_000, 1_000_000), n),
        pct_1ms_10ms: pct(count(1_000_000, 10_000_000), n),
        pct_10ms_100ms: pct(count(10_000_000, 100_000_000), n),
        pct_ge_100ms: pct(count(100_000_000, u64::MAX), n),
        p50_us: round(q(0.5), 2),
        p99_us: round(q(0.99), 2),
        max_us: round(lat.last().copied().unwrap_or(0) as f64 / 1e3, 2),
        writer_mops: round(
            writes.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64() / 1e6,
            2,
        ),
        bound_units: policy.staleness_bound(rs.nr_cpus(), tree.groups.len(), 1),
        max_error_units: max_err,
        mean_error_units: round(
            if n == 0 {
                0.0
            } else {
                sum_err as f64 / n as f64
            },
            2,
        ),
        cdf_us: (1..=99)
            .map(|i| f64::from(i) / 100.0)
            .chain([0.999, 1.0])
            .map(|p| [p, round(q(p), 2)])
            .collect(),
    }
}

/// Run the benchmark.
pub fn run(cfg: &Config) -> Report {
    let policies = cfg.policies.iter().map(|&p| run_policy(cfg, p)).collect();
    Report {
        policies,
        groups: cfg.groups.max(112),
        writers: cfg.writers,
        readers: cfg.readers,
        period_ms: cfg.period.as_secs_f64() * 1e3,
        seconds_per_policy: cfg.duration.as_secs_f64(),
        machine: Machine::detect(),
    }
}

/// Human-readable table.
pub fn table(r: &Report) -> String {
    let mut s = format!(
        "rstat bench read-latency: {} groups, {} writers, {} readers each reading a random group every {} ms, {} s per policy\n{}\n\n",
        r.groups, r.writers, r.readers, r.period_ms, r.seconds_per_policy, r.machine.line()
    );
    s += &format!(
        "{:<13} {:>8} {:>8} {:>9} {:>9} {:>10} {:>8} {:>9} {:>9} {:>10} {:>9} {:>10} {:>9}\n",
        "policy",
        "reads",
        "<100us",
        "100us-1ms",
        "1-10ms",
        "10-100ms",
        ">=100ms",
        "p50 us",
        "p99 us",
        "max us",
        "wr Mops",
        "bound",
        "max err"
    );
    for p in &r.policies {
        s += &format!(
            "{:<13} {:>8} {:>7.2}% {:>8.2}% {:>8.2}% {:>9.2}% {:>7.2}% {:>9.1} {:>9.1} {:>10.1} {:>9.2} {:>10} {:>9}\n",
            p.name,
            p.reads,
            p.pct_lt_100us,
            p.pct_100us_1ms,
            p.pct_1ms_10ms,
            p.pct_10ms_100ms,
            p.pct_ge_100ms,
            p.p50_us,
            p.p99_us,
            p.max_us,
            p.writer_mops,
            p.bound_units.map_or("none".to_owned(), |b| b.to_string()),
            p.max_error_units
        );
    }
    s
}

/// A stacked bar chart of the latency buckets per policy, as SVG, with p50
/// and p99 beside each bar (for BENCHMARKS.md).
pub fn svg(r: &Report) -> String {
    const COLORS: [(&str, &str); 5] = [
        ("&lt; 100 µs", "#2b8a3e"),
        ("100 µs – 1 ms", "#94d82d"),
        ("1 – 10 ms", "#fcc419"),
        ("10 – 100 ms", "#f76707"),
        ("≥ 100 ms", "#c92a2a"),
    ];
    let (left, bar_w, bar_h, gap, top) = (120.0, 520.0, 26.0, 14.0, 58.0);
    let height = top + r.policies.len() as f64 * (bar_h + gap) + 70.0;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1000\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"13\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">read latency by flush policy: {} groups, {} writers, {} readers every {} ms</text>\n\
         <text x=\"10\" y=\"42\" fill=\"#555\">{}</text>\n",
        r.groups,
        r.writers,
        r.readers,
        r.period_ms,
        xml_escape(&r.machine.line())
    );
    for (i, p) in r.policies.iter().enumerate() {
        let y = top + i as f64 * (bar_h + gap);
        s += &format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
            left - 8.0,
            y + bar_h * 0.68,
            p.name
        );
        let parts = [
            p.pct_lt_100us,
            p.pct_100us_1ms,
            p.pct_1ms_10ms,
            p.pct_10ms_100ms,
            p.pct_ge_100ms,
        ];
        let mut x = left;
        for (pct, (_, color)) in parts.iter().zip(COLORS) {
            let w = bar_w * pct / 100.0;
            if w > 0.0 {
                s += &format!(
                    "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{bar_h}\" fill=\"{color}\"/>\n"
                );
            }
            x += w;
        }
        s += &format!(
            "<text x=\"{}\" y=\"{}\">p50 {:.0} µs, p99 {:.0} µs, max err {}</text>\n",
            left + bar_w + 8.0,
            y + bar_h * 0.68,
            p.p50_us,
            p.p99_us,
            p.max_error_units
        );
    }
    let ly = height - 30.0;
    for (i, (label, color)) in COLORS.iter().enumerate() {
        let x = left + i as f64 * 130.0;
        s += &format!(
            "<rect x=\"{x}\" y=\"{}\" width=\"14\" height=\"14\" fill=\"{color}\"/><text x=\"{}\" y=\"{}\">{label}</text>\n",
            ly - 11.0,
            x + 19.0,
            ly
        );
    }
    s += "</svg>\n";
    s
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
