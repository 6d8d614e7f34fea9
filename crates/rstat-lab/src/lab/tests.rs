use std::time::Duration;

use serde_json::{json, Value};

use super::*;

fn opts(only: &[&str], repeat: usize, cpus: usize) -> Options {
    Options {
        quick: true,
        repeat,
        cpus,
        only: only.iter().map(|s| (*s).to_owned()).collect(),
        command: "rstat bench all --out x".into(),
        rustc: "rustc test".into(),
    }
}

/// Real JSON of each experiment with a view of its own, from tiny runs.
fn real(name: &str) -> Value {
    let v = match name {
        "update" => serde_json::to_value(crate::update_bench::run(&crate::update_bench::Config {
            iters: 2_000,
            samples: 1,
            threads: 2,
            sweep: true,
        })),
        "flush-scaling" => {
            serde_json::to_value(crate::flush_scaling::run(&crate::flush_scaling::Config {
                groups: 2_000,
                active: 3,
                rounds: 20,
                sweep: vec![1_500],
            }))
        }
        "separate-trees" => {
            serde_json::to_value(crate::separate_trees::run(&crate::separate_trees::Config {
                reads: 200,
                cpus: Some(2),
            }))
        }
        "read-latency" => {
            serde_json::to_value(crate::read_latency::run(&crate::read_latency::Config {
                groups: 200,
                readers: 2,
                duration: Duration::from_millis(60),
                period: Duration::from_millis(2),
                ..Default::default()
            }))
        }
        "accuracy" => serde_json::to_value(crate::accuracy::run(&crate::accuracy::Config {
            updates: 5_000,
            ..Default::default()
        })),
        "percpu-ref" => serde_json::to_value(crate::percpu_ref_bench::run(
            &crate::percpu_ref_bench::Config {
                seconds_per_case: 0.004,
                threads: Some(2),
                neighbour: true,
            },
        )),
        "page-counter" => serde_json::to_value(crate::page_counter_bench::run(
            &crate::page_counter_bench::Config {
                seconds: 0.03,
                cpus: Some(1),
            },
        )),
        "charge" => serde_json::to_value(crate::charge_bench::run(&crate::charge_bench::Config {
            iters: 500,
            samples: 1,
            threads: 2,
        })),
        "scrape" => serde_json::to_value(
            crate::scrape_bench::run(&[150, 300], 1).expect("a scrape of a small tree"),
        ),
        "peers" => serde_json::to_value(
            crate::peers::run(&crate::peers::Config {
                samples: 1,
                sample: Duration::from_millis(5),
                period: Duration::from_millis(2),
                exact_phase: Duration::from_millis(10),
                groups: 20,
            })
            .expect("every contender's totals check exact"),
        ),
        other => panic!("no real run for {other}"),
    };
    v.expect("serialises")
}

#[test]
fn every_view_finds_its_figures_in_the_real_json() {
    let own_view = [
        "update",
        "flush-scaling",
        "separate-trees",
        "read-latency",
        "accuracy",
        "percpu-ref",
        "page-counter",
        "charge",
        "scrape",
        "peers",
    ];
    // These have a view of their own but no target.
    let no_targets = ["scrape"];
    for e in EXPERIMENTS.iter().filter(|e| own_view.contains(&e.name())) {
        let json = real(e.name());
        let mut runner = |_: &str, _: &[String]| Ok(json.clone());
        let lab = run_all(&opts(&[e.name()], 1, 2), &mut runner, &mut |_| {})
            .unwrap_or_else(|err| panic!("{}: {err}", e.name()));
        let o = &lab.experiments[0];
        assert_eq!(o.status, "ok", "{}", e.name());
        assert_eq!(
            o.targets.is_empty(),
            no_targets.contains(&e.name()),
            "{}: targets {:?}",
            e.name(),
            o.targets
        );
        for t in &o.targets {
            assert!(
                t.median.is_some(),
                "{}: target {} points at nothing",
                e.name(),
                t.what
            );
        }
        let v = e.view(&o.fig());
        // A view whose pointers missed would be all dashes.
        let cells = v.table.matches(" | ").count();
        let dashes = v.table.matches("| – ").count();
        assert!(
            dashes * 4 < cells,
            "{}: {} of {} cells empty:\n{}",
            e.name(),
            dashes,
            cells,
            v.table
        );
        assert_eq!(lab.plots.len(), 1, "{}: no plot", e.name());
        let svg = &lab.plots[0].1;
        assert!(
            svg.starts_with("<svg") && svg.contains("</svg>"),
            "{}",
            e.name()
        );
        assert!(svg.contains("<text"), "{}: a plot without labels", e.name());
        let report = lab.report("");
        assert!(report.contains(&format!("## {}", e.name())));
        if e.name() == "peers" {
            // Every sample of every contender was checked exact.
            assert!(
                json["exact_checks"].as_u64().is_some_and(|n| n > 0),
                "{json}"
            );
        }
        if let Some(seed) = e.seed() {
            assert!(
                report.contains(seed.figure),
                "{}: seed figure missing",
                e.name()
            );
        }
    }
}

#[test]
fn a_generic_experiment_is_shown_by_its_numbers() {
    let mut runner = |_: &str, _: &[String]| {
        Ok(
            json!({"enter_ns": 12.5, "leave_ns": 7.0, "enter_mops_2t": 40.0,
                  "machine": {"online_cpus": 2}, "what": "x"}),
        )
    };
    let lab = run_all(&opts(&["alloc"], 1, 2), &mut runner, &mut |_| {}).unwrap();
    let r = lab.report("img/");
    assert!(r.contains("| `enter_ns` | 12.500 |"), "{r}");
    assert!(!r.contains("machine.online_cpus"), "{r}");
    assert!(r.contains("](img/10-alloc.svg)"), "{r}");
    assert_eq!(lab.plots.len(), 1);
    let mut unitless = |_: &str, _: &[String]| Ok(json!({"entries": 3, "depth": 2.5}));
    let lab = run_all(&opts(&["alloc"], 1, 2), &mut unitless, &mut |_| {}).unwrap();
    assert_eq!(
        lab.plots.len(),
        1,
        "a generic experiment always gets a plot"
    );
    assert!(lab.plots[0].1.contains("entries"));
}

#[test]
fn an_experiment_missing_from_the_build_is_reported_not_fatal() {
    let mut calls = Vec::new();
    let mut runner = |name: &str, _: &[String]| {
        calls.push(name.to_owned());
        if name == "enter" {
            Err(RunError::NotInBuild)
        } else {
            Err(RunError::Failed("boom: it panicked".into()))
        }
    };
    let lab = run_all(
        &opts(&["enter", "accuracy"], 3, 2),
        &mut runner,
        &mut |_| {},
    )
    .unwrap();
    let by = |n: &str| lab.experiments.iter().find(|o| o.name == n).unwrap();
    assert_eq!(by("enter").status, "not_in_build");
    assert_eq!(by("accuracy").status, "failed");
    assert_eq!(by("accuracy").reason, "boom: it panicked");
    // One attempt each: a missing or failing experiment is not retried.
    assert_eq!(calls.len(), 2, "{calls:?}");
    let r = lab.report("");
    assert!(r.contains("no `rstat bench enter` yet"), "{r}");
    assert!(r.contains("boom: it panicked"), "{r}");
    assert!(lab.plots.is_empty());
    let j: Value = serde_json::from_str(&lab.json().unwrap()).unwrap();
    assert_eq!(j["experiments"][0]["status"], "failed");
}

#[test]
fn too_many_cpus_is_a_reason_not_a_number() {
    let online = crate::machine::online_cpus();
    let mut ran = Vec::new();
    let mut runner = |name: &str, args: &[String]| {
        ran.push((name.to_owned(), args.to_vec()));
        Err(RunError::Failed("not expected".into()))
    };
    let lab = run_all(
        &opts(&["update", "accuracy"], 1, online + 1),
        &mut runner,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(lab.experiments[0].status, "cannot_run");
    assert!(lab.experiments[0]
        .reason
        .contains(&format!("{online} online")));
    // accuracy does not scale with CPUs: it ran, without --cpus.
    assert_eq!(ran.len(), 1);
    assert_eq!(ran[0].0, "accuracy");
    assert!(!ran[0].1.contains(&"--cpus".to_owned()));
    let mut never = |_: &str, _: &[String]| Err(RunError::Failed("not expected".into()));
    let lab = run_all(&opts(&["update"], 1, 1), &mut never, &mut |_| {}).unwrap();
    assert!(lab.experiments[0].reason.contains("at least 2 CPUs"));
}

#[test]
fn repeats_report_the_median_and_the_spread() {
    let runs = [3.0, 1.0, 2.0];
    let mut i = 0;
    let mut runner = |_: &str, args: &[String]| {
        assert!(args.contains(&"--quick".to_owned()) && args.contains(&"--json".to_owned()));
        let v = runs[i];
        i += 1;
        Ok(
            json!({"rstat_max_error": v, "rstat_mean_error": v, "batched_max_error": 10,
                  "batched_mean_error": 5.0, "batched_bound": 100, "reads": 1,
                  "cpus": 64, "groups": 32, "updates": 5}),
        )
    };
    let lab = run_all(&opts(&["accuracy"], 3, 2), &mut runner, &mut |_| {}).unwrap();
    let o = &lab.experiments[0];
    assert_eq!(o.runs.len(), 3);
    assert_eq!(o.median["rstat_max_error"], json!(2.0));
    assert_eq!(o.min["rstat_max_error"], json!(1.0));
    assert_eq!(o.max["rstat_max_error"], json!(3.0));
    assert_eq!(o.median["batched_max_error"], json!(10));
    // rstat_max_error <= 0 was met in no run.
    assert!(!o.targets[0].met);
    assert_eq!(o.targets[0].runs_met, 0);
    let r = lab.report("");
    assert!(r.contains("2 [1–3]"), "{r}");
    assert!(r.contains("**missed**"), "{r}");
}

#[test]
fn combine_takes_the_middle_of_an_even_count_and_walks_arrays() {
    let (m, lo, hi) = combine(&[
        json!({"a": [1, {"b": 10.0}], "s": "x"}),
        json!({"a": [3, {"b": 30.0}], "s": "y"}),
    ]);
    assert_eq!(m, json!({"a": [2, {"b": 20.0}], "s": "x"}));
    assert_eq!(lo, json!({"a": [1, {"b": 10.0}], "s": "x"}));
    assert_eq!(hi, json!({"a": [3, {"b": 30.0}], "s": "x"}));
    assert_eq!(combine(&[]).0, Value::Null);
}

#[test]
fn unknown_names_in_only_are_refused_with_the_known_ones() {
    let Err(e) = select(&["nope".into()]) else {
        panic!("an unknown name was accepted");
    };
    assert!(
        e.contains("nope") && e.contains("update") && e.contains("charge"),
        "{e}"
    );
    assert_eq!(select(&[]).unwrap().len(), EXPERIMENTS.len());
}

#[test]
fn the_registry_has_every_experiment_once() {
    let mut names: Vec<&str> = EXPERIMENTS.iter().map(|e| e.name()).collect();
    for n in [
        "update",
        "flush-scaling",
        "separate-trees",
        "read-latency",
        "accuracy",
        "percpu-ref",
        "page-counter",
        "charge",
        "enter",
        "alloc",
        "scrape",
        "peers",
    ] {
        assert!(names.contains(&n), "{n}");
    }
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), EXPERIMENTS.len());
}

/// `rstat bench` as the CLI declares it, completed from the registry.
fn bench_command() -> clap::Command {
    command::augment(
        clap::Command::new("bench")
            .arg(clap::Arg::new(command::NAME_ARG).required(true))
            .arg(clap::Arg::new(command::CPUS_ARG).long("cpus")),
    )
}

#[test]
fn the_bench_command_takes_every_name_and_every_experiment_flag() {
    // Panics if two experiments' flags clash (same id or same --name).
    bench_command().debug_assert();
    for name in EXPERIMENTS.iter().map(|e| e.name()).chain([command::ALL]) {
        let m = bench_command()
            .try_get_matches_from(["bench", name])
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            m.get_one::<String>(command::NAME_ARG).map(String::as_str),
            Some(name)
        );
    }
    assert!(bench_command()
        .try_get_matches_from(["bench", "nope"])
        .is_err());
    let m = bench_command()
        .try_get_matches_from([
            "bench",
            "read-latency",
            "--readers",
            "3",
            "--policy",
            "threshold",
        ])
        .expect("read-latency's own flags");
    let p = Params {
        quick: true,
        cpus: None,
        matches: &m,
    };
    assert_eq!(p.get::<u16>("readers"), Some(3));
    assert_eq!(p.get::<String>("policy").as_deref(), Some("threshold"));
    assert_eq!(p.get::<f64>("seconds"), Some(3.0), "the default");
    assert_eq!(p.get::<u16>("no-such-flag"), None);
}

#[test]
fn cpus_are_refused_where_they_do_not_apply_or_cannot_be_had() {
    let none = clap::ArgMatches::default();
    let accuracy = find("accuracy").expect("registered");
    let Err(BenchError::Usage(why)) = command::run_one(accuracy, true, Some(1), &none) else {
        panic!("--cpus given to an experiment that does not spread threads was not refused");
    };
    assert!(why.contains("drop --cpus"), "{why}");
    let online = crate::machine::online_cpus();
    let update = find("update").expect("registered");
    let Err(BenchError::Usage(why)) = command::run_one(update, true, Some(online + 1), &none)
    else {
        panic!("more CPUs than the machine has were not refused");
    };
    assert!(why.contains(&format!("{online} online")), "{why}");
}
