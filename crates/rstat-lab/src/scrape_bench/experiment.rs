//! `rstat bench scrape` as an experiment of the lab: its words and its
//! configuration (`--quick`: one tree of 1,000 groups, one scrape).

use crate::lab::experiment::{BenchError, Experiment, Output, Params};

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
}
