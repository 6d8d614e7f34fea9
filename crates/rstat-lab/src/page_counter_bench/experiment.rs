//! `rstat bench page-counter` as an experiment of the lab: its words, its
//! configuration (`--quick`, `--cpus`), and how the report shows its JSON.

use super::Config;
use crate::lab::experiment::{BenchError, Cpus, Experiment, Output, Params, Seed};
use crate::lab::figures::{md_table, Fig, View};
use crate::lab::plot::{figure, Cat, Panel};
use crate::lab::targets::{Op, Target};

/// The `rstat bench page-counter` experiment.
pub struct PageCounter;

impl Experiment for PageCounter {
    fn name(&self) -> &'static str {
        "page-counter"
    }

    fn about(&self) -> &'static str {
        "Seed 002: page_counter packed vs padded layout under concurrent charge"
    }

    fn title(&self) -> &'static str {
        "page_counter layout: padded against packed"
    }

    fn measures(&self) -> &'static str {
        "Charge + high check + uncharge throughput of two threads per CPU on a \
         3-level page-counter tree, with `usage` sharing its cache line with the \
         limits (packed) or alone on its line (padded)."
    }

    fn seed(&self) -> Option<Seed> {
        Some(Seed {
            id: "002",
            figure: "+18.4% netperf throughput (10482.7 → 12413.7 Mbps) on 72 CPUs, 3-level \
                     hierarchy",
        })
    }

    fn cpus(&self) -> Cpus {
        Cpus::Spread { min: 1 }
    }

    fn remarks(&self) -> &'static str {
        "With few CPUs the false sharing the padded layout removes is small \
         and noisy; the seed measured on 72 CPUs."
    }

    fn run(&self, p: &Params<'_>) -> Result<Output, BenchError> {
        let mut cfg = Config {
            cpus: p.cpus,
            ..Default::default()
        };
        if p.quick {
            cfg.seconds = 0.2;
        }
        Output::new(&super::run(&cfg), super::table)
    }

    fn view(&self, f: &Fig<'_>) -> View {
        view(f)
    }

    fn targets(&self, _f: &Fig<'_>) -> Vec<Target> {
        vec![Target::new(
            "gain_pct",
            "/gain_pct",
            Op::Gt,
            0.0,
            "the padding must not lose",
        )]
    }

    fn plot(&self, f: &Fig<'_>, machine: &str) -> Result<String, String> {
        plot(f, machine)
    }
}

fn view(f: &Fig) -> View {
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

fn plot(f: &Fig, machine: &str) -> Result<String, String> {
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
