//! The lab's report (`report.md`) and data (`results.json`), written from
//! a [`Lab`] that [`super::run_all`] made: the machine and how busy it was,
//! a summary of the targets, then per experiment (in registry order) what
//! it measures, the seed's figure beside ours, its view, its targets, the
//! load during its runs and its plot.

use serde_json::Value;

use super::figures::md_table;
use super::registry::find;
use super::run::{Lab, Outcome};

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
            let Some(e) = find(&o.name) else {
                continue;
            };
            s += &format!("\n## {}\n\n", o.name);
            s += &format!("**{}.** {}\n\n", e.title(), e.measures());
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
                if let Some(seed) = e.seed() {
                    s += &format!("\nThe seed's figure ({}): {}\n", seed.id, seed.figure);
                }
                continue;
            }
            let v = e.view(&o.fig());
            match e.seed() {
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
            if !e.remarks().is_empty() {
                s += &format!("\n{}\n", e.remarks());
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
