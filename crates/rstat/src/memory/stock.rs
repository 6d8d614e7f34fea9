//! The per-CPU charge stock: charges pre-paid in batches, so that most
//! charges and uncharges touch no shared cache line.
//!
//! Each CPU has [`NR_STOCK`] slots, each a (group, amount) pair: `amount`
//! units already charged to the group's page counter (and so to every
//! ancestor's) that no caller holds yet.
//!
//! - **consume**: a charge of `n ≤ batch` units to a group with at least
//!   `n` units in this CPU's stock takes them from the slot. No page
//!   counter is touched.
//! - **refill**: a charge that missed charges `max(batch, n)` to the page
//!   counter and stocks the surplus; an uncharge puts its units in the
//!   stock instead of uncharging them. A slot that would hold more than
//!   `batch` is emptied into its page counter (overflow); a group without a
//!   slot takes a free one, or evicts one round-robin (its units are
//!   uncharged).
//! - **drain**: empty chosen slots on every CPU into their page counters:
//!   on `memory.max`/`memory.high` writes and under the limit before
//!   reclaiming and before declaring OOM (a subtree's slots), and when a
//!   group goes offline or is released (its slots).
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
//! its operation returns, and a group has at most one slot per CPU, so the
//! units charged to a group's counter that no caller holds are at most
//! `batch × nr_cpus` (plus the amounts of operations in flight). Draining
//! before OOM means a charge never fails because of them.
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

use std::sync::Arc;

use core::ptr::NonNull;

use super::config::HeapStats;
use super::memcg::MemCg;
use super::objcg::ObjCg;
use crate::page_counter::CachePadded;
use crate::sync::{AtomicBool, AtomicUsize, Ordering, UnsafeCell};

/// Slots per CPU (the kernel's `NR_MEMCG_STOCK`); 2 under loom.
pub const NR_STOCK: usize = if cfg!(rstat_loom) { 2 } else { 7 };

/// Every CPU's stock, and the batch.
pub(crate) struct Stocks {
    cpus: Box<[CachePadded<CpuStock>]>,
    batch: u64,
    /// How many groups are flagged as possibly over their `memory.max`.
    nr_over: CachePadded<AtomicUsize>,
}

/// One CPU's slots and their lock.
struct CpuStock {
    locked: AtomicBool,
    slots: UnsafeCell<Slots>,
}

// SAFETY: `slots` is only reached through `Held`, which exists only while
// this thread holds `locked`; its contents (`Arc<MemCg>`, integers, and
// the handle addresses in `keys`, compared and never dereferenced) are
// Send + Sync.
unsafe impl Sync for CpuStock {}
// SAFETY: as above.
unsafe impl Send for CpuStock {}

/// The slot table: `cached[i]` holds `nr[i]` pre-charged units,
/// `refs[i]` references on its group's owner handle ([`super::objcg`]),
/// taken in batches for the allocator's objects, and `stat[i]` the
/// allocator's `memory.stat` deltas of its group not yet added to the
/// group's stat items (see [`HEAP_STAT_BATCH`]).
struct Slots {
    cached: [Option<Arc<MemCg>>; NR_STOCK],
    /// `cached[i]`'s owner handle address (null for an empty slot): the
    /// accounting allocator finds a slot by the handle an object holds,
    /// without reaching its group. A handle lives while a slot names its
    /// state (the state holds its base reference until its removal has
    /// drained every slot), so an address here is never another handle's.
    keys: [*const ObjCg; NR_STOCK],
    /// `cached[i]`'s owner handle serial (0 for an empty slot): what a
    /// charge that remembers a handle without holding a reference on it
    /// matches, since a handle's address can be reused once it is freed
    /// (its group removed) and a slot then made for a new group's handle at
    /// that address ([`Stocks::heap_charge_fast`]).
    serials: [u64; NR_STOCK],
    nr: [u64; NR_STOCK],
    refs: [usize; NR_STOCK],
    stat: [HeapStats; NR_STOCK],
    /// Operations counted in `stat[i]` since it was last added.
    nstat: [u32; NR_STOCK],
    /// This stock's CPU index, and the memory controller's stat
    /// controller id (`usize::MAX`: none, in models), for those adds.
    cpu: usize,
    stat_ctl: usize,
    /// The next slot to evict when none is free (round-robin).
    next_evict: usize,
}

impl Slots {
    #[inline(always)]
    fn find(&self, memcg: &MemCg) -> Option<usize> {
        self.cached
            .iter()
            .position(|c| c.as_deref().is_some_and(|c| core::ptr::eq(c, memcg)))
    }

    /// The slot of the state whose owner handle is `x`.
    #[inline(always)]
    fn find_key(&self, x: *const ObjCg) -> Option<usize> {
        self.keys.iter().position(|&k| core::ptr::eq(k, x))
    }

    /// The slot of the state whose owner handle has serial `serial` (not
    /// 0).
    #[inline(always)]
    fn find_serial(&self, serial: u64) -> Option<usize> {
        self.serials.iter().position(|&k| k == serial)
    }

    /// The allocator's charge of one object from slot `i`: its units and
    /// one handle reference (fetched [`REF_BATCH`] at a time). False if the
    /// slot has fewer units.
    ///
    /// A slot names a state only until that state's removal drains it, and
    /// the state holds its handle's base reference until after that drain:
    /// the handle is live while we hold the lock.
    #[inline(always)]
    fn heap_take_at(&mut self, i: usize, size: u64, overhead: u64) -> bool {
        let n = size + overhead;
        if self.nr[i] < n {
            return false;
        }
        self.nr[i] -= n;
        if self.refs[i] == 0 {
            // SAFETY: the handle is live (above).
            unsafe { ObjCg::get(NonNull::new_unchecked(self.keys[i].cast_mut()), REF_BATCH) };
            self.refs[i] = REF_BATCH;
        }
        self.refs[i] -= 1;
        // Amounts are below PAGE_COUNTER_MAX: they fit an i64.
        self.count(i, [size as i64, overhead as i64, 1, 0]);
        true
    }

    /// The allocator's uncharge of one object into slot `i` (its units, at
    /// most `batch`, and its handle reference). Returns what must be given
    /// back once the lock is released (the slot, if it overflowed).
    #[inline(always)]
    fn heap_put_at(&mut self, i: usize, size: u64, overhead: u64, batch: u64) -> Option<Taken> {
        // Made here, not captured: a captured array is read back from the
        // caller's stack with wider loads than it was written with (a
        // store-forwarding stall on this hot path).
        let d = [-(size as i64), -(overhead as i64), 0, 1];
        // nr ≤ batch before, n ≤ batch ≤ MAX_BATCH: no overflow.
        self.nr[i] += size + overhead;
        self.refs[i] += 1;
        self.count(i, d);
        if self.refs[i] > REF_MAX {
            let surplus = self.refs[i] - REF_BATCH;
            self.refs[i] = REF_BATCH;
            // SAFETY: these references were the slot's; the base reference
            // is held (a slot names the state), so this is not the last.
            unsafe { ObjCg::put(NonNull::new_unchecked(self.keys[i].cast_mut()), surplus) };
        }
        if self.nr[i] > batch {
            return self.take(i);
        }
        None
    }

    /// Add slot `i`'s pending heap stat deltas to its group's stat items
    /// (per-CPU adds). Under the lock: the group is live while a slot
    /// names its state (its removal drains the slot first).
    #[inline(never)]
    fn flush_stats(&mut self, i: usize) {
        if self.nstat[i] == 0 {
            return;
        }
        self.nstat[i] = 0;
        let d = core::mem::take(&mut self.stat[i]);
        if let Some(m) = self.cached[i].as_deref() {
            m.add_heap_stats(self.stat_ctl, self.cpu, d);
        }
    }

    /// Count one heap operation's deltas in slot `i`, adding them to the
    /// group's items every [`HEAP_STAT_BATCH`] operations.
    #[inline(always)]
    fn count(&mut self, i: usize, d: HeapStats) {
        for (a, b) in self.stat[i].iter_mut().zip(d) {
            *a = a.wrapping_add(b);
        }
        self.nstat[i] += 1;
        if self.nstat[i] >= HEAP_STAT_BATCH {
            self.flush_stats(i);
        }
    }

    /// Empty slot `i`; its group, units and handle references, if it
    /// named one (its stat deltas are added first).
    #[inline(never)]
    fn take(&mut self, i: usize) -> Option<Taken> {
        self.flush_stats(i);
        let nr = core::mem::take(&mut self.nr[i]);
        let refs = core::mem::take(&mut self.refs[i]);
        self.keys[i] = core::ptr::null();
        self.serials[i] = 0;
        self.cached[i].take().map(|m| Taken { memcg: m, nr, refs })
    }

    /// The slot of `memcg`, made (a free one, or one evicted round-robin)
    /// if it has none: its index and what was evicted.
    #[inline(always)]
    fn slot_for(&mut self, memcg: &Arc<MemCg>) -> (usize, Option<Taken>) {
        if let Some(i) = self.find(memcg) {
            return (i, None);
        }
        self.new_slot(memcg)
    }

    /// [`Stocks::heap_refill`] when `memcg` has no slot: make one and put
    /// the object in it (its units are at most the batch, so the new slot
    /// cannot overflow); return what was evicted.
    #[inline(never)]
    fn heap_refill_new(
        &mut self,
        memcg: &Arc<MemCg>,
        size: u64,
        overhead: u64,
        batch: u64,
    ) -> Option<Taken> {
        let (i, evicted) = self.new_slot(memcg);
        let overflow = self.heap_put_at(i, size, overhead, batch);
        debug_assert!(overflow.is_none(), "an empty slot overflowed");
        evicted
    }

    /// [`slot_for`](Self::slot_for) when `memcg` has no slot (kept out of
    /// line).
    #[inline(never)]
    fn new_slot(&mut self, memcg: &Arc<MemCg>) -> (usize, Option<Taken>) {
        let (i, evicted) = match self.cached.iter().position(Option::is_none) {
            Some(i) => (i, None),
            None => {
                let i = self.next_evict % NR_STOCK;
                self.next_evict = (i + 1) % NR_STOCK;
                (i, self.take(i))
            }
        };
        self.cached[i] = Some(Arc::clone(memcg));
        self.keys[i] = memcg.objcg().as_ptr();
        self.serials[i] = memcg.objcg_serial();
        (i, evicted)
    }
}

/// What a slot held when it was emptied: units to uncharge and handle
/// references to drop, after the lock is released ([`Taken::give_back`]).
#[must_use]
pub(crate) struct Taken {
    memcg: Arc<MemCg>,
    nr: u64,
    refs: usize,
}

impl Taken {
    /// Uncharge the units and drop the references. Returns the units.
    pub(crate) fn give_back(self) -> u64 {
        self.memcg.uncharge_counter(self.nr);
        // SAFETY: the slot owned these references on its group's handle.
        unsafe { self.memcg.put_objcg(self.refs) };
        self.nr
    }
}

/// Heap operations a slot counts before adding its stat deltas to its
/// group's items: a read through [`Memory::stat`](super::Memory::stat) or
/// [`stat_exact`](super::Memory::stat_exact) adds every slot's first, so it
/// stays exact; a read of the raw stat controller
/// ([`Memory::stats`](super::Memory::stats)) may miss fewer than this many
/// operations' deltas per (group, CPU).
pub const HEAP_STAT_BATCH: u32 = 64;

/// References on a handle the allocator takes at once into a stock slot,
/// and the most a slot keeps (above it, the surplus goes back).
pub(crate) const REF_BATCH: usize = 64;
const REF_MAX: usize = 2 * REF_BATCH;

/// Proof that this thread holds one CPU's lock; releases it on drop. The
/// accounting allocator's read side ([`super::objcg`]).
pub(crate) struct Held<'a>(&'a CpuStock);

impl Held<'_> {
    #[inline(always)]
    fn with<R>(&mut self, f: impl FnOnce(&mut Slots) -> R) -> R {
        // SAFETY: we hold the lock, so no other thread reaches the slots
        // (module docs); `&mut self` makes this the only access here.
        self.0.slots.with_mut(|p| f(unsafe { &mut *p }))
    }
}

impl Drop for Held<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        // Release: publishes our slot writes to the next holder's Acquire.
        self.0.locked.store(false, Ordering::Release);
    }
}

impl CpuStock {
    #[inline(always)]
    fn try_lock(&self) -> Option<Held<'_>> {
        // Acquire on success: pairs with the Release in `Held::drop`.
        // Relaxed on failure: we then touch nothing.
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Held(self))
    }

    fn lock(&self) -> Held<'_> {
        loop {
            if let Some(h) = self.try_lock() {
                return h;
            }
            // Relaxed: only a hint of when to try again.
            while self.locked.load(Ordering::Relaxed) {
                spin_wait();
            }
        }
    }
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
            .map(|cpu| {
                CachePadded::new(CpuStock {
                    locked: AtomicBool::new(false),
                    slots: UnsafeCell::new(Slots {
                        cached: Default::default(),
                        keys: [core::ptr::null(); NR_STOCK],
                        serials: [0; NR_STOCK],
                        nr: [0; NR_STOCK],
                        refs: [0; NR_STOCK],
                        stat: [[0; 4]; NR_STOCK],
                        nstat: [0; NR_STOCK],
                        cpu,
                        stat_ctl,
                        next_evict: 0,
                    }),
                })
            })
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
        if n == 0 {
            return;
        }
        if n > self.batch {
            memcg.uncharge_counter(n);
            return;
        }
        let Some(mut h) = self.cpus[cpu].try_lock() else {
            memcg.uncharge_counter(n);
            return;
        };
        // Under the lock: the offline protocol (module docs).
        if !memcg.is_online() {
            drop(h);
            memcg.uncharge_counter(n);
            return;
        }
        let batch = self.batch;
        let out = h.with(|s| {
            if let Some(i) = s.find(memcg) {
                // nr ≤ batch before, n ≤ batch ≤ MAX_BATCH: no overflow.
                s.nr[i] += n;
                return if s.nr[i] > batch { s.take(i) } else { None };
            }
            let (i, evicted) = s.slot_for(memcg);
            s.nr[i] = n;
            evicted
        });
        drop(h);
        if let Some(t) = out {
            t.give_back();
        }
    }

    /// The accounting allocator's charge of one object: take `n` units of
    /// `memcg` and one reference on its owner handle from the held stock
    /// (references are fetched [`REF_BATCH`] at a time). False if the slot
    /// has fewer units, or none.
    ///
    /// The caller checked, under this lock, that `memcg` is online: its
    /// handle's base reference is then held until a drain that waits for
    /// this lock, so the handle is live.
    #[inline(always)]
    pub(crate) fn heap_consume(
        &self,
        h: &mut Held<'_>,
        memcg: &MemCg,
        size: u64,
        overhead: u64,
    ) -> bool {
        h.with(|s| match s.find(memcg) {
            Some(i) => s.heap_take_at(i, size, overhead),
            None => false,
        })
    }

    /// The accounting allocator's uncharge of one object bound to
    /// `memcg`'s handle: its `n` units (at most `batch`) and its reference
    /// go into the held stock. Returns what must be given back once the
    /// lock is released (a slot that overflowed or was evicted).
    ///
    /// The caller checked, under this lock, that `memcg` is online and may
    /// be stocked (see [`refill`](Self::refill) for the rules).
    #[inline(always)]
    pub(crate) fn heap_refill(
        &self,
        h: &mut Held<'_>,
        memcg: &Arc<MemCg>,
        size: u64,
        overhead: u64,
    ) -> Option<Taken> {
        let batch = self.batch;
        h.with(|s| match s.find(memcg) {
            Some(i) => s.heap_put_at(i, size, overhead, batch),
            // Out of line, so the common case returns `None` without
            // moving a `Taken` through the stack.
            None => s.heap_refill_new(memcg, size, overhead, batch),
        })
    }

    /// The CPU slot the calling thread should use: the CPU it runs on,
    /// folded into the stocks' CPU count.
    #[inline(always)]
    pub(crate) fn this_cpu(&self) -> usize {
        crate::percpu::cpu::fold(crate::percpu::cpu::current(), self.cpus.len())
    }

    /// The accounting allocator's fast charge of one object to the group
    /// whose owner handle has serial `serial` (a handle the caller
    /// remembers but holds no reference on): if CPU `cpu`'s lock is free
    /// and its stock has a slot for that handle with the units, take them
    /// and one reference on the handle from it, and return the handle.
    /// `None` (nothing done) otherwise: the caller takes the full path.
    ///
    /// The slot's presence is the proof that the group's removal has not
    /// drained this CPU yet: the charge is ordered before that removal, and
    /// the handle's base reference is held until after it. The slot is
    /// found by the serial, not the address: after the removal the handle
    /// may be freed and a new group's handle made at its address, with a
    /// slot here, which an address would match (the loom model
    /// `fast_charge_never_takes_a_slot_of_a_handle_at_a_reused_address`).
    #[inline(always)]
    pub(crate) fn heap_charge_fast(
        &self,
        cpu: usize,
        serial: u64,
        size: u64,
        overhead: u64,
    ) -> Option<NonNull<ObjCg>> {
        let mut h = self.cpus[cpu].try_lock()?;
        h.with(|s| {
            let i = s.find_serial(serial)?;
            // A slot's key is non-null (a handle's address).
            let x = NonNull::new(s.keys[i].cast_mut())?;
            s.heap_take_at(i, size, overhead).then_some(x)
        })
    }

    /// The accounting allocator's fast uncharge of one object of owner
    /// handle `x` (the object's reference on it is given back): if CPU
    /// `cpu`'s lock is free and its stock has a slot for the handle's
    /// group, the units (at most `batch`) and the reference go into it.
    /// False (nothing done) otherwise, or while some group may be over its
    /// `memory.max` (see "Over the limit"): the caller takes the full path.
    ///
    /// As for [`heap_charge_fast`](Self::heap_charge_fast), the slot's
    /// presence orders this free before the group's removal, so the units
    /// go to the group that was charged (a handle is reparented only
    /// during its group's removal, before the drain).
    #[inline(always)]
    pub(crate) fn heap_uncharge_fast(
        &self,
        cpu: usize,
        x: *const ObjCg,
        size: u64,
        overhead: u64,
    ) -> bool {
        let batch = self.batch;
        // Relaxed: as in `may_stock`.
        if size + overhead > batch || self.nr_over.load(Ordering::Relaxed) != 0 {
            return false;
        }
        let Some(mut h) = self.cpus[cpu].try_lock() else {
            return false;
        };
        let out = h.with(|s| match s.find_key(x) {
            Some(i) => Ok(s.heap_put_at(i, size, overhead, batch)),
            None => Err(()),
        });
        drop(h);
        match out {
            Ok(Some(t)) => {
                t.give_back();
                true
            }
            Ok(None) => true,
            Err(()) => false,
        }
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

    /// Empty, on every CPU, the slots whose group satisfies `pred`, into
    /// their page counters. Waits for each CPU's lock in turn. Returns the
    /// units uncharged.
    pub(crate) fn drain(&self, pred: impl Fn(&MemCg) -> bool) -> u64 {
        let mut total = 0u64;
        // Room for one CPU's slots, on the stack: no allocation, so a drain
        // is exact for the caller's own group (a scratch buffer's free
        // would go back into its stock), and nothing is allocated under a
        // stock lock (the accounting allocator's charge may need it).
        let mut taken: [Option<Taken>; NR_STOCK] = Default::default();
        for cpu in self.cpus.iter() {
            let mut h = cpu.lock();
            h.with(|s| {
                for (i, t) in taken.iter_mut().enumerate() {
                    if s.cached[i].as_deref().is_some_and(&pred) {
                        *t = s.take(i);
                    }
                }
            });
            drop(h);
            for t in taken.iter_mut().filter_map(Option::take) {
                total = total.saturating_add(t.give_back());
            }
        }
        total
    }

    /// Add the pending heap stat deltas of every slot whose group
    /// satisfies `pred`, on every CPU, to their groups' stat items. Takes
    /// each CPU's lock in turn.
    pub(crate) fn flush_stats(&self, pred: impl Fn(&MemCg) -> bool) {
        for cpu in self.cpus.iter() {
            let mut h = cpu.lock();
            h.with(|s| {
                for i in 0..NR_STOCK {
                    if s.cached[i].as_deref().is_some_and(&pred) {
                        s.flush_stats(i);
                    }
                }
            });
        }
    }

    /// Give `memcg`'s slot on CPU `cpu` the key `addr`, as if its handle
    /// had been made at that address (the loom model of address reuse).
    #[cfg(all(rstat_loom, test))]
    pub(crate) fn rekey_for_model(&self, cpu: usize, memcg: &MemCg, addr: *const ObjCg) {
        let mut h = self.cpus[cpu].lock();
        h.with(|s| {
            if let Some(i) = s.find(memcg) {
                s.keys[i] = addr;
            }
        });
    }

    /// Units of `memcg` in all stocks. Takes every CPU's lock in turn.
    pub(crate) fn stocked(&self, memcg: &MemCg) -> u64 {
        let mut total = 0u64;
        for cpu in self.cpus.iter() {
            let mut h = cpu.lock();
            total += h.with(|s| s.find(memcg).map_or(0, |i| s.nr[i]));
        }
        total
    }
}

/// Let the lock holder run (it may be preempted on this very CPU).
#[cold]
fn spin_wait() {
    #[cfg(rstat_loom)]
    loom::thread::yield_now();
    #[cfg(not(rstat_loom))]
    std::thread::yield_now();
}
