//! Per-CPU building blocks: which CPU am I on ([`cpu`]), and where does
//! per-CPU state live ([`arena`]).

pub mod arena;
pub mod cpu;
pub(crate) mod rseq;

#[doc(hidden)]
pub use rseq::BareSectionCounter;
