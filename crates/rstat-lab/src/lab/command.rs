//! `rstat bench`'s command line, built from the registry: the experiment
//! names it accepts (with their help lines), the flags each experiment
//! adds, and the run of one experiment (`rstat bench NAME ...`) with its
//! `--cpus` checked. The `rstat` binary declares the command's common
//! flags (`--json`, `--quick`, `--cpus`, `--out`, ...), hands the command
//! to [`augment`] and calls [`run_one`]; it names no experiment.

use clap::builder::{PossibleValue, PossibleValuesParser};

use super::experiment::{cannot_run, BenchError, Cpus, Experiment, Output, Params};
use super::registry::EXPERIMENTS;

/// The id of the experiment-name argument of `rstat bench`.
pub const NAME_ARG: &str = "name";

/// The id of `rstat bench`'s `--cpus` flag.
pub const CPUS_ARG: &str = "cpus";

/// `rstat bench NAME`'s `all`: every experiment into one report.
pub const ALL: &str = "all";

/// `rstat bench`, completed from the registry: the names (and `all`) as
/// the possible values of [`NAME_ARG`], the `--cpus` help naming the
/// experiments that spread threads over CPUs, and every experiment's own
/// flags.
pub fn augment(bench: clap::Command) -> clap::Command {
    let names = EXPERIMENTS
        .iter()
        .map(|e| PossibleValue::new(e.name()).help(e.about()))
        .chain([
            PossibleValue::new(ALL).help("Every experiment, into one report (needs `--out DIR`)")
        ]);
    let spread: Vec<&str> = EXPERIMENTS
        .iter()
        .filter(|e| matches!(e.cpus(), Cpus::Spread { .. }))
        .map(|e| e.name())
        .collect();
    let cpus_help = format!(
        "The CPUs an experiment that scales with CPUs spreads its threads over ({}; default: \
         their own, 2 or every CPU); at most the online CPUs. For `all`: default every online CPU",
        spread.join(", ")
    );
    EXPERIMENTS.iter().fold(
        bench
            .mut_arg(NAME_ARG, |a| {
                a.value_parser(PossibleValuesParser::new(names))
            })
            .mut_arg(CPUS_ARG, |a| a.help(cpus_help)),
        |cmd, e| cmd.args(e.args()),
    )
}

/// Run experiment `e` once: `--cpus` refused where it does not apply or
/// this machine cannot do it ([`BenchError::Usage`]), then the run.
/// `matches` are `rstat bench`'s, where the experiment's own flags are.
pub fn run_one(
    e: &dyn Experiment,
    quick: bool,
    cpus: Option<usize>,
    matches: &clap::ArgMatches,
) -> Result<Output, BenchError> {
    if let Some(n) = cpus {
        let name = e.name();
        if e.cpus() == Cpus::Own {
            return Err(BenchError::Usage(format!(
                "`rstat bench {name}` does not spread threads over CPUs; drop --cpus"
            )));
        }
        if let Some(why) = cannot_run(e, n, crate::machine::online_cpus()) {
            return Err(BenchError::Usage(format!("`rstat bench {name}` {why}")));
        }
    }
    e.run(&Params {
        quick,
        cpus,
        matches,
    })
}

/// An interval flag in seconds (`rstat demo --interval`, `rstat top
/// --interval`): as [`parse_secs`], and at least a millisecond. A shorter
/// one only prints faster than anyone reads, and one below a nanosecond
/// would round to zero (a loop that never advances).
pub fn parse_interval(s: &str) -> Result<f64, String> {
    let v = parse_secs(s)?;
    if v < MIN_INTERVAL_SECS {
        return Err(format!(
            "{s} is too short an interval: give at least {MIN_INTERVAL_SECS} seconds"
        ));
    }
    Ok(v)
}

/// The shortest interval [`parse_interval`] accepts, in seconds.
pub const MIN_INTERVAL_SECS: f64 = 0.001;

/// A duration flag in seconds (`--seconds`, `--duration`, ...): above 0
/// and at most a day. The one parser of such flags, for the lab's
/// experiments and the `rstat` binary alike.
pub fn parse_secs(s: &str) -> Result<f64, String> {
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
