//! The memory controller's side of the accounting allocator
//! ([`crate::alloc`]): charging and uncharging heap objects through the
//! same stock and page counters as explicit charges, counting the `heap*`
//! items of `memory.stat`, and the per-group limit mode.
//!
//! Nothing here allocates on the common path (a stock hit): a few loads,
//! one uncontended compare-and-swap on this CPU's stock lock, the stat
//! deltas counted in the stock slot (see the stock's `HEAP_STAT_BATCH`);
//! the object's reference on its owner handle
//! ([`objcg`](super::objcg)) is taken from (or put back into) the stock
//! slot, a shared atomic add only once per `REF_BATCH` (the stock's)
//! objects. The slow paths may allocate (error paths, reclaim); the
//! allocator runs them with its re-entry guard set, so those nested
//! allocations pass through.

use std::borrow::Cow;
use std::ptr::NonNull;

use super::charge::{ancestor, charge_memcg, check_high, uncharge_memcg, Charged, OnOom};
use super::config::{
    STAT_HEAP, STAT_HEAP_ALLOCS, STAT_HEAP_FREES, STAT_HEAP_OVERHEAD, STAT_HEAP_REPARENTED,
};
use super::error::MemoryError;
use super::events::MemoryEvent;
use super::handle::{Memory, Target};
use super::memcg::MemCg;
use super::objcg::ObjCg;
use crate::group::{Group, GroupInner};
use crate::page_counter::{PageCounterError, PAGE_COUNTER_MAX};
use crate::sync::Ordering;

/// What `memory.max` means to the accounting allocator, per group (a new
/// group starts with its parent's mode; the root's is `Account`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HeapLimitMode {
    /// Charge anyway: an allocation over `memory.max` succeeds, counting a
    /// `max` event on the level that refused (not `oom`: nothing failed)
    /// and the `forced` stat item. No reclaim runs on this path (set `memory.high`
    /// to have reclaimers called).
    #[default]
    Account,
    /// Refuse: the allocation returns null after the charge path's drain,
    /// reclaim and retries failed (the `max` and `oom` events, `failcnt`).
    /// `try_reserve`, `Vec::try_with_capacity` and the like then fail
    /// cleanly; an infallible allocation (`Box::new`, `vec![]`, a `push`
    /// that grows) calls `handle_alloc_error`, which aborts the process,
    /// as Rust requires of a null from the global allocator. The first
    /// refusal in a group writes a line to standard error naming rstat,
    /// the group and the limit (written without charging anything), so
    /// that such an abort is explained.
    Enforce,
    /// OOM-kill the work, not the process (the kernel's
    /// `memory.oom.group`): an allocation that cannot be brought under
    /// `memory.max` by the stocks' drain, the reclaimers and the OOM
    /// handler kills the allocating thread's group
    /// ([`Group::kill`](crate::Group::kill): it and its subtree; counts
    /// `oom` and `oom_kill`) and succeeds, past the limit, as does every
    /// later allocation of the killed work, so nothing aborts. The work
    /// stops at its next check: a [`killable`](crate::Group::killable)
    /// future resolves to `Err(Killed)` at its next poll and is dropped,
    /// which frees (and uncharges) what it held; a thread checks
    /// [`current_killed`](crate::attach::current_killed) or registers
    /// [`on_kill`](crate::Group::on_kill). Fallible charges of a killed
    /// group (`try_charge`) fail with [`MemoryError::Killed`]. Every
    /// allocation succeeds in this mode, `try_reserve`'s too: choose
    /// [`Enforce`](Self::Enforce) to have those fail instead.
    Kill,
}

impl HeapLimitMode {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => HeapLimitMode::Enforce,
            2 => HeapLimitMode::Kill,
            _ => HeapLimitMode::Account,
        }
    }

    fn as_u8(self) -> u8 {
        match self {
            HeapLimitMode::Account => 0,
            HeapLimitMode::Enforce => 1,
            HeapLimitMode::Kill => 2,
        }
    }
}

/// The delay one charge of a batch owes at an overage of 100% above
/// `memory.high` (it grows with the square of the overage: a group just
/// over its `high` is barely slowed, one far over it is held up to
/// [`MAX_PENALTY`](crate::attach::MAX_PENALTY) per charge), as the
/// kernel's `calculate_high_delay` scales its penalty.
pub const HIGH_PENALTY_AT_FULL_OVERAGE: std::time::Duration = std::time::Duration::from_secs(64);

/// After a charge of the accounting allocator left `memcg` (or an
/// ancestor) above `memory.high` and the reclaimers ran: owe the
/// allocating work a delay ([`crate::attach::throttle_point`], and a
/// scoped future's next poll) for the worst overage left on the chain,
/// `(usage - high) / high`, squared, times
/// [`HIGH_PENALTY_AT_FULL_OVERAGE`]. It runs once per refill of a stock
/// batch, so the delay per byte allocated follows the overage whatever the
/// object sizes. Never slept here, inside the allocator.
fn high_penalty(memcg: &MemCg) {
    let mut worst = 0.0f64;
    let mut m = Some(memcg);
    while let Some(c) = m {
        let (usage, high) = (c.counter.usage(), c.counter.high());
        if usage > high && high > 0 {
            worst = worst.max((usage - high) as f64 / high as f64);
        }
        m = c.parent.as_deref();
    }
    if worst > 0.0 {
        let ns = HIGH_PENALTY_AT_FULL_OVERAGE.as_nanos() as f64 * worst * worst;
        crate::attach::throttle::add_penalty(ns.min(u64::MAX as f64) as u64);
    }
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
        m.heap_mode.store(mode.as_u8(), Ordering::Relaxed);
        Ok(())
    }

    /// `group`'s [`HeapLimitMode`]. One load.
    pub fn heap_limit_mode(&self, group: &Group) -> Result<HeapLimitMode, MemoryError> {
        Ok(HeapLimitMode::from_u8(
            self.memcg(group)?.heap_mode.load(Ordering::Relaxed),
        ))
    }

    /// The controller's stocks.
    #[inline]
    pub(crate) fn stocks(&self) -> *const super::stock::Stocks {
        &self.inner.shared.stocks
    }

    /// `group`'s own owner handle, if it has a state here.
    #[inline]
    pub(crate) fn heap_objcg_of(&self, group: &Group) -> Option<NonNull<ObjCg>> {
        self.inner.ext.get(group).ok().map(|m| m.objcg())
    }

    /// The allocator's charge of one object: `size + overhead` bytes to
    /// `group` (or, if it was removed, its nearest live ancestor), through
    /// CPU `cpu`'s stock. Returns the owner handle the object keeps, with
    /// one reference on it for the object ([`objcg`](super::objcg)), or
    /// `None` if the charge was refused ([`HeapLimitMode::Enforce`]) or
    /// cannot be made.
    #[inline(always)]
    pub(crate) fn heap_charge(
        &self,
        group: &Group,
        size: u64,
        overhead: u64,
        cpu: usize,
    ) -> Option<NonNull<ObjCg>> {
        let n = size + overhead;
        let stocks = &self.inner.shared.stocks;
        if let Ok(m) = self.inner.ext.get(group) {
            if n <= stocks.batch() {
                let mut h = stocks.lock_any(cpu);
                // Online, checked under the lock: the handle's base
                // reference is held until after this critical section.
                if m.is_online() && stocks.heap_consume(&mut h, m, size, overhead) {
                    drop(h);
                    return Some(m.objcg());
                }
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
    ) -> Option<NonNull<ObjCg>> {
        let t = self.heap_charge_bytes(group, size + overhead, cpu).ok()?;
        let x = self.objcg_ref(&t.memcg, cpu);
        self.count_heap(&t.group, size, overhead, false, cpu);
        self.count_on(&t.group, STAT_HEAP_ALLOCS, 1, cpu);
        release_target(t);
        Some(x)
    }

    /// One reference on the owner handle of `memcg`, or, if its group was
    /// removed meanwhile, of its nearest live ancestor's.
    fn objcg_ref(&self, memcg: &MemCg, cpu: usize) -> NonNull<ObjCg> {
        let h = self.inner.shared.stocks.lock_any(cpu);
        let mut m = memcg;
        while !m.is_online() {
            match m.parent.as_deref() {
                Some(p) => m = p,
                None => break,
            }
        }
        // SAFETY: `m` is online, and we hold a stock lock, so its handle's
        // base reference is held until a drain that waits for this lock; or
        // it is the root after its engine's drop, whose base reference is
        // held as long as its state (`MemCg::root_offline`), which `memcg`'s
        // chain holds.
        unsafe { ObjCg::get(m.objcg(), 1) };
        drop(h);
        m.objcg()
    }

    /// Where the objects of handle `x` are charged now, with a reference
    /// of our own on that group, and whether it is an ancestor of the
    /// handle's own group. `None` for an unbound handle.
    ///
    /// # Safety
    /// The caller holds a reference on `x`.
    unsafe fn objcg_owner(&self, x: NonNull<ObjCg>, cpu: usize) -> Option<(Group, bool)> {
        let h = self.inner.shared.stocks.lock_any(cpu);
        // SAFETY: caller's reference.
        let cur = unsafe { x.as_ref() }.current();
        let g = NonNull::new(cur.group.cast::<GroupInner>()).map(|p| {
            // SAFETY: the group stays allocated while we hold the stock
            // lock, and its count is not zero (see `objcg`).
            unsafe { Group::clone_from_ptr(p) }
        });
        drop(h);
        g.map(|g| (g, cur.reparented))
    }

    /// The first refusal of an allocation in `group`'s state, on standard
    /// error (see [`HeapLimitMode::Enforce`]): what an abort that follows
    /// is about. Runs inside the allocator, whose own allocations pass
    /// through uncharged.
    #[cold]
    fn report_refusal(&self, group: &Group, n: u64, e: &MemoryError) {
        let Ok(m) = self.memcg(group) else { return };
        if m.refusal_reported.swap(true, Ordering::Relaxed) {
            return;
        }
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "rstat: refused a heap allocation of {n} bytes (object and owner word) in group {:?} \
             (HeapLimitMode::Enforce): {e}. A fallible allocation (try_reserve) gets an error; \
             an infallible one aborts the process next. HeapLimitMode::Kill cancels the \
             group's work instead. (Reported once per group.)",
            group.path()
        );
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
        // A killed group's work must be able to unwind: its allocations
        // succeed whatever the mode (fallible charges outside the
        // allocator fail instead).
        let mode = if held || group.is_killed() {
            HeapLimitMode::Account
        } else {
            HeapLimitMode::from_u8(self.memcg(group)?.heap_mode.load(Ordering::Relaxed))
        };
        let (t, flags) = if mode != HeapLimitMode::Account {
            let on_oom = if mode == HeapLimitMode::Kill {
                OnOom::Kill
            } else {
                OnOom::Fail
            };
            match self.charge_target(group, n, on_oom, cpu) {
                Ok(tf) => tf,
                Err(e) => {
                    self.report_refusal(group, n, &e);
                    return Err(e);
                }
            }
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
                    // Usage hit the limit (`max`); the allocation still
                    // succeeds, so this is not an `oom`, which counts only
                    // charges that could not be satisfied.
                    over.raise(MemoryEvent::Max);
                    // Never release a group inside the allocator.
                    over_g.drop_deferred();
                    self.force(&t, n)?
                }
                Err(_) => return Err(MemoryError::TooLarge { amount: n }),
            };
            (t, flags)
        };
        if flags.over_high && !held && !super::reclaim::in_reclaim() {
            let t0 = crate::os::mono_ns();
            let _ = self.reclaim_high(&t.group);
            // Time in the reclaimers: a memory stall of the allocating work.
            t.group.record_stall(
                crate::group::PressureKind::Memory,
                t0,
                crate::os::mono_ns(),
                false,
            );
            high_penalty(&t.memcg);
        }
        Ok(t)
    }

    /// The allocator's uncharge of one object charged by
    /// [`heap_charge`](Self::heap_charge): `size + overhead` bytes from the
    /// group its handle `x` names now (its own, or after removals its
    /// nearest live ancestor, counted as reparented there), giving back the
    /// object's reference on `x`.
    ///
    /// # Safety
    /// The caller owns one reference on `x` (the object's) and gives it up.
    #[inline(always)]
    pub(crate) unsafe fn heap_uncharge(
        &self,
        x: NonNull<ObjCg>,
        size: u64,
        overhead: u64,
        cpu: usize,
    ) {
        let n = size + overhead;
        let stocks = &self.inner.shared.stocks;
        let mut h = stocks.lock_any(cpu);
        // SAFETY: the object's reference keeps `x` live. From here until
        // the lock is released the group it names stays allocated (`objcg`).
        let cur = unsafe { x.as_ref() }.current();
        let Some(gp) = NonNull::new(cur.group.cast::<GroupInner>()) else {
            drop(h);
            // SAFETY: the object's reference (an unbound handle: nothing
            // was charged through it).
            unsafe { ObjCg::put(x, 1) };
            return;
        };
        // SAFETY: allocated while we hold the lock; not dropped.
        let g = unsafe { Group::borrow_ptr(gp) };
        if !cur.reparented && n <= stocks.batch() {
            if let Ok(m) = self.inner.ext.get(&g) {
                if m.is_online()
                    && n <= m.counter.usage()
                    && stocks.may_stock(m)
                    && !super::reclaim::in_reclaim()
                {
                    debug_assert_eq!(m.objcg(), x, "a bound handle is its group's");
                    // The object's reference on `x` moves into the slot.
                    let out = stocks.heap_refill(&mut h, m, size, overhead);
                    drop(h);
                    if let Some(t) = out {
                        t.give_back();
                    }
                    return;
                }
            }
        }
        // A reference of our own for the slow path (the count is not zero
        // while the group is reachable through a handle).
        let owned = Group::clone(&g);
        drop(h);
        self.heap_uncharge_slow(owned, cur.reparented, size, overhead, cpu);
        // SAFETY: the object's reference, given back.
        unsafe { ObjCg::put(x, 1) };
    }

    #[inline(never)]
    fn heap_uncharge_slow(
        &self,
        group: Group,
        reparented: bool,
        size: u64,
        overhead: u64,
        cpu: usize,
    ) {
        self.heap_uncharge_bytes(&group, size + overhead, cpu, reparented);
        self.count_heap(&group, size, overhead, true, cpu);
        self.count_on(&group, STAT_HEAP_FREES, 1, cpu);
        // Never release a group inside the allocator.
        group.drop_deferred();
    }

    /// Uncharge `n` heap bytes from `group`'s target (itself, or its
    /// nearest live ancestor), counting them as reparented there if
    /// `reparented` (the object's own group was removed) or the target is
    /// an ancestor. A count that would go below zero is clamped by the
    /// page counter (it cannot happen to the allocator's own charges).
    pub(crate) fn heap_uncharge_bytes(&self, group: &Group, n: u64, cpu: usize, reparented: bool) {
        let Ok(t) = self.target(group) else { return };
        uncharge_memcg(&self.inner.shared.stocks, &t.memcg, cpu, n);
        if reparented || matches!(t.group, Cow::Owned(_)) {
            self.count_on(&t.group, STAT_HEAP_REPARENTED, n, cpu);
        }
        release_target(t);
    }

    /// The allocator's `realloc` of an object of handle `x` from `old` to
    /// `new` (size, overhead): charge (growth) or uncharge (shrink) the
    /// difference to the group the handle names now, and count the size
    /// and overhead changes. False if a growth was refused.
    ///
    /// # Safety
    /// The caller holds a reference on `x` (the object's) for the call.
    pub(crate) unsafe fn heap_resize(
        &self,
        x: NonNull<ObjCg>,
        old: (u64, u64),
        new: (u64, u64),
        cpu: usize,
    ) -> bool {
        // SAFETY: caller's reference.
        let Some((group, reparented)) = (unsafe { self.objcg_owner(x, cpu) }) else {
            return true;
        };
        let (old_t, new_t) = (old.0 + old.1, new.0 + new.1);
        let ok = if new_t > old_t {
            match self.heap_charge_bytes(&group, new_t - old_t, cpu) {
                Ok(t) => {
                    release_target(t);
                    true
                }
                Err(_) => false,
            }
        } else {
            if new_t < old_t {
                self.heap_uncharge_bytes(&group, old_t - new_t, cpu, reparented);
            }
            true
        };
        if ok {
            self.count_heap(&group, old.0, old.1, true, cpu);
            self.count_heap(&group, new.0, new.1, false, cpu);
        }
        group.drop_deferred();
        ok
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

/// Drop a charge target's handle, if it made one, without releasing.
fn release_target(t: Target<'_>) {
    if let Cow::Owned(g) = t.group {
        g.drop_deferred();
    }
}
