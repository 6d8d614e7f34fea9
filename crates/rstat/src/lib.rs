//! rstat: cgroup-style hierarchical accounting for a tree of groups in your
//! process.
//!
//! A tree of groups (tenants, requests, queries, jobs); per group, stats
//! charged at per-CPU cost from any thread and read exactly, with the read
//! side paying only for the groups that changed. The machinery is the Linux
//! kernel's: rstat's per-CPU updated trees with lock-free backlogs and
//! per-controller locks ([`engine`]), a per-CPU arena like the kernel's
//! percpu allocator ([`percpu`]), percpu_ref ([`percpu_ref`]) and
//! page_counter ([`page_counter`]).
//!
//! Start with [`Rstat`].
#![warn(
    clippy::undocumented_unsafe_blocks,
    unsafe_op_in_unsafe_fn,
    missing_docs
)]

mod sync;

pub mod controller;
pub mod engine;
pub mod error;
pub mod group;
pub mod memory;
pub mod page_counter;
pub mod percpu;
pub mod percpu_ref;

pub use controller::counters::{
    ControllerHandle, CounterSet, CounterSetController, GroupStats, StatHandle,
};
pub use controller::{Controller, FlushCtx, Totals};
pub use engine::policy::FlushPolicy;
pub use engine::{Builder, Rstat, CPU_STAT_NAMES, DEFAULT_PERIOD, MAX_CONTROLLERS};
pub use error::{Error, Result};
pub use group::ext::{Ext, GroupExt};
pub use group::Group;
pub use percpu::cpu::CpuIdSource;
