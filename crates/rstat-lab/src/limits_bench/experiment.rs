//! `rstat bench limits` as an experiment of the lab: its words, its
//! configuration (`--quick`) and its targets (its table and plot are the
//! generic ones).

use super::Config;
use crate::lab::experiment::{BenchError, Experiment, Output, Params};
use crate::lab::figures::Fig;
use crate::lab::targets::{Op, Target};

/// The `rstat bench limits` experiment.
pub struct Limits;

impl Experiment for Limits {
    fn name(&self) -> &'static str {
        "limits"
    }

    fn about(&self) -> &'static str {
        "cpu.max and memory.high slow the tenant over its limit, not its neighbour \
         (scoped tasks on a tokio runtime)"
    }

    fn title(&self) -> &'static str {
        "Limits that slow a tenant, not the process"
    }

    fn measures(&self) -> &'static str {
        "On a tokio runtime with 2 workers: two tenants each running 4 scoped tasks that burn \
         200 µs of CPU and yield, tenant A with cpu.max \"20000 100000\", for 10 s: each \
         tenant's CPU use (usage_usec over the wall time) and A's throttling counts. Then two \
         tenants each allocating 64 KiB buffers through Accounted<System> into a cache an \
         evictor empties at 32 MiB/s, tenant A with memory.high 8 MiB, for 3 s: each tenant's \
         allocation rate and peak memory.current."
    }

    fn remarks(&self) -> &'static str {
        "cpu.max charges each poll its CPU time when it ends and defers the polls that \
         follow a spent quota (a cooperative executor cannot stop a poll midway): a poll that \
         overruns the quota leaves a debt the next periods pay. The memory.high penalty holds \
         a scoped future's next poll; it is never slept inside the allocator."
    }

    fn run(&self, p: &Params<'_>) -> Result<Output, BenchError> {
        let mut cfg = Config::default();
        if p.quick {
            cfg.cpu_secs = 1.0;
            cfg.mem_secs = 0.5;
        }
        Output::new(&super::run(&cfg), super::table)
    }

    fn targets(&self, _f: &Fig<'_>) -> Vec<Target> {
        vec![
            Target::new(
                "a_share_error_pct",
                "/a_share_error_pct",
                Op::Le,
                10.0,
                "limits: a tenant at cpu.max 20000 100000 uses 20% of a CPU, within 10%",
            ),
            Target::new(
                "b_cpus_vs_rest",
                "/b_cpus_vs_rest",
                Op::Ge,
                0.9,
                "limits: its neighbour uses the rest",
            ),
            Target::new(
                "a_slowdown",
                "/a_slowdown",
                Op::Ge,
                2.0,
                "limits: a tenant over memory.high is slowed",
            ),
            Target::new(
                "a_peak_vs_high",
                "/a_peak_vs_high",
                Op::Le,
                1.5,
                "limits: its usage stays near memory.high instead of running to its cap",
            ),
        ]
    }
}
