//! The `rstat` command: `demo` (the main job; `--listen` serves Prometheus
//! metrics), `top` (a live view of an exporter) and `bench <experiment>`.

use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use rstat_lab::lab::command::{parse_interval, parse_secs};
use rstat_lab::lab::{command, BenchError};

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
        /// Seconds between tree printouts (at least 0.001).
        #[arg(long, default_value_t = 1.0, value_parser = parse_interval)]
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
        /// Seconds between samples (at least 0.001).
        #[arg(long, default_value_t = 1.0, value_parser = parse_interval)]
        interval: f64,
        /// Sort column: path, cpu, mem, max or events.
        #[arg(long, default_value = "path", value_parser = top::SortKey::parse)]
        sort: top::SortKey,
    },
    /// Run one of the seeds' experiments; `--json` prints one JSON object as
    /// the last line. `rstat bench all --out DIR` runs every experiment and
    /// writes DIR/report.md, DIR/results.json and one SVG plot each.
    Bench(BenchArgs),
}

/// `rstat bench`'s own flags; the experiment names and each experiment's
/// flags are added from the lab's registry ([`command::augment`]).
#[derive(clap::Args)]
struct BenchArgs {
    /// Which experiment.
    name: String,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Shorter run (fewer iterations): for smoke tests, not for figures.
    #[arg(long)]
    quick: bool,
    /// The CPUs an experiment that scales with CPUs spreads its threads
    /// over (the help lists them, from the lab's registry).
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
}

/// `rstat bench NAME`: one experiment run as the lab's registry says, or
/// `all` into one report.
fn bench(b: BenchArgs, matches: &clap::ArgMatches) -> ExitCode {
    let cpus = b.cpus.map(usize::from);
    if b.name == command::ALL {
        let Some(out) = b.out else {
            eprintln!("error: `rstat bench all` needs --out DIR (where to write report.md, results.json and the plots)");
            return ExitCode::from(2);
        };
        if b.json {
            eprintln!("error: `rstat bench all` writes DIR/results.json; drop --json");
            return ExitCode::from(2);
        }
        let args = lab::Args {
            out,
            quick: b.quick,
            repeat: usize::from(b.repeat),
            cpus,
            only: b.only,
            markdown: b.markdown,
        };
        return match lab::run(&args) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if b.out.is_some() || b.markdown.is_some() {
        eprintln!("error: --out and --markdown belong to `rstat bench all`");
        return ExitCode::from(2);
    }
    // The name's value parser accepts only the registry's names and `all`.
    let Some(e) = rstat_lab::lab::find(&b.name) else {
        eprintln!("error: no experiment named {:?}", b.name);
        return ExitCode::from(2);
    };
    match command::run_one(e, b.quick, cpus, matches) {
        Ok(out) if b.json => {
            println!("{}", out.json);
            ExitCode::SUCCESS
        }
        Ok(out) => {
            print!("{}", out.table);
            ExitCode::SUCCESS
        }
        Err(BenchError::Usage(why)) => {
            eprintln!("error: {why}");
            ExitCode::from(2)
        }
        Err(BenchError::Failed(why)) => {
            eprintln!("error: {why}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    // `rstat bench` takes its experiment names and their own flags from the
    // lab's registry.
    let matches = Cli::command()
        .mut_subcommand("bench", command::augment)
        .get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
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
        Cmd::Bench(b) => {
            let none = clap::ArgMatches::default();
            bench(b, matches.subcommand_matches("bench").unwrap_or(&none))
        }
    }
}
