//! rstat: cgroup-style hierarchical accounting for a tree of groups in your
//! process.
//!
//! A tree of groups (tenants, requests, queries, jobs); per group, stats
//! charged at per-CPU cost from any thread and read exactly, with the read
//! side paying only for the groups that changed. The machinery is the Linux
//! kernel's, in its newest shape, written anew for userspace:
//!
//! - **[`Rstat`]**: the engine, the kernel's rstat. An update is one
//!   uncontended locked add on this CPU's slot, or, opted in with [`Builder::update_path`], an
//!   unlocked add in a restartable sequence (the kernel's `this_cpu_add`),
//!   and one load; the first update of a group after a flush
//!   pushes it on a lock-free per-(controller, CPU) backlog (kernel v6.17).
//!   A read flushes: under the controller's own lock (v6.16's separate
//!   trees) it drains the backlogs into per-CPU *updated trees* and folds
//!   only the changed groups under the one being read, children first.
//!   Stronger than the kernel, an update that completed before a read began
//!   is always in that read, even when threads share a CPU slot (a
//!   store-buffering pair, closed on the rseq path by an asymmetric fence:
//!   `membarrier` on the reading side only; proven with loom on both
//!   paths).
//! - **[`policy`]**: who flushes and when: `Threshold`
//!   (v6.8, default, paced in time so that reads under a steady stream
//!   copy a recent flush instead of flushing), `Always`, `UnifiedRoot`,
//!   `Coalesced`, plus a periodic root flusher; each with a documented
//!   staleness bound.
//! - **[`percpu`]**: CPU identity from glibc's rseq area, restartable
//!   per-CPU sections (the userspace "preemption disabled": an unlocked add
//!   the kernel restarts if the thread moves, and `membarrier` to stop them
//!   all), and a per-CPU arena like the kernel's percpu allocator (one
//!   offset valid in every CPU's unit: dense, no false sharing, no
//!   per-group padding).
//! - **[`percpu_ref`]**: the kernel's percpu_ref, on restartable
//!   sections where available, or on locked per-CPU adds.
//! - **[`group`]**: the hierarchy. Group lifetime is a [`percpu_ref`]:
//!   handles are per-CPU references; removal kills the ref; the
//!   last put flushes the group into its parent and frees it, so a removed
//!   subtree loses no history. [`GroupExt`] attaches subsystem state.
//! - **[`report`]**: each group as cgroupfs-style files (`cpu.stat`,
//!   `memory.current`, `memory.max`, `memory.events`, `memory.stat`, every
//!   controller's `<name>.stat`) and snapshots of a subtree (JSON with the
//!   `serde` feature); [`group::watch`] tells a reader which groups were
//!   removed, so none is missed.
//! - **[`attach`]**: the current group of a thread ([`Group::enter`],
//!   [`current_group`]) or async task ([`Group::scope`]); the time a
//!   thread spends inside a group is charged to its `cpu` stats from the
//!   thread's own CPU clock, on every change of group and periodically.
//! - **[`page_counter`]**: hierarchical charging with max/high/low/min and
//!   the kernel's effective protection, with the counters that different
//!   writers change on separate cache lines.
//! - **[`memory`]**: the memory controller (per-CPU charge stock, limits,
//!   events, protection, reclaim) and **[`alloc`]**, the accounting
//!   allocator: a `#[global_allocator]` wrapper that charges every heap
//!   object to the current group through the stock and uncharges it from
//!   that group when freed, on any thread.
//!
//! # Costs at a glance
//!
//! | call | cost |
//! |---|---|
//! | [`StatItem::add`], [`StatHandle::add`] | [`UpdatePath::Rseq`]: one restartable section (an unlocked load, add and store on this CPU's slot) + one load; [`UpdatePath::Locked`]: one uncontended locked add + one load; no lock, no allocation, no fence; once per [`UPDATE_BATCH`](controller::UPDATE_BATCH) × the item's [unit](Controller::stat_units) of change on a CPU, one uncontended add per ancestor to that CPU's pending counters (no line another CPU's updates write) |
//! | [`ControllerHandle::add`] | the same, plus a range check, an engine check and two dependent loads to find the group's state (a [`StatItem`] resolves these once and keeps the item's slot and links addresses: its `add` loads nothing from the group or its state on the common path) |
//! | [`ItemHandle::add`], [`ItemHandle::add_current`] | as [`ControllerHandle::add`] (the item was found by name once, [`ControllerHandle::item`]); `add_current` finds the thread's current group with one thread-local load and no reference count, and charges the root when the thread is in none of the engine's groups |
//! | [`ControllerHandle::read_exact`] | the controller's lock; per CPU, drain the backlog; on the rseq path one `membarrier` system call (more when it must interrupt CPUs running our threads; the locked path has none); then fold the changed groups under the target |
//! | [`ControllerHandle::read`] | by policy; `Threshold`: a clock read and the root's flush stamp, then a lock-free copy (no lock, no system call) while a flush of the root or of the group's subtree started less than half the read pace ago ([`Builder::read_pace`]; the periodic flusher keeps it so under a stream of updates); otherwise nr_cpus loads of the group's per-CPU pending counters, a copy unless more than [`UPDATE_BATCH`](controller::UPDATE_BATCH) × nr_cpus units (each item in its declared unit) are pending, still a copy if a flush started within the pace, else as `read_exact` |
//! | [`StatHandle::read`], [`StatHandle::read_exact`] | as [`ControllerHandle::read`] / [`read_exact`](ControllerHandle::read_exact) of the handle's group, minus finding the group's state (one line of the group, which a reader sweeping many groups finds cold) |
//! | the periodic flusher | one root flush (as `read_exact` of the root) per period |
//! | [`Group`] clone / drop | one per-CPU reference get / put |
//! | [`Group::enter`] + drop, a [`Group::scope`]d poll | one wall clock read (the TSC, or `clock_gettime(CLOCK_MONOTONIC)` in the vDSO: [`attach::switch_clock`]; no system call) per change of the current group, an uncontended lock and a wall-time segment; the thread's CPU clock is read and apportioned among its groups at reconciliations (every few ms of wall time, after a long segment), so a thread's charges sum to its CPU time exactly there (error model: [`attach`]); nothing but the stack push/pop when the group is already current |
//! | [`Group::create_child`], [`Group::remove`] | the topology lock (shared, one lock per CPU slot: creations and removals on different CPUs run side by side without sharing its line), the parent's children lock, arena allocations from this CPU slot's cache / a reference-count switch (the last handle's drop folds the group into its parent: a flush of that group alone) |
//!
//! # At the edges
//!
//! - **Misuse is visible.** [`ControllerHandle::item`],
//!   [`StatHandle::item`] / [`StatHandle::item_named`] check an item once
//!   (a misspelt name is an error listing the items) and return an
//!   [`ItemHandle`] or a [`StatItem`], whose `add_current` / `add` cannot
//!   fail;
//!   [`ControllerHandle::add`] and [`StatHandle::add`] (which can) return
//!   the same `Result`, which must be used.
//! - **No silent wrap.** Totals saturate at the `i64` bounds and each clamp
//!   is counted per group ([`GroupStats::overflows`]);
//!   [`Rstat::account_cputime`] refuses values that do not fit. The one
//!   limit, a single CPU changing one item by more than `i64::MAX` between
//!   two flushes, is in [`controller`]'s `# Overflow`.
//! - **Errors say where.** Paths may start with `/` (the root); a bad or
//!   missing component is named ([`Error::InvalidPath`],
//!   [`Error::NotFound`]), and errors print the root as `/`.
//! - **Flushes know their group.** [`FlushCtx::group_id`] (the same as
//!   [`Group::id`], unique for the engine's lifetime, one load) and
//!   [`FlushCtx::group_path`] (computed on demand) let a controller keep
//!   per-group state.
//! - **A panicking controller loses nothing.** A panic in a user
//!   [`Controller::flush`] is contained, that fold undone and retried at the
//!   next flush, and counted ([`ControllerHandle::flush_panics`]); see
//!   [`controller`]'s `# A flush that panics`.
//!
//! # Example
//!
//! ```
//! let rs = rstat::Rstat::new();
//! let tenant = rs.root().create_child("tenant-a")?;
//! let req = tenant.create_child("req-1")?;
//! // Bytes charged in pages: each item declares its unit (a power of two),
//! // so the `Threshold` counting measures pages, not bytes.
//! let io = rs.register_counters_with_units("io", &[("rbytes", 4096), ("wbytes", 4096)])?;
//! // Resolve once (a typo'd name is an error here), then update at per-CPU
//! // cost; a StatItem's add cannot fail.
//! let rbytes = io.stat_handle(&req)?.item_named("rbytes")?;
//! rbytes.add(4096);
//! req.remove()?; // its history folds into tenant-a
//! assert_eq!(io.read_exact(&tenant)?.get("rbytes"), Some(4096));
//! # Ok::<(), rstat::Error>(())
//! ```
//!
//! # Verification
//!
//! loom models of every lock-free protocol, each beside its mechanism
//! (`stat`, `group`, `percpu_ref`, `page_counter` and `memory`, in their
//! `tests_loom.rs`; group lifetime in `tests/loom.rs`), a proptest against
//! a sequential model
//! (`tests/model.rs`), stress tests with known totals, Miri on the unsafe
//! code (`.ci/run`).
#![warn(
    clippy::undocumented_unsafe_blocks,
    unsafe_op_in_unsafe_fn,
    missing_docs
)]

mod os;
mod sync;

pub mod attach;
pub mod controller;
mod engine;
pub mod error;
pub mod group;
pub mod memory;
pub mod page_counter;
pub mod percpu;
pub mod percpu_ref;
pub mod report;
mod stat;
#[doc(hidden)]
pub mod testing;

pub use attach::{current_group, EnterGuard};
pub use controller::{Controller, FlushCtx, StatKind, Totals, MAX_STAT_ITEMS, MAX_STAT_UNIT};
pub use controller::{
    ControllerHandle, CounterSet, CounterSetController, GroupStats, ItemHandle, StatHandle,
    StatItem,
};
pub use engine::{
    Builder, Rstat, UpdatePath, CPU_STAT_NAMES, DEFAULT_FLUSH_PERIOD, DEFAULT_READ_PACE,
    MAX_NR_CPUS, ROOT_GROUP_ID,
};
pub use error::{Error, Result};
pub use group::ext::{Ext, GroupExt};
pub use group::{CpuMax, CpuMaxStat, Group, Killed, PressureKind, PressureTotals};
pub use memory::alloc;
pub use percpu::cpu::CpuIdSource;
pub use stat::ops::MAX_CONTROLLERS;
pub use stat::policy::{self, FlushPolicy};
