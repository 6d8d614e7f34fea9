//! An experiment's combined figures and what its view makes of them.
//!
//! With `--repeat N` every number of an experiment's JSON is combined over
//! the N runs ([`combine`]: the median, with the lowest and highest run);
//! [`Fig`] is how a view, a target or a plot reads those numbers by JSON
//! pointer, and [`View`] and [`md_table`] are what a view hands back for
//! the report. Nothing here knows any experiment: each one's view lives
//! beside its bench (see [`super::experiment`]).

use serde_json::{json, Value};

use super::plot;

/// The median, lowest and highest of every number in `runs` (JSON values
/// of the same shape): the result has the first run's shape with each
/// number replaced. Numbers missing from some runs are combined over the
/// runs that have them; non-numbers are the first run's.
pub fn combine(runs: &[Value]) -> (Value, Value, Value) {
    fn go(vs: &[&Value]) -> (Value, Value, Value) {
        let Some(first) = vs.first() else {
            return (Value::Null, Value::Null, Value::Null);
        };
        match first {
            Value::Number(_) => {
                let mut xs: Vec<f64> = vs.iter().filter_map(|v| v.as_f64()).collect();
                xs.sort_by(f64::total_cmp);
                let m = xs.len() / 2;
                let med = if xs.len() % 2 == 1 {
                    xs[m]
                } else {
                    (xs[m - 1] + xs[m]) / 2.0
                };
                let all_int = vs.iter().all(|v| v.is_i64() || v.is_u64());
                let num = |x: f64| {
                    if all_int && x.fract() == 0.0 {
                        json!(x as i64)
                    } else {
                        json!(x)
                    }
                };
                (num(med), num(xs[0]), num(xs[xs.len() - 1]))
            }
            Value::Object(o) => {
                let (mut a, mut b, mut c) = (
                    serde_json::Map::new(),
                    serde_json::Map::new(),
                    serde_json::Map::new(),
                );
                for k in o.keys() {
                    let sub: Vec<&Value> = vs.iter().filter_map(|v| v.get(k)).collect();
                    let (x, y, z) = go(&sub);
                    a.insert(k.clone(), x);
                    b.insert(k.clone(), y);
                    c.insert(k.clone(), z);
                }
                (Value::Object(a), Value::Object(b), Value::Object(c))
            }
            Value::Array(arr) => {
                let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
                for i in 0..arr.len() {
                    let sub: Vec<&Value> = vs.iter().filter_map(|v| v.get(i)).collect();
                    let (x, y, z) = go(&sub);
                    a.push(x);
                    b.push(y);
                    c.push(z);
                }
                (Value::Array(a), Value::Array(b), Value::Array(c))
            }
            other => ((*other).clone(), (*other).clone(), (*other).clone()),
        }
    }
    let refs: Vec<&Value> = runs.iter().collect();
    go(&refs)
}

/// An experiment's combined figures, for its view and plot.
pub struct Fig<'a> {
    /// The median of each number.
    pub med: &'a Value,
    min: &'a Value,
    max: &'a Value,
    /// Runs combined.
    pub n: usize,
}

impl<'a> Fig<'a> {
    /// The figures of `n` runs combined into `med`, `min` and `max` (as
    /// [`combine`] makes them).
    pub fn new(med: &'a Value, min: &'a Value, max: &'a Value, n: usize) -> Self {
        Fig { med, min, max, n }
    }

    /// The median at JSON pointer `ptr`.
    pub fn v(&self, ptr: &str) -> Option<f64> {
        self.med.pointer(ptr)?.as_f64()
    }

    /// The median and spread at `ptr`, for a plot.
    pub fn val(&self, ptr: &str) -> Option<plot::Val> {
        let med = self.v(ptr)?;
        let lo = self.min.pointer(ptr).and_then(Value::as_f64).unwrap_or(med);
        let hi = self.max.pointer(ptr).and_then(Value::as_f64).unwrap_or(med);
        Some(plot::Val { med, lo, hi })
    }

    /// A string at `ptr` (empty if none).
    pub fn s(&self, ptr: &str) -> String {
        match self.med.pointer(ptr) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(v) => v.to_string(),
        }
    }

    /// The figure at `ptr` with `d` decimals, and its range over the runs
    /// when there was more than one (`12.3 [11.9–12.8]`); `–` if missing.
    pub fn f(&self, ptr: &str, d: usize) -> String {
        let Some(v) = self.val(ptr) else {
            return "–".into();
        };
        if self.n > 1 && v.hi > v.lo {
            format!("{:.d$} [{:.d$}–{:.d$}]", v.med, v.lo, v.hi)
        } else {
            format!("{:.d$}", v.med)
        }
    }
}

/// What an experiment's view shows.
#[derive(Default)]
pub struct View {
    /// Our figure, beside the seed's.
    pub ours: String,
    /// The table (Markdown).
    pub table: String,
    /// Remarks after the targets.
    pub notes: String,
}

/// A Markdown table; a column whose cells all start like a number is
/// right-aligned.
pub fn md_table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = format!("| {} |\n|", head.join(" | "));
    let numeric = |i: usize| {
        rows.iter().all(|r| {
            r.get(i).is_some_and(|c| {
                c.starts_with(|ch: char| ch.is_ascii_digit() || "–-+".contains(ch))
            })
        })
    };
    for (i, _) in head.iter().enumerate() {
        s += if i > 0 && numeric(i) { "---:|" } else { "---|" };
    }
    s.push('\n');
    for r in rows {
        s += &format!("| {} |\n", r.join(" | "));
    }
    s
}
