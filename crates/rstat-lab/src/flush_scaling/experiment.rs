//! `rstat bench flush-scaling` as an experiment of the lab: its words, its
//! configuration (`--quick`), and how the report shows its JSON: the flush
//! cost per tree size, the target and the plot.

use serde_json::Value;

use super::Config;
use crate::lab::experiment::{BenchError, Experiment, Output, Params, Seed};
use crate::lab::figures::{md_table, Fig, View};
use crate::lab::plot::{figure, Line, Panel};
use crate::lab::targets::{Op, Target};

/// The `rstat bench flush-scaling` experiment.
pub struct FlushScaling;

impl Experiment for FlushScaling {
    fn name(&self) -> &'static str {
        "flush-scaling"
    }

    fn about(&self) -> &'static str {
        "Flush cost: 100,000-group tree vs only the active groups"
    }

    fn title(&self) -> &'static str {
        "Flush cost follows changed groups, not tree size"
    }

    fn measures(&self) -> &'static str {
        "µs to flush the root after a few active leaves (depth 4) changed on every \
         CPU slot, in trees from only those leaves and their ancestors up to the big \
         tree (100,000 groups; 5,000 with --quick)."
    }

    fn seed(&self) -> Option<Seed> {
        Some(Seed {
            id: "003",
            figure: "no timing: the seed's argument is that rstat aggregates only the parts of \
                     a subtree with pending changes, where idle groups cost nothing",
        })
    }

    fn remarks(&self) -> &'static str {
        "Both kinds of tree fold the same (group, CPU) pairs per flush (the \
         folds column): the idle groups of the big trees are never touched, whatever \
         their number."
    }

    fn run(&self, p: &Params<'_>) -> Result<Output, BenchError> {
        let mut cfg = Config::default();
        if p.quick {
            cfg.groups = 5_000;
            cfg.rounds = 200;
            cfg.sweep = vec![2_000];
        }
        Output::new(&super::run(&cfg), super::table)
    }

    fn view(&self, f: &Fig<'_>) -> View {
        view(f)
    }

    fn targets(&self, _f: &Fig<'_>) -> Vec<Target> {
        vec![Target::new(
            "ratio big/small",
            "/ratio",
            Op::Le,
            1.5,
            "flush cost follows the changed groups",
        )]
    }

    fn plot(&self, f: &Fig<'_>, machine: &str) -> Result<String, String> {
        plot(f, machine)
    }
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

fn view(f: &Fig) -> View {
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

fn plot(f: &Fig, machine: &str) -> Result<String, String> {
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
