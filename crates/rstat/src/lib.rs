//! rstat: cgroup-style hierarchical accounting for a tree of groups in your
//! process.
#![warn(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn, missing_docs)]

mod sync;

pub mod percpu;
