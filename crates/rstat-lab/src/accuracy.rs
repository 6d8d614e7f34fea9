//! `rstat bench accuracy` (seed 003): rstat's exact read against the
//! pre-rstat memcg scheme, which batched on the write side: per-CPU deltas
//! pushed up the tree only when they exceed 32 units, so a read can be off
//! by up to 32 x CPUs x groups in the subtree.
//!
//! Updates of random size and sign go to random groups of a tree on random
//! CPU slots (64 simulated CPUs, so the experiment means the same on any
//! machine); after every batch the root is read both ways and compared with
//! the truth.

pub mod experiment;

use std::sync::atomic::{AtomicI64, Ordering};

use rstat::testing::ControllerHandleExt;
use serde::Serialize;

use crate::machine::Machine;

/// The old memcg batch.
pub const BATCH: i64 = 32;

/// Settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Simulated CPUs.
    pub cpus: usize,
    /// Groups in the tree (root included).
    pub groups: usize,
    /// Updates.
    pub updates: usize,
    /// Read both ways every this many updates.
    pub read_every: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cpus: 64,
            groups: 32,
            updates: 1_000_000,
            read_every: 1000,
        }
    }
}

/// Results.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Largest |truth - rstat exact read| at the root (target 0).
    pub rstat_max_error: i64,
    /// Mean |truth - rstat exact read| over all reads.
    pub rstat_mean_error: f64,
    /// Largest |truth - batched read| at the root.
    pub batched_max_error: i64,
    /// Mean of the batched error over all reads.
    pub batched_mean_error: f64,
    /// The batched scheme's bound: 32 x CPUs x groups in the subtree.
    pub batched_bound: i64,
    /// Reads compared.
    pub reads: usize,
    /// Simulated CPUs.
    pub cpus: usize,
    /// Groups.
    pub groups: usize,
    /// Updates.
    pub updates: usize,
    /// The machine.
    pub machine: Machine,
}

/// The pre-rstat memcg scheme: per-(group, CPU) pending deltas, pushed into
/// every ancestor's total when their magnitude exceeds the batch.
struct Batched {
    parent: Vec<Option<usize>>,
    pending: Vec<Vec<i64>>,
    total: Vec<AtomicI64>,
}

impl Batched {
    fn add(&mut self, g: usize, cpu: usize, delta: i64) {
        let p = &mut self.pending[g][cpu];
        *p += delta;
        if p.abs() > BATCH {
            let v = std::mem::take(p);
            let mut x = Some(g);
            while let Some(i) = x {
                self.total[i].fetch_add(v, Ordering::Relaxed);
                x = self.parent[i];
            }
        }
    }
}

/// Run the benchmark.
pub fn run(cfg: &Config) -> Report {
    let must = |e: rstat::Error| -> ! { panic!("accuracy setup: {e}") };
    let rs = rstat::Rstat::builder()
        .nr_cpus(cfg.cpus)
        .periodic_flush(None)
        .build()
        .unwrap_or_else(|e| must(e));
    let ctl = rs
        .register_counters("acc", &["pages"])
        .unwrap_or_else(|e| must(e));
    let n = cfg.groups.max(2);
    let mut groups = vec![rs.root().clone()];
    let mut parent = vec![None];
    for i in 1..n {
        // A bushy tree: each group's parent is among the earlier ones.
        let p = (i - 1) / 3;
        groups.push(
            groups[p]
                .create_child(&format!("g{i}"))
                .unwrap_or_else(|e| must(e)),
        );
        parent.push(Some(p));
    }
    let mut batched = Batched {
        parent,
        pending: vec![vec![0; cfg.cpus]; n],
        total: (0..n).map(|_| AtomicI64::new(0)).collect(),
    };
    let mut truth = 0i64;
    let (mut rmax, mut bmax, mut rsum, mut bsum, mut reads) = (0i64, 0i64, 0f64, 0f64, 0usize);
    let mut x = 0x9e3779b97f4a7c15u64;
    for u in 0..cfg.updates {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let g = (x % n as u64) as usize;
        let cpu = ((x >> 20) % cfg.cpus as u64) as usize;
        // Mostly charges, some uncharges, like page counts.
        let mag = ((x >> 32) % 24) as i64 + 1;
        let delta = if (x >> 60) < 5 { -mag } else { mag };
        ctl.add_on_cpu(&groups[g], cpu, 0, delta)
            .unwrap_or_else(|e| must(e));
        batched.add(g, cpu, delta);
        truth += delta;
        if (u + 1) % cfg.read_every == 0 {
            let r = ctl
                .read_exact(rs.root())
                .unwrap_or_else(|e| must(e))
                .hierarchical()[0];
            let b = batched.total[0].load(Ordering::Relaxed);
            rmax = rmax.max((truth - r).abs());
            rsum += (truth - r).abs() as f64;
            bmax = bmax.max((truth - b).abs());
            bsum += (truth - b).abs() as f64;
            reads += 1;
        }
    }
    Report {
        rstat_max_error: rmax,
        rstat_mean_error: if reads == 0 {
            0.0
        } else {
            (rsum / reads as f64 * 10.0).round() / 10.0
        },
        batched_max_error: bmax,
        batched_mean_error: if reads == 0 {
            0.0
        } else {
            (bsum / reads as f64 * 10.0).round() / 10.0
        },
        batched_bound: BATCH * cfg.cpus as i64 * n as i64,
        reads,
        cpus: cfg.cpus,
        groups: n,
        updates: cfg.updates,
        machine: Machine::detect(),
    }
}

/// Human-readable table.
pub fn table(r: &Report) -> String {
    format!(
        "rstat bench accuracy (seed 003): {} updates over {} groups on {} CPU slots; root read {} times\n{}\n\n\
         {:<34} {:>12} {:>12}\n{:<34} {:>12} {:>12.1}\n{:<34} {:>12} {:>12.1}\n\nbatched bound (32 x CPUs x groups): {}\n",
        r.updates,
        r.groups,
        r.cpus,
        r.reads,
        r.machine.line(),
        "scheme",
        "max error",
        "mean error",
        "rstat, exact read",
        r.rstat_max_error,
        r.rstat_mean_error,
        "write-side batching (pre-rstat)",
        r.batched_max_error,
        r.batched_mean_error,
        r.batched_bound
    )
}
