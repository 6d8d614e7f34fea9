//! `rstat bench separate-trees` as an experiment of the lab: its words, its
//! configuration (`--quick`, `--cpus`), and how the report shows its JSON.

use super::Config;
use crate::lab::experiment::{BenchError, Cpus, Experiment, Output, Params, Seed};
use crate::lab::figures::{md_table, Fig, View};
use crate::lab::plot::{figure, Cat, Panel};
use crate::lab::targets::{Op, Target};

/// The `rstat bench separate-trees` experiment.
pub struct SeparateTrees;

impl Experiment for SeparateTrees {
    fn name(&self) -> &'static str {
        "separate-trees"
    }

    fn about(&self) -> &'static str {
        "Seed 000: cpu.stat reads with separate vs unified trees"
    }

    fn title(&self) -> &'static str {
        "cpu.stat reads while memory stats are busy"
    }

    fn measures(&self) -> &'static str {
        "ns per exact read of a parent's cpu stats while writers keep a 48-item \
         controller busy in its children, with one unified update tree against one \
         tree per controller."
    }

    fn seed(&self) -> Option<Seed> {
        Some(Seed {
            id: "000",
            figure: "3.0x: 1M reads of a parent's cpu.stat on a 52-CPU host while 26 tasks \
                     churn memory stats took 18.449 s with a unified tree, 6.080 s with \
                     separate trees",
        })
    }

    fn cpus(&self) -> Cpus {
        Cpus::Spread { min: 2 }
    }

    fn remarks(&self) -> &'static str {
        "With separate trees the cpu reads never fold the heavy controller \
         (0 heavy folds); unified, every read folds what the writers left pending. The \
         speedup depends on how much the writers get done between reads: on a busy \
         machine they get less CPU, leave less for the unified read to fold, and the \
         gap narrows or vanishes."
    }

    fn run(&self, p: &Params<'_>) -> Result<Output, BenchError> {
        let mut cfg = Config {
            cpus: p.cpus,
            ..Default::default()
        };
        if p.quick {
            cfg.reads = 2_000;
        }
        Output::new(&super::run(&cfg), super::table)
    }

    fn view(&self, f: &Fig<'_>) -> View {
        view(f)
    }

    fn targets(&self, _f: &Fig<'_>) -> Vec<Target> {
        vec![Target::new(
            "speedup",
            "/speedup",
            Op::Ge,
            3.0,
            "separate trees per controller",
        )]
    }

    fn plot(&self, f: &Fig<'_>, machine: &str) -> Result<String, String> {
        plot(f, machine)
    }
}

fn view(f: &Fig) -> View {
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
            "{} reads; {} writer thread(s); {} children; {} heavy items; locked update path (on the rseq path each exact read adds one `membarrier`, the same in both layouts).",
            f.s("/reads"),
            f.s("/writers"),
            f.s("/children"),
            f.s("/heavy_items")
        ),
    }
}

fn plot(f: &Fig, machine: &str) -> Result<String, String> {
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
