//! `rstat bench server` as an experiment of the lab: its words, its
//! configuration (`--quick`) and its targets (its table and plot are the
//! generic ones).

use super::Config;
use crate::lab::experiment::{BenchError, Experiment, Output, Params};
use crate::lab::figures::Fig;
use crate::lab::targets::{Op, Target};

/// The `rstat bench server` experiment.
pub struct Server;

impl Experiment for Server {
    fn name(&self) -> &'static str {
        "server"
    }

    fn about(&self) -> &'static str {
        "What rstat costs a tokio server per request (a span per request, a group per request) \
         vs no accounting and vs tokio-metrics + prometheus + a counting allocator; \
         per-tenant CPU and heap checked"
    }

    fn title(&self) -> &'static str {
        "A server's requests, end to end"
    }

    fn measures(&self) -> &'static str {
        "A tokio runtime with 2 workers serving in-process requests for 16 tenants (64 in \
         flight, closed loop); each request allocates a few objects (one freed later by \
         another request), yields, burns W = 5, 20 or 100 µs of CPU and updates 3 counters. \
         Variants interleaved in one run: no accounting; rstat with a tracing span per request \
         (GroupLayer) + Accounted<mimalloc> + counters; rstat with a group per request under \
         its tenant; tokio-metrics' TaskMonitor per tenant + prometheus counters + a \
         per-tenant counting allocator. Overhead = process CPU time per request over no \
         accounting's in the same sample (median). In the same run: each tenant's usage_usec \
         against the workers' thread clocks around its requests' bodies, and each tenant's \
         heap against its live objects after draining the stocks."
    }

    fn remarks(&self) -> &'static str {
        "The allocators are called through GlobalAlloc explicitly (not the process's \
         #[global_allocator]), so only the requests' objects are charged. The CPU truth is \
         read inside the requests' bodies: rstat also charges the part of each poll's \
         entering and leaving that lies inside the group, so its charge is expected slightly \
         above the truth, more so at small W."
    }

    fn run(&self, p: &Params<'_>) -> Result<Output, BenchError> {
        let mut cfg = Config::default();
        if p.quick {
            cfg.samples = 2;
            cfg.sample_work_us = 20_000;
            cfg.check_requests = 640;
        }
        let r = super::run(&cfg).map_err(BenchError::Failed)?;
        if r.errors > 0 {
            return Err(BenchError::Failed(format!(
                "{} requests failed (an allocation, a group creation or removal, or a task)",
                r.errors
            )));
        }
        Output::new(&r, super::table)
    }

    fn targets(&self, _f: &Fig<'_>) -> Vec<Target> {
        vec![
            Target::new(
                "overhead_pct_tenant_w20",
                "/overhead_pct_tenant_w20",
                Op::Le,
                2.0,
                "attach + alloc: a span per request costs a 20 µs request at most 2%",
            ),
            Target::new(
                "overhead_pct_request_w20",
                "/overhead_pct_request_w20",
                Op::Le,
                7.0,
                "groups: a group per request costs a 20 µs request at most 7%",
            ),
            Target::new(
                "tenant_minus_peers_pct_w20",
                "/tenant_minus_peers_pct_w20",
                Op::Le,
                0.0,
                "peers: per-tenant accounting costs no more than tokio-metrics + prometheus + a \
                 counting allocator",
            ),
            Target::new(
                "cpu_error_pct_max",
                "/cpu_error_pct_max",
                Op::Le,
                1.0,
                "attach: per-tenant CPU within 1% of the workers' clocks",
            ),
            Target::new(
                "heap_mismatches",
                "/heap_mismatches",
                Op::Le,
                0.0,
                "accounting allocator: per-tenant heap exact after draining",
            ),
        ]
    }
}
