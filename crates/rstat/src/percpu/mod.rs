//! Per-CPU building blocks: which CPU am I on ([`cpu`]), and where does
//! per-CPU state live ([`arena`]).

pub mod arena;
pub mod cpu;
pub(crate) mod rseq;
#[cfg(all(test, not(rstat_loom)))]
pub(crate) mod testing;
