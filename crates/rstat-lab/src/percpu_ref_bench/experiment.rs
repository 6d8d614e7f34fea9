//! `rstat bench percpu-ref` as an experiment of the lab: its words, its
//! configuration (`--quick`, `--cpus`), and how the report shows its JSON:
//! the rows by thread count and copy size, the targets and the plot.

use serde_json::Value;

use super::Config;
use crate::lab::experiment::{BenchError, Cpus, Experiment, Output, Params, Seed};
use crate::lab::figures::{md_table, Fig, View};
use crate::lab::plot::{figure, Line, Panel};
use crate::lab::targets::{Op, Target};

/// The `rstat bench percpu-ref` experiment.
pub struct PercpuRef;

impl Experiment for PercpuRef {
    fn name(&self) -> &'static str {
        "percpu-ref"
    }

    fn about(&self) -> &'static str {
        "Seed 001: percpu_ref vs a shared atomic refcount, copy sizes 0-512"
    }

    fn title(&self) -> &'static str {
        "percpu_ref against an atomic reference count"
    }

    fn measures(&self) -> &'static str {
        "get, copy N bytes to a per-CPU buffer, put, as many times as possible: a \
         shared atomic against `PercpuRef` (rseq fast path) and `PercpuRef` with \
         locked slots, on one pinned thread and on one thread per CPU."
    }

    fn seed(&self) -> Option<Seed> {
        Some(Seed {
            id: "001",
            figure: "1 CPU: +45.8% at copy 0, −6.9% to −10.4% at 32–512 bytes; all CPUs (2 \
                     cores / 4 threads, qemu): +1007% at copy 0, +105% to +252% at 32–512",
        })
    }

    fn cpus(&self) -> Cpus {
        Cpus::Spread { min: 2 }
    }

    fn remarks(&self) -> &'static str {
        "`percpu_ref` is the default fast path: a restartable sequence (an \
         unlocked add on this CPU's slot, restarted by the kernel if the thread \
         moves), the kernel's `this_cpu_add`. `locked` is `InitFlags::LOCKED_SLOTS`: a \
         `lock xadd` per get and put, whose slot address is computed after the \
         previous one completes (the fallback without rseq, and what rstat's groups \
         use, because their kills must not call `membarrier`)."
    }

    fn run(&self, p: &Params<'_>) -> Result<Output, BenchError> {
        let mut cfg = Config {
            threads: p.cpus,
            ..Default::default()
        };
        if p.quick {
            cfg.seconds_per_case = 0.02;
        }
        Output::new(&super::run(&cfg), super::table)
    }

    fn view(&self, f: &Fig<'_>) -> View {
        view(f)
    }

    fn targets(&self, f: &Fig<'_>) -> Vec<Target> {
        targets(f)
    }

    fn plot(&self, f: &Fig<'_>, machine: &str) -> Result<String, String> {
        plot(f, machine)
    }
}

/// (row index, threads, copy bytes, busy neighbour) of each row.
fn percpu_rows(f: &Fig) -> Vec<(usize, u64, u64, bool)> {
    let n = f
        .med
        .get("rows")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    (0..n)
        .filter_map(|i| {
            let t = f.v(&format!("/rows/{i}/threads"))? as u64;
            let c = f.v(&format!("/rows/{i}/copy_bytes"))? as u64;
            let busy = f
                .med
                .pointer(&format!("/rows/{i}/busy_neighbour"))
                .and_then(Value::as_bool)
                .unwrap_or(false);
            Some((i, t, c, busy))
        })
        .collect()
}

fn view(f: &Fig) -> View {
    let secs = f.v("/seconds_per_case").unwrap_or(1.0).max(1e-9);
    let mops = |p: &str| -> String {
        let Some(v) = f.val(p) else {
            return "–".into();
        };
        let s = |x: f64| x / secs / 1e6;
        if f.n > 1 && v.hi > v.lo {
            format!("{:.1} [{:.1}–{:.1}]", s(v.med), s(v.lo), s(v.hi))
        } else {
            format!("{:.1}", s(v.med))
        }
    };
    let rows: Vec<Vec<String>> = percpu_rows(f)
        .iter()
        .map(|&(i, t, c, busy)| {
            vec![
                t.to_string(),
                (if busy { "memory-bound" } else { "idle" }).to_string(),
                c.to_string(),
                mops(&format!("/rows/{i}/atomic_ops")),
                mops(&format!("/rows/{i}/percpu_ops")),
                format!("{}%", f.f(&format!("/rows/{i}/diff_pct"), 1)),
                mops(&format!("/rows/{i}/locked_ops")),
                format!("{}%", f.f(&format!("/rows/{i}/locked_diff_pct"), 1)),
                f.f(&format!("/rows/{i}/aborts_per_million_sections"), 3),
            ]
        })
        .collect();
    let pick = |threads_one: bool, busy: bool| -> Vec<String> {
        percpu_rows(f)
            .iter()
            .filter(|r| (r.1 == 1) == threads_one && r.3 == busy)
            .map(|&(i, _, c, _)| format!("{c}: {}%", f.f(&format!("/rows/{i}/diff_pct"), 1)))
            .collect()
    };
    let beside = pick(true, true);
    View {
        ours: format!(
            "1 thread: {}; {}all CPUs: {}",
            pick(true, false).join(", "),
            if beside.is_empty() {
                String::new()
            } else {
                format!(
                    "1 thread beside a memory-bound neighbour: {}; ",
                    beside.join(", ")
                )
            },
            pick(false, false).join(", ")
        ),
        table: md_table(
            &[
                "threads",
                "other CPU",
                "copy bytes",
                "atomic Mloops/s",
                "percpu_ref Mloops/s",
                "diff",
                "locked Mloops/s",
                "diff",
                "rseq aborts per 10^6 sections",
            ],
            &rows,
        ),
        notes: format!(
            "`percpu_ref` is the default fast path ({}); `locked` is `InitFlags::LOCKED_SLOTS`. \
             {} s per variant per case; CPU ids from {}. Aborts: restartable sections of the \
             default fast path that the kernel aborted (counted by {}). `other CPU`: idle, or a \
             memory-bound neighbour pinned to CPU 1 (random read-modify-writes over 32 KiB) while \
             the one measured thread runs on CPU 0: where the two are hyperthreads of one core, \
             the neighbour competes for the core's load/store queues and L1, as another VM's \
             thread on a sibling does.",
            f.s("/fast_path"),
            f.s("/seconds_per_case"),
            f.s("/cpu_id_source"),
            f.s("/abort_counter")
        ),
    }
}

fn targets(f: &Fig) -> Vec<Target> {
    percpu_rows(f)
        .iter()
        .filter_map(|&(i, t, c, busy)| {
            let p = format!("/rows/{i}/diff_pct");
            if t == 1 {
                let beside = if busy {
                    " beside a memory-bound neighbour"
                } else {
                    ""
                };
                Some(Target::new(
                    &format!("1 thread{beside}, copy {c}: diff_pct"),
                    &p,
                    Op::Ge,
                    -10.0,
                    "percpu_ref on one thread: near the atomic",
                ))
            } else if c == 0 {
                Some(Target::new(
                    &format!("{t} threads, copy 0: diff_pct"),
                    &p,
                    Op::Ge,
                    300.0,
                    "percpu_ref far ahead when CPUs share it",
                ))
            } else {
                None
            }
        })
        .collect()
}

fn plot(f: &Fig, machine: &str) -> Result<String, String> {
    let secs = f.v("/seconds_per_case").unwrap_or(1.0).max(1e-9);
    let rows = percpu_rows(f);
    let mut blocks: Vec<(u64, bool)> = rows.iter().map(|r| (r.1, r.3)).collect();
    blocks.dedup();
    let panels: Vec<Panel> = blocks
        .iter()
        .map(|&(t, busy)| {
            let line = |name: &str, key: &str| Line {
                name: name.into(),
                points: rows
                    .iter()
                    .filter(|r| r.1 == t && r.3 == busy)
                    .filter_map(|&(i, _, c, _)| {
                        Some((c as f64, f.v(&format!("/rows/{i}/{key}"))? / secs / 1e6))
                    })
                    .collect(),
            };
            Panel::Lines {
                title: match (t, busy) {
                    (1, false) => "1 thread, pinned".into(),
                    (1, true) => "1 thread, memory-bound neighbour on CPU 1".into(),
                    _ => format!("{t} threads, one per CPU"),
                },
                x_desc: "bytes copied while the reference is held".into(),
                y_desc: "million get+copy+put per s".into(),
                lines: vec![
                    line("atomic", "atomic_ops"),
                    line("percpu_ref", "percpu_ops"),
                    line("percpu_ref, locked", "locked_ops"),
                ],
                log_x: false,
                log_y: false,
            }
        })
        .collect();
    figure(
        "rstat bench percpu-ref: percpu_ref vs atomic by copy size",
        machine,
        &panels,
        2,
        560,
    )
}
