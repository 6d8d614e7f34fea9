//! The per-CPU charge stock: charges pre-paid in batches, so that most
//! charges and uncharges touch no shared cache line.
//!
//! Each CPU has [`NR_STOCK`] slots, each a (group, amount) pair: `amount`
//! units already charged to the group's page counter (and so to every
//! ancestor's) that no caller holds yet.
//!
//! **Many groups per CPU.** The kernel keeps 7 slots per CPU, since a CPU
//! runs few cgroups between context switches. Here a worker thread
//! switches groups at every poll (a tenant per request), so one CPU
//! charges for as many groups as there are tenants at work, and a group
//! without a slot pays the slow path twice (its charge goes up the page
//! counters, and its new slot evicts another group's batch). So the stock
//! has more slots (32), found by hashing: a slot's preferred index is a
//! hash of its group's owner handle address, a new slot takes the first
//! free index from there on, and a lookup probes from there. A hit usually
//! costs one probe, whatever the slot count; a miss tests only the
//! occupied slots whose 7-bit tag (of the same hash) matches, after one
//! pass over the tag bytes. The price is memory: each
//! CPU's stock grows with the slot count (per memory controller and CPU,
//! not per group). Details at [`NR_STOCK`].
//!
//! - **consume**: a charge of `n ≤ batch` units to a group with at least
//!   `n` units in this CPU's stock takes them from the slot. No page
//!   counter is touched.
//! - **refill**: a charge that missed charges `max(batch, n)` to the page
//!   counter and stocks the surplus; an uncharge puts its units in the
//!   stock instead of uncharging them. A slot that would hold more than
//!   `batch` is emptied into its page counter (overflow); a group without a
//!   slot takes a free one, or, with all `NR_STOCK` taken, evicts the next
//!   index in round-robin order (its units are uncharged).
//! - **drain**: empty chosen slots on every CPU into their page counters:
//!   on `memory.max`/`memory.high` writes and under the limit before
//!   reclaiming and before declaring OOM (a subtree's slots), and when a
//!   group goes offline or is released (its slots: looked up only on the
//!   CPUs whose stock ever made one, a mask in the group's state set under
//!   that CPU's lock, though every CPU's lock is still taken, for the
//!   owner handles' grace period).
//!
//! **The accounting allocator's extras** ([`crate::alloc`]). A slot also
//! keeps, for its group, references on the group's owner handle
//! (`memory::objcg`; fetched 64 at a time, one per object
//! handed out, given back on frees) and the allocator's `memory.stat`
//! deltas (added to the group's stat items every [`HEAP_STAT_BATCH`]
//! operations, when the slot is emptied, and by
//! [`Memory::flush_heap_stats`](super::Memory::flush_heap_stats) before a
//! read). Both are plain integers under the slot's lock. The allocator
//! takes this lock on every allocation and free, also when it then goes to
//! the page counter: the lock is the read side of the owner handles' grace
//! period (see `objcg`), and it takes another CPU's
//! rather than wait when this CPU's is busy.
//!
//! **Overcharge bound.** A slot never holds more than `batch` units once
//! its operation returns, and a group has at most one slot per CPU (a new
//! slot is made only after a lookup over every slot missed), however many
//! slots a CPU has, so the units charged to a group's counter that no
//! caller holds are at most `batch × nr_cpus` (plus the amounts of
//! operations in flight). Draining
//! before OOM means a charge never fails because of them.
//!
//! **Idle stock.** Pre-charged units show in `memory.current` (as in the
//! kernel): a group's usage reads up to `batch` per CPU above what its
//! callers hold. So they do not sit there for good once a group goes
//! quiet, the engine's periodic flusher (every
//! [`DEFAULT_FLUSH_PERIOD`](crate::DEFAULT_FLUSH_PERIOD) unless the
//! engine was built otherwise) makes an idle pass over every CPU's slots
//! after each root flush (`Stocks::return_idle`): a slot not used since
//! the previous pass is emptied into its page counter; the others are
//! marked unused. An idle group's `memory.current` thus comes down to what
//! its callers hold within two flush periods, while a busy group keeps its
//! stock (marking a slot used is one plain store to the line the operation
//! writes anyway). Without a periodic flusher
//! ([`Builder::periodic_flush`](crate::Builder::periodic_flush) `None`),
//! stock leaves only when evicted, overflowing or drained
//! ([`Memory::drain_stocks`](super::Memory::drain_stocks)).
//!
//! **Over the limit.** Units uncharged while the group or an ancestor is
//! above its `memory.max` (a forced charge, or a `memory.max` write reclaim
//! could not reach) go back to the page counter, not the stock, so they
//! cannot be handed to a charge that would not fit: a group over its limit
//! shrinks with every uncharge. To keep that check off the common path,
//! the groups that may be over are flagged and counted (`nr_over`); only
//! while the count is non-zero do uncharges look at their levels' usage
//! and max, and they clear the flags of levels back under their limit.
//!
//! **Lifetime.** A slot holds a strong reference (`Arc`) on its group's
//! memory state, so that state (and its page counter, which the units are
//! charged to) outlives every slot that names it. Groups going offline are
//! drained and never stocked again (see below), so a removed group's charges
//! never sit in a stock.
//!
//! # Synchronization
//!
//! A thread can be preempted or migrated at any point, so "this CPU's
//! stock" is only a hint: the slots are protected by a per-CPU lock, one
//! atomic flag, taken with a single compare-and-swap.
//!
//! - **Charge and uncharge only *try* the lock.** If it is held (another
//!   thread on this CPU, a thread that migrated away mid-operation, or a
//!   drainer), they go straight to the page counter instead: a consume
//!   fails over to `try_charge`, a refill uncharges its units. They never
//!   wait, so a preempted holder cannot stall anyone (the kernel's
//!   `local_trylock` fallback). Uncontended, the lock costs one
//!   compare-and-swap on a line this CPU owns, and its release is a plain
//!   store.
//! - **Drains wait for the lock** (spinning with `yield`). Holders keep it
//!   for a few loads and stores: page-counter uncharges and the drop of an
//!   evicted group's reference happen after the release.
//! - **Orderings.** Taking the lock is an `Acquire` compare-and-swap and
//!   releasing it a `Release` store, so each holder sees every slot write
//!   of the previous holders (the slots are plain memory behind
//!   `UnsafeCell`). No unit is created or lost: every unit is at all times
//!   in exactly one of "held by a caller", "in a slot" or "uncharged", and
//!   every move between slot and counter is made by the one thread holding
//!   the lock (or, for units just removed from a slot, by the thread that
//!   removed them). The loom model `memory::tests_loom` checks this.
//! - **Offline vs refill.** Going offline stores `online = false`, then
//!   drains the group's slots on every CPU; a refill checks `online` while
//!   holding the lock (a `Relaxed` load suffices). If the refill took CPU
//!   *i*'s lock after the drain released it, the drain's store happens
//!   before the refill's load (program order, then the drain's `Release`
//!   unlock and the refill's `Acquire` lock), so the refill sees `false`
//!   and uncharges instead; if before, the drain finds the refill's units.
//!   Either way no slot names the group after the drain.
//! - **Which CPUs a group's drain looks on.** A slot is made for a group on
//!   CPU *c* only under *c*'s lock, which first sets bit `c % 64` of the
//!   group's `stocked_on` mask (never cleared). The drain of one group
//!   (`drain_one`) reads that bit under *c*'s lock too, so the lock orders
//!   every slot made before it after the bit's store: a clear bit means no
//!   slot there, and the drain skips the lookup (the lock is still taken:
//!   it is the owner handles' grace period). Read outside the lock, the
//!   mask could miss a slot a racing refill makes before the drain reaches
//!   *c*: the loom model `refill_vs_offline` fails then.

// The files, lowest first: `slots` (one CPU's table), `lock` (its lock),
// this file (the stocks and the charge path's operations), then `heap`
// (the accounting allocator's operations) and `drain`.
mod drain;
mod heap;
mod lock;
mod slots;

pub use slots::{HEAP_STAT_BATCH, NR_STOCK};

use std::sync::Arc;

use lock::{CpuStock, Held};
use slots::Slots;

use super::memcg::MemCg;
use super::objcg::ObjCg;
use crate::percpu::CachePadded;
use crate::sync::{AtomicUsize, Ordering};

/// Every CPU's stock, and the batch.
pub(crate) struct Stocks {
    cpus: Box<[CachePadded<CpuStock>]>,
    batch: u64,
    /// How many groups are flagged as possibly over their `memory.max`.
    nr_over: CachePadded<AtomicUsize>,
}

impl Stocks {
    /// These stocks as the untyped word an owner handle keeps
    /// ([`ObjCg::stocks`]: the handle sits below the stock, whose slots
    /// hold references on handles, so it does not name this type);
    /// [`of_handle`](Self::of_handle) reads it back.
    pub(crate) fn as_handle_word(&self) -> *const () {
        core::ptr::from_ref(self).cast()
    }

    /// The stocks owner handle `x` was made for (null in models).
    #[inline(always)]
    pub(crate) fn of_handle(x: &ObjCg) -> *const Stocks {
        x.stocks().cast()
    }

    /// Empty stocks for `nr_cpus` CPUs; `batch == 0` disables stocking.
    /// `stat_ctl`: the memory controller's stat controller id, for the
    /// heap stat deltas slots keep (`usize::MAX` in models: none).
    pub(crate) fn new(nr_cpus: usize, batch: u64, stat_ctl: usize) -> Self {
        let cpus = (0..nr_cpus.max(1))
            .map(|cpu| CachePadded::new(CpuStock::new(Slots::new(cpu, stat_ctl))))
            .collect();
        Stocks {
            cpus,
            batch,
            nr_over: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    /// Flag `memcg` as possibly above its `memory.max` (after a forced
    /// charge or a `memory.max` write that fell short).
    pub(crate) fn mark_over(&self, memcg: &MemCg) {
        // Relaxed, here and in the other `over` accesses: the flags gate a
        // heuristic (skip the stock); a racing uncharge that misses a fresh
        // flag stocks at most one batch, within the overcharge bound.
        if !memcg.over.swap(true, Ordering::Relaxed) {
            self.nr_over.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Clear `memcg`'s flag.
    pub(crate) fn clear_over(&self, memcg: &MemCg) {
        if memcg.over.swap(false, Ordering::Relaxed) {
            self.nr_over.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Whether units of `memcg` may be stocked: false while it or an
    /// ancestor is above its max. One load unless some group is flagged;
    /// then O(depth), clearing the flags of levels back under their max.
    #[inline]
    pub(crate) fn may_stock(&self, memcg: &MemCg) -> bool {
        if self.nr_over.load(Ordering::Relaxed) == 0 {
            return true;
        }
        self.may_stock_slow(memcg)
    }

    #[cold]
    fn may_stock_slow(&self, memcg: &MemCg) -> bool {
        let mut ok = true;
        let mut m = Some(memcg);
        while let Some(c) = m {
            if c.counter.usage() > c.counter.max() {
                ok = false;
            } else if c.over.load(Ordering::Relaxed) {
                self.clear_over(c);
            }
            m = c.parent.as_deref();
        }
        ok
    }

    /// The charge batch.
    #[inline(always)]
    pub(crate) fn batch(&self) -> u64 {
        self.batch
    }

    /// Take `n` units of `memcg` from CPU `cpu`'s stock (`cpu` in range).
    /// False if `n > batch`, the lock is busy, or the slot has fewer.
    #[inline]
    pub(crate) fn consume(&self, cpu: usize, memcg: &MemCg, n: u64) -> bool {
        if n > self.batch {
            return false;
        }
        let Some(mut h) = self.cpus[cpu].try_lock() else {
            return false;
        };
        h.with(|s| match s.find(memcg) {
            Some(i) if s.nr[i] >= n => {
                s.nr[i] -= n;
                s.used |= 1 << i;
                true
            }
            _ => false,
        })
    }

    /// Put `n` units of `memcg`, charged to its page counter and held by
    /// nobody, in CPU `cpu`'s stock; what cannot be stocked (lock busy,
    /// `n > batch`, group offline, overflow, an evicted slot) is uncharged.
    #[inline]
    pub(crate) fn refill(&self, cpu: usize, memcg: &Arc<MemCg>, n: u64) {
        // No usage to check against: `try_refill` refuses only what cannot
        // be stocked, which goes to the page counter instead.
        if n != 0 && !self.try_refill(cpu, memcg, n, u64::MAX) {
            memcg.uncharge_counter(n);
        }
    }

    /// [`refill`](Self::refill) of `n` units if CPU `cpu`'s stock can take
    /// them and they are at most `usage` (the group's page counter, read by
    /// the caller) less what this CPU's slot already holds for the group:
    /// no more than its callers can hold, so an over-uncharge cannot hide
    /// in the stock until it gives its units back. False, with nothing
    /// done, otherwise (or if `n` is 0 or above the batch, the lock is
    /// busy, or the group is offline). Units in other CPUs' slots are not
    /// counted here (that would take their locks), so an excess smaller
    /// than them can still pass.
    #[inline]
    pub(crate) fn try_refill(&self, cpu: usize, memcg: &Arc<MemCg>, n: u64, usage: u64) -> bool {
        if n == 0 || n > self.batch {
            return false;
        }
        let Some(mut h) = self.cpus[cpu].try_lock() else {
            return false;
        };
        // Under the lock: the offline protocol (module docs).
        if !memcg.is_online() {
            return false;
        }
        let batch = self.batch;
        let out = h.with(|s| {
            let here = s.find(memcg);
            let stocked = here.map_or(0, |i| s.nr[i]);
            if n > usage.saturating_sub(stocked) {
                return Err(());
            }
            Ok(s.put(here, memcg, n, batch))
        });
        drop(h);
        match out {
            Ok(t) => {
                if let Some(t) = t {
                    t.give_back();
                }
                true
            }
            Err(()) => false,
        }
    }

    /// The CPU slot the calling thread should use: the CPU it runs on,
    /// folded into the stocks' CPU count.
    #[inline(always)]
    pub(crate) fn this_cpu(&self) -> usize {
        crate::percpu::cpu::current_in(self.cpus.len())
    }

    /// This CPU's lock, else any other CPU's that is free, else wait for
    /// this CPU's: the read side of the owner handles' grace period (any
    /// one stock lock will do; see [`super::objcg`]).
    #[inline(always)]
    pub(crate) fn lock_any(&self, cpu: usize) -> Held<'_> {
        if let Some(h) = self.cpus[cpu].try_lock() {
            return h;
        }
        self.lock_any_slow(cpu)
    }

    #[cold]
    fn lock_any_slow(&self, cpu: usize) -> Held<'_> {
        for c in self
            .cpus
            .iter()
            .cycle()
            .skip(cpu + 1)
            .take(self.cpus.len() - 1)
        {
            if let Some(h) = c.try_lock() {
                return h;
            }
        }
        self.cpus[cpu].lock()
    }
}
