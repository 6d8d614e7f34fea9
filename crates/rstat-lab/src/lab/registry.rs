//! The lab's experiments: one entry each, in report order.

use serde_json::Value;

use super::plot::{figure, Cat, Line, Panel};
use super::{md_table, Fig, Op, Target, View};

/// A seed's own measurement.
pub struct Seed {
    /// Which seed (`000` to `004`, files in the seeds directory).
    pub id: &'static str,
    /// Its figure, in words.
    pub figure: &'static str,
}

/// Draws an experiment's plot: (figures, machine line) to SVG.
pub type Plotter = fn(&Fig, &str) -> Result<String, String>;

/// (series name, ns points, Mops points) by depth.
type ByDelta = Vec<(String, Vec<(f64, f64)>, Vec<(f64, f64)>)>;

/// One experiment of the lab.
pub struct Experiment {
    /// `rstat bench NAME`.
    pub name: &'static str,
    /// A short title.
    pub title: &'static str,
    /// What it measures.
    pub measures: &'static str,
    /// The seed's own figure, if a seed measured this.
    pub seed: Option<Seed>,
    /// It spreads threads over CPUs: it gets `--cpus N`.
    pub scales_with_cpus: bool,
    /// The fewest CPUs it can run on (when it scales with CPUs).
    pub min_cpus: usize,
    /// What bounds or explains its figures (no figures: those come from
    /// the run).
    pub remarks: &'static str,
    /// Its table (and our figure beside the seed's).
    pub view: fn(&Fig) -> View,
    /// Its targets.
    pub targets: fn(&Fig) -> Vec<Target>,
    /// Its plot: (figures, machine line) to SVG.
    pub plot: Option<Plotter>,
}

impl Experiment {
    /// An experiment shown generically: a table of its JSON's numbers, a
    /// bar plot of its `ns` and `mops` figures (of its first numbers if no
    /// field names either), no targets. Adding an
    /// experiment to the lab is one such line in [`EXPERIMENTS`].
    pub const fn generic(
        name: &'static str,
        title: &'static str,
        measures: &'static str,
        scales_with_cpus: bool,
    ) -> Self {
        Experiment {
            name,
            title,
            measures,
            seed: None,
            scales_with_cpus,
            min_cpus: 1,
            remarks: "",
            view: generic_view,
            targets: no_targets,
            plot: Some(generic_plot),
        }
    }
}

/// Every experiment, in report order.
pub static EXPERIMENTS: &[Experiment] = &[
    Experiment {
        name: "update",
        title: "The cost of one stat update",
        measures: "ns per counter update through a `StatItem` on one thread, and updates per \
                   second with one thread per CPU on one group, beside a shared `AtomicU64` and \
                   a bare per-CPU counter measured in the same run; plus the depth x delta sweep \
                   (item in unit 1: a delta of 64 or more crosses the flush threshold on every \
                   update).",
        seed: None,
        scales_with_cpus: true,
        min_cpus: 2,
        remarks: "What bounds these figures. One thread, on the rseq path: the bare \
                  restartable section row is the floor under every update (arm the section, \
                  read the CPU id, load, add and store this CPU's slot; in a loop each add \
                  loads what the last one stored, at an address known only once the CPU id is \
                  read, so it waits on store-to-load forwarding; like every handle, the \
                  counter re-loads its words after each section, since the compiler must \
                  assume the `asm!` block wrote memory). An update adds instructions around \
                  that section: it tests for a batch boundary and checks the on-list flag; \
                  `StatHandle::add` also loads the css's slot and links, and \
                  `ControllerHandle::add` also checks the item, the engine and the group's \
                  table (by the benchmark loops' disassembly, 27 instructions per iteration \
                  through a `StatItem` and 40 through a `ControllerHandle`, section, loop and \
                  `black_box` included). Which of the two bounds a thread depends on the core: \
                  where forwarding through the slot is slow, the section's chain does, an \
                  update costs little more than the bare section and the three ways to update \
                  cost about the same (the extra instructions run in the chain's shadow); \
                  where forwarding is fast, the instructions do, and the three cost roughly in \
                  proportion to their instruction counts, so `ControllerHandle::add` can miss \
                  its 1.5x target on such a core. The rstat update's ratio to the bare section \
                  in this run tells which case this is. When the VM's other work shares our \
                  cores, instruction-bound code slows more than a latency-bound locked add. \
                  Several threads: the `Threshold` counting is exact (a flush subtracts what \
                  it folded), so once per 64 units of an item's change per CPU a crossing does a contended \
                  read-modify-write on the group's and every ancestor's pending counter; kernel \
                  v6.8 skips ancestors already due for a flush, which rstat cannot do and stay \
                  exact. The sweep shows that walk: with an item in unit 1, deltas of 64 or more \
                  cross on every update and the cost grows with depth, while a byte counter \
                  declared in pages (depth 5, delta 4096, unit 4096) crosses once per 64 pages. \
                  When the VM state is degraded (a bare per-CPU counter is itself only a small \
                  multiple of a shared atomic), no per-CPU design reaches the 8x target.",
        view: update_view,
        targets: update_targets,
        plot: Some(update_plot),
    },
    Experiment {
        name: "flush-scaling",
        title: "Flush cost follows changed groups, not tree size",
        measures: "µs to flush the root after a few active leaves (depth 4) changed on every \
                   CPU slot, in trees from only those leaves and their ancestors up to the big \
                   tree (100,000 groups; 5,000 with --quick).",
        seed: Some(Seed {
            id: "003",
            figure: "no timing: the seed's argument is that rstat aggregates only the parts of \
                     a subtree with pending changes, where idle groups cost nothing",
        }),
        scales_with_cpus: false,
        min_cpus: 1,
        remarks: "Both kinds of tree fold the same (group, CPU) pairs per flush (the \
                  folds column): the idle groups of the big trees are never touched, whatever \
                  their number.",
        view: flush_view,
        targets: |_| {
            vec![Target::new(
                "ratio big/small",
                "/ratio",
                Op::Le,
                1.5,
                "issue 2",
            )]
        },
        plot: Some(flush_plot),
    },
    Experiment {
        name: "separate-trees",
        title: "cpu.stat reads while memory stats are busy",
        measures: "ns per exact read of a parent's cpu stats while writers keep a 48-item \
                   controller busy in its children, with one unified update tree against one \
                   tree per controller.",
        seed: Some(Seed {
            id: "000",
            figure: "3.0x: 1M reads of a parent's cpu.stat on a 52-CPU host while 26 tasks \
                     churn memory stats took 18.449 s with a unified tree, 6.080 s with \
                     separate trees",
        }),
        scales_with_cpus: true,
        min_cpus: 2,
        remarks: "With separate trees the cpu reads never fold the heavy controller \
                  (0 heavy folds); unified, every read folds what the writers left pending. The \
                  speedup depends on how much the writers get done between reads: on a busy \
                  machine they get less CPU, leave less for the unified read to fold, and the \
                  gap narrows or vanishes.",
        view: separate_view,
        targets: |_| vec![Target::new("speedup", "/speedup", Op::Ge, 3.0, "issue 2")],
        plot: Some(separate_plot),
    },
    Experiment {
        name: "read-latency",
        title: "Read latency and staleness per flush policy",
        measures: "Latency of reads of random groups by many readers while writers (one per \
                   CPU) update random leaves of a 1,000-group tree, per flush policy; and how \
                   stale each read was against a shadow count of completed updates (the \
                   numbers of readers and writers are under the table).",
        seed: Some(Seed {
            id: "004",
            figure: "384 CPUs, 10k reader threads every 100 ms: 98.8% of reads < 100 µs, \
                     1.09% 100 µs–1 ms, 0.11% 1–10 ms; every 10 ms: 82.3% < 100 µs, 4.2% \
                     100 µs–1 ms, 4.7% 1–10 ms, 8.8% 10–100 ms",
        }),
        scales_with_cpus: true,
        min_cpus: 1,
        remarks: "In the seed's terms: `unified-root` makes every reader pay for the \
                  whole tree, and a reader that finds a flush running returns what the last one \
                  folded (the stalest); `always` flushes only the subtree read (exact); \
                  `threshold` (the default, kernel v6.8) flushes only past its bound and \
                  otherwise returns a lock-free copy; `coalesced` waits for a running root \
                  flush, so its tail pays for whole-tree flushes and its reads are not exact. \
                  The seed's 384-CPU, 10k-reader scale is out of reach on a small machine: \
                  compare the policies' shapes, not the absolute buckets.",
        view: latency_view,
        targets: latency_targets,
        plot: Some(latency_plot),
    },
    Experiment {
        name: "accuracy",
        title: "Exact reads against write-side batching",
        measures: "The largest error of a root read over 1,000,000 random updates to 32 groups \
                   on 64 simulated CPU slots: rstat's exact read against the write-side \
                   batching memcg used before rstat (32 units per CPU per group).",
        seed: Some(Seed {
            id: "003",
            figure: "before rstat, the root's memory.stat inactive_file was 3,305,472 bytes \
                     (807 pages) away from /proc/vmstat; with rstat, equal",
        }),
        scales_with_cpus: false,
        min_cpus: 1,
        remarks: "The batching's error grows with CPUs x groups x 32 units; an exact \
                  read folds every pending per-CPU delta of the subtree under the read and has \
                  none.",
        view: accuracy_view,
        targets: |_| {
            vec![Target::new(
                "rstat_max_error",
                "/rstat_max_error",
                Op::Le,
                0.0,
                "issue 5",
            )]
        },
        plot: Some(accuracy_plot),
    },
    Experiment {
        name: "percpu-ref",
        title: "percpu_ref against an atomic reference count",
        measures: "get, copy N bytes to a per-CPU buffer, put, as many times as possible: a \
                   shared atomic against `PercpuRef` (rseq fast path) and `PercpuRef` with \
                   locked slots, on one pinned thread and on one thread per CPU.",
        seed: Some(Seed {
            id: "001",
            figure: "1 CPU: +45.8% at copy 0, −6.9% to −10.4% at 32–512 bytes; all CPUs (2 \
                     cores / 4 threads, qemu): +1007% at copy 0, +105% to +252% at 32–512",
        }),
        scales_with_cpus: true,
        min_cpus: 2,
        remarks: "`percpu_ref` is the default fast path: a restartable sequence (an \
                  unlocked add on this CPU's slot, restarted by the kernel if the thread \
                  moves), the kernel's `this_cpu_add`. `locked` is `InitFlags::LOCKED_SLOTS`: a \
                  `lock xadd` per get and put, whose slot address is computed after the \
                  previous one completes (the fallback without rseq, and what rstat's groups \
                  use, because their kills must not call `membarrier`).",
        view: percpu_view,
        targets: percpu_targets,
        plot: Some(percpu_plot),
    },
    Experiment {
        name: "page-counter",
        title: "page_counter layout: padded against packed",
        measures: "Charge + high check + uncharge throughput of two threads per CPU on a \
                   3-level page-counter tree, with `usage` sharing its cache line with the \
                   limits (packed) or alone on its line (padded).",
        seed: Some(Seed {
            id: "002",
            figure: "+18.4% netperf throughput (10482.7 → 12413.7 Mbps) on 72 CPUs, 3-level \
                     hierarchy",
        }),
        scales_with_cpus: true,
        min_cpus: 1,
        remarks: "With few CPUs the false sharing the padded layout removes is small \
                  and noisy; the seed measured on 72 CPUs.",
        view: page_counter_view,
        targets: |_| vec![Target::new("gain_pct", "/gain_pct", Op::Gt, 0.0, "issue 4")],
        plot: Some(page_counter_plot),
    },
    Experiment {
        name: "charge",
        title: "Memory charge throughput by method",
        measures: "Charge + uncharge pairs per second through the per-CPU stock (raw calls and \
                   the `Charge` guard), without a stock, on bare page counters, and on eager \
                   shared atomics (the baseline), at 1 thread and one thread per CPU.",
        seed: None,
        scales_with_cpus: true,
        min_cpus: 2,
        remarks: "At one thread the stock does more work than the eager baseline: a \
                  charge + uncharge pair costs two stock-lock attempts and two per-CPU stat \
                  updates that keep `memory.stat` exact, against the baseline's operations on \
                  lines no other CPU wants. With several threads the baseline's shared \
                  counters bounce between CPUs and the stock's lines do not; when the threads \
                  did not really run at once (see above), that gap is understated.",
        view: charge_view,
        targets: |_| {
            vec![
                Target::new(
                    "ratio_vs_eager_2t",
                    "/ratio_vs_eager_2t",
                    Op::Ge,
                    5.0,
                    "issue 4",
                ),
                Target::new(
                    "ratio_guard_vs_stock_2t",
                    "/ratio_guard_vs_stock_2t",
                    Op::Ge,
                    0.8,
                    "issue 10",
                ),
            ]
        },
        plot: Some(charge_plot),
    },
    Experiment {
        name: "enter",
        title: "Attaching threads and tasks to groups",
        measures: "The cost of entering and leaving a group on one thread (each change of the \
                   current group reads the thread's CPU clock once) against two \
                   `clock_gettime(CLOCK_THREAD_CPUTIME_ID)` calls measured in the same run; a \
                   `scope`d future's poll against a bare poll; and the accuracy of a hog's \
                   `usage_usec` against the thread's own clock, exact and sampled (issue 11).",
        seed: None,
        scales_with_cpus: false,
        min_cpus: 1,
        remarks: "",
        view: generic_view,
        targets: |_| {
            vec![
                Target::new(
                    "enter_exit_vs_clock_pair",
                    "/enter_exit_vs_clock_pair",
                    Op::Le,
                    1.5,
                    "issue 11",
                ),
                Target::new(
                    "hog_usage_error_pct",
                    "/hog_usage_error_pct",
                    Op::Le,
                    1.0,
                    "issue 11",
                ),
            ]
        },
        plot: Some(enter_plot),
    },
    Experiment {
        targets: |_| {
            vec![
                Target::new("overhead_pct", "/overhead_pct", Op::Le, 15.0, "issue 12"),
                Target::new("ratio_vs_eager", "/ratio_vs_eager", Op::Ge, 2.0, "issue 12"),
                Target::new(
                    "drift_after_drain_bytes_max",
                    "/drift_after_drain_bytes_max",
                    Op::Le,
                    0.0,
                    "issue 12",
                ),
            ]
        },
        ..Experiment::generic(
            "alloc",
            "The accounting allocator",
            "2 threads, each in its own group under a common parent, allocating and freeing \
             16-4096 byte objects (some freed by the other thread) through the inner allocator \
             alone, `Accounted<inner>`, an eager tracker (owner header, every ancestor's shared \
             atomic) and a per-thread-batch tracker (ClickHouse's shape); drift of the charged \
             bytes from the live bytes at quiescent points, against its documented bound \
             (`drift_bound_bytes`) (issue 12).",
            false,
        )
    },
];

fn no_targets(_: &Fig) -> Vec<Target> {
    Vec::new()
}

/// Numbers at the top level of an object, and one level into objects
/// (not `machine`), as (pointer, label).
fn numeric_fields(v: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Value::Object(o) = v {
        for (k, x) in o {
            match x {
                Value::Number(_) => out.push((format!("/{k}"), k.clone())),
                Value::Object(inner) if k != "machine" => {
                    for (k2, y) in inner {
                        if y.is_number() {
                            out.push((format!("/{k}/{k2}"), format!("{k}.{k2}")));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    out
}

fn generic_view(f: &Fig) -> View {
    let rows: Vec<Vec<String>> = numeric_fields(f.med)
        .into_iter()
        .map(|(p, l)| vec![format!("`{l}`"), f.f(&p, 3)])
        .collect();
    View {
        ours: String::new(),
        table: md_table(&["field", "value"], &rows),
        notes: "Shown generically: this experiment's registry line has no view of its own yet."
            .into(),
    }
}

fn generic_plot(f: &Fig, machine: &str) -> Result<String, String> {
    let fields = numeric_fields(f.med);
    let pick = |unit: &str| -> Vec<Cat> {
        fields
            .iter()
            .filter(|(_, l)| l.contains(unit))
            .filter_map(|(p, l)| {
                Some(Cat {
                    label: l.clone(),
                    vals: vec![Some(f.val(p)?)],
                })
            })
            .collect()
    };
    let mut panels = Vec::new();
    for (unit, desc) in [("ns", "ns"), ("mops", "Mops/s")] {
        let cats = pick(unit);
        if !cats.is_empty() {
            panels.push(Panel::Bars {
                title: format!("fields with `{unit}`"),
                x_desc: desc.into(),
                series: vec!["median".into()],
                cats,
            });
        }
    }
    if panels.is_empty() {
        // No field names a unit: plot the first numbers as they are.
        let cats: Vec<Cat> = fields
            .iter()
            .take(12)
            .filter_map(|(p, l)| {
                Some(Cat {
                    label: l.clone(),
                    vals: vec![Some(f.val(p)?)],
                })
            })
            .collect();
        if cats.is_empty() {
            return Err("its JSON has no numbers to plot".into());
        }
        panels.push(Panel::Bars {
            title: "its numbers (mixed units)".into(),
            x_desc: "value".into(),
            series: vec!["median".into()],
            cats,
        });
    }
    figure("generic view", machine, &panels, 2, 640)
}

fn enter_plot(f: &Fig, machine: &str) -> Result<String, String> {
    let bars = |rows: &[(&str, &str)]| -> Vec<Cat> {
        rows.iter()
            .filter_map(|(label, p)| {
                Some(Cat {
                    label: (*label).into(),
                    vals: vec![Some(f.val(p)?)],
                })
            })
            .collect()
    };
    let cost = bars(&[
        ("enter + exit", "/enter_exit_ns"),
        ("two thread-clock reads", "/thread_clock_pair_ns"),
        ("nested enter + exit", "/nested_enter_exit_ns"),
        ("re-enter the current group", "/reenter_ns"),
        ("sampled mode: enter + exit", "/sampled_enter_exit_ns"),
        ("scoped poll overhead", "/poll_overhead_ns"),
    ]);
    let error = bars(&[
        ("exact (clock on each change)", "/hog_usage_error_pct"),
        ("sampled", "/sampled_hog_usage_error_pct"),
    ]);
    if cost.is_empty() {
        return Err("its JSON has none of the enter/exit costs".into());
    }
    let panels = vec![
        Panel::Bars {
            title: "cost per operation".into(),
            x_desc: "ns".into(),
            series: vec!["median".into()],
            cats: cost,
        },
        Panel::Bars {
            title: "a hog's usage_usec vs its own CPU clock".into(),
            x_desc: "error, %".into(),
            series: vec!["median".into()],
            cats: error,
        },
    ];
    figure(
        "enter: attaching threads to groups",
        machine,
        &panels,
        2,
        640,
    )
}

fn update_view(f: &Fig) -> View {
    let t = f.s("/threads");
    let t = if t.is_empty() { "2".to_owned() } else { t };
    // (case, 1-thread figure, multi-thread figure or "" for none).
    let cases = [
        (
            "rstat update (depth 1, delta 1)",
            "/ns_per_update_1t",
            "/rstat_mops_2t",
        ),
        (
            "depth 5, delta 4096 (unit 4096)",
            "/deep_large_ns_1t",
            "/deep_large_mops_2t",
        ),
        ("`ControllerHandle::add`", "/controller_handle_ns_1t", ""),
        ("`StatHandle::add`", "/stat_handle_ns_1t", ""),
        ("locked update path", "/locked_ns_1t", "/locked_mops_2t"),
        (
            "shared `AtomicU64::fetch_add`",
            "/shared_atomic_ns_1t",
            "/shared_atomic_mops_2t",
        ),
        (
            "reference: bare per-CPU counter",
            "/bare_percpu_ns_1t",
            "/bare_percpu_mops_2t",
        ),
        (
            "reference: bare restartable section",
            "/bare_section_ns_1t",
            "",
        ),
        ("per-thread plain counter", "/plain_thread_local_ns_1t", ""),
    ];
    let rows: Vec<Vec<String>> = cases
        .iter()
        .map(|(l, p1, pn)| {
            vec![
                (*l).to_owned(),
                f.f(p1, 2),
                if pn.is_empty() {
                    "–".into()
                } else {
                    f.f(pn, 1)
                },
            ]
        })
        .collect();
    let mut table = md_table(
        &[
            "case",
            "ns per update, 1 thread",
            &format!("Mops/s, {t} threads"),
        ],
        &rows,
    );
    if f.v("/update_vs_bare_section_1t").is_some() {
        table += &format!(
            "\nOne thread, the rstat update against the bare restartable section: {}x, \
             `ControllerHandle::add` against a `StatItem` update: {}x.\n",
            f.f("/update_vs_bare_section_1t", 2),
            f.f("/controller_handle_vs_update_1t", 2),
        );
    }
    if f.v("/ns_per_update_1t_neighbour").is_some() {
        let rows: Vec<Vec<String>> = [
            (
                "rstat update (depth 1, delta 1)",
                "/ns_per_update_1t_neighbour",
            ),
            (
                "shared `AtomicU64::fetch_add`",
                "/shared_atomic_ns_1t_neighbour",
            ),
            (
                "reference: bare per-CPU counter",
                "/bare_percpu_ns_1t_neighbour",
            ),
        ]
        .iter()
        .map(|(l, p)| vec![(*l).to_owned(), f.f(p, 2)])
        .collect();
        table += "\nOne thread on CPU 0 beside a memory-bound neighbour on CPU 1 (random \
                  read-modify-writes over 32 KiB; where the two are hyperthreads of one core, \
                  the state in which the section's memory accesses cost the most):\n\n";
        table += &md_table(&["case", "ns per update, 1 thread"], &rows);
    }
    if let Some(Value::Array(shapes)) = f.med.get("shapes") {
        if !shapes.is_empty() {
            let rows: Vec<Vec<String>> = (0..shapes.len())
                .map(|i| {
                    vec![
                        f.s(&format!("/shapes/{i}/depth")),
                        f.s(&format!("/shapes/{i}/delta")),
                        f.f(&format!("/shapes/{i}/ns_1t"), 2),
                        f.f(&format!("/shapes/{i}/mops_nt"), 1),
                    ]
                })
                .collect();
            table += "\nThe depth x delta sweep (item in unit 1):\n\n";
            table += &md_table(
                &[
                    "depth",
                    "delta",
                    "ns, 1 thread",
                    &format!("Mops/s, {t} threads"),
                ],
                &rows,
            );
        }
    }
    View {
        ours: format!(
            "rstat {}x a shared atomic at {t} threads; the bare per-CPU counter {}x (issue 2's \
             reference machine: 9.2x)",
            f.f("/ratio_vs_shared_atomic_2t", 2),
            f.f("/bare_ratio_vs_shared_atomic_2t", 2)
        ),
        table,
        notes: format!(
            "Update path of the measured engine: {}; flush policy: {}. The `*_2t` JSON fields \
             are the {t}-thread figures.",
            f.s("/update_path"),
            f.s("/flush_policy")
        ),
    }
}

fn update_targets(f: &Fig) -> Vec<Target> {
    let mut v = vec![
        Target::new(
            "ratio_vs_shared_atomic_2t",
            "/ratio_vs_shared_atomic_2t",
            Op::Ge,
            8.0,
            "issue 2",
        ),
        Target::new(
            "ratio_vs_shared_atomic_1t",
            "/ratio_vs_shared_atomic_1t",
            Op::Le,
            1.0,
            "issue 10",
        ),
        Target::new(
            "ratio_vs_bare_percpu_2t",
            "/ratio_vs_bare_percpu_2t",
            Op::Ge,
            0.9,
            "issue 10",
        ),
        Target::new(
            "deep_large_vs_update_1t",
            "/deep_large_vs_update_1t",
            Op::Le,
            1.25,
            "issue 10",
        ),
        Target::new(
            "deep_large_vs_update_2t",
            "/deep_large_vs_update_2t",
            Op::Ge,
            0.8,
            "issue 10",
        ),
        Target::new(
            "controller_handle_vs_update_1t",
            "/controller_handle_vs_update_1t",
            Op::Le,
            1.5,
            "issue 10",
        ),
        Target::new(
            "controller_handle_vs_stat_handle_1t",
            "/controller_handle_vs_stat_handle_1t",
            Op::Le,
            1.5,
            "issue 10 item 3",
        ),
    ];
    // Measured only where there is a CPU 1 for the neighbour.
    if f.v("/ratio_vs_shared_atomic_1t_neighbour").is_some() {
        v.push(Target::new(
            "ratio_vs_shared_atomic_1t_neighbour",
            "/ratio_vs_shared_atomic_1t_neighbour",
            Op::Le,
            1.0,
            "issue 10, beside a busy sibling",
        ));
    }
    v
}

fn update_plot(f: &Fig, machine: &str) -> Result<String, String> {
    let t = f.s("/threads");
    let n = f
        .med
        .get("shapes")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let mut by_delta: ByDelta = Vec::new();
    for i in 0..n {
        let (Some(depth), Some(delta)) = (
            f.v(&format!("/shapes/{i}/depth")),
            f.v(&format!("/shapes/{i}/delta")),
        ) else {
            continue;
        };
        let name = format!("delta {delta}");
        let k = match by_delta.iter().position(|(n, _, _)| *n == name) {
            Some(k) => k,
            None => {
                by_delta.push((name, Vec::new(), Vec::new()));
                by_delta.len() - 1
            }
        };
        if let Some(v) = f.v(&format!("/shapes/{i}/ns_1t")) {
            by_delta[k].1.push((depth, v));
        }
        if let Some(v) = f.v(&format!("/shapes/{i}/mops_nt")) {
            by_delta[k].2.push((depth, v));
        }
    }
    let cats = |ptrs: [&str; 5]| -> Vec<Cat> {
        [
            "rstat",
            "depth 5, delta 4096",
            "locked path",
            "shared atomic",
            "bare per-CPU",
        ]
        .iter()
        .zip(ptrs)
        .map(|(l, p)| Cat {
            label: (*l).into(),
            vals: vec![f.val(p)],
        })
        .collect()
    };
    let mut panels = vec![
        Panel::Bars {
            title: "one update, 1 thread".into(),
            x_desc: "ns per update (lower is better)".into(),
            series: vec!["ns".into()],
            cats: cats([
                "/ns_per_update_1t",
                "/deep_large_ns_1t",
                "/locked_ns_1t",
                "/shared_atomic_ns_1t",
                "/bare_percpu_ns_1t",
            ]),
        },
        Panel::Bars {
            title: format!("{t} threads on one group"),
            x_desc: "million updates per second (higher is better)".into(),
            series: vec!["Mops/s".into()],
            cats: cats([
                "/rstat_mops_2t",
                "/deep_large_mops_2t",
                "/locked_mops_2t",
                "/shared_atomic_mops_2t",
                "/bare_percpu_mops_2t",
            ]),
        },
    ];
    if !by_delta.is_empty() {
        panels.push(Panel::Lines {
            title: "cost by depth and delta (1 thread)".into(),
            x_desc: "depth of the updated group".into(),
            y_desc: "ns per update".into(),
            lines: by_delta
                .iter()
                .map(|(n, a, _)| Line {
                    name: n.clone(),
                    points: a.clone(),
                })
                .collect(),
            log_x: false,
            log_y: true,
        });
        panels.push(Panel::Lines {
            title: format!("throughput by depth and delta ({t} threads)"),
            x_desc: "depth of the updated group".into(),
            y_desc: "Mops/s".into(),
            lines: by_delta
                .iter()
                .map(|(n, _, b)| Line {
                    name: n.clone(),
                    points: b.clone(),
                })
                .collect(),
            log_x: false,
            log_y: true,
        });
    }
    figure("rstat bench update", machine, &panels, 2, 620)
}

fn flush_rows(f: &Fig) -> Vec<(String, String, String)> {
    // (groups ptr, flush ptr, folds ptr), smallest tree first.
    let mut rows = vec![(
        "/small_tree_groups".to_owned(),
        "/small_tree_flush_us".to_owned(),
        "/folds_per_flush_small".to_owned(),
    )];
    let n = f
        .med
        .get("sweep")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    for i in 0..n {
        rows.push((
            format!("/sweep/{i}/groups"),
            format!("/sweep/{i}/flush_us"),
            format!("/sweep/{i}/folds_per_flush"),
        ));
    }
    rows.push((
        "/big_tree_groups".into(),
        "/big_tree_flush_us".into(),
        "/folds_per_flush_big".into(),
    ));
    rows
}

fn flush_view(f: &Fig) -> View {
    let rows: Vec<Vec<String>> = flush_rows(f)
        .iter()
        .map(|(g, t, k)| vec![f.s(g), f.f(t, 3), f.f(k, 1)])
        .collect();
    View {
        ours: format!(
            "flushing the root of {} groups costs {}x flushing {} groups holding the same \
             active leaves",
            f.s("/big_tree_groups"),
            f.f("/ratio", 3),
            f.s("/small_tree_groups")
        ),
        table: md_table(
            &["groups in tree", "flush µs (median)", "folds per flush"],
            &rows,
        ),
        notes: String::new(),
    }
}

fn flush_plot(f: &Fig, machine: &str) -> Result<String, String> {
    let pts: Vec<(f64, f64)> = flush_rows(f)
        .iter()
        .filter_map(|(g, t, _)| Some((f.v(g)?, f.v(t)?)))
        .collect();
    figure(
        "rstat bench flush-scaling",
        machine,
        &[Panel::Lines {
            title: "root flush cost vs tree size (10 active leaves)".into(),
            x_desc: "groups in the tree".into(),
            y_desc: "flush µs (median)".into(),
            lines: vec![Line {
                name: "flush µs".into(),
                points: pts,
            }],
            log_x: true,
            log_y: false,
        }],
        1,
        760,
    )
}

fn separate_view(f: &Fig) -> View {
    View {
        ours: format!("{}x", f.f("/speedup", 2)),
        table: md_table(
            &["trees", "ns per read", "heavy folds by reads"],
            &[
                vec![
                    "unified".into(),
                    f.f("/unified_read_ns", 1),
                    f.f("/heavy_folds_unified", 0),
                ],
                vec![
                    "separate".into(),
                    f.f("/separate_read_ns", 1),
                    f.f("/heavy_folds_separate", 0),
                ],
            ],
        ),
        notes: format!(
            "{} reads; {} writer thread(s); {} children; {} heavy items.",
            f.s("/reads"),
            f.s("/writers"),
            f.s("/children"),
            f.s("/heavy_items")
        ),
    }
}

fn separate_plot(f: &Fig, machine: &str) -> Result<String, String> {
    figure(
        "rstat bench separate-trees",
        machine,
        &[Panel::Bars {
            title: "exact cpu-stat read while memory is busy".into(),
            x_desc: "ns per read".into(),
            series: vec!["ns per read".into()],
            cats: vec![
                Cat {
                    label: "unified tree".into(),
                    vals: vec![f.val("/unified_read_ns")],
                },
                Cat {
                    label: "separate trees".into(),
                    vals: vec![f.val("/separate_read_ns")],
                },
            ],
        }],
        1,
        760,
    )
}

fn policies(f: &Fig) -> usize {
    f.med
        .get("policies")
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}

fn latency_view(f: &Fig) -> View {
    let n = policies(f);
    let rows: Vec<Vec<String>> = (0..n)
        .map(|i| {
            let p = |k: &str| format!("/policies/{i}/{k}");
            vec![
                f.s(&p("name")),
                f.f(&p("reads"), 0),
                f.f(&p("pct_lt_100us"), 2),
                f.f(&p("pct_100us_1ms"), 2),
                f.f(&p("pct_1ms_10ms"), 2),
                f.f(&p("pct_10ms_100ms"), 2),
                f.f(&p("pct_ge_100ms"), 2),
                f.f(&p("p50_us"), 1),
                f.f(&p("p99_us"), 1),
                f.f(&p("max_us"), 0),
                f.f(&p("writer_mops"), 2),
                {
                    let b = f.s(&p("bound_units"));
                    if b.is_empty() {
                        "none".into()
                    } else {
                        b
                    }
                },
                f.f(&p("max_error_units"), 0),
                f.f(&p("mean_error_units"), 1),
            ]
        })
        .collect();
    let ours = (0..n)
        .map(|i| {
            format!(
                "{} {}% < 100 µs",
                f.s(&format!("/policies/{i}/name")),
                f.f(&format!("/policies/{i}/pct_lt_100us"), 1)
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    View {
        ours: format!(
            "{} readers every {} ms on {} CPUs: {ours}",
            f.s("/readers"),
            f.s("/period_ms"),
            f.s("/machine/online_cpus")
        ),
        table: md_table(
            &[
                "policy",
                "reads",
                "% <100µs",
                "% 100µs–1ms",
                "% 1–10ms",
                "% 10–100ms",
                "% ≥100ms",
                "p50 µs",
                "p99 µs",
                "max µs",
                "writer Mops/s",
                "bound (units)",
                "max stale",
                "mean stale",
            ],
            &rows,
        ),
        notes: format!(
            "{} groups, {} writers, {} readers each reading every {} ms, {} s per policy. `bound` is the policy's documented \
             staleness bound for a read of the root; `max stale` and `mean stale` are how far \
             behind the completed updates a read was.",
            f.s("/groups"),
            f.s("/writers"),
            f.s("/readers"),
            f.s("/period_ms"),
            f.s("/seconds_per_policy")
        ),
    }
}

fn latency_targets(f: &Fig) -> Vec<Target> {
    (0..policies(f))
        .filter_map(|i| {
            let bound = f.v(&format!("/policies/{i}/bound_units"))?;
            Some(Target::new(
                &format!("{} max_error_units", f.s(&format!("/policies/{i}/name"))),
                &format!("/policies/{i}/max_error_units"),
                Op::Le,
                bound,
                "issue 5",
            ))
        })
        .collect()
}

fn latency_plot(f: &Fig, machine: &str) -> Result<String, String> {
    let n = policies(f);
    let lines: Vec<Line> = (0..n)
        .map(|i| {
            let k = f
                .med
                .pointer(&format!("/policies/{i}/cdf_us"))
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            Line {
                name: f.s(&format!("/policies/{i}/name")),
                points: (0..k)
                    .filter_map(|j| {
                        let us = f.v(&format!("/policies/{i}/cdf_us/{j}/1"))?;
                        let q = f.v(&format!("/policies/{i}/cdf_us/{j}/0"))?;
                        Some((us, q))
                    })
                    .collect(),
            }
        })
        .collect();
    let cats: Vec<Cat> = (0..n)
        .map(|i| {
            let bound = f.s(&format!("/policies/{i}/bound_units"));
            Cat {
                label: format!(
                    "{} (bound {})",
                    f.s(&format!("/policies/{i}/name")),
                    if bound.is_empty() { "none" } else { &bound }
                ),
                vals: vec![
                    f.val(&format!("/policies/{i}/mean_error_units")),
                    f.val(&format!("/policies/{i}/max_error_units")),
                ],
            }
        })
        .collect();
    figure(
        "rstat bench read-latency",
        machine,
        &[
            Panel::Lines {
                title: "read latency CDF per policy".into(),
                x_desc: "read latency, µs (log)".into(),
                y_desc: "fraction of reads".into(),
                lines,
                log_x: true,
                log_y: false,
            },
            Panel::Bars {
                title: "staleness per policy".into(),
                x_desc: "units behind the completed updates".into(),
                series: vec!["mean stale".into(), "max stale".into()],
                cats,
            },
        ],
        2,
        600,
    )
}

fn accuracy_view(f: &Fig) -> View {
    View {
        ours: format!(
            "rstat's largest error {} units; the write-side batching {} (bound {})",
            f.f("/rstat_max_error", 0),
            f.f("/batched_max_error", 0),
            f.s("/batched_bound")
        ),
        table: md_table(
            &["scheme", "max error", "mean error"],
            &[
                vec![
                    "rstat, exact read".into(),
                    f.f("/rstat_max_error", 0),
                    f.f("/rstat_mean_error", 1),
                ],
                vec![
                    "write-side batching (pre-rstat)".into(),
                    f.f("/batched_max_error", 0),
                    f.f("/batched_mean_error", 1),
                ],
            ],
        ),
        notes: format!(
            "{} updates over {} groups on {} CPU slots; root read {} times; the batching's \
             bound (32 x CPUs x groups) is {}.",
            f.s("/updates"),
            f.s("/groups"),
            f.s("/cpus"),
            f.s("/reads"),
            f.s("/batched_bound")
        ),
    }
}

fn accuracy_plot(f: &Fig, machine: &str) -> Result<String, String> {
    figure(
        "rstat bench accuracy",
        machine,
        &[Panel::Bars {
            title: "error of a root read (units)".into(),
            x_desc: "units away from the truth".into(),
            series: vec!["mean error".into(), "max error".into()],
            cats: vec![
                Cat {
                    label: "rstat, exact read".into(),
                    vals: vec![f.val("/rstat_mean_error"), f.val("/rstat_max_error")],
                },
                Cat {
                    label: "write-side batching".into(),
                    vals: vec![f.val("/batched_mean_error"), f.val("/batched_max_error")],
                },
            ],
        }],
        1,
        760,
    )
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

fn percpu_view(f: &Fig) -> View {
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

fn percpu_targets(f: &Fig) -> Vec<Target> {
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
                    "issue 10",
                ))
            } else if c == 0 {
                Some(Target::new(
                    &format!("{t} threads, copy 0: diff_pct"),
                    &p,
                    Op::Ge,
                    300.0,
                    "issue 3",
                ))
            } else {
                None
            }
        })
        .collect()
}

fn percpu_plot(f: &Fig, machine: &str) -> Result<String, String> {
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

fn page_counter_view(f: &Fig) -> View {
    View {
        ours: format!(
            "{}% with {} threads on {} CPUs",
            f.f("/gain_pct", 1),
            f.s("/threads"),
            f.s("/nr_cpus")
        ),
        table: md_table(
            &["layout", "median Mops/s"],
            &[
                vec!["packed".into(), f.f("/packed_mops", 2)],
                vec!["padded".into(), f.f("/padded_mops", 2)],
            ],
        ),
        notes: f.s("/what"),
    }
}

fn page_counter_plot(f: &Fig, machine: &str) -> Result<String, String> {
    figure(
        "rstat bench page-counter",
        machine,
        &[Panel::Bars {
            title: "charge throughput by page_counter layout".into(),
            x_desc: "Mops/s, all threads".into(),
            series: vec!["Mops/s".into()],
            cats: vec![
                Cat {
                    label: "packed".into(),
                    vals: vec![f.val("/packed_mops")],
                },
                Cat {
                    label: "padded".into(),
                    vals: vec![f.val("/padded_mops")],
                },
            ],
        }],
        1,
        760,
    )
}

const CHARGE_METHODS: [(&str, &str); 5] = [
    ("stock (raw calls)", "stock"),
    ("stock (Charge guard)", "stock_guard"),
    ("no stock (batch 0)", "nostock"),
    ("bare page counter", "page_counter"),
    ("eager shared atomics (baseline)", "eager_atomic"),
];

fn charge_view(f: &Fig) -> View {
    let t = f.s("/threads");
    let t = if t.is_empty() { "2".to_owned() } else { t };
    let mut rows: Vec<Vec<String>> = CHARGE_METHODS
        .iter()
        .map(|(l, k)| {
            vec![
                (*l).into(),
                f.f(&format!("/{k}_mops_1t"), 2),
                f.f(&format!("/{k}_mops_2t"), 2),
            ]
        })
        .collect();
    rows.push(vec![
        "burst of 32: stock".into(),
        "–".into(),
        f.f("/burst_stock_mops_2t", 2),
    ]);
    rows.push(vec![
        "burst of 32: eager".into(),
        "–".into(),
        f.f("/burst_eager_atomic_mops_2t", 2),
    ]);
    View {
        ours: String::new(),
        table: md_table(
            &[
                "method",
                "Mops/s, 1 thread",
                &format!("Mops/s, {t} threads"),
            ],
            &rows,
        ),
        notes: format!(
            "The {t}-thread samples ran {} of {t} threads at once (median; well below {t} means \
             other work took turns with them). {}",
            f.f("/parallel_2t", 2),
            f.s("/what")
        ),
    }
}

fn charge_plot(f: &Fig, machine: &str) -> Result<String, String> {
    let t = f.s("/threads");
    figure(
        "rstat bench charge: throughput by method",
        machine,
        &[Panel::Bars {
            title: "charge + uncharge pairs".into(),
            x_desc: "Mops/s, all threads".into(),
            series: vec!["1 thread".into(), format!("{t} threads")],
            cats: CHARGE_METHODS
                .iter()
                .map(|(l, k)| Cat {
                    label: (*l).into(),
                    vals: vec![
                        f.val(&format!("/{k}_mops_1t")),
                        f.val(&format!("/{k}_mops_2t")),
                    ],
                })
                .collect(),
        }],
        1,
        760,
    )
}
