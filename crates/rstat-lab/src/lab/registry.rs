//! The registry: the one list of the lab's experiments, in report order.
//!
//! Each entry is an [`Experiment`] implemented beside its bench module;
//! this list is the only place an experiment is named. `rstat bench NAME`
//! finds its experiment here ([`find`]), `rstat bench --help` lists these
//! names, and `rstat bench all` runs them in this order ([`select`]); a
//! plot's file name carries the experiment's place in the list
//! (`05-accuracy.svg`), so new experiments go at the end.

use super::experiment::Experiment;
use crate::{
    accuracy, alloc_bench, charge_bench, enter_bench, flush_scaling, limits_bench,
    page_counter_bench, peers, percpu_ref_bench, read_latency, scrape_bench, separate_trees,
    server_bench, update_bench,
};

/// Every experiment, in report order.
pub static EXPERIMENTS: &[&dyn Experiment] = &[
    &update_bench::experiment::Update,
    &flush_scaling::experiment::FlushScaling,
    &separate_trees::experiment::SeparateTrees,
    &read_latency::experiment::ReadLatency,
    &accuracy::experiment::Accuracy,
    &percpu_ref_bench::experiment::PercpuRef,
    &page_counter_bench::experiment::PageCounter,
    &charge_bench::experiment::Charge,
    &enter_bench::experiment::Enter,
    &alloc_bench::experiment::Alloc,
    &scrape_bench::experiment::Scrape,
    &peers::experiment::Peers,
    &server_bench::experiment::Server,
    &limits_bench::experiment::Limits,
];

/// The experiment `rstat bench name` runs, if there is one.
pub fn find(name: &str) -> Option<&'static dyn Experiment> {
    EXPERIMENTS.iter().copied().find(|e| e.name() == name)
}

/// The place of `e` in the registry, from 1 (its plot's file name starts
/// with it).
pub fn number(e: &dyn Experiment) -> usize {
    EXPERIMENTS
        .iter()
        .position(|x| x.name() == e.name())
        .map_or(0, |i| i + 1)
}

/// Which experiments to run (all, or those in `only`); unknown names in
/// `only` are an error naming the known ones.
pub fn select(only: &[String]) -> Result<Vec<&'static dyn Experiment>, String> {
    for n in only {
        if find(n).is_none() {
            let known: Vec<&str> = EXPERIMENTS.iter().map(|e| e.name()).collect();
            return Err(format!(
                "no experiment named {n:?} in the lab; known: {}",
                known.join(", ")
            ));
        }
    }
    Ok(EXPERIMENTS
        .iter()
        .copied()
        .filter(|e| only.is_empty() || only.iter().any(|n| n == e.name()))
        .collect())
}
