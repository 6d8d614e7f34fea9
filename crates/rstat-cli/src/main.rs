//! The `rstat` command: `demo` (the main job; `--listen` serves Prometheus
//! metrics), `top` (a live view of an exporter) and `bench <experiment>`.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

mod demo;
mod lab;
mod serve;
mod top;

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
        /// Serve Prometheus metrics (and `rstat top`'s snapshots) at
        /// HOST:PORT while the demo runs, e.g. 127.0.0.1:9756 (port 0: any).
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
        /// Allow --listen on a non-loopback address (the metrics name every
        /// group).
        #[arg(long, requires = "listen")]
        allow_remote: bool,
    },
    /// Live view of the group tree of a process that serves rstat metrics
    /// (e.g. `rstat demo --listen 127.0.0.1:9756`): full-screen on a
    /// terminal, plain tables otherwise or with --once.
    Top {
        /// The exporter's URL.
        #[arg(long, default_value = top::DEFAULT_URL)]
        url: String,
        /// Print one table (after two samples an interval apart) and exit.
        #[arg(long)]
        once: bool,
        /// Seconds between samples.
        #[arg(long, default_value_t = 1.0, value_parser = parse_secs)]
        interval: f64,
        /// Sort column: path, cpu, mem, max or events.
        #[arg(long, default_value = "path", value_parser = top::SortKey::parse)]
        sort: top::SortKey,
    },
    /// Run one of the seeds' experiments; `--json` prints one JSON object as
    /// the last line. `rstat bench all --out DIR` runs every experiment and
    /// writes DIR/report.md, DIR/results.json and one SVG plot each.
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
        /// The CPUs an experiment that scales with CPUs spreads its threads
        /// over (update, charge, percpu-ref, page-counter, separate-trees,
        /// read-latency; default: their own, 2 or every CPU); at most the
        /// online CPUs. For `all`: default every online CPU.
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=4096))]
        cpus: Option<u16>,
        /// all: the directory to write report.md, results.json and the plots
        /// to (created if missing).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// all: run each experiment this many times and report the median
        /// and the range.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=100))]
        repeat: u16,
        /// all: only these experiments (comma-separated names).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// all: also write the report to this file, its plot links relative
        /// to it (e.g. `--markdown BENCHMARKS.md`).
        #[arg(long)]
        markdown: Option<std::path::PathBuf>,
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
    /// One Prometheus scrape of 1k/10k/100k groups: series, bytes, time.
    Scrape,
    /// Issue 11: enter/exit and scoped-poll cost vs a thread-clock pair;
    /// accuracy of a hog's CPU time.
    Enter,
    /// The accounting allocator vs the inner allocator, an eager tracker
    /// and a per-thread batch tracker; drift at quiescent points.
    Alloc,
    /// Every experiment, into one report (needs `--out DIR`).
    All,
}

/// The `--cpus` an experiment gets, refused where it does not apply or
/// this machine cannot do it.
fn cpus_for(name: &str, cpus: Option<u16>) -> Result<Option<usize>, ExitCode> {
    let Some(n) = cpus.map(usize::from) else {
        return Ok(None);
    };
    let Some(e) = rstat_lab::lab::EXPERIMENTS.iter().find(|e| e.name == name) else {
        return Ok(None);
    };
    if !e.scales_with_cpus {
        eprintln!("error: `rstat bench {name}` does not spread threads over CPUs; drop --cpus");
        return Err(ExitCode::from(2));
    }
    match rstat_lab::lab::cannot_run(e, n, rstat_lab::machine::online_cpus()) {
        Some(why) => {
            eprintln!("error: `rstat bench {name}` {why}");
            Err(ExitCode::from(2))
        }
        None => Ok(Some(n)),
    }
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
        Cmd::Top {
            url,
            once,
            interval,
            sort,
        } => {
            let opts = top::Options {
                url,
                once,
                interval: Duration::from_secs_f64(interval),
                sort,
            };
            match top::run(&opts) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Demo {
            duration,
            threads,
            interval,
            listen,
            allow_remote,
        } => {
            let opts = demo::Options {
                duration: Duration::from_secs_f64(duration),
                threads: threads as usize,
                interval: Duration::from_secs_f64(interval),
                listen,
                allow_remote,
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
            cpus,
            out,
            repeat,
            only,
            markdown,
        } => match name {
            BenchName::All => {
                let Some(out) = out else {
                    eprintln!("error: `rstat bench all` needs --out DIR (where to write report.md, results.json and the plots)");
                    return ExitCode::from(2);
                };
                if json {
                    eprintln!("error: `rstat bench all` writes DIR/results.json; drop --json");
                    return ExitCode::from(2);
                }
                let args = lab::Args {
                    out,
                    quick,
                    repeat: usize::from(repeat),
                    cpus: cpus.map(usize::from),
                    only,
                    markdown,
                };
                match lab::run(&args) {
                    Ok(true) => ExitCode::SUCCESS,
                    Ok(false) => ExitCode::FAILURE,
                    Err(e) => {
                        eprintln!("error: {e}");
                        ExitCode::FAILURE
                    }
                }
            }
            _ if out.is_some() || markdown.is_some() => {
                eprintln!("error: --out and --markdown belong to `rstat bench all`");
                ExitCode::from(2)
            }
            BenchName::Update => {
                let cpus = match cpus_for("update", cpus) {
                    Ok(c) => c,
                    Err(code) => return code,
                };
                let mut cfg = rstat_lab::update_bench::Config::default();
                if quick {
                    cfg.iters = 200_000;
                    cfg.samples = 1;
                }
                if let Some(n) = cpus {
                    cfg.threads = n;
                }
                emit(
                    json,
                    &rstat_lab::update_bench::run(&cfg),
                    rstat_lab::update_bench::table,
                )
            }
            BenchName::FlushScaling => {
                // Refuses --cpus: this experiment does not use threads per CPU.
                if let Err(code) = cpus_for("flush-scaling", cpus) {
                    return code;
                }
                let mut cfg = rstat_lab::flush_scaling::Config::default();
                if quick {
                    cfg.groups = 5_000;
                    cfg.rounds = 200;
                    cfg.sweep = vec![2_000];
                }
                emit(
                    json,
                    &rstat_lab::flush_scaling::run(&cfg),
                    rstat_lab::flush_scaling::table,
                )
            }
            BenchName::SeparateTrees => {
                let cpus = match cpus_for("separate-trees", cpus) {
                    Ok(c) => c,
                    Err(code) => return code,
                };
                let mut cfg = rstat_lab::separate_trees::Config {
                    cpus,
                    ..Default::default()
                };
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
                let cpus = match cpus_for("read-latency", cpus) {
                    Ok(c) => c,
                    Err(code) => return code,
                };
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
                if let Some(n) = cpus {
                    cfg.writers = n;
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
                // Refuses --cpus: this experiment does not use threads per CPU.
                if let Err(code) = cpus_for("accuracy", cpus) {
                    return code;
                }
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
                let cpus = match cpus_for("percpu-ref", cpus) {
                    Ok(c) => c,
                    Err(code) => return code,
                };
                let mut cfg = rstat_lab::percpu_ref_bench::Config {
                    threads: cpus,
                    ..Default::default()
                };
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
                let cpus = match cpus_for("charge", cpus) {
                    Ok(c) => c,
                    Err(code) => return code,
                };
                let mut cfg = rstat_lab::charge_bench::Config::default();
                if quick {
                    cfg.iters = 100_000;
                    cfg.samples = 1;
                }
                if let Some(n) = cpus {
                    cfg.threads = n;
                }
                emit(
                    json,
                    &rstat_lab::charge_bench::run(&cfg),
                    rstat_lab::charge_bench::table,
                )
            }
            BenchName::Scrape => {
                let (sizes, samples): (&[usize], usize) = if quick {
                    (&[1_000], 1)
                } else {
                    (&[1_000, 10_000, 100_000], 5)
                };
                match rstat_lab::scrape_bench::run(sizes, samples) {
                    Ok(r) => emit(json, &r, rstat_lab::scrape_bench::table),
                    Err(e) => {
                        eprintln!("error: {e}");
                        ExitCode::FAILURE
                    }
                }
            }
            BenchName::Enter => {
                let mut cfg = rstat_lab::enter_bench::Config::default();
                if quick {
                    cfg.iters = 20_000;
                    cfg.samples = 1;
                    cfg.hog = Duration::from_millis(100);
                }
                emit(
                    json,
                    &rstat_lab::enter_bench::run(&cfg),
                    rstat_lab::enter_bench::table,
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
                let cpus = match cpus_for("page-counter", cpus) {
                    Ok(c) => c,
                    Err(code) => return code,
                };
                let mut cfg = rstat_lab::page_counter_bench::Config {
                    cpus,
                    ..Default::default()
                };
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
