//! The memory controller's side of the accounting allocator
//! ([`crate::alloc`]): charging and uncharging heap objects through the
//! same stock and page counters as explicit charges, counting the `heap*`
//! items of `memory.stat`, and the per-group limit mode.
//!
//! Nothing here allocates on the common path (a stock hit): a few loads,
//! one uncontended compare-and-swap on this CPU's stock lock, three
//! per-CPU stat adds and the caller's per-CPU group reference. The slow
//! paths may allocate (error paths, reclaim); the allocator runs them with
//! its re-entry guard set, so those nested allocations pass through.

use std::borrow::Cow;

use super::charge::{ancestor, charge_memcg, check_high, uncharge_memcg, Charged, OnOom};
use super::{
    Memory, MemoryError, MemoryEvent, Target, STAT_HEAP, STAT_HEAP_ALLOCS, STAT_HEAP_FREES,
    STAT_HEAP_OVERHEAD, STAT_HEAP_REPARENTED,
};
use crate::group::Group;
use crate::page_counter::{PageCounterError, PAGE_COUNTER_MAX};
use crate::sync::Ordering;

/// What `memory.max` means to the accounting allocator, per group (a new
/// group starts with its parent's mode; the root's is `Account`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HeapLimitMode {
    /// Charge anyway: an allocation over `memory.max` succeeds, counting a
    /// `max` event on the level that refused and an `oom` event, and the
    /// `forced` stat item. No reclaim runs on this path (set `memory.high`
    /// to have reclaimers called).
    #[default]
    Account,
    /// Refuse: the allocation returns null after the charge path's drain,
    /// reclaim and retries failed (the `max` and `oom` events, `failcnt`).
    /// `try_reserve`, `Vec::try_with_capacity` and the like then fail
    /// cleanly; an infallible allocation (`Box::new`, `vec![]`, a `push`
    /// that grows) calls `handle_alloc_error`, which aborts the process,
    /// as Rust requires of a null from the global allocator.
    Enforce,
}

/// The sign of a byte delta, for the stat items (amounts are below
/// `PAGE_COUNTER_MAX`, so they fit an `i64`).
#[inline(always)]
fn signed(n: u64, neg: bool) -> i64 {
    let v = n as i64;
    if neg {
        -v
    } else {
        v
    }
}

impl Memory {
    /// Set `group`'s [`HeapLimitMode`]. Descendants created later start
    /// with it; existing ones keep theirs. One store.
    pub fn set_heap_limit_mode(
        &self,
        group: &Group,
        mode: HeapLimitMode,
    ) -> Result<(), MemoryError> {
        let m = self.live_memcg(group)?;
        // Relaxed: a setting read on its own by later charges.
        m.heap_enforce
            .store(mode == HeapLimitMode::Enforce, Ordering::Relaxed);
        Ok(())
    }

    /// `group`'s [`HeapLimitMode`]. One load.
    pub fn heap_limit_mode(&self, group: &Group) -> Result<HeapLimitMode, MemoryError> {
        Ok(if self.memcg(group)?.heap_enforce.load(Ordering::Relaxed) {
            HeapLimitMode::Enforce
        } else {
            HeapLimitMode::Account
        })
    }

    /// The allocator's charge of one object: `size + overhead` bytes to
    /// `group` (or, if it was removed, its nearest live ancestor), through
    /// CPU `cpu`'s stock. Returns a reference on the group charged, for
    /// the object to keep, or `None` if the charge was refused
    /// ([`HeapLimitMode::Enforce`]) or cannot be made.
    #[inline(always)]
    pub(crate) fn heap_charge(
        &self,
        group: &Group,
        size: u64,
        overhead: u64,
        cpu: usize,
    ) -> Option<Group> {
        let n = size + overhead;
        if let Ok(m) = self.inner.ext.get(group) {
            if m.is_online() && self.inner.shared.stocks.consume(cpu, m, n) {
                self.count_heap(group, size, overhead, false, cpu);
                self.count_on(group, STAT_HEAP_ALLOCS, 1, cpu);
                return Some(group.clone());
            }
        }
        self.heap_charge_slow(group, size, overhead, cpu)
    }

    #[inline(never)]
    fn heap_charge_slow(
        &self,
        group: &Group,
        size: u64,
        overhead: u64,
        cpu: usize,
    ) -> Option<Group> {
        let t = self.heap_charge_bytes(group, size + overhead, cpu).ok()?;
        let g = t.group.into_owned();
        self.count_heap(&g, size, overhead, false, cpu);
        self.count_on(&g, STAT_HEAP_ALLOCS, 1, cpu);
        Some(g)
    }

    /// Charge `n` bytes for the heap to `group` by its limit mode: the
    /// stock, else the page counter; over `memory.max`, account (force,
    /// counting `max` and `oom`) or enforce (the full charge path, which
    /// may fail); over `memory.high`, run the reclaimers
    /// ([`reclaim_high`](Self::reclaim_high)). While this thread holds one
    /// of the crate's locks, always account and never reclaim (either
    /// could wait for the lock held).
    pub(crate) fn heap_charge_bytes<'g>(
        &self,
        group: &'g Group,
        n: u64,
        cpu: usize,
    ) -> Result<Target<'g>, MemoryError> {
        if n > PAGE_COUNTER_MAX {
            return Err(MemoryError::TooLarge { amount: n });
        }
        // Under one of the crate's own locks (an allocation the crate makes
        // while holding it), nothing that may wait for a lock or call a
        // reclaimer: charge, forced if need be, and leave reclaim to a
        // later allocation.
        let held = crate::sync::locks_held();
        let enforce = !held && self.memcg(group)?.heap_enforce.load(Ordering::Relaxed);
        let (t, flags) = if enforce {
            self.charge_target(group, n, OnOom::Fail, cpu)?
        } else {
            let t = self.target(group)?;
            let flags = match charge_memcg(&self.inner.shared.stocks, &t.memcg, cpu, n) {
                Ok(false) => Charged::default(),
                Ok(true) => Charged {
                    over_high: check_high(&t.memcg),
                    forced: false,
                },
                Err(PageCounterError::OverLimit { level, .. }) => {
                    let (over_g, over) = ancestor(&t, level);
                    over.raise(MemoryEvent::Max);
                    over.raise(MemoryEvent::Oom);
                    // Never release a group inside the allocator.
                    over_g.drop_deferred();
                    self.force(&t, n)?
                }
                Err(_) => return Err(MemoryError::TooLarge { amount: n }),
            };
            (t, flags)
        };
        if flags.over_high && !held && !super::reclaim::in_reclaim() {
            let _ = self.reclaim_high(&t.group);
        }
        Ok(t)
    }

    /// The allocator's uncharge of one object charged by
    /// [`heap_charge`](Self::heap_charge): `size + overhead` bytes from
    /// `group` (the object's reference, given back here without a release:
    /// see [`Group::drop_deferred`]), or, if it was removed, from its
    /// nearest live ancestor, counted as reparented there.
    #[inline(always)]
    pub(crate) fn heap_uncharge(&self, group: Group, size: u64, overhead: u64, cpu: usize) {
        let n = size + overhead;
        let stocks = &self.inner.shared.stocks;
        if let Ok(m) = self.inner.ext.get(&group) {
            if n <= stocks.batch()
                && m.is_online()
                && n <= m.counter.usage()
                && stocks.may_stock(m)
                && !super::reclaim::in_reclaim()
            {
                stocks.refill(cpu, m, n);
                self.count_heap(&group, size, overhead, true, cpu);
                self.count_on(&group, STAT_HEAP_FREES, 1, cpu);
                group.drop_deferred();
                return;
            }
        }
        self.heap_uncharge_slow(group, size, overhead, cpu);
    }

    #[inline(never)]
    fn heap_uncharge_slow(&self, group: Group, size: u64, overhead: u64, cpu: usize) {
        self.heap_uncharge_bytes(&group, size + overhead, cpu);
        self.count_heap(&group, size, overhead, true, cpu);
        self.count_on(&group, STAT_HEAP_FREES, 1, cpu);
        group.drop_deferred();
    }

    /// Uncharge `n` heap bytes from `group`'s target (itself, or its
    /// nearest live ancestor, counting them as reparented there). A count
    /// that would go below zero is clamped by the page counter (it cannot
    /// happen to the allocator's own charges).
    pub(crate) fn heap_uncharge_bytes(&self, group: &Group, n: u64, cpu: usize) {
        let Ok(t) = self.target(group) else { return };
        uncharge_memcg(&self.inner.shared.stocks, &t.memcg, cpu, n);
        if let Cow::Owned(anc) = t.group {
            self.count_on(&anc, STAT_HEAP_REPARENTED, n, cpu);
            // A live ancestor: not its last reference, but never release a
            // group from inside the allocator.
            anc.drop_deferred();
        }
    }

    /// Count a heap object's bytes (`neg`: freed) on `group`.
    #[inline(always)]
    pub(crate) fn count_heap(
        &self,
        group: &Group,
        size: u64,
        overhead: u64,
        neg: bool,
        cpu: usize,
    ) {
        self.count_signed(group, STAT_HEAP, signed(size, neg), cpu);
        self.count_signed(group, STAT_HEAP_OVERHEAD, signed(overhead, neg), cpu);
    }
}
