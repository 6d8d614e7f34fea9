//! `rstat bench charge` as an experiment of the lab: its words, its
//! configuration (`--quick`, `--cpus`), and how the report shows its JSON.

use super::Config;
use crate::lab::experiment::{BenchError, Cpus, Experiment, Output, Params};
use crate::lab::figures::{md_table, Fig, View};
use crate::lab::plot::{figure, Cat, Panel};
use crate::lab::targets::{Op, Target};

/// The `rstat bench charge` experiment.
pub struct Charge;

impl Experiment for Charge {
    fn name(&self) -> &'static str {
        "charge"
    }

    fn about(&self) -> &'static str {
        "Memory charge/uncharge through the per-CPU stock vs eager atomics"
    }

    fn title(&self) -> &'static str {
        "Memory charge throughput by method"
    }

    fn measures(&self) -> &'static str {
        "Charge + uncharge pairs per second through the per-CPU stock (raw calls and \
         the `Charge` guard), without a stock, on bare page counters, and on eager \
         shared atomics (the baseline), at 1 thread and one thread per CPU."
    }

    fn cpus(&self) -> Cpus {
        Cpus::Spread { min: 2 }
    }

    fn remarks(&self) -> &'static str {
        "At one thread the stock does more work than the eager baseline: a \
         charge + uncharge pair costs two stock-lock attempts and two per-CPU stat \
         updates that keep `memory.stat` exact, against the baseline's operations on \
         lines no other CPU wants. With several threads the baseline's shared \
         counters bounce between CPUs and the stock's lines do not; when the threads \
         did not really run at once (see above), that gap is understated."
    }

    fn run(&self, p: &Params<'_>) -> Result<Output, BenchError> {
        let mut cfg = Config::default();
        if p.quick {
            cfg.iters = 100_000;
            cfg.samples = 1;
        }
        if let Some(n) = p.cpus {
            cfg.threads = n;
        }
        Output::new(&super::run(&cfg), super::table)
    }

    fn view(&self, f: &Fig<'_>) -> View {
        view(f)
    }

    fn targets(&self, _f: &Fig<'_>) -> Vec<Target> {
        vec![
            Target::new(
                "ratio_vs_eager_2t",
                "/ratio_vs_eager_2t",
                Op::Ge,
                5.0,
                "the charge stock beats eager shared atomics",
            ),
            Target::new(
                "ratio_guard_vs_stock_2t",
                "/ratio_guard_vs_stock_2t",
                Op::Ge,
                0.8,
                "the `Charge` guard touches no shared line",
            ),
        ]
    }

    fn plot(&self, f: &Fig<'_>, machine: &str) -> Result<String, String> {
        plot(f, machine)
    }
}

const CHARGE_METHODS: [(&str, &str); 5] = [
    ("stock (raw calls)", "stock"),
    ("stock (Charge guard)", "stock_guard"),
    ("no stock (batch 0)", "nostock"),
    ("bare page counter", "page_counter"),
    ("eager shared atomics (baseline)", "eager_atomic"),
];

fn view(f: &Fig) -> View {
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

fn plot(f: &Fig, machine: &str) -> Result<String, String> {
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
