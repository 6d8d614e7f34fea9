//! Per-CPU building blocks: which CPU am I on ([`cpu`]), and where does
//! per-CPU state live ([`arena`], densely, one unit per CPU; or
//! [`CachePadded`], one value on cache lines of its own).

pub mod arena;
mod cache_padded;
pub mod cpu;
pub(crate) mod rseq;
#[cfg(all(test, not(rstat_loom)))]
pub(crate) mod testing;
#[cfg(test)]
mod tests_line_box;

pub use cache_padded::{CachePadded, LineBox, CACHE_LINE};
