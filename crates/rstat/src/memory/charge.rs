//! The charge path: stock, page counter, over-limit handling, the `Charge`
//! guard and the raw calls.

use std::borrow::Cow;
use std::sync::Arc;

use super::config::{STAT_CHARGED, STAT_FAILCNT, STAT_FORCED, STAT_UNCHARGED};
use super::error::{MemoryError, OverLimit};
use super::events::MemoryEvent;
use super::handle::{Memory, Target};
use super::memcg::MemCg;
use super::reclaim::ReclaimBudget;
use super::stock::Stocks;
use crate::group::Group;
use crate::page_counter::{PageCounterError, PAGE_COUNTER_MAX};

/// Most subtree drains one over-limit charge makes before its final one.
const MAX_DRAINS: u32 = 8;

/// What a charge does when reclaim cannot make room under `memory.max`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OnOom {
    /// Fail with [`MemoryError::OverLimit`] (after counting `oom`).
    #[default]
    Fail,
    /// Charge anyway, past the limit (the kernel's `__GFP_NOFAIL`); counts
    /// `oom` and the `forced` stat item.
    Force,
}

/// Flags of a successful charge.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Charged {
    /// Some level's usage is above its `memory.high`: throttle (sleep, or
    /// call [`Memory::reclaim_high`]) before charging more. Checked each
    /// time a charge reaches the page counter, so at least once every
    /// `batch` units per CPU; a charge served from the stock reports false.
    pub over_high: bool,
    /// The charge was forced past `memory.max` ([`OnOom::Force`], or a
    /// charge made by a reclaimer while it reclaims).
    pub forced: bool,
}

/// A charge held by the caller; dropping it uncharges it (through this
/// CPU's stock).
///
/// It borrows the controller and the group it was charged through, so
/// making and dropping one writes no reference count: the guard path costs
/// what [`Memory::charge_raw`] + [`Memory::uncharge_raw`] cost, and touches
/// no cache line that other CPUs' charges write (see "The `Charge` guard" in
/// the [module docs](super#the-charge-guard)). The borrow is also what keeps
/// the group valid: the caller's handle outlives the guard. A charge that
/// landed on the nearest live ancestor of a removed group holds a handle
/// to that ancestor (one per-CPU reference, taken on that cold path only).
///
/// To keep a charge where a borrow cannot go (a `'static` cache, a
/// reclaimer's state, another thread without a scope), turn it into an
/// [`OwnedCharge`] with [`into_owned`](Self::into_owned).
#[must_use = "dropping a Charge uncharges it at once"]
pub struct Charge<'a> {
    mem: &'a Memory,
    group: Cow<'a, Group>,
    amount: u64,
    flags: Charged,
}

impl std::fmt::Debug for Charge<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Charge")
            .field("group", &self.group.path())
            .field("amount", &self.amount)
            .field("flags", &self.flags)
            .finish()
    }
}

impl Charge<'_> {
    /// Units charged.
    #[inline]
    pub fn amount(&self) -> u64 {
        self.amount
    }

    /// The group charged: the one asked for, or if it had been removed its
    /// nearest live ancestor.
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// See [`Charged::over_high`].
    pub fn over_high(&self) -> bool {
        self.flags.over_high
    }

    /// See [`Charged::forced`].
    pub fn forced(&self) -> bool {
        self.flags.forced
    }

    /// Uncharge now, reporting errors (dropping does the same silently).
    #[inline]
    pub fn uncharge(mut self) -> Result<(), MemoryError> {
        let n = core::mem::take(&mut self.amount);
        uncharge_guard(self.mem, &self.group, n)
    }

    /// Give up the guard without uncharging: the caller must later call
    /// [`Memory::uncharge_raw`] with the returned group and amount. Takes a
    /// reference on the group (per-CPU; see [`Group`]'s `clone`).
    pub fn into_raw(mut self) -> (Group, u64) {
        (Group::clone(&self.group), core::mem::take(&mut self.amount))
    }

    /// The same charge, owning a handle to the controller and the group:
    /// `'static`, movable anywhere. Cost: one reference count on the
    /// controller (shared by every thread: written here and when the owned
    /// guard drops) and one per-CPU reference on the group. Make it once per
    /// long-lived charge, not on a hot path.
    pub fn into_owned(mut self) -> OwnedCharge {
        OwnedCharge {
            mem: self.mem.clone(),
            group: Group::clone(&self.group),
            amount: core::mem::take(&mut self.amount),
            flags: self.flags,
        }
    }
}

impl Drop for Charge<'_> {
    // `inline(always)` here and on the entry points (guarded and raw): the
    // stock path is a few tens of instructions, and whether it is inlined
    // into the caller's loop, left to the heuristics, varied from build to
    // build, moving either path by up to 1.8x against the other.
    #[inline(always)]
    fn drop(&mut self) {
        let _ = uncharge_guard(self.mem, &self.group, self.amount);
    }
}

impl From<Charge<'_>> for OwnedCharge {
    fn from(c: Charge<'_>) -> OwnedCharge {
        c.into_owned()
    }
}

/// A [`Charge`] that owns its handles, so it is `'static`: for caches,
/// reclaimers' state and anything else that outlives a borrow of the
/// controller. Made by [`Charge::into_owned`]; dropping it uncharges.
///
/// It holds a [`Memory`] (one reference count, a cache line every thread
/// shares) and a [`Group`] (a per-CPU reference): making and dropping one
/// writes the controller's count, so keep [`Charge`] on hot paths.
#[must_use = "dropping an OwnedCharge uncharges it at once"]
pub struct OwnedCharge {
    mem: Memory,
    group: Group,
    amount: u64,
    flags: Charged,
}

impl std::fmt::Debug for OwnedCharge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedCharge")
            .field("group", &self.group.path())
            .field("amount", &self.amount)
            .field("flags", &self.flags)
            .finish()
    }
}

impl OwnedCharge {
    /// Units charged.
    #[inline]
    pub fn amount(&self) -> u64 {
        self.amount
    }

    /// The group charged (see [`Charge::group`]).
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// See [`Charged::over_high`].
    pub fn over_high(&self) -> bool {
        self.flags.over_high
    }

    /// See [`Charged::forced`].
    pub fn forced(&self) -> bool {
        self.flags.forced
    }

    /// Uncharge now, reporting errors (dropping does the same silently).
    #[inline]
    pub fn uncharge(mut self) -> Result<(), MemoryError> {
        let n = core::mem::take(&mut self.amount);
        uncharge_guard(&self.mem, &self.group, n)
    }

    /// Give up the guard without uncharging: the caller must later call
    /// [`Memory::uncharge_raw`] with the returned group and amount.
    pub fn into_raw(mut self) -> (Group, u64) {
        (self.group.clone(), core::mem::take(&mut self.amount))
    }
}

impl Drop for OwnedCharge {
    fn drop(&mut self) {
        let _ = uncharge_guard(&self.mem, &self.group, self.amount);
    }
}

/// A guard's uncharge: through this CPU's stock, as
/// [`Memory::uncharge_raw`]. Nothing for a guard already given up.
#[inline(always)]
fn uncharge_guard(mem: &Memory, group: &Group, n: u64) -> Result<(), MemoryError> {
    if n == 0 {
        return Ok(());
    }
    mem.uncharge_on(group, n, mem.this_cpu())
}

/// Charge `n` to `memcg`: from CPU `cpu`'s stock, else `max(batch, n)` to
/// the page counter with the surplus stocked, else `n` alone. Returns
/// whether the page counter was reached. On failure nothing is charged.
#[inline]
pub(crate) fn charge_memcg(
    stocks: &Stocks,
    memcg: &Arc<MemCg>,
    cpu: usize,
    n: u64,
) -> Result<bool, PageCounterError> {
    if stocks.consume(cpu, memcg, n) {
        return Ok(false);
    }
    charge_memcg_slow(stocks, memcg, cpu, n)
}

#[inline(never)]
fn charge_memcg_slow(
    stocks: &Stocks,
    memcg: &Arc<MemCg>,
    cpu: usize,
    n: u64,
) -> Result<bool, PageCounterError> {
    let batch = stocks.batch().max(n);
    match memcg.counter.try_charge(batch) {
        Ok(()) => {
            stocks.refill(cpu, memcg, batch - n);
            Ok(true)
        }
        Err(PageCounterError::OverLimit { .. }) if batch > n => {
            memcg.counter.try_charge(n).map(|()| true)
        }
        Err(e) => Err(e),
    }
}

/// Uncharge `n` from `memcg` through CPU `cpu`'s stock; directly while
/// this thread is reclaiming, so the room it makes shows at once, or while
/// a level is over its max (see the stock's "Over the limit").
#[inline]
pub(crate) fn uncharge_memcg(stocks: &Stocks, memcg: &Arc<MemCg>, cpu: usize, n: u64) {
    if super::reclaim::in_reclaim() || !stocks.may_stock(memcg) {
        memcg.uncharge_counter(n);
        // Clear the flags of levels this brought back under their max.
        stocks.may_stock(memcg);
    } else {
        stocks.refill(cpu, memcg, n);
    }
}

impl Memory {
    /// Charge `amount` units to `group` (or, if it was removed, to its
    /// nearest live ancestor) and return a guard that uncharges on drop.
    /// Over `memory.max` it drains, reclaims, retries and finally fails with
    /// [`MemoryError::OverLimit`] (module docs).
    ///
    /// Cost, served from this CPU's stock (at most `batch` units, the stock
    /// holding enough): a few loads, one uncontended compare-and-swap, one
    /// per-CPU stat add; the guard borrows `self` and `group` and takes no
    /// reference count. Otherwise one atomic add per ancestor on their
    /// `usage` lines. Over the limit: every CPU's stock lock and the
    /// reclaimers' work. Dropping the guard costs an
    /// [`uncharge_raw`](Self::uncharge_raw).
    #[inline(always)]
    pub fn try_charge<'a>(
        &'a self,
        group: &'a Group,
        amount: u64,
    ) -> Result<Charge<'a>, MemoryError> {
        self.try_charge_with(group, amount, OnOom::Fail)
    }

    /// [`try_charge`](Self::try_charge) with a choice of what to do at OOM.
    #[inline(always)]
    pub fn try_charge_with<'a>(
        &'a self,
        group: &'a Group,
        amount: u64,
        on_oom: OnOom,
    ) -> Result<Charge<'a>, MemoryError> {
        self.try_charge_at(group, amount, on_oom, self.this_cpu())
    }

    /// As [`try_charge_with`](Self::try_charge_with) through stock slot
    /// `cpu` (folded into range): for tests and models that control
    /// placement.
    #[doc(hidden)]
    pub fn try_charge_on_cpu<'a>(
        &'a self,
        group: &'a Group,
        amount: u64,
        on_oom: OnOom,
        cpu: usize,
    ) -> Result<Charge<'a>, MemoryError> {
        self.try_charge_at(group, amount, on_oom, self.check_cpu(cpu))
    }

    /// The guarded charge: the stock hit inline, as the raw charge's.
    #[inline(always)]
    fn try_charge_at<'a>(
        &'a self,
        group: &'a Group,
        amount: u64,
        on_oom: OnOom,
        cpu: usize,
    ) -> Result<Charge<'a>, MemoryError> {
        if self.consume_stock(group, amount, cpu) {
            return Ok(Charge {
                mem: self,
                group: Cow::Borrowed(group),
                amount,
                flags: Charged::default(),
            });
        }
        self.try_charge_slow(group, amount, on_oom, cpu)
    }

    #[inline(never)]
    fn try_charge_slow<'a>(
        &'a self,
        group: &'a Group,
        amount: u64,
        on_oom: OnOom,
        cpu: usize,
    ) -> Result<Charge<'a>, MemoryError> {
        let (t, flags) = self.charge_target(group, amount, on_oom, cpu)?;
        Ok(Charge {
            mem: self,
            group: t.group,
            amount,
            flags,
        })
    }

    /// Charge without a guard (for a C ABI, or the hottest loops): the
    /// caller undoes it with [`uncharge_raw`](Self::uncharge_raw) of the
    /// same group and amount. Same path and cost as
    /// [`try_charge_with`](Self::try_charge_with), which only adds a guard
    /// of borrowed handles.
    #[inline(always)]
    pub fn charge_raw(
        &self,
        group: &Group,
        amount: u64,
        on_oom: OnOom,
    ) -> Result<Charged, MemoryError> {
        self.charge_raw_at(group, amount, on_oom, self.this_cpu())
    }

    /// The raw charge: the stock hit inline, everything else out of line.
    #[inline(always)]
    fn charge_raw_at(
        &self,
        group: &Group,
        n: u64,
        on_oom: OnOom,
        cpu: usize,
    ) -> Result<Charged, MemoryError> {
        if self.consume_stock(group, n, cpu) {
            return Ok(Charged::default());
        }
        self.charge_raw_slow(group, n, on_oom, cpu)
    }

    /// The stock hit: `group` live, `n` units in CPU `cpu`'s stock for it;
    /// counts the stat. False (nothing done) otherwise.
    #[inline(always)]
    fn consume_stock(&self, group: &Group, n: u64, cpu: usize) -> bool {
        if let Ok(m) = self.inner.ext.get(group) {
            if n > 0 && m.is_online() && self.inner.shared.stocks.consume(cpu, m, n) {
                self.count_on(group, STAT_CHARGED, n, cpu);
                return true;
            }
        }
        false
    }

    #[inline(never)]
    fn charge_raw_slow(
        &self,
        group: &Group,
        n: u64,
        on_oom: OnOom,
        cpu: usize,
    ) -> Result<Charged, MemoryError> {
        self.charge_target(group, n, on_oom, cpu).map(|(_, f)| f)
    }

    /// As [`charge_raw`](Self::charge_raw) through stock slot `cpu`.
    #[doc(hidden)]
    pub fn charge_raw_on_cpu(
        &self,
        group: &Group,
        amount: u64,
        on_oom: OnOom,
        cpu: usize,
    ) -> Result<Charged, MemoryError> {
        self.charge_raw_at(group, amount, on_oom, self.check_cpu(cpu))
    }

    /// Uncharge `amount` units from `group`, or, if it was removed, from
    /// its nearest live ancestor (which holds its reparented charges).
    /// Uncharging more than that group's whole usage is
    /// [`MemoryError::Underflow`] and changes nothing; smaller excesses
    /// cannot be seen at once (the units may sit in a stock) and are caught
    /// by the page counter later, which clamps at zero and counts it in
    /// [`uncharge_underflows`](Self::uncharge_underflows). Counters never
    /// wrap or go negative.
    ///
    /// Cost: a few loads, one load of the group's `usage` line (rarely
    /// written while the stock serves), one uncontended compare-and-swap,
    /// one per-CPU stat add; a stock slot overflowing `batch` or evicted is
    /// uncharged from the page counter.
    #[inline(always)]
    pub fn uncharge_raw(&self, group: &Group, amount: u64) -> Result<(), MemoryError> {
        self.uncharge_on(group, amount, self.this_cpu())
    }

    /// The common uncharge inline: a live group, at most a batch, no level
    /// over its max, not reclaiming; everything else out of line.
    #[inline(always)]
    pub(crate) fn uncharge_on(&self, group: &Group, n: u64, cpu: usize) -> Result<(), MemoryError> {
        let stocks = &self.inner.shared.stocks;
        if let Ok(m) = self.inner.ext.get(group) {
            if n > 0
                && n <= stocks.batch()
                && m.is_online()
                && n <= m.counter.usage()
                && stocks.may_stock(m)
                && !super::reclaim::in_reclaim()
            {
                stocks.refill(cpu, m, n);
                self.count_on(group, STAT_UNCHARGED, n, cpu);
                return Ok(());
            }
        }
        self.uncharge_slow(group, n, cpu)
    }

    /// As [`uncharge_raw`](Self::uncharge_raw) through stock slot `cpu`.
    #[doc(hidden)]
    pub fn uncharge_raw_on_cpu(
        &self,
        group: &Group,
        amount: u64,
        cpu: usize,
    ) -> Result<(), MemoryError> {
        self.uncharge_on(group, amount, self.check_cpu(cpu))
    }

    #[inline(never)]
    fn uncharge_slow(&self, group: &Group, n: u64, cpu: usize) -> Result<(), MemoryError> {
        if n == 0 {
            return Ok(());
        }
        if n > PAGE_COUNTER_MAX {
            return Err(MemoryError::TooLarge { amount: n });
        }
        let t = self.target(group)?;
        let usage = t.memcg.counter.usage();
        if n > usage {
            return Err(MemoryError::Underflow {
                path: t.group.path(),
                amount: n,
                usage,
            });
        }
        uncharge_memcg(&self.inner.shared.stocks, &t.memcg, cpu, n);
        self.count_on(&t.group, STAT_UNCHARGED, n, cpu);
        Ok(())
    }

    #[inline]
    pub(super) fn charge_target<'g>(
        &self,
        group: &'g Group,
        n: u64,
        on_oom: OnOom,
        cpu: usize,
    ) -> Result<(Target<'g>, Charged), MemoryError> {
        if n > PAGE_COUNTER_MAX {
            return Err(MemoryError::TooLarge { amount: n });
        }
        let t = self.target(group)?;
        if n == 0 {
            return Ok((t, Charged::default()));
        }
        let flags = match charge_memcg(&self.inner.shared.stocks, &t.memcg, cpu, n) {
            Ok(false) => Charged::default(),
            Ok(true) => Charged {
                over_high: check_high(&t.memcg),
                forced: false,
            },
            Err(PageCounterError::OverLimit { level, .. }) => {
                self.charge_over_limit(&t, n, on_oom, cpu, level)?
            }
            Err(_) => return Err(MemoryError::TooLarge { amount: n }),
        };
        self.count_on(&t.group, STAT_CHARGED, n, cpu);
        Ok((t, flags))
    }

    /// Step 3 of the charge path (module docs): the charge of `n` was
    /// refused by the ancestor `level` steps up.
    #[cold]
    #[inline(never)]
    fn charge_over_limit(
        &self,
        t: &Target<'_>,
        n: u64,
        on_oom: OnOom,
        cpu: usize,
        mut level: usize,
    ) -> Result<Charged, MemoryError> {
        let stocks = &self.inner.shared.stocks;
        let (mut over_g, mut over_m) = ancestor(t, level);
        if super::reclaim::in_reclaim() {
            // A reclaimer allocating while it frees memory (the kernel's
            // PF_MEMALLOC): let it through rather than recurse.
            over_m.raise(MemoryEvent::Max);
            return self.force(t, n);
        }
        over_m.raise(MemoryEvent::Max);
        let mut budget = ReclaimBudget::new(self.inner.shared.max_retries);
        // Drain the subtree of each group that refuses, once (bounded, in
        // case the refusing level keeps changing under concurrent charges).
        let mut drained = false;
        let mut drains_left = MAX_DRAINS;
        let mut final_drain = false;
        let mut passed_oom = false;
        loop {
            if !drained && drains_left > 0 {
                drained = true;
                drains_left -= 1;
                self.drain_subtree(&over_m);
            } else if budget.may_retry() {
                let need = over_m
                    .counter
                    .usage()
                    .saturating_add(n)
                    .saturating_sub(over_m.counter.max())
                    .max(n);
                let (freed, any_reclaimer) = self.reclaim_memcg_counted(&over_g, &over_m, need);
                budget.record(freed, any_reclaimer);
            } else if !final_drain {
                // Before declaring OOM: uncharges since the first drain may
                // have left units in the stocks.
                final_drain = true;
                if self.drain_subtree(&over_m) == 0 {
                    continue;
                }
            } else {
                // OOM.
                over_m.raise(MemoryEvent::Oom);
                if !passed_oom && self.call_oom_handler(&over_g, &over_m, n) {
                    over_m.raise(MemoryEvent::OomKill);
                    passed_oom = true;
                    budget = ReclaimBudget::new(self.inner.shared.max_retries);
                    final_drain = false;
                    continue;
                }
                return match on_oom {
                    OnOom::Force => self.force(t, n),
                    OnOom::Fail => {
                        self.count(&t.group, STAT_FAILCNT, 1);
                        Err(MemoryError::OverLimit(OverLimit {
                            path: over_g.path(),
                            amount: n,
                            usage: over_m.counter.usage(),
                            max: over_m.counter.max(),
                        }))
                    }
                };
            }
            match charge_memcg(stocks, &t.memcg, cpu, n) {
                Ok(_) => {
                    return Ok(Charged {
                        over_high: check_high(&t.memcg),
                        forced: false,
                    })
                }
                Err(PageCounterError::OverLimit { level: l, .. }) => {
                    if l != level {
                        level = l;
                        (over_g, over_m) = ancestor(t, level);
                        over_m.raise(MemoryEvent::Max);
                        drained = false;
                    }
                }
                Err(_) => return Err(MemoryError::TooLarge { amount: n }),
            }
        }
    }

    /// Charge past the limits, counting it, and flag every level it left
    /// over its max (see the stock's "Over the limit").
    pub(super) fn force(&self, t: &Target<'_>, n: u64) -> Result<Charged, MemoryError> {
        t.memcg
            .counter
            .charge(n)
            .map_err(|_| MemoryError::Overflow {
                amount: n,
                path: t.group.path(),
            })?;
        let mut m = Some(&**t.memcg);
        while let Some(c) = m {
            if c.counter.usage() > c.counter.max() {
                self.inner.shared.stocks.mark_over(c);
            }
            m = c.parent.as_deref();
        }
        self.count(&t.group, STAT_FORCED, n);
        Ok(Charged {
            over_high: check_high(&t.memcg),
            forced: true,
        })
    }
}

/// The group and state `level` steps above the target (whose chain the
/// page counters mirror).
pub(super) fn ancestor(t: &Target<'_>, level: usize) -> (Group, Arc<MemCg>) {
    let mut g = t.group.clone().into_owned();
    let mut m = Arc::clone(&t.memcg);
    for _ in 0..level {
        match (g.parent(), m.parent.clone()) {
            (Some(pg), Some(pm)) => {
                g = pg;
                m = pm;
            }
            _ => break,
        }
    }
    (g, m)
}

/// Whether any level from `memcg` up is above its `memory.high`; counts a
/// `high` event on each that is. O(depth) loads.
pub(super) fn check_high(memcg: &MemCg) -> bool {
    let mut over = false;
    let mut m = Some(memcg);
    while let Some(c) = m {
        if c.counter.usage() > c.counter.high() {
            c.raise(MemoryEvent::High);
            over = true;
        }
        m = c.parent.as_deref();
    }
    over
}
