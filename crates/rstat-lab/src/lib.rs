//! The seeds' experiments.
pub mod page_counter_bench;
pub mod percpu_ref_bench;
