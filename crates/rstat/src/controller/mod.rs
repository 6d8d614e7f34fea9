//! Controllers: what is counted per group, and how it is folded.
//!
//! A controller declares a list of stat items. The engine gives every
//! (group, controller) pair one signed 64-bit counter per item per CPU in the
//! per-CPU arena (the kernel's memcg stats, base cputime stats and BPF
//! `cgroup_hierarchical_stats` are all arrays of counters), plus
//! local/hierarchical totals and a pending array for deltas handed up by
//! children. On flush the engine computes each counter's per-CPU delta since
//! the last flush (the "prev" scheme) and calls [`Controller::flush`] once per
//! changed (group, CPU), children before parents. The default fold is the
//! kernel's: local += delta; hierarchical += delta + pending; parent's pending
//! += delta + pending.
//!
//! Built in: [`cpu`](crate::Rstat::cpu_stat) base stats and user counter sets
//! ([`Rstat::register_counters`](crate::Rstat::register_counters)). Each
//! controller has its own updated trees and flush lock unless the engine is
//! built in unified mode.
//!
//! # Handles
//!
//! From the most general to the most resolved, all updating the same
//! per-CPU counters:
//!
//! | handle | names | `add` |
//! |---|---|---|
//! | [`ControllerHandle`] | a controller | `add(&group, index, delta)`: checks the index and finds the group's state at each call |
//! | [`ItemHandle`] ([`ControllerHandle::item`]) | one item, by name, found once | `add(&group, delta)`, or `add_current(delta)`: the thread's current group ([`attach`](crate::attach)), else the root |
//! | [`StatHandle`] ([`ControllerHandle::stat_handle`]) | one (group, controller) pair | `add(index, delta)` |
//! | [`StatItem`] ([`StatHandle::item_named`], [`ItemHandle::stat_item`]) | one (group, item) pair | `add(delta)`, which cannot fail and loads nothing but the handle |
//!
//! Levels that go up and down (connections open, bytes in use) are items
//! declared [`StatKind::Gauge`] and moved by paired adds; why there is no
//! `set`: [`ItemHandle`]'s "Levels (gauges)".
//!
//! Each item declares a unit of significance ([`Controller::stat_units`]:
//! 4096 for bytes charged in pages, 1 by default): the `Threshold` policy
//! counts changes in it, so the update path walks the ancestors' pending
//! counters once per [`UPDATE_BATCH`] units of change of an item on a CPU, however large
//! the deltas and deep the group (see [`policy`](crate::policy)).
//!
//! # Overflow
//!
//! Totals are `i64` and never wrap. The standard fold ([`FlushCtx::fold`])
//! adds with saturation: a sum past `i64::MAX` (or below `i64::MIN`) is
//! clamped to the bound, and the clamp is counted in the group's
//! [`overflows`](crate::GroupStats::overflows) (a clamp of the parent's
//! pending array is counted in the parent's). A clamped total is no longer
//! exact, and stays inexact: later updates move it from the bound, not from
//! the true value. So a non-zero count means "this group's totals for this
//! controller cannot be trusted", and it is never reset. A controller
//! folding by hand reports its own clamps with
//! [`FlushCtx::note_overflow`] / [`FlushCtx::note_parent_overflow`].
//!
//! The per-CPU slots are different: they are modular by design. An update
//! is one atomic add that wraps at `i64::MAX`, and the fold takes each slot's
//! delta as `cur - prev` modulo 2^64, which is exact whenever the true net
//! change of one item on one CPU between two folds of the group lies within
//! `i64` (±9.2 · 10^18). Long-lived slots that wrap (charges on one CPU,
//! uncharges on another) therefore lose nothing. The one case nothing
//! detects: one CPU changing one item by more than that between two folds
//! (e.g. two adds of `i64::MAX` with no flush in between); the fold then sees
//! the change modulo 2^64. Keep single deltas well below 2^62, or flush
//! between huge ones. [`Rstat::account_cputime`](crate::Rstat::account_cputime)
//! refuses values that do not fit `i64` instead of clamping them.
//!
//! # A flush that panics
//!
//! A user [`Controller::flush`] runs under the controller's flush lock, in
//! the middle of a flush someone else asked for. If it panics, the engine
//! contains the panic ([`catch_unwind`](std::panic::catch_unwind)) and
//! undoes that one (group, CPU) fold so nothing is lost or counted twice:
//!
//! 1. before the call, the group's totals and the parent's pending array
//!    are copied to the flush's scratch space (no allocation once warm);
//! 2. on a panic they are copied back, so the totals are as before the
//!    call, whatever the controller had written;
//! 3. the group's `prev` values for that CPU are moved back by the deltas,
//!    so the next flush computes the same deltas again (plus any newer
//!    updates), and the group is put back on that CPU's backlog so the next
//!    flush visits it;
//! 4. the panic is counted
//!    ([`ControllerHandle::flush_panics`](crate::ControllerHandle::flush_panics))
//!    and the flush goes on with the next group. The lock is released
//!    normally: nothing is poisoned.
//!
//! The read that ran the flush returns totals without that (group, CPU)'s
//! deltas (it is as if they had not been flushed yet); a later read has
//! them, exactly once, as soon as the controller's flush stops panicking.
//! (An undone fold subtracts nothing from the `Threshold` policy's
//! pending-update counts, so a `Threshold` read that finds the group due
//! for a flush still flushes, and retries.) The one exception is a group's
//! final flush at its release, which has no later flush: there the deltas
//! are folded with the standard sum fold ([`FlushCtx::fold`]) instead of
//! being retried, so they still reach the ancestors. State the controller
//! keeps outside the [`FlushCtx`] is its own to keep consistent: the same
//! deltas will be offered again.
//!
//! The cost, paid by user controllers only (the built-in counter sets run
//! the standard fold, which cannot panic, without any of this): copying
//! 4 × items + 2 numbers per (group, CPU) fold. The panic message still goes
//! to the panic hook (stderr by default), and a build with `panic = "abort"`
//! aborts as usual.

mod handle;
mod item;
mod process;
mod stat_handle;
mod stats;

pub use crate::stat::css::UPDATE_BATCH;
pub use crate::stat::ops::{Controller, FlushCtx, StatKind, Totals, MAX_STAT_ITEMS, MAX_STAT_UNIT};
pub use handle::{ControllerHandle, CounterSet, CounterSetController};
pub use item::ItemHandle;
pub use stat_handle::{StatHandle, StatItem};
pub use stats::GroupStats;
