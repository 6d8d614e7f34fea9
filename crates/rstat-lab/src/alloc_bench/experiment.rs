//! `rstat bench alloc` as an experiment of the lab: its words, its
//! configuration (`--quick`) and its targets (its table and plot are the
//! generic ones).

use super::Config;
use crate::lab::experiment::{BenchError, Experiment, Output, Params};
use crate::lab::figures::Fig;
use crate::lab::targets::{Op, Target};

/// The `rstat bench alloc` experiment.
pub struct Alloc;

impl Experiment for Alloc {
    fn name(&self) -> &'static str {
        "alloc"
    }

    fn about(&self) -> &'static str {
        "The accounting allocator vs the inner allocator, an eager tracker, a per-thread \
         batch tracker and a flat per-group counter; drift at quiescent points"
    }

    fn title(&self) -> &'static str {
        "The accounting allocator"
    }

    fn measures(&self) -> &'static str {
        "2 threads, each in its own group under a common parent, allocating and freeing \
         16-4096 byte objects (some freed by the other thread) through the inner allocator \
         alone, `Accounted<inner>`, an eager tracker (owner header, every ancestor's shared \
         atomic), a per-thread-batch tracker (ClickHouse's shape) and a per-group counter \
         (owner header, one shared atomic per group); drift of the charged \
         bytes from the live bytes at quiescent points, against its documented bound \
         (`drift_bound_bytes`)."
    }

    fn run(&self, p: &Params<'_>) -> Result<Output, BenchError> {
        let mut cfg = Config::default();
        if p.quick {
            cfg.ops = 20_000;
            cfg.rounds = 2;
            cfg.samples = 1;
        }
        Output::new(&super::run(&cfg), super::table)
    }

    fn targets(&self, _f: &Fig<'_>) -> Vec<Target> {
        vec![
            Target::new(
                "overhead_pct",
                "/overhead_pct",
                Op::Le,
                15.0,
                "accounting allocator: low overhead",
            ),
            Target::new(
                "ratio_vs_eager",
                "/ratio_vs_eager",
                Op::Ge,
                2.0,
                "accounting allocator: beats an eager tracker",
            ),
            Target::new(
                "mimalloc_ratio_vs_alone",
                "/mimalloc_ratio_vs_alone",
                Op::Ge,
                0.8,
                "accounting allocator over mimalloc: at least 0.8x mimalloc alone",
            ),
            Target::new(
                "mimalloc_ratio_vs_group_counter",
                "/mimalloc_ratio_vs_group_counter",
                Op::Ge,
                1.0,
                "accounting allocator over mimalloc: no slower than one shared counter per group",
            ),
            Target::new(
                "drift_after_drain_bytes_max",
                "/drift_after_drain_bytes_max",
                Op::Le,
                0.0,
                "accounting allocator: exact after draining",
            ),
        ]
    }
}
