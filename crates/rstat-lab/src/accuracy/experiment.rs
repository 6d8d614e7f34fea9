//! `rstat bench accuracy` as an experiment of the lab: its words, its
//! configuration (`--quick`), and how the report shows its JSON.

use super::Config;
use crate::lab::experiment::{BenchError, Experiment, Output, Params, Seed};
use crate::lab::figures::{md_table, Fig, View};
use crate::lab::plot::{figure, Cat, Panel};
use crate::lab::targets::{Op, Target};

/// The `rstat bench accuracy` experiment.
pub struct Accuracy;

impl Experiment for Accuracy {
    fn name(&self) -> &'static str {
        "accuracy"
    }

    fn about(&self) -> &'static str {
        "Seed 003: rstat's exact reads vs write-side batching error"
    }

    fn title(&self) -> &'static str {
        "Exact reads against write-side batching"
    }

    fn measures(&self) -> &'static str {
        "The largest error of a root read over 1,000,000 random updates to 32 groups \
         on 64 simulated CPU slots: rstat's exact read against the write-side \
         batching memcg used before rstat (32 units per CPU per group)."
    }

    fn seed(&self) -> Option<Seed> {
        Some(Seed {
            id: "003",
            figure: "before rstat, the root's memory.stat inactive_file was 3,305,472 bytes \
                     (807 pages) away from /proc/vmstat; with rstat, equal",
        })
    }

    fn remarks(&self) -> &'static str {
        "The batching's error grows with CPUs x groups x 32 units; an exact \
         read folds every pending per-CPU delta of the subtree under the read and has \
         none."
    }

    fn run(&self, p: &Params<'_>) -> Result<Output, BenchError> {
        let mut cfg = Config::default();
        if p.quick {
            cfg.updates = 20_000;
        }
        Output::new(&super::run(&cfg), super::table)
    }

    fn view(&self, f: &Fig<'_>) -> View {
        view(f)
    }

    fn targets(&self, _f: &Fig<'_>) -> Vec<Target> {
        vec![Target::new(
            "rstat_max_error",
            "/rstat_max_error",
            Op::Le,
            0.0,
            "exact reads",
        )]
    }

    fn plot(&self, f: &Fig<'_>, machine: &str) -> Result<String, String> {
        plot(f, machine)
    }
}

fn view(f: &Fig) -> View {
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

fn plot(f: &Fig, machine: &str) -> Result<String, String> {
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
