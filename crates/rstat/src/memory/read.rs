//! Reads of a group's memory state through the [`Memory`] handle:
//! `memory.current`, `memory.peak`, `memory.events`, `memory.stat` (with
//! the heap deltas the stocks keep), the stocks' contents and drains, the
//! page counter itself, and the tree-wide protection mode.

use std::sync::Arc;

use super::error::MemoryError;
use super::events::MemoryEvents;
use super::handle::Memory;
use super::memcg::MemCg;
use crate::controller::{ControllerHandle, GroupStats};
use crate::group::Group;
use crate::page_counter::PageCounter;

impl Memory {
    /// `memory.current`: `group`'s usage, hierarchical, including units
    /// pre-charged in stocks. One load. A removed group reads its own
    /// (reparented, so normally 0) counter.
    pub fn current(&self, group: &Group) -> Result<u64, MemoryError> {
        Ok(self.memcg(group)?.counter.usage())
    }

    /// `memory.peak`: the highest usage since creation or
    /// [`reset_peak`](Self::reset_peak). One load.
    pub fn peak(&self, group: &Group) -> Result<u64, MemoryError> {
        Ok(self.memcg(group)?.counter.watermark())
    }

    /// Reset `memory.peak` to the current usage. Takes the counter's setter
    /// lock.
    pub fn reset_peak(&self, group: &Group) -> Result<(), MemoryError> {
        self.memcg(group)?.counter.reset_watermark();
        Ok(())
    }

    /// `memory.events`: events of `group` and its descendants. Five loads.
    pub fn events(&self, group: &Group) -> Result<MemoryEvents, MemoryError> {
        Ok(self.memcg(group)?.events.hierarchical())
    }

    /// `memory.events.local`: events of `group` itself.
    pub fn events_local(&self, group: &Group) -> Result<MemoryEvents, MemoryError> {
        Ok(self.memcg(group)?.events.local())
    }

    /// `memory.stat`: the [`MEMORY_STAT_NAMES`](super::MEMORY_STAT_NAMES)
    /// items, local and hierarchical, as fresh as the controller's flush
    /// policy makes them: [`ControllerHandle::read`] of the
    /// [`stat_controller`](Self::stat_controller), after adding the
    /// accounting allocator's pending deltas
    /// ([`flush_heap_stats`](Self::flush_heap_stats): each CPU's stock lock
    /// once). Under `Threshold` (the default) that read's bound holds:
    /// within the unit threshold, or including every update that completed
    /// a read pace ([`Rstat::read_pace`](crate::Rstat::read_pace)) before
    /// the call.
    pub fn read(&self, group: &Group) -> Result<GroupStats, MemoryError> {
        self.flush_heap_stats(group)?;
        Ok(self.inner.stats.read(group)?)
    }

    /// `memory.stat`, exact: every update completed before the call is in,
    /// the accounting allocator's included ([`ControllerHandle::read_exact`]
    /// of the [`stat_controller`](Self::stat_controller), after the heap
    /// deltas). Takes each CPU's stock lock once
    /// ([`flush_heap_stats`](Self::flush_heap_stats)), then the
    /// controller's flush lock.
    pub fn read_exact(&self, group: &Group) -> Result<GroupStats, MemoryError> {
        self.flush_heap_stats(group)?;
        Ok(self.inner.stats.read_exact(group)?)
    }

    /// Add the heap stat deltas the stocks keep for `group`'s subtree to
    /// its groups' stat items (every CPU's stock lock in turn), so a read
    /// of the stat items that follows includes every heap operation
    /// completed before this call. [`read`](Self::read) and
    /// [`read_exact`](Self::read_exact) call it; call it before reading
    /// through the [`stat_controller`](Self::stat_controller) for the same.
    pub fn flush_heap_stats(&self, group: &Group) -> Result<(), MemoryError> {
        let t = self.target(group)?;
        self.inner
            .shared
            .stocks
            .flush_stats(|m| m.is_in_subtree(&t.memcg));
        Ok(())
    }

    /// The handle of the controller that counts the `memory.stat` items
    /// (registered as `"memory"`): its flush policy, pending updates and
    /// raw reads, which do not add the accounting allocator's pending
    /// deltas ([`flush_heap_stats`](Self::flush_heap_stats)). No cost.
    pub fn stat_controller(&self) -> &ControllerHandle {
        &self.inner.stats
    }

    /// Return every stock slot of `group` and its descendants to the page
    /// counters. Returns the units uncharged. Cost: each CPU's stock lock in
    /// turn (waiting for it), O(slots × depth). Allocates nothing, so it is
    /// exact for the caller's own group too: with no other thread charging
    /// the subtree, its `memory.current` afterwards is exactly what its
    /// callers hold (with the accounting allocator, its live objects'
    /// bytes and overhead).
    pub fn drain_stocks(&self, group: &Group) -> Result<u64, MemoryError> {
        let t = self.target(group)?;
        Ok(self.drain_subtree(&t.memcg))
    }

    pub(crate) fn drain_subtree(&self, root: &MemCg) -> u64 {
        self.inner.shared.stocks.drain(|m| m.is_in_subtree(root))
    }

    /// Units pre-charged to `group` itself (not its descendants) sitting in
    /// the stocks, over all CPUs: at most `batch × nr_cpus`. Cost: each
    /// CPU's stock lock in turn.
    pub fn stocked(&self, group: &Group) -> Result<u64, MemoryError> {
        Ok(self.inner.shared.stocks.stocked(self.memcg(group)?))
    }

    /// How many times units given back to `group`'s page counter would
    /// have taken it below zero (clamped there instead): an uncharge of
    /// more than was charged. [`uncharge_raw`](Self::uncharge_raw) refuses
    /// an excess over what the group holds at once, except one hidden by
    /// other CPUs' stocks or by racing uncharges (see there), which reaches
    /// the counter only when a stock gives its units back; this count is
    /// where it shows, as the kernel warns on a page counter underflow.
    /// Counted on each level that underflowed. Non-zero means some caller
    /// uncharges more than it charged: the group's usage is understated
    /// until then. One load.
    pub fn uncharge_underflows(&self, group: &Group) -> Result<u64, MemoryError> {
        Ok(self.memcg(group)?.counter.cancel_underflows())
    }

    /// `group`'s page counter, to read what this API does not show
    /// (failcnt, effective protection, local watermark). Set limits with
    /// [`set_limit`](Self::set_limit), not through the counter's own
    /// setters: those skip the stocks' drain, the reclaim and the stocks'
    /// over-the-limit flags that `set_limit` keeps.
    pub fn page_counter(&self, group: &Group) -> Result<Arc<PageCounter>, MemoryError> {
        Ok(Arc::clone(&self.memcg(group)?.counter))
    }

    /// Turn recursive protection (cgroup2's `memory_recursiveprot`) on or
    /// off for the whole tree.
    pub fn set_recursive_protection(&self, on: bool) -> Result<(), MemoryError> {
        self.inner
            .root
            .counter
            .set_recursive_protection(on)
            .map_err(|_| MemoryError::InvalidConfig {
                reason: "the root's page counter has a parent".into(),
            })
    }
}
