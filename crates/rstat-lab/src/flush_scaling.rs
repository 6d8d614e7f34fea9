//! `rstat bench flush-scaling` (seed 003): flush cost follows the groups
//! that changed, not the size of the tree.
//!
//! A tree of 100,000 groups, four levels deep, with 10 active leaves, against
//! a tree holding only those 10 leaves and their ancestors. Both get the same
//! updates (each active leaf on every CPU slot), then the root is flushed;
//! only the flush is timed. The two trees alternate, so noise hits both.
//!
//! The sweep (`sweep`) times the same flush on trees of intermediate sizes
//! (`Config::sweep`), `rounds / 4` flushes each, for a flush-cost-vs-size
//! curve.

pub mod experiment;

use std::time::Instant;

use rstat::testing::{BuilderExt, ControllerHandleExt};
use serde::Serialize;

use crate::machine::{median, round, Machine};

/// Settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Groups in the big tree, root included.
    pub groups: usize,
    /// Active leaves.
    pub active: usize,
    /// Timed flushes per tree.
    pub rounds: usize,
    /// Tree sizes of the sweep (groups, root included; at least 1,200 so
    /// that the tree has its active leaves).
    pub sweep: Vec<usize>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            groups: 100_000,
            active: 10,
            rounds: 20_000,
            sweep: vec![2_000, 10_000, 30_000],
        }
    }
}

/// One tree size of the sweep.
#[derive(Clone, Debug, Serialize)]
pub struct SweepRow {
    /// Groups in the tree, root included.
    pub groups: usize,
    /// Median flush of the root, µs.
    pub flush_us: f64,
    /// (group, CPU) pairs folded per flush.
    pub folds_per_flush: f64,
}

/// Results.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Median flush of the big tree's root, µs.
    pub big_tree_flush_us: f64,
    /// Median flush of the small tree's root, µs.
    pub small_tree_flush_us: f64,
    /// big / small (target <= 1.5).
    pub ratio: f64,
    /// Groups in the big tree.
    pub big_tree_groups: usize,
    /// Groups in the small tree.
    pub small_tree_groups: usize,
    /// Depth of the leaves.
    pub depth: usize,
    /// Active leaves.
    pub active_leaves: usize,
    /// Per-CPU slots each active leaf was updated on per round.
    pub cpus_updated: usize,
    /// (group, CPU) folds per flush in the big tree (must equal the small's).
    pub folds_per_flush_big: f64,
    /// Same, small tree.
    pub folds_per_flush_small: f64,
    /// Flush cost at the sweep's tree sizes.
    pub sweep: Vec<SweepRow>,
    /// The machine.
    pub machine: Machine,
}

struct Tree {
    rs: rstat::Rstat,
    ctl: rstat::ControllerHandle,
    active: Vec<rstat::Group>,
    groups: usize,
}

fn must<T>(r: rstat::Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("flush-scaling setup: {e}"),
    }
}

/// Fan-out per level: 10, 10, 10, then the rest of the groups as leaves.
fn build(total: usize, active: usize, only_active: bool) -> Tree {
    let rs = must(rstat::Rstat::builder().cpu_controller(false).build());
    let ctl = must(rs.register_counters("s", &["a", "b", "c", "d"]));
    let mut count = 1;
    let mut active_leaves = Vec::new();
    let l3_total = 1000;
    let leaves_total = total.saturating_sub(1 + 10 + 100 + l3_total);
    let per_l3 = leaves_total.div_ceil(l3_total).max(1);
    let mut leaves_made = 0;
    for a in 0..10 {
        let l1 = must(rs.root().create_child(&format!("l1-{a}")));
        count += 1;
        for b in 0..10 {
            if only_active && (b != 0 || a >= active) {
                continue;
            }
            let l2 = must(l1.create_child(&format!("l2-{b}")));
            count += 1;
            for c in 0..10 {
                if only_active && c != 0 {
                    continue;
                }
                let l3 = must(l2.create_child(&format!("l3-{c}")));
                count += 1;
                for d in 0..per_l3 {
                    let is_active = b == 0 && c == 0 && d == 0 && a < active;
                    if only_active && !is_active {
                        continue;
                    }
                    if !only_active && leaves_made >= leaves_total {
                        break;
                    }
                    let leaf = must(l3.create_child(&format!("leaf-{d}")));
                    count += 1;
                    leaves_made += 1;
                    if is_active {
                        active_leaves.push(leaf);
                    }
                }
            }
        }
    }
    Tree {
        rs,
        ctl,
        active: active_leaves,
        groups: count,
    }
}

/// Run the benchmark.
pub fn run(cfg: &Config) -> Report {
    let active = cfg.active.clamp(1, 10);
    let big = build(cfg.groups, active, false);
    let small = build(cfg.groups, active, true);
    let nr = big.rs.nr_cpus();
    let round_of = |t: &Tree| -> f64 {
        for leaf in &t.active {
            for cpu in 0..nr {
                for item in 0..4 {
                    must(t.ctl.add_on_cpu(leaf, cpu, item, 1));
                }
            }
        }
        let t0 = Instant::now();
        must(t.ctl.flush(t.rs.root()));
        t0.elapsed().as_secs_f64() * 1e6
    };
    // Warm up both, then alternate.
    for _ in 0..100 {
        round_of(&big);
        round_of(&small);
    }
    let (fb0, fs0) = (big.ctl.flush_counts(), small.ctl.flush_counts());
    let mut bt = Vec::with_capacity(cfg.rounds);
    let mut st = Vec::with_capacity(cfg.rounds);
    for _ in 0..cfg.rounds {
        bt.push(round_of(&big));
        st.push(round_of(&small));
    }
    let (fb1, fs1) = (big.ctl.flush_counts(), small.ctl.flush_counts());
    let per = |a: (u64, u64), b: (u64, u64)| (b.1 - a.1) as f64 / (b.0 - a.0).max(1) as f64;
    // Honesty check: both trees hold the same totals.
    let total = |t: &Tree| must(t.ctl.read_exact(t.rs.root())).hierarchical().to_vec();
    assert_eq!(total(&big), total(&small), "the two trees disagree");
    let (b, s) = (median(bt), median(st));
    let sweep = cfg
        .sweep
        .iter()
        .map(|&groups| {
            let t = build(groups.max(1_200), active, false);
            for _ in 0..20 {
                round_of(&t);
            }
            let f0 = t.ctl.flush_counts();
            let rounds = (cfg.rounds / 4).max(20);
            let times: Vec<f64> = (0..rounds).map(|_| round_of(&t)).collect();
            let f1 = t.ctl.flush_counts();
            // Every round added 1 per active leaf, CPU slot and item.
            let want = (rounds + 20) as i64 * (t.active.len() * nr) as i64;
            assert_eq!(
                total(&t)[0],
                want,
                "the sweep tree lost updates ({groups} groups)"
            );
            SweepRow {
                groups: t.groups,
                flush_us: round(median(times), 3),
                folds_per_flush: per(f0, f1),
            }
        })
        .collect();
    Report {
        big_tree_flush_us: round(b, 3),
        small_tree_flush_us: round(s, 3),
        ratio: round(b / s, 3),
        big_tree_groups: big.groups,
        small_tree_groups: small.groups,
        depth: 4,
        active_leaves: active,
        cpus_updated: nr,
        folds_per_flush_big: per(fb0, fb1),
        folds_per_flush_small: per(fs0, fs1),
        sweep,
        machine: Machine::detect(),
    }
}

/// Human-readable table.
pub fn table(r: &Report) -> String {
    format!(
        "rstat bench flush-scaling: {} active leaves at depth {}, updated on {} CPU slots, root flushed (median)\n{}\n\n\
         {:<28} {:>10} {:>14} {:>16}\n{:<28} {:>10} {:>14.3} {:>16.1}\n{:<28} {:>10} {:>14.3} {:>16.1}\n\n\
         ratio big/small: {:.3} (target <= 1.5)\n",
        r.active_leaves,
        r.depth,
        r.cpus_updated,
        r.machine.line(),
        "tree",
        "groups",
        "flush µs",
        "folds/flush",
        "big",
        r.big_tree_groups,
        r.big_tree_flush_us,
        r.folds_per_flush_big,
        "only active + ancestors",
        r.small_tree_groups,
        r.small_tree_flush_us,
        r.folds_per_flush_small,
        r.ratio
    )
}
