//! The lab: every experiment, registered once, run by one command into one
//! report (`report.md`), its data (`results.json`) and one SVG plot each.
//!
//! An experiment is an [`Experiment`]: a unit struct beside its bench
//! module that names it, says what it measures and what its seed measured,
//! whether it spreads threads over CPUs (then it gets `--cpus N`), which
//! flags of its own it takes, how to run it (its `--quick` mode included)
//! into the JSON and table `rstat bench NAME` prints, and how to show its
//! JSON (the view, the targets, the plot). The registry,
//! [`EXPERIMENTS`], is the one list of them: `rstat bench NAME` looks its
//! experiment up there ([`command`]) and `rstat bench all` runs them all.
//! An experiment without a view of its own is shown generically, as a
//! table and a plot of its JSON's numbers.
//!
//! The experiments are not run inside the lab: [`run_all`] asks a caller's
//! runner for each run's JSON (the CLI runs `rstat bench NAME --json` as a
//! child process, so each experiment starts from a fresh process, and one
//! that panics is reported, not fatal). A name the build does not know, a
//! run that fails, or a run this machine cannot do (too few CPUs) is
//! reported with the reason instead of a number.
//!
//! With `--repeat N` every experiment runs N times; each number of its JSON
//! is reported as the median of the N runs with the lowest and highest
//! beside it ([`combine`]), and each target says in how many runs it was
//! met. The machine section says what the figures are worth: CPU, cores,
//! kernel, rustc, where CPU ids came from, how much CPU other processes
//! took during each experiment, and the state of the VM as the `update`
//! experiment's reference pair (a bare per-CPU counter against one shared
//! atomic, side by side) saw it.
//!
//! The files, from the bottom up: [`plot`] (SVG panels), [`figures`]
//! (combined figures and views), [`targets`], [`generic`] (the default
//! view and plot), [`experiment`] (the trait); then the experiments beside
//! their benches; then [`registry`] (the list), [`run`] (`rstat bench
//! all`'s runs), [`report`] (its report), [`command`] (`rstat bench`'s
//! flags and one experiment's run) and [`host`] (the machine's load).

pub mod command;
pub mod experiment;
pub mod figures;
pub mod generic;
pub mod host;
pub mod plot;
pub mod registry;
pub mod report;
pub mod run;
pub mod targets;

pub use experiment::{cannot_run, BenchError, Cpus, Experiment, Output, Params, Seed};
pub use figures::{combine, md_table, Fig, View};
pub use registry::{find, select, EXPERIMENTS};
pub use report::{BUSY_CPUS, VM_NORMAL_RATIO};
pub use run::{args_for, run_all, Lab, Options, Outcome, RunError, Runner};
pub use targets::{Op, Target, TargetResult};

#[cfg(test)]
mod tests;
