//! `rstat bench peers` as an experiment of the lab: its words, its
//! configuration (`--quick`, `--samples`), and how the report shows its
//! JSON: one table of Mops/s per variant and contender with rstat's ratio
//! to the best peer, the reads, the group per request and each
//! contender's guarantees beside its figures; rstat's own costs; the
//! targets; the plot.

use clap::{value_parser, Arg};

use super::{Config, CONTENDERS};
use crate::lab::experiment::{BenchError, Experiment, Output, Params};
use crate::lab::figures::{md_table, Fig, View};
use crate::lab::plot::{figure, Cat, Panel};
use crate::lab::targets::{Op, Target};

/// The `rstat bench peers` experiment.
pub struct Peers;

/// Where the targets come from.
const SOURCE: &str = "peers on the default settings";

impl Experiment for Peers {
    fn name(&self) -> &'static str {
        "peers"
    }

    fn about(&self) -> &'static str {
        "rstat (default settings) vs prometheus, metrics and an eager tracker on many groups"
    }

    fn title(&self) -> &'static str {
        "Against the crates users would pick instead"
    }

    fn measures(&self) -> &'static str {
        "Mops/s of rstat on its default settings (a `StatItem` per leaf, a byte counter in \
         pages) beside the `prometheus` crate's `IntCounterVec`, a `metrics-util` registry \
         and a hand-rolled eager tracker (an atomic per group, every ancestor charged), all \
         in the same run, interleaved: 64 tenants x 4 services with one leaf each at depth 3 \
         (and 16 and 256 tenants: 64 and 1,024 leaves), 1 and 2 writer threads adding 1 B to \
         16 KiB to leaves drawn at random, a reader reading every tenant's total every \
         10 ms; the hot leaf (2 threads on one leaf); a group per request (created under a \
         tenant, updated 3 times, removed; requests/s). Every contender's totals are checked \
         exact after each sample. Also rstat's tenant `read()` and `read_exact()` under load, \
         one `membarrier`, creating + removing a group and the bytes one holds with 2, 16 and \
         64 CPU slots."
    }

    fn remarks(&self) -> &'static str {
        "What the peers give up, which the guarantees table states beside their figures: \
         `prometheus` and `metrics` keep one flat series per label set, so a tenant's total \
         is a sum the reader makes of series read one by one (no hierarchy, no consistent \
         snapshot), and a removed series is gone with its counts (no history). The eager \
         tracker keeps the hierarchy and the history (every ancestor is charged on each \
         add), but a read of a tenant and its services is no snapshot, and every add writes \
         the root's line, which all threads share. The reader runs beside the writers on a \
         2-CPU machine: its sweeps take CPU time from one writer, more so for the contender \
         whose reads cost most. A group per request on the peers reads each request's value \
         back before removing it (the check that nothing was lost; what a user wanting the \
         history would have to fold somewhere)."
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::new("samples")
            .long("samples")
            .value_name("N")
            .value_parser(value_parser!(u16).range(1..=1000))
            .help("peers: interleaved samples per figure (default 7; 2 with --quick)")]
    }

    fn run(&self, p: &Params<'_>) -> Result<Output, BenchError> {
        let mut cfg = if p.quick {
            Config::quick()
        } else {
            Config::default()
        };
        if let Some(n) = p.get::<u16>("samples") {
            cfg.samples = usize::from(n);
        }
        let report = super::run(&cfg).map_err(BenchError::Failed)?;
        Output::new(&report, super::table)
    }

    fn view(&self, f: &Fig<'_>) -> View {
        view(f)
    }

    fn targets(&self, _f: &Fig<'_>) -> Vec<Target> {
        targets()
    }

    fn plot(&self, f: &Fig<'_>, machine: &str) -> Result<String, String> {
        plot(f, machine)
    }
}

fn targets() -> Vec<Target> {
    let t = |ptr: &str, op, goal| Target::new(&ptr[1..], ptr, op, goal, SOURCE);
    vec![
        t("/spread_2t_vs_best_peer", Op::Ge, 1.2),
        t("/spread_1t_vs_best_peer", Op::Ge, 1.0),
        t("/hot_2t_vs_best_peer", Op::Ge, 1.5),
        t("/bounded_read_ns", Op::Le, 200.0),
        t("/exact_read_minus_membarrier_ns", Op::Le, 1000.0),
        t("/create_remove_ns_2", Op::Le, 1000.0),
        t("/create_remove_ns_64", Op::Le, 2000.0),
    ]
}

fn count(f: &Fig, key: &str) -> usize {
    f.med
        .get(key)
        .and_then(serde_json::Value::as_array)
        .map_or(0, Vec::len)
}

fn yes(f: &Fig, ptr: &str) -> String {
    match f.med.pointer(ptr).and_then(serde_json::Value::as_bool) {
        Some(true) => "yes".into(),
        Some(false) => "no".into(),
        None => "–".into(),
    }
}

fn view(f: &Fig) -> View {
    let nv = count(f, "variants");
    let mut rows: Vec<Vec<String>> = (0..nv)
        .map(|i| {
            let p = |k: &str| format!("/variants/{i}/{k}");
            let mut row = vec![f.s(&p("name")), f.s(&p("leaves")), f.s(&p("threads"))];
            row.extend(
                (0..CONTENDERS.len())
                    .map(|k| f.f(&format!("/variants/{i}/contenders/{k}/mops"), 1)),
            );
            row.push(format!("{}x", f.f(&p("rstat_vs_best_peer"), 2)));
            row.push(f.s(&p("best_peer")));
            row
        })
        .collect();
    // The reader's cost beside the main workload's figures.
    if let Some(i) = (0..nv).find(|i| f.s(&format!("/variants/{i}/name")) == "spread_2t") {
        let mut row = vec![
            "tenant read under load, ns (spread_2t)".to_owned(),
            f.s(&format!("/variants/{i}/leaves")),
            f.s(&format!("/variants/{i}/threads")),
        ];
        row.extend(
            (0..CONTENDERS.len()).map(|k| f.f(&format!("/variants/{i}/contenders/{k}/read_ns"), 1)),
        );
        row.extend(["–".to_owned(), String::new()]);
        rows.push(row);
        let mut row = vec![
            "writers running at once (spread_2t)".to_owned(),
            String::new(),
            String::new(),
        ];
        row.extend(
            (0..CONTENDERS.len())
                .map(|k| f.f(&format!("/variants/{i}/contenders/{k}/parallel"), 2)),
        );
        row.extend([String::new(), String::new()]);
        rows.push(row);
    }
    let mut row = vec![
        "group per request, requests/s".to_owned(),
        "–".to_owned(),
        f.s("/per_request_threads"),
    ];
    row.extend(
        (0..CONTENDERS.len()).map(|k| f.f(&format!("/per_request/{k}/requests_per_sec"), 0)),
    );
    row.push(format!("{}x", f.f("/per_request_2t_vs_best_peer", 2)));
    row.push(String::new());
    rows.push(row);
    // Each contender's guarantees, in its column.
    for (label, key) in [
        ("hierarchy", "hierarchy"),
        ("consistent snapshot", "consistent_snapshot"),
        ("history of removed groups", "history"),
    ] {
        let mut row = vec![label.to_owned(), String::new(), String::new()];
        row.extend((0..CONTENDERS.len()).map(|k| yes(f, &format!("/guarantees/{k}/{key}"))));
        row.extend([String::new(), String::new()]);
        rows.push(row);
    }
    let mut head = vec!["Mops/s unless said", "leaves", "threads"];
    head.extend(CONTENDERS);
    head.extend(["rstat vs best peer", "best peer"]);
    let mut table = md_table(&head, &rows);

    let ng = count(f, "guarantees");
    let grows: Vec<Vec<String>> = (0..ng)
        .map(|i| {
            let p = |k: &str| format!("/guarantees/{i}/{k}");
            vec![f.s(&p("contender")), f.s(&p("per_request"))]
        })
        .collect();
    table += "\nWhat a request does with each contender:\n\n";
    table += &md_table(&["contender", "a group per request"], &grows);

    let costs: Vec<Vec<String>> = [
        ("tenant `read()` under load, ns", "/bounded_read_ns", 1),
        ("tenant `read_exact()` under load, ns", "/exact_read_ns", 1),
        (
            "one `membarrier` by the reader, after its sweeps, ns",
            "/membarrier_ns",
            1,
        ),
        (
            "one `membarrier` by another thread, between sweeps, ns",
            "/membarrier_between_sweeps_ns",
            1,
        ),
        (
            "`read_exact()` less one `membarrier`, ns",
            "/exact_read_minus_membarrier_ns",
            1,
        ),
        (
            "create + remove a group, 2 slots, ns",
            "/create_remove_ns_2",
            0,
        ),
        (
            "create + remove a group, 16 slots, ns",
            "/create_remove_ns_16",
            0,
        ),
        (
            "create + remove a group, 64 slots, ns",
            "/create_remove_ns_64",
            0,
        ),
        (
            "bytes per group, used once, 2 slots",
            "/bytes_per_group_2",
            0,
        ),
        (
            "bytes per group, used once, 16 slots",
            "/bytes_per_group_16",
            0,
        ),
        (
            "bytes per group, used once, 64 slots",
            "/bytes_per_group_64",
            0,
        ),
        (
            "of which per-CPU, 64 slots",
            "/percpu_bytes_per_group_64",
            0,
        ),
        (
            "per-CPU address space reserved, 64 slots",
            "/reserved_percpu_bytes_per_group_64",
            0,
        ),
    ]
    .iter()
    .map(|(l, p, d)| vec![(*l).to_owned(), f.f(p, *d)])
    .collect();
    table += "\nrstat's own costs (2 writers on 256 leaves for the reads; a group with cpu, \
              memory and a 4-item counter set):\n\n";
    table += &md_table(&["rstat", "figure"], &costs);

    View {
        ours: format!(
            "rstat (default settings, update path {}) vs the best peer: {}x at 2 threads, {}x \
             at 1 thread (256 leaves), {}x on the hot leaf",
            f.s("/default_update_path"),
            f.f("/spread_2t_vs_best_peer", 2),
            f.f("/spread_1t_vs_best_peer", 2),
            f.f("/hot_2t_vs_best_peer", 2)
        ),
        table,
        notes: format!(
            "Each figure is the median of {} interleaved samples of {} ms (the contenders' \
             order rotating each sample); {} tenant totals were checked exact. Membarrier \
             command: {}; the fence a `read_exact()` pays is timed by the reader thread right \
             after each of its sweeps, in the state its reads' own fences run in (writers on \
             both CPUs, the reader on one), and `read_exact()` less one `membarrier` uses that \
             figure; the same call timed by another thread between sweeps (the reader asleep, \
             one busy CPU fewer to interrupt) is shown beside it. Bytes per group: {}. The targets are where rstat must get on its \
             default settings (flush policy {}); they are expected to be missed until the \
             engine work of the same issue lands.",
            f.s("/samples"),
            f.s("/sample_ms"),
            f.s("/exact_checks"),
            f.s("/membarrier_cmd"),
            f.s("/bytes_method"),
            f.s("/default_flush_policy"),
        ),
    }
}

fn plot(f: &Fig, machine: &str) -> Result<String, String> {
    let nv = count(f, "variants");
    let series: Vec<String> = CONTENDERS.iter().map(|c| (*c).to_owned()).collect();
    let cats: Vec<Cat> = (0..nv)
        .map(|i| Cat {
            label: f.s(&format!("/variants/{i}/name")),
            vals: (0..CONTENDERS.len())
                .map(|k| f.val(&format!("/variants/{i}/contenders/{k}/mops")))
                .collect(),
        })
        .collect();
    let one = |label: &str, ptr: &dyn Fn(usize) -> String| Cat {
        label: label.to_owned(),
        vals: (0..CONTENDERS.len()).map(|k| f.val(&ptr(k))).collect(),
    };
    let spread = (0..nv).find(|i| f.s(&format!("/variants/{i}/name")) == "spread_2t");
    let mut panels = vec![Panel::Bars {
        title: "adds to leaves, by variant".into(),
        x_desc: "million adds per second (higher is better)".into(),
        series: series.clone(),
        cats,
    }];
    panels.push(Panel::Bars {
        title: "a group per request".into(),
        x_desc: "requests per second (higher is better)".into(),
        series: series.clone(),
        cats: vec![one(
            &format!("{} threads", f.s("/per_request_threads")),
            &|k| format!("/per_request/{k}/requests_per_sec"),
        )],
    });
    if let Some(i) = spread {
        panels.push(Panel::Bars {
            title: "a tenant's total, read while 2 writers run".into(),
            x_desc: "ns per read (lower is better)".into(),
            series,
            cats: vec![one("256 leaves", &|k| {
                format!("/variants/{i}/contenders/{k}/read_ns")
            })],
        });
    }
    figure("rstat bench peers", machine, &panels, 2, 620)
}
