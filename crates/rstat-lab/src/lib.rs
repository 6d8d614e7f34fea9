//! The seeds' experiments, each with its baseline measured in the same run.
//!
//! Every benchmark returns a serialisable report (printed as one JSON line by
//! `rstat bench NAME --json`) and a human table. None of them is a test:
//! timing never gates CI. Each bench module carries its experiment (an
//! [`lab::Experiment`], in its `experiment.rs`), and [`lab::EXPERIMENTS`]
//! lists them all: `rstat bench` and `rstat bench all` find every
//! experiment there.

pub mod accuracy;
pub mod alloc_bench;
pub mod charge_bench;
pub mod enter_bench;
pub mod flush_scaling;
pub mod lab;
pub mod limits_bench;
pub mod machine;
pub mod page_counter_bench;
pub mod peers;
pub mod percpu_ref_bench;
pub mod read_latency;
pub mod rseq_aborts;
pub mod scrape_bench;
pub mod separate_trees;
pub mod server_bench;
pub mod update_bench;
