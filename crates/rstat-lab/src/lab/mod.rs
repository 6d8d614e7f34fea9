//! `rstat bench all`: every experiment, run by one command, into one
//! report (`report.md`), its data (`results.json`) and one SVG plot each.
//!
//! The lab is driven by one list, [`EXPERIMENTS`]: one entry per
//! `rstat bench NAME` experiment. An entry names the experiment, says what
//! it measures and what its seed measured, whether it spreads threads over
//! CPUs (then it gets `--cpus N`), and how to show its JSON (the table, the
//! targets, the plot). Adding an experiment is one line
//! ([`Experiment::generic`]); a generic entry is shown as a table of its
//! JSON's numbers until it gets a view of its own.
//!
//! The experiments themselves are not run here: [`run_all`] asks a caller's
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

pub mod host;
pub mod plot;
mod registry;

use serde::Serialize;
use serde_json::{json, Value};

pub use registry::{Experiment, Seed, EXPERIMENTS};

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

/// A target and how it fared.
#[derive(Clone, Debug, Serialize)]
pub struct TargetResult {
    /// What is compared (`field >= goal`).
    pub what: String,
    /// Where it comes from.
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

/// Which experiments to run (all, or those in `only`); unknown names in
/// `only` are an error naming the known ones.
pub fn select(only: &[String]) -> Result<Vec<&'static Experiment>, String> {
    for n in only {
        if !EXPERIMENTS.iter().any(|e| e.name == n) {
            let known: Vec<&str> = EXPERIMENTS.iter().map(|e| e.name).collect();
            return Err(format!(
                "no experiment named {n:?} in the lab; known: {}",
                known.join(", ")
            ));
        }
    }
    Ok(EXPERIMENTS
        .iter()
        .filter(|e| only.is_empty() || only.iter().any(|n| n == e.name))
        .collect())
}

/// Why `e` cannot run here with `cpus` CPUs, if it cannot.
pub fn cannot_run(e: &Experiment, cpus: usize, online: usize) -> Option<String> {
    if !e.scales_with_cpus {
        return None;
    }
    if cpus > online {
        return Some(format!(
            "asked to spread its threads over {cpus} CPUs (--cpus {cpus}); this machine has \
             {online} online: run it on a machine with at least {cpus} CPUs"
        ));
    }
    if cpus < e.min_cpus {
        return Some(format!(
            "needs at least {} CPUs (its figures compare 1 thread with several, each on its \
             own CPU); --cpus is {cpus}",
            e.min_cpus
        ));
    }
    None
}

/// The arguments one run of `e` gets (after `rstat bench NAME`).
pub fn args_for(e: &Experiment, opts: &Options) -> Vec<String> {
    let mut a = vec!["--json".to_owned()];
    if opts.quick {
        a.push("--quick".into());
    }
    if e.scales_with_cpus {
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
                name: e.name.to_owned(),
                status: "ok".into(),
                reason: String::new(),
                args: args_for(e, opts),
                runs: Vec::new(),
                median: Value::Null,
                min: Value::Null,
                max: Value::Null,
                load: Vec::new(),
                targets: Vec::new(),
                plot: String::new(),
            };
            if let Some(why) = cannot_run(e, opts.cpus, machine.online_cpus) {
                progress(&format!("{}: cannot run here: {why}", e.name));
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
                e.name,
                i + 1,
                e.name,
                out.args.join(" ")
            ));
            let a = host::now();
            let r = runner(e.name, &out.args);
            out.load.push(host::between(&a, &host::now()));
            match r {
                Ok(v) => out.runs.push(v),
                Err(RunError::NotInBuild) => {
                    progress(&format!("{}: not in this build of rstat", e.name));
                    out.status = "not_in_build".into();
                    out.reason = format!(
                        "this build of rstat has no `rstat bench {}` yet; the report shows it once \
                         the experiment is added",
                        e.name
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
            let fig = Fig::new(out);
            out.targets = (e.targets)(&fig)
                .into_iter()
                .map(|t| t.judge(&out.runs, &out.median))
                .collect();
        } else {
            out.runs.clear();
        }
    }
    let load = host::between(&t0, &host::now());
    let mut lab = Lab {
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
        plots: Vec::new(),
    };
    for o in lab.experiments.iter_mut() {
        let Some((i, plotter)) = EXPERIMENTS
            .iter()
            .enumerate()
            .find(|(_, e)| e.name == o.name)
            .and_then(|(i, e)| Some((i, e.plot?)))
        else {
            continue;
        };
        if o.status != "ok" {
            continue;
        }
        let fig = Fig::new(o);
        match plotter(&fig, &lab.machine.line()) {
            Ok(svg) => {
                o.plot = format!("{:02}-{}.svg", i + 1, o.name);
                lab.plots.push((o.plot.clone(), svg));
            }
            Err(e) => progress(&format!("{}: plot failed: {e}", o.name)),
        }
    }
    Ok(lab)
}

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
    fn new(o: &'a Outcome) -> Self {
        Fig {
            med: &o.median,
            min: &o.min,
            max: &o.max,
            n: o.runs.len(),
        }
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
    /// Where the target comes from (an issue).
    pub source: &'static str,
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

    fn judge(&self, runs: &[Value], med: &Value) -> TargetResult {
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

impl Lab {
    /// The whole run's machine and load, in words.
    pub fn machine_section(&self) -> String {
        let m = &self.machine;
        let mut s = format!(
            "- **CPU**: {} | **cores**: {} online / {} possible | **kernel**: Linux {} | \
             **rustc**: {} | **CPU ids from**: {}\n",
            m.cpu_model, m.online_cpus, m.possible_cpus, m.kernel, self.rustc, m.cpu_id_source
        );
        // VM state, from the update experiment's reference pair.
        let upd = self
            .experiments
            .iter()
            .find(|o| o.name == "update" && o.status == "ok");
        match upd {
            Some(o) => {
                let per_run: Vec<String> = o
                    .runs
                    .iter()
                    .filter_map(|r| r.get("bare_ratio_vs_shared_atomic_2t")?.as_f64())
                    .map(|x| format!("{x:.2}x"))
                    .collect();
                let med = o
                    .median
                    .get("bare_ratio_vs_shared_atomic_2t")
                    .and_then(Value::as_f64);
                let t = o.median.get("threads").and_then(Value::as_u64).unwrap_or(2);
                let state = match med {
                    Some(x) if x >= VM_NORMAL_RATIO => format!(
                        "**normal**: a contended cache line costs its full price here (a bare \
                         per-CPU counter ran {x:.2}x a shared atomic at {t} threads; at least \
                         {VM_NORMAL_RATIO}x counts as normal)"
                    ),
                    Some(x) => format!(
                        "**degraded**: a bare per-CPU counter ran only {x:.2}x a shared atomic at \
                         {t} threads (below {VM_NORMAL_RATIO}x): the vCPUs share a cache line \
                         cheaply, or the threads took turns on a busy machine; every per-CPU \
                         design's multi-thread ratio against a shared atomic collapses alike"
                    ),
                    None => "unknown (the update experiment gave no reference pair)".into(),
                };
                s += &format!(
                    "- **VM state**: {state} (per run: {})\n",
                    per_run.join(", ")
                );
            }
            None => {
                s += "- **VM state**: not measured (the `update` experiment, whose reference \
                      pair measures it, did not run)\n"
            }
        }
        let busiest = self
            .experiments
            .iter()
            .flat_map(|o| o.load.iter())
            // Shorter runs are a few clock ticks: too coarse to judge.
            .filter(|l| l.seconds >= 1.0)
            .filter_map(|l| l.other_cpus)
            .fold(0.0f64, f64::max);
        let busy = match self.load.other_cpus {
            Some(o) if o >= BUSY_CPUS => format!(
                "**busy**: other processes used {o:.2} of {} CPUs on average while the lab ran \
                 (up to {busiest:.2} during one run of 1 s or more); timings are noisy and ratios \
                 measured side by side in one run are the figures to trust",
                m.online_cpus
            ),
            Some(o) => format!(
                "**quiet**: other processes used {o:.2} of {} CPUs on average while the lab ran \
                 (up to {busiest:.2} during one run of 1 s or more)",
                m.online_cpus
            ),
            None => "unknown (/proc/stat unreadable)".into(),
        };
        s += &format!(
            "- **Machine load**: {busy}; hypervisor steal {:.2} CPUs; load average {} at the start\n",
            self.load.steal_cpus.unwrap_or(0.0),
            self.loadavg_start
                .map_or("unknown".into(), |l| format!("{l:.2}"))
        );
        s
    }

    /// The VM state in a few words, from the `update` experiment's
    /// reference pair (bare per-CPU counter vs shared atomic).
    fn vm_state_short(&self) -> String {
        let ratio = self
            .experiments
            .iter()
            .find(|o| o.name == "update" && o.status == "ok")
            .and_then(|o| o.median.get("bare_ratio_vs_shared_atomic_2t")?.as_f64());
        match ratio {
            Some(x) if x >= VM_NORMAL_RATIO => format!("normal (bare per-CPU {x:.2}x atomic)"),
            Some(x) => format!("degraded (bare per-CPU {x:.2}x atomic)"),
            None => "not measured".into(),
        }
    }

    /// One experiment's machine line: the machine, the VM state and the
    /// load other processes put on it during each of its runs.
    fn experiment_machine_line(&self, o: &Outcome) -> String {
        let m = &self.machine;
        let loads: Vec<String> = o
            .load
            .iter()
            .map(|l| {
                format!(
                    "{} ({:.1} s)",
                    l.other_cpus.map_or("?".into(), |c| format!("{c:.2}")),
                    l.seconds
                )
            })
            .collect();
        format!(
            "Machine: {} | {} online / {} possible CPUs | Linux {} | {} | CPU ids: {} | VM state: \
             {} | other processes' CPUs during each run (wall time): {}.\n",
            m.cpu_model,
            m.online_cpus,
            m.possible_cpus,
            m.kernel,
            self.rustc,
            m.cpu_id_source,
            self.vm_state_short(),
            loads.join(", ")
        )
    }

    /// The report (`report.md`), with plot links prefixed by `img_prefix`
    /// (`""` when the report sits beside the plots).
    pub fn report(&self, img_prefix: &str) -> String {
        let mut s = String::from("# rstat lab report\n\n");
        s += &format!(
            "Generated by `{}` (started {}; {} run{} per experiment{}). Every figure below was \
             written by that command; none is typed by hand. Regenerate with the same command \
             (`cargo build --release -p rstat-cli` first; the binary is `target/release/rstat`). \
             The data is in `results.json` beside the plots.\n\n",
            self.command,
            self.started_utc,
            self.repeat,
            if self.repeat == 1 { "" } else { "s" },
            if self.quick {
                "; **--quick: short runs for smoke tests, the figures mean little**"
            } else {
                ""
            }
        );
        if self.repeat > 1 {
            s += "Each figure is the median of the runs, with the lowest and highest run in \
                  brackets where they differ; each target says in how many runs it was met.\n\n";
        }
        s += "## Machine\n\n";
        s += &self.machine_section();
        s += &format!(
            "- **--cpus**: {} (the CPUs the CPU-scaling experiments spread their threads over)\n\n",
            self.cpus
        );
        s += "## Summary\n\n";
        let mut rows = Vec::new();
        for o in &self.experiments {
            let targets = if o.status != "ok" {
                format!("{}: {}", o.status.replace('_', " "), o.reason)
            } else if o.targets.is_empty() {
                "no target".into()
            } else {
                let met = o.targets.iter().filter(|t| t.met).count();
                format!("{met} of {} met", o.targets.len())
            };
            rows.push(vec![format!("[`{}`](#{})", o.name, o.name), targets]);
        }
        s += &md_table(&["experiment", "targets (on the median)"], &rows);
        for o in &self.experiments {
            let Some(e) = EXPERIMENTS.iter().find(|e| e.name == o.name) else {
                continue;
            };
            s += &format!("\n## {}\n\n", o.name);
            s += &format!("**{}.** {}\n\n", e.title, e.measures);
            s += &format!(
                "Command: `rstat bench {} {}`{}\n\n",
                o.name,
                o.args.join(" "),
                if self.repeat > 1 {
                    format!(", {} times", self.repeat)
                } else {
                    String::new()
                }
            );
            if o.status != "ok" {
                s += &format!(
                    "**No figures: {}.** {}\n",
                    o.status.replace('_', " "),
                    o.reason
                );
                if let Some(seed) = &e.seed {
                    s += &format!("\nThe seed's figure ({}): {}\n", seed.id, seed.figure);
                }
                continue;
            }
            let fig = Fig::new(o);
            let v = (e.view)(&fig);
            match &e.seed {
                Some(seed) => {
                    s += &md_table(
                        &["", "figure"],
                        &[
                            vec![format!("seed {}", seed.id), seed.figure.to_owned()],
                            vec!["rstat, here".into(), v.ours.clone()],
                        ],
                    );
                    s.push('\n');
                }
                None if !v.ours.is_empty() => {
                    s += &format!("No seed measured this. Here: {}\n\n", v.ours);
                }
                None => {}
            }
            s += &v.table;
            s.push('\n');
            if !o.targets.is_empty() {
                let rows: Vec<Vec<String>> = o
                    .targets
                    .iter()
                    .map(|t| {
                        vec![
                            format!("`{}`", t.what),
                            t.source.clone(),
                            t.median.map_or("–".into(), |m| format!("{m:.2}")),
                            if t.met { "met" } else { "**missed**" }.into(),
                            format!("{} of {}", t.runs_met, t.runs),
                        ]
                    })
                    .collect();
                s += &md_table(&["target", "from", "median", "", "runs met"], &rows);
                s.push('\n');
            }
            s += &self.experiment_machine_line(o);
            if !v.notes.is_empty() {
                s += &format!("\n{}\n", v.notes);
            }
            if !e.remarks.is_empty() {
                s += &format!("\n{}\n", e.remarks);
            }
            if !o.plot.is_empty() {
                s += &format!("\n![{}]({img_prefix}{})\n", o.name, o.plot);
            }
        }
        s
    }

    /// `results.json`: one line (the latency distributions make the
    /// indented form several times larger), then a newline.
    pub fn json(&self) -> Result<String, String> {
        serde_json::to_string(self)
            .map(|s| s + "\n")
            .map_err(|e| format!("encoding results.json: {e}"))
    }
}

/// A bare per-CPU counter at least this many times a shared atomic at the
/// multi-thread count means cache lines bounce at their full price.
pub const VM_NORMAL_RATIO: f64 = 4.0;

/// Other processes using at least this many CPUs' worth of time makes the
/// machine "busy".
pub const BUSY_CPUS: f64 = 0.2;

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

#[cfg(test)]
mod tests;
