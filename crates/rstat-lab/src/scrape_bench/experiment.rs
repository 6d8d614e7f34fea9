//! `rstat bench scrape` as an experiment of the lab: its words, its
//! configuration (`--quick`: one tree of 1,000 groups, one scrape), and how
//! the report shows its JSON: one row per tree size and format, and the
//! plot of scrape time and size against the number of groups.

use crate::lab::experiment::{BenchError, Experiment, Output, Params};
use crate::lab::figures::{md_table, Fig, View};
use crate::lab::plot::{figure, Line, Panel};

/// The `rstat bench scrape` experiment.
pub struct Scrape;

impl Experiment for Scrape {
    fn name(&self) -> &'static str {
        "scrape"
    }

    fn about(&self) -> &'static str {
        "One Prometheus scrape of 1k/10k/100k groups: series, bytes, time"
    }

    fn title(&self) -> &'static str {
        "What one Prometheus scrape costs"
    }

    fn measures(&self) -> &'static str {
        "Series and bytes of one scrape of the exporter, in the classic text format and in \
         OpenMetrics, for trees of 1,000, 10,000 and 100,000 groups (1,000 with --quick), and \
         the time to read the tree and encode it, of which the time to read the tree alone \
         (median of 5 scrapes; 1 with --quick)."
    }

    fn run(&self, p: &Params<'_>) -> Result<Output, BenchError> {
        let (sizes, samples): (&[usize], usize) = if p.quick {
            (&[1_000], 1)
        } else {
            (&[1_000, 10_000, 100_000], 5)
        };
        let report = super::run(sizes, samples).map_err(|e| BenchError::Failed(e.to_string()))?;
        Output::new(&report, super::table)
    }

    fn view(&self, f: &Fig<'_>) -> View {
        view(f)
    }

    fn plot(&self, f: &Fig<'_>, machine: &str) -> Result<String, String> {
        plot(f, machine)
    }
}

/// The number of rows (one per tree size and format).
fn rows(f: &Fig) -> usize {
    f.med
        .get("rows")
        .and_then(serde_json::Value::as_array)
        .map_or(0, Vec::len)
}

fn view(f: &Fig) -> View {
    let n = rows(f);
    let table: Vec<Vec<String>> = (0..n)
        .map(|i| {
            let p = |k: &str| format!("/rows/{i}/{k}");
            vec![
                f.s(&p("groups")),
                f.s(&p("format")),
                f.f(&p("series"), 0),
                f.f(&p("bytes"), 0),
                f.f(&p("scrape_ms"), 2),
                f.f(&p("snapshot_ms"), 2),
            ]
        })
        .collect();
    let ours = n.checked_sub(1).map_or(String::new(), |last| {
        let p = |k: &str| format!("/rows/{last}/{k}");
        format!(
            "{} groups: {} series, {} bytes, {} ms per {} scrape",
            f.s(&p("groups")),
            f.f(&p("series"), 0),
            f.f(&p("bytes"), 0),
            f.f(&p("scrape_ms"), 1),
            f.s(&p("format"))
        )
    });
    View {
        ours,
        table: md_table(
            &[
                "groups",
                "format",
                "series",
                "bytes",
                "scrape ms",
                "of which reading the tree, ms",
            ],
            &table,
        ),
        notes: format!(
            "Median of {} scrape(s) per row; a scrape reads the whole tree and encodes it.",
            f.s("/samples")
        ),
    }
}

fn plot(f: &Fig, machine: &str) -> Result<String, String> {
    let n = rows(f);
    // One line per format (in the order the rows first name them) of the
    // figure at `key` against the tree's size.
    let by_format = |key: &str, scale: f64| -> Vec<Line> {
        let mut lines: Vec<Line> = Vec::new();
        for i in 0..n {
            let format = f.s(&format!("/rows/{i}/format"));
            let (Some(groups), Some(v)) = (
                f.v(&format!("/rows/{i}/groups")),
                f.v(&format!("/rows/{i}/{key}")),
            ) else {
                continue;
            };
            match lines.iter_mut().find(|l| l.name == format) {
                Some(l) => l.points.push((groups, v * scale)),
                None => lines.push(Line {
                    name: format,
                    points: vec![(groups, v * scale)],
                }),
            }
        }
        lines
    };
    let mut time = by_format("scrape_ms", 1.0);
    for l in by_format("snapshot_ms", 1.0) {
        time.push(Line {
            name: format!("{}: reading the tree", l.name),
            points: l.points,
        });
    }
    figure(
        "rstat bench scrape: one Prometheus scrape by tree size",
        machine,
        &[
            Panel::Lines {
                title: "time per scrape".into(),
                x_desc: "groups in the tree".into(),
                y_desc: "ms (median)".into(),
                lines: time,
                log_x: true,
                log_y: true,
            },
            Panel::Lines {
                title: "size of one scrape".into(),
                x_desc: "groups in the tree".into(),
                y_desc: "MB".into(),
                lines: by_format("bytes", 1e-6),
                log_x: true,
                log_y: true,
            },
        ],
        2,
        600,
    )
}
