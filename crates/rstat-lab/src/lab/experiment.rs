//! The [`Experiment`] trait: everything the lab and the `rstat bench`
//! command know about one experiment, implemented once beside each bench
//! module (`update_bench/experiment.rs`, ...) and listed once in
//! [`super::registry`].
//!
//! An experiment says what it is (name, help line, title, what it measures,
//! the seed's figure), how it uses CPUs, which flags of its own it adds to
//! `rstat bench`, how to run it (its quick mode included) into the JSON and
//! the table `rstat bench NAME` prints, and how the lab shows its combined
//! runs (view, targets, plot; [`super::generic`] shows any JSON when an
//! experiment has no view of its own). The figures it is shown from are in
//! [`super::figures`], its targets in [`super::targets`].

use serde::Serialize;

use super::figures::{Fig, View};
use super::generic;
use super::targets::Target;

/// A seed's own measurement.
#[derive(Clone, Copy, Debug)]
pub struct Seed {
    /// Which seed (`000` to `004`, files in the seeds directory).
    pub id: &'static str,
    /// Its figure, in words.
    pub figure: &'static str,
}

/// How an experiment uses the machine's CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cpus {
    /// Its threads are its own: it refuses `--cpus`.
    Own,
    /// It spreads threads over `--cpus N` CPUs (its own default without
    /// the flag), and needs at least `min` of them.
    Spread {
        /// The fewest CPUs it can run on.
        min: usize,
    },
}

/// What one run of an experiment gets from `rstat bench NAME ...`.
pub struct Params<'a> {
    /// `--quick`: short runs for smoke tests, not for figures.
    pub quick: bool,
    /// `--cpus N`, checked: only given to an experiment that spreads its
    /// threads ([`Cpus::Spread`]) and that can run on N CPUs here.
    pub cpus: Option<usize>,
    /// The parsed command line, where the experiment's own flags
    /// ([`Experiment::args`]) are.
    pub matches: &'a clap::ArgMatches,
}

impl Params<'_> {
    /// The value of the experiment's own flag `id` (`None` when the command
    /// line had no such flag defined, e.g. a run from a test, or it has no
    /// default and was not given).
    ///
    /// Panics if the flag was defined with a value of another type than
    /// `T` (the experiment's [`Experiment::args`] and its run disagree).
    pub fn get<T: Clone + Send + Sync + 'static>(&self, id: &str) -> Option<T> {
        match self.matches.try_get_one::<T>(id) {
            Ok(v) => v.cloned(),
            Err(clap::parser::MatchesError::UnknownArgument { .. }) => None,
            Err(e) => panic!("the flag {id:?} is read as another type than it was defined: {e}"),
        }
    }
}

/// What a run printed: its report as one JSON line (`--json`) and as a
/// human table.
#[derive(Clone, Debug)]
pub struct Output {
    /// The report as one line of JSON (the fields .ci/run and the lab
    /// read).
    pub json: String,
    /// The report as a table.
    pub table: String,
}

impl Output {
    /// The output of `report`, drawn as a table by `table`.
    pub fn new<R: Serialize>(report: &R, table: fn(&R) -> String) -> Result<Self, BenchError> {
        let json = serde_json::to_string(report)
            .map_err(|e| BenchError::Failed(format!("encoding the report as JSON: {e}")))?;
        Ok(Output {
            json,
            table: table(report),
        })
    }
}

/// Why `rstat bench NAME` gave no report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BenchError {
    /// The command line asked for something the experiment cannot do
    /// (exit status 2); the message says what to change.
    Usage(String),
    /// It ran and failed (exit status 1); the message says why.
    Failed(String),
}

/// One experiment of the lab: one `rstat bench NAME`.
///
/// Implemented by a unit struct beside the bench module it drives; the
/// registry ([`super::EXPERIMENTS`]) is the only list of them. Only
/// [`Experiment::name`], the words and [`Experiment::run`] are required: an
/// experiment without a view of its own is shown as a table and a bar plot
/// of its JSON's numbers, with no targets.
pub trait Experiment: Sync {
    /// `rstat bench NAME`.
    fn name(&self) -> &'static str;

    /// One line for `rstat bench --help`.
    fn about(&self) -> &'static str;

    /// A short title (the report's heading line).
    fn title(&self) -> &'static str;

    /// What it measures, for the report.
    fn measures(&self) -> &'static str;

    /// The seed's own figure, if a seed measured this.
    fn seed(&self) -> Option<Seed> {
        None
    }

    /// How it uses CPUs (whether it gets `--cpus N`).
    fn cpus(&self) -> Cpus {
        Cpus::Own
    }

    /// What bounds or explains its figures, for the report (no figures:
    /// those come from the run).
    fn remarks(&self) -> &'static str {
        ""
    }

    /// Flags of its own, added to `rstat bench` (their help starts with
    /// the experiment's name; their ids must not clash with another
    /// experiment's or with the command's).
    fn args(&self) -> Vec<clap::Arg> {
        Vec::new()
    }

    /// Run it once: its configuration from `p` (the short one under
    /// `p.quick`), then the benchmark, into its JSON and its table.
    fn run(&self, p: &Params<'_>) -> Result<Output, BenchError>;

    /// Its table in the report (and our figure beside the seed's).
    fn view(&self, f: &Fig<'_>) -> View {
        generic::view(f)
    }

    /// Its targets, on the combined figures.
    fn targets(&self, _f: &Fig<'_>) -> Vec<Target> {
        Vec::new()
    }

    /// Its plot: (figures, machine line) to SVG.
    fn plot(&self, f: &Fig<'_>, machine: &str) -> Result<String, String> {
        generic::plot(f, machine)
    }
}

/// Why `e` cannot run here with `cpus` CPUs out of `online`, if it cannot.
pub fn cannot_run(e: &dyn Experiment, cpus: usize, online: usize) -> Option<String> {
    let Cpus::Spread { min } = e.cpus() else {
        return None;
    };
    if cpus > online {
        return Some(format!(
            "asked to spread its threads over {cpus} CPUs (--cpus {cpus}); this machine has \
             {online} online: run it on a machine with at least {cpus} CPUs"
        ));
    }
    if cpus < min {
        return Some(format!(
            "needs at least {min} CPUs (its figures compare 1 thread with several, each on its \
             own CPU); --cpus is {cpus}"
        ));
    }
    None
}
