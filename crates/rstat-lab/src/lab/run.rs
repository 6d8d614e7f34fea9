//! `rstat bench all`'s run: every selected experiment of the registry,
//! `--repeat` times, through a caller's runner, into a [`Lab`]: each
//! experiment's runs, their combined figures, its judged targets and its
//! plot. What the report says about a [`Lab`] is in [`super::report`].

use serde::Serialize;
use serde_json::Value;

use super::experiment::{cannot_run, Cpus, Experiment};
use super::figures::{combine, Fig};
use super::host;
use super::registry::{number, select};
use super::targets::TargetResult;
use crate::machine::Machine;

/// What `rstat bench all` was asked to do.
#[derive(Clone, Debug)]
pub struct Options {
    /// Short runs (`--quick` to every experiment).
    pub quick: bool,
    /// Runs per experiment.
    pub repeat: usize,
    /// CPUs the CPU-scaling experiments spread their threads over.
    pub cpus: usize,
    /// Only these experiments (all if empty).
    pub only: Vec<String>,
    /// The command line, quoted at the top of the report.
    pub command: String,
    /// `rustc --version` of the build.
    pub rustc: String,
}

/// Why a run gave no JSON.
#[derive(Clone, Debug)]
pub enum RunError {
    /// This build of `rstat` has no such experiment.
    NotInBuild,
    /// It ran and failed; the reason (its error output's last lines).
    Failed(String),
}

/// A runner: run experiment `name` once with `args` (`--json` is implied),
/// return the JSON object it printed.
pub type Runner<'a> = dyn FnMut(&str, &[String]) -> Result<Value, RunError> + 'a;

/// One experiment's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    /// `rstat bench NAME`.
    pub name: String,
    /// `ok`, `not_in_build`, `cannot_run` or `failed`.
    pub status: String,
    /// Why there are no figures (empty when `ok`).
    pub reason: String,
    /// The arguments each run got.
    pub args: Vec<String>,
    /// Each run's JSON.
    pub runs: Vec<Value>,
    /// Each number: the median over the runs (null when no run).
    pub median: Value,
    /// Each number: the lowest run.
    pub min: Value,
    /// Each number: the highest run.
    pub max: Value,
    /// The machine's load during each run.
    pub load: Vec<host::Load>,
    /// The targets, judged on the median and on each run.
    pub targets: Vec<TargetResult>,
    /// The plot's file name in the output directory (empty if none).
    pub plot: String,
}

impl Outcome {
    /// Its combined figures, for its view and plot.
    pub fn fig(&self) -> Fig<'_> {
        Fig::new(&self.median, &self.min, &self.max, self.runs.len())
    }
}

/// Everything the lab produced: `results.json`, plus the report and plots
/// rendered from it.
#[derive(Clone, Debug, Serialize)]
pub struct Lab {
    /// The command that made it.
    pub command: String,
    /// When it started.
    pub started_utc: String,
    /// `--quick`.
    pub quick: bool,
    /// Runs per experiment.
    pub repeat: usize,
    /// CPUs the CPU-scaling experiments used.
    pub cpus: usize,
    /// The machine.
    pub machine: Machine,
    /// `rustc --version` of the build.
    pub rustc: String,
    /// 1-minute load average before the first experiment.
    pub loadavg_start: Option<f64>,
    /// The whole run's load.
    pub load: host::Load,
    /// Each experiment, in registry order.
    pub experiments: Vec<Outcome>,
    /// The plots: (file name, SVG). Not in `results.json`.
    #[serde(skip)]
    pub plots: Vec<(String, String)>,
}

/// The arguments one run of `e` gets (after `rstat bench NAME`).
pub fn args_for(e: &dyn Experiment, opts: &Options) -> Vec<String> {
    let mut a = vec!["--json".to_owned()];
    if opts.quick {
        a.push("--quick".into());
    }
    if let Cpus::Spread { .. } = e.cpus() {
        a.push("--cpus".into());
        a.push(opts.cpus.to_string());
    }
    a
}

/// Run every selected experiment `opts.repeat` times through `runner`,
/// reporting progress through `progress`, and judge the results.
pub fn run_all(
    opts: &Options,
    runner: &mut Runner<'_>,
    progress: &mut dyn FnMut(&str),
) -> Result<Lab, String> {
    let chosen = select(&opts.only)?;
    let machine = Machine::detect();
    let started_utc = host::utc_now();
    let loadavg_start = host::loadavg();
    let t0 = host::now();
    let repeat = opts.repeat.max(1);
    let mut experiments: Vec<Outcome> = chosen
        .iter()
        .map(|e| {
            let mut out = Outcome {
                name: e.name().to_owned(),
                status: "ok".into(),
                reason: String::new(),
                args: args_for(*e, opts),
                runs: Vec::new(),
                median: Value::Null,
                min: Value::Null,
                max: Value::Null,
                load: Vec::new(),
                targets: Vec::new(),
                plot: String::new(),
            };
            if let Some(why) = cannot_run(*e, opts.cpus, machine.online_cpus) {
                progress(&format!("{}: cannot run here: {why}", e.name()));
                out.status = "cannot_run".into();
                out.reason = why;
            }
            out
        })
        .collect();
    // Round after round through every experiment, so that a drift in the
    // machine's load spreads over all of them instead of hitting one.
    for i in 0..repeat {
        for (e, out) in chosen.iter().zip(experiments.iter_mut()) {
            if out.status != "ok" {
                continue;
            }
            progress(&format!(
                "{}: run {} of {repeat}: rstat bench {} {}",
                e.name(),
                i + 1,
                e.name(),
                out.args.join(" ")
            ));
            let a = host::now();
            let r = runner(e.name(), &out.args);
            out.load.push(host::between(&a, &host::now()));
            match r {
                Ok(v) => out.runs.push(v),
                Err(RunError::NotInBuild) => {
                    progress(&format!("{}: not in this build of rstat", e.name()));
                    out.status = "not_in_build".into();
                    out.reason = format!(
                        "this build of rstat has no `rstat bench {}` yet; the report shows it once \
                         the experiment is added",
                        e.name()
                    );
                }
                Err(RunError::Failed(why)) => {
                    out.status = "failed".into();
                    out.reason = why;
                }
            }
        }
    }
    for (e, out) in chosen.iter().zip(experiments.iter_mut()) {
        if out.status == "ok" {
            let (med, lo, hi) = combine(&out.runs);
            out.median = med;
            out.min = lo;
            out.max = hi;
            out.targets = e
                .targets(&out.fig())
                .into_iter()
                .map(|t| t.judge(&out.runs, &out.median))
                .collect();
        } else {
            out.runs.clear();
        }
    }
    let load = host::between(&t0, &host::now());
    let machine_line = machine.line();
    let mut plots = Vec::new();
    for (e, o) in chosen.iter().zip(experiments.iter_mut()) {
        if o.status != "ok" {
            continue;
        }
        match e.plot(&o.fig(), &machine_line) {
            Ok(svg) => {
                o.plot = format!("{:02}-{}.svg", number(*e), o.name);
                plots.push((o.plot.clone(), svg));
            }
            Err(err) => progress(&format!("{}: plot failed: {err}", o.name)),
        }
    }
    Ok(Lab {
        command: opts.command.clone(),
        started_utc,
        quick: opts.quick,
        repeat,
        cpus: opts.cpus,
        machine,
        rustc: opts.rustc.clone(),
        loadavg_start,
        load,
        experiments,
        plots,
    })
}
