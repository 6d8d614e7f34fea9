//! Targets: a goal on one number of an experiment's JSON (with the name of
//! the requirement it checks), and how the combined figures and each run fared against
//! it. An experiment lists its targets beside its bench
//! ([`super::Experiment::targets`]); the lab judges them here and the
//! report prints the [`TargetResult`]s.

use serde::Serialize;
use serde_json::Value;

/// How a target compares.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// At least.
    Ge,
    /// At most.
    Le,
    /// Above.
    Gt,
}

/// A target on one number of an experiment's JSON.
#[derive(Clone, Debug)]
pub struct Target {
    /// What it is, in words.
    pub label: String,
    /// JSON pointer of the number.
    pub ptr: String,
    /// Comparison.
    pub op: Op,
    /// The goal.
    pub goal: f64,
    /// The requirement the target checks, by name (the report's "from"
    /// column): what it asks of rstat, not where it was asked.
    pub source: &'static str,
}

/// A target and how it fared.
#[derive(Clone, Debug, Serialize)]
pub struct TargetResult {
    /// What is compared (`field >= goal`).
    pub what: String,
    /// The requirement it checks, by name.
    pub source: String,
    /// The median value (null if missing).
    pub median: Option<f64>,
    /// Met by the median.
    pub met: bool,
    /// Runs that met it.
    pub runs_met: usize,
    /// Runs judged.
    pub runs: usize,
}

impl Target {
    /// A target.
    pub fn new(label: &str, ptr: &str, op: Op, goal: f64, source: &'static str) -> Self {
        Target {
            label: label.to_owned(),
            ptr: ptr.to_owned(),
            op,
            goal,
            source,
        }
    }

    fn ok(&self, v: f64) -> bool {
        match self.op {
            Op::Ge => v >= self.goal,
            Op::Le => v <= self.goal,
            Op::Gt => v > self.goal,
        }
    }

    /// Judge the target on the median `med` and on each of `runs`.
    pub fn judge(&self, runs: &[Value], med: &Value) -> TargetResult {
        let get = |v: &Value| v.pointer(&self.ptr).and_then(Value::as_f64);
        let m = get(med);
        let sym = match self.op {
            Op::Ge => ">=",
            Op::Le => "<=",
            Op::Gt => ">",
        };
        TargetResult {
            what: format!("{} {sym} {}", self.label, self.goal),
            source: self.source.to_owned(),
            median: m,
            met: m.is_some_and(|x| self.ok(x)),
            runs_met: runs
                .iter()
                .filter(|r| get(r).is_some_and(|x| self.ok(x)))
                .count(),
            runs: runs.len(),
        }
    }
}
