//! The `rstat` command: `demo` (the main job) and `bench <experiment>`.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

mod demo;

#[derive(Parser)]
#[command(
    name = "rstat",
    version,
    about = "cgroup-style hierarchical accounting for your process: demo and benchmarks"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a multi-tenant workload on rstat and print the live group tree.
    Demo {
        /// How long to run, in seconds (fractions allowed).
        #[arg(long, default_value_t = 5.0, value_parser = parse_secs)]
        duration: f64,
        /// Worker threads.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=256))]
        threads: u16,
        /// Seconds between tree printouts.
        #[arg(long, default_value_t = 1.0, value_parser = parse_secs)]
        interval: f64,
    },
    /// Run one of the seeds' experiments; `--json` prints one JSON object as
    /// the last line.
    Bench {
        /// Which experiment.
        #[arg(value_enum)]
        name: BenchName,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
        /// Shorter run (fewer iterations): for smoke tests, not for figures.
        #[arg(long)]
        quick: bool,
        /// read-latency: which flush policy to run (always, threshold,
        /// unified-root, coalesced) or `all`.
        #[arg(long, default_value = "all")]
        policy: String,
        /// read-latency: reader threads.
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=4096))]
        readers: u16,
        /// read-latency: milliseconds between one reader's reads.
        #[arg(long, default_value_t = 10.0, value_parser = parse_ms)]
        period_ms: f64,
        /// read-latency: seconds per policy.
        #[arg(long, default_value_t = 3.0, value_parser = parse_secs)]
        seconds: f64,
        /// read-latency: also write the latency plot (SVG) to this file.
        #[arg(long)]
        plot: Option<std::path::PathBuf>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum BenchName {
    /// Update cost vs a shared atomic and a per-thread counter.
    Update,
    /// Flush cost: 100,000-group tree vs only the active groups.
    FlushScaling,
    /// Seed 000: cpu.stat reads with separate vs unified trees.
    SeparateTrees,
    /// Seed 002: page_counter packed vs padded layout under concurrent charge.
    PageCounter,
    /// Seed 004: read latency and staleness under many readers, per policy.
    ReadLatency,
    /// Seed 003: rstat's exact reads vs write-side batching error.
    Accuracy,
    /// Seed 001: percpu_ref vs a shared atomic refcount, copy sizes 0-512.
    PercpuRef,
    /// Memory charge/uncharge through the per-CPU stock vs eager atomics.
    Charge,
    /// The accounting allocator vs the inner allocator, an eager tracker
    /// and a per-thread batch tracker; drift at quiescent points.
    Alloc,
}

fn parse_secs(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !v.is_finite() || v <= 0.0 || v > 86_400.0 {
        return Err(format!(
            "{s} is out of range: give a number of seconds above 0 and at most 86400"
        ));
    }
    Ok(v)
}

fn parse_ms(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of milliseconds"))?;
    if !v.is_finite() || !(0.01..=60_000.0).contains(&v) {
        return Err(format!("{s} ms is out of range: give 0.01 to 60000"));
    }
    Ok(v)
}

fn policies(name: &str) -> Result<Vec<rstat::FlushPolicy>, String> {
    if name == "all" {
        return Ok(rstat::FlushPolicy::ALL.to_vec());
    }
    name.parse::<rstat::FlushPolicy>()
        .map(|p| vec![p])
        .map_err(|e| format!("{e} (or `all`)"))
}

fn emit<T: serde::Serialize>(json: bool, report: &T, table: impl Fn(&T) -> String) -> ExitCode {
    if json {
        match serde_json::to_string(report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("error: encoding the report as JSON: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", table(report));
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Demo {
            duration,
            threads,
            interval,
        } => {
            let opts = demo::Options {
                duration: Duration::from_secs_f64(duration),
                threads: threads as usize,
                interval: Duration::from_secs_f64(interval),
            };
            match demo::run(&opts) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::FAILURE,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Bench {
            name,
            json,
            quick,
            policy,
            readers,
            period_ms,
            seconds,
            plot,
        } => match name {
            BenchName::Update => {
                let mut cfg = rstat_lab::update_bench::Config::default();
                if quick {
                    cfg.iters = 200_000;
                    cfg.samples = 1;
                }
                emit(
                    json,
                    &rstat_lab::update_bench::run(&cfg),
                    rstat_lab::update_bench::table,
                )
            }
            BenchName::FlushScaling => {
                let mut cfg = rstat_lab::flush_scaling::Config::default();
                if quick {
                    cfg.groups = 5_000;
                    cfg.rounds = 200;
                }
                emit(
                    json,
                    &rstat_lab::flush_scaling::run(&cfg),
                    rstat_lab::flush_scaling::table,
                )
            }
            BenchName::SeparateTrees => {
                let mut cfg = rstat_lab::separate_trees::Config::default();
                if quick {
                    cfg.reads = 2_000;
                }
                emit(
                    json,
                    &rstat_lab::separate_trees::run(&cfg),
                    rstat_lab::separate_trees::table,
                )
            }
            BenchName::ReadLatency => {
                let policies = match policies(&policy) {
                    Ok(p) => p,
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::from(2);
                    }
                };
                let mut cfg = rstat_lab::read_latency::Config {
                    readers: readers as usize,
                    period: Duration::from_secs_f64(period_ms / 1e3),
                    duration: Duration::from_secs_f64(seconds),
                    policies,
                    ..Default::default()
                };
                if quick {
                    cfg.duration = Duration::from_millis(200);
                    cfg.readers = cfg.readers.min(8);
                }
                let report = rstat_lab::read_latency::run(&cfg);
                if let Some(path) = plot {
                    if let Err(e) = std::fs::write(&path, rstat_lab::read_latency::svg(&report)) {
                        eprintln!("error: writing the plot to {}: {e}", path.display());
                        return ExitCode::FAILURE;
                    }
                }
                emit(json, &report, rstat_lab::read_latency::table)
            }
            BenchName::Accuracy => {
                let mut cfg = rstat_lab::accuracy::Config::default();
                if quick {
                    cfg.updates = 20_000;
                }
                emit(
                    json,
                    &rstat_lab::accuracy::run(&cfg),
                    rstat_lab::accuracy::table,
                )
            }
            BenchName::PercpuRef => {
                let mut cfg = rstat_lab::percpu_ref_bench::Config::default();
                if quick {
                    cfg.seconds_per_case = 0.02;
                }
                emit(
                    json,
                    &rstat_lab::percpu_ref_bench::run(&cfg),
                    rstat_lab::percpu_ref_bench::table,
                )
            }
            BenchName::Charge => {
                let mut cfg = rstat_lab::charge_bench::Config::default();
                if quick {
                    cfg.iters = 100_000;
                    cfg.samples = 1;
                }
                emit(
                    json,
                    &rstat_lab::charge_bench::run(&cfg),
                    rstat_lab::charge_bench::table,
                )
            }
            BenchName::Alloc => {
                let mut cfg = rstat_lab::alloc_bench::Config::default();
                if quick {
                    cfg.ops = 20_000;
                    cfg.rounds = 2;
                    cfg.samples = 1;
                }
                emit(
                    json,
                    &rstat_lab::alloc_bench::run(&cfg),
                    rstat_lab::alloc_bench::table,
                )
            }
            BenchName::PageCounter => {
                let mut cfg = rstat_lab::page_counter_bench::Config::default();
                if quick {
                    cfg.seconds = 0.2;
                }
                emit(
                    json,
                    &rstat_lab::page_counter_bench::run(&cfg),
                    rstat_lab::page_counter_bench::table,
                )
            }
        },
    }
}
