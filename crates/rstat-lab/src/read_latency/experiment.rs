//! `rstat bench read-latency` as an experiment of the lab: its words, its
//! own flags (`--policy`, `--readers`, `--period-ms`, `--seconds`,
//! `--plot`), its configuration (`--quick`, `--cpus`), and how the report
//! shows its JSON: the latency buckets and staleness per policy, the
//! targets and the plot.

use std::path::PathBuf;
use std::time::Duration;

use clap::{value_parser, Arg};
use rstat::FlushPolicy;
use serde_json::Value;

use super::Config;
use crate::lab::command::parse_secs;
use crate::lab::experiment::{BenchError, Cpus, Experiment, Output, Params, Seed};
use crate::lab::figures::{md_table, Fig, View};
use crate::lab::plot::{figure, Cat, Line, Panel};
use crate::lab::targets::{Op, Target};

/// The `rstat bench read-latency` experiment.
pub struct ReadLatency;

impl Experiment for ReadLatency {
    fn name(&self) -> &'static str {
        "read-latency"
    }

    fn about(&self) -> &'static str {
        "Seed 004: read latency and staleness under many readers, per policy"
    }

    fn title(&self) -> &'static str {
        "Read latency and staleness per flush policy"
    }

    fn measures(&self) -> &'static str {
        "Latency of reads of random groups by many readers while writers (one per \
         CPU) update random leaves of a 1,000-group tree, per flush policy; and how \
         stale each read was against a shadow count of completed updates (the \
         numbers of readers and writers are under the table)."
    }

    fn seed(&self) -> Option<Seed> {
        Some(Seed {
            id: "004",
            figure: "384 CPUs, 10k reader threads every 100 ms: 98.8% of reads < 100 µs, \
                     1.09% 100 µs–1 ms, 0.11% 1–10 ms; every 10 ms: 82.3% < 100 µs, 4.2% \
                     100 µs–1 ms, 4.7% 1–10 ms, 8.8% 10–100 ms",
        })
    }

    fn cpus(&self) -> Cpus {
        Cpus::Spread { min: 1 }
    }

    fn remarks(&self) -> &'static str {
        "In the seed's terms: `unified-root` makes every reader pay for the \
         whole tree, and a reader that finds a flush running returns what the last one \
         folded (the stalest); `always` flushes only the subtree read (exact); \
         `threshold` (the default, kernel v6.8) flushes only past its bound and \
         otherwise returns a lock-free copy (run here without a read pace, so its reads \
         keep the kernel's bound in units; `rstat bench peers` measures the default, \
         paced in time); `coalesced` waits for a running root \
         flush, so its tail pays for whole-tree flushes and its reads are not exact. \
         The seed's 384-CPU, 10k-reader scale is out of reach on a small machine: \
         compare the policies' shapes, not the absolute buckets."
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::new("policy")
                .long("policy")
                .value_name("POLICY")
                .default_value("all")
                .help(
                    "read-latency: which flush policy to run (always, threshold, unified-root, \
                     coalesced) or `all`",
                ),
            Arg::new("readers")
                .long("readers")
                .value_name("READERS")
                .default_value("64")
                .value_parser(value_parser!(u16).range(1..=4096))
                .help("read-latency: reader threads"),
            Arg::new("period_ms")
                .long("period-ms")
                .value_name("PERIOD_MS")
                .default_value("10")
                .value_parser(parse_ms)
                .help("read-latency: milliseconds between one reader's reads"),
            Arg::new("seconds")
                .long("seconds")
                .value_name("SECONDS")
                .default_value("3")
                .value_parser(parse_secs)
                .help("read-latency: seconds per policy"),
            Arg::new("plot")
                .long("plot")
                .value_name("PLOT")
                .value_parser(value_parser!(PathBuf))
                .help("read-latency: also write the latency plot (SVG) to this file"),
        ]
    }

    fn run(&self, p: &Params<'_>) -> Result<Output, BenchError> {
        let policy = p.get::<String>("policy").unwrap_or_else(|| "all".into());
        let policies = parse_policies(&policy).map_err(BenchError::Usage)?;
        let mut cfg = Config {
            policies,
            ..Default::default()
        };
        if let Some(r) = p.get::<u16>("readers") {
            cfg.readers = usize::from(r);
        }
        if let Some(ms) = p.get::<f64>("period_ms") {
            cfg.period = Duration::from_secs_f64(ms / 1e3);
        }
        if let Some(s) = p.get::<f64>("seconds") {
            cfg.duration = Duration::from_secs_f64(s);
        }
        if p.quick {
            cfg.duration = Duration::from_millis(200);
            cfg.readers = cfg.readers.min(8);
        }
        if let Some(n) = p.cpus {
            cfg.writers = n;
        }
        let report = super::run(&cfg);
        if let Some(path) = p.get::<PathBuf>("plot") {
            std::fs::write(&path, super::svg(&report)).map_err(|e| {
                BenchError::Failed(format!("writing the plot to {}: {e}", path.display()))
            })?;
        }
        Output::new(&report, super::table)
    }

    fn view(&self, f: &Fig<'_>) -> View {
        view(f)
    }

    fn targets(&self, f: &Fig<'_>) -> Vec<Target> {
        targets(f)
    }

    fn plot(&self, f: &Fig<'_>, machine: &str) -> Result<String, String> {
        plot(f, machine)
    }
}

/// `--policy`: one flush policy by name, or `all`.
fn parse_policies(name: &str) -> Result<Vec<FlushPolicy>, String> {
    if name == "all" {
        return Ok(FlushPolicy::ALL.to_vec());
    }
    name.parse::<FlushPolicy>()
        .map(|p| vec![p])
        .map_err(|e| format!("{e} (or `all`)"))
}

/// `--period-ms`: 0.01 ms to a minute.
fn parse_ms(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of milliseconds"))?;
    if !v.is_finite() || !(0.01..=60_000.0).contains(&v) {
        return Err(format!("{s} ms is out of range: give 0.01 to 60000"));
    }
    Ok(v)
}

fn policies(f: &Fig) -> usize {
    f.med
        .get("policies")
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}

fn view(f: &Fig) -> View {
    let n = policies(f);
    let rows: Vec<Vec<String>> = (0..n)
        .map(|i| {
            let p = |k: &str| format!("/policies/{i}/{k}");
            vec![
                f.s(&p("name")),
                f.f(&p("reads"), 0),
                f.f(&p("pct_lt_100us"), 2),
                f.f(&p("pct_100us_1ms"), 2),
                f.f(&p("pct_1ms_10ms"), 2),
                f.f(&p("pct_10ms_100ms"), 2),
                f.f(&p("pct_ge_100ms"), 2),
                f.f(&p("p50_us"), 1),
                f.f(&p("p99_us"), 1),
                f.f(&p("max_us"), 0),
                f.f(&p("writer_mops"), 2),
                {
                    let b = f.s(&p("bound_units"));
                    if b.is_empty() {
                        "none".into()
                    } else {
                        b
                    }
                },
                f.f(&p("max_error_units"), 0),
                f.f(&p("mean_error_units"), 1),
            ]
        })
        .collect();
    let ours = (0..n)
        .map(|i| {
            format!(
                "{} {}% < 100 µs",
                f.s(&format!("/policies/{i}/name")),
                f.f(&format!("/policies/{i}/pct_lt_100us"), 1)
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    View {
        ours: format!(
            "{} readers every {} ms on {} CPUs: {ours}",
            f.s("/readers"),
            f.s("/period_ms"),
            f.s("/machine/online_cpus")
        ),
        table: md_table(
            &[
                "policy",
                "reads",
                "% <100µs",
                "% 100µs–1ms",
                "% 1–10ms",
                "% 10–100ms",
                "% ≥100ms",
                "p50 µs",
                "p99 µs",
                "max µs",
                "writer Mops/s",
                "bound (units)",
                "max stale",
                "mean stale",
            ],
            &rows,
        ),
        notes: format!(
            "{} groups, {} writers, {} readers each reading every {} ms, {} s per policy. `bound` is the policy's documented \
             staleness bound for a read of the root; `max stale` and `mean stale` are how far \
             behind the completed updates a read was.",
            f.s("/groups"),
            f.s("/writers"),
            f.s("/readers"),
            f.s("/period_ms"),
            f.s("/seconds_per_policy")
        ),
    }
}

fn targets(f: &Fig) -> Vec<Target> {
    (0..policies(f))
        .filter_map(|i| {
            let bound = f.v(&format!("/policies/{i}/bound_units"))?;
            Some(Target::new(
                &format!("{} max_error_units", f.s(&format!("/policies/{i}/name"))),
                &format!("/policies/{i}/max_error_units"),
                Op::Le,
                bound,
                "the policy's documented staleness bound",
            ))
        })
        .collect()
}

fn plot(f: &Fig, machine: &str) -> Result<String, String> {
    let n = policies(f);
    let lines: Vec<Line> = (0..n)
        .map(|i| {
            let k = f
                .med
                .pointer(&format!("/policies/{i}/cdf_us"))
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            Line {
                name: f.s(&format!("/policies/{i}/name")),
                points: (0..k)
                    .filter_map(|j| {
                        let us = f.v(&format!("/policies/{i}/cdf_us/{j}/1"))?;
                        let q = f.v(&format!("/policies/{i}/cdf_us/{j}/0"))?;
                        Some((us, q))
                    })
                    .collect(),
            }
        })
        .collect();
    let cats: Vec<Cat> = (0..n)
        .map(|i| {
            let bound = f.s(&format!("/policies/{i}/bound_units"));
            Cat {
                label: format!(
                    "{} (bound {})",
                    f.s(&format!("/policies/{i}/name")),
                    if bound.is_empty() { "none" } else { &bound }
                ),
                vals: vec![
                    f.val(&format!("/policies/{i}/mean_error_units")),
                    f.val(&format!("/policies/{i}/max_error_units")),
                ],
            }
        })
        .collect();
    figure(
        "rstat bench read-latency",
        machine,
        &[
            Panel::Lines {
                title: "read latency CDF per policy".into(),
                x_desc: "read latency, µs (log)".into(),
                y_desc: "fraction of reads".into(),
                lines,
                log_x: true,
                log_y: false,
            },
            Panel::Bars {
                title: "staleness per policy".into(),
                x_desc: "units behind the completed updates".into(),
                series: vec!["mean stale".into(), "max stale".into()],
                cats,
            },
        ],
        2,
        600,
    )
}
