//! `rstat bench enter` as an experiment of the lab: its words, its
//! configuration (`--quick`), its targets and its plot (its table is the
//! generic one).

use std::time::Duration;

use super::Config;
use crate::lab::experiment::{BenchError, Experiment, Output, Params};
use crate::lab::figures::Fig;
use crate::lab::plot::{figure, Cat, Panel};
use crate::lab::targets::{Op, Target};

/// The `rstat bench enter` experiment.
pub struct Enter;

impl Experiment for Enter {
    fn name(&self) -> &'static str {
        "enter"
    }

    fn about(&self) -> &'static str {
        "Enter/exit cost vs a thread-clock pair; scoped poll vs tokio-metrics; CPU time's accuracy"
    }

    fn title(&self) -> &'static str {
        "Attaching threads and tasks to groups"
    }

    fn measures(&self) -> &'static str {
        "The cost of entering and leaving a group on one thread (each change of the \
         current group reads a wall clock once: the TSC or the vDSO's monotonic clock, \
         no system call) against two \
         `clock_gettime(CLOCK_THREAD_CPUTIME_ID)` calls measured in the same run; a \
         `scope`d future's overhead per poll against `tokio-metrics`' `TaskMonitor`'s, \
         both over the same bare poll; the accuracy of a hog's `usage_usec` against \
         the thread's own clock, exact and sampled; and the error model: per-group \
         `usage_usec` against the thread's clock around each request, for a mix of \
         CPU-bound and blocking requests in four groups on one thread."
    }

    fn run(&self, p: &Params<'_>) -> Result<Output, BenchError> {
        let mut cfg = Config::default();
        if p.quick {
            cfg.iters = 20_000;
            cfg.samples = 1;
            cfg.hog = Duration::from_millis(100);
            cfg.requests = 400;
        }
        Output::new(&super::run(&cfg), super::table)
    }

    fn targets(&self, _f: &Fig<'_>) -> Vec<Target> {
        vec![
            Target::new(
                "enter_exit_vs_clock_pair",
                "/enter_exit_vs_clock_pair",
                Op::Le,
                1.5,
                "attach: enter + exit cost about their two clock reads",
            ),
            Target::new(
                "hog_usage_error_pct",
                "/hog_usage_error_pct",
                Op::Le,
                1.0,
                "attach: CPU time as exact as the kernel's selftest asks",
            ),
            Target::new(
                "enter_exit_ns",
                "/enter_exit_ns",
                Op::Le,
                150.0,
                "attach: an enter + exit pair without a system call per switch",
            ),
            Target::new(
                "root_vs_getrusage_pct",
                "/root_vs_getrusage_pct",
                Op::Le,
                1.0,
                "attach: the root is the process (its usage_usec matches getrusage)",
            ),
            Target::new(
                "scope_vs_tokio_metrics",
                "/scope_vs_tokio_metrics",
                Op::Le,
                1.2,
                "attach: a scoped poll costs at most 1.2x tokio-metrics' per-poll overhead",
            ),
        ]
    }

    fn plot(&self, f: &Fig<'_>, machine: &str) -> Result<String, String> {
        plot(f, machine)
    }
}

fn plot(f: &Fig, machine: &str) -> Result<String, String> {
    let bars = |rows: &[(&str, &str)]| -> Vec<Cat> {
        rows.iter()
            .filter_map(|(label, p)| {
                Some(Cat {
                    label: (*label).into(),
                    vals: vec![Some(f.val(p)?)],
                })
            })
            .collect()
    };
    let cost = bars(&[
        ("enter + exit", "/enter_exit_ns"),
        ("two thread-clock reads", "/thread_clock_pair_ns"),
        ("nested enter + exit", "/nested_enter_exit_ns"),
        ("re-enter the current group", "/reenter_ns"),
        ("sampled mode: enter + exit", "/sampled_enter_exit_ns"),
        ("scope: overhead per poll", "/scope_poll_ns"),
        ("tokio-metrics: overhead per poll", "/tokio_metrics_poll_ns"),
    ]);
    let error = bars(&[
        ("exact (clock on each change)", "/hog_usage_error_pct"),
        ("sampled", "/sampled_hog_usage_error_pct"),
        ("request mix: worst group", "/cpu_error_pct_max"),
    ]);
    if cost.is_empty() {
        return Err("its JSON has none of the enter/exit costs".into());
    }
    let panels = vec![
        Panel::Bars {
            title: "cost per operation".into(),
            x_desc: "ns".into(),
            series: vec!["median".into()],
            cats: cost,
        },
        Panel::Bars {
            title: "usage_usec vs the thread's CPU clock".into(),
            x_desc: "error, %".into(),
            series: vec!["median".into()],
            cats: error,
        },
    ];
    figure(
        "enter: attaching threads to groups",
        machine,
        &panels,
        2,
        640,
    )
}
