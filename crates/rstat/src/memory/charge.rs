//! The charge path (module docs, "The charge path", steps 1, 2 and 4):
//! a charge from this CPU's stock, else from the page counter with the
//! surplus stocked; the raw calls ([`Memory::charge_raw`],
//! [`Memory::uncharge_raw`]) and the uncharge path; what a charge reports
//! ([`Charged`]) and what it does at OOM ([`OnOom`]). Step 3, over the
//! limit, is `over_limit`'s; the guard that uncharges on drop is
//! `guard`'s. Both sit above this file.

use std::sync::Arc;

use super::config::{STAT_CHARGED, STAT_UNCHARGED};
use super::error::MemoryError;
use super::events::MemoryEvent;
use super::handle::{Memory, Target};
use super::memcg::MemCg;
use super::stock::Stocks;
use crate::group::Group;
use crate::page_counter::{PageCounterError, PAGE_COUNTER_MAX};

/// What a charge does when reclaim cannot make room under `memory.max`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OnOom {
    /// Fail with [`MemoryError::OverLimit`] (after counting `oom`).
    #[default]
    Fail,
    /// Charge anyway, past the limit (the kernel's `__GFP_NOFAIL`); counts
    /// `oom` and the `forced` stat item.
    Force,
    /// Kill the charged group's work ([`Group::kill`]: it and its
    /// subtree), count `oom` and `oom_kill` on the level over its limit,
    /// and charge anyway (forced), so the work runs on to its next
    /// cancellation point. A charge to a group already killed is forced at
    /// once, without reclaiming. What the accounting allocator does in
    /// [`HeapLimitMode::Kill`](super::HeapLimitMode::Kill).
    Kill,
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

    /// The raw charge through stock slot `cpu` (`< nr_cpus`): the stock
    /// hit inline, everything else out of line. (`rstat::testing` lets
    /// tests and models pick the slot.)
    #[inline(always)]
    pub(crate) fn charge_raw_at(
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
    pub(super) fn consume_stock(&self, group: &Group, n: u64, cpu: usize) -> bool {
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

    /// Uncharge `amount` units from `group`, or, if it was removed, from
    /// its nearest live ancestor (which holds its reparented charges).
    /// Uncharging more than that group holds is
    /// [`MemoryError::Underflow`] and changes nothing. What it holds is its
    /// usage less the units pre-charged in the stocks: the stock of the CPU
    /// the uncharge goes through is always counted (so an excess cannot
    /// hide in it, to be given back later off every ancestor, other
    /// groups' charges with it), and every CPU's once the amount is above
    /// the batch or within a batch per CPU of the usage. Not seen at once:
    /// an excess smaller than the group's units in *other* CPUs' stocks
    /// (counting them on every uncharge would take every CPU's lock), and
    /// uncharges racing on one group that together exceed what it held.
    /// Those are caught by the page counter when the units come back,
    /// which clamps at zero and counts it in
    /// [`uncharge_underflows`](Self::uncharge_underflows). Counters never
    /// wrap or go negative.
    ///
    /// Cost: a few loads, one load of the group's `usage` line (rarely
    /// written while the stock serves), one uncontended compare-and-swap,
    /// one per-CPU stat add; a stock slot overflowing `batch` or evicted is
    /// uncharged from the page counter. An amount that this CPU's stock
    /// cannot take and that is within a batch per CPU of the usage also
    /// counts the other CPUs' stocked units: each CPU's stock lock in turn.
    #[inline(always)]
    pub fn uncharge_raw(&self, group: &Group, amount: u64) -> Result<(), MemoryError> {
        self.uncharge_on(group, amount, self.this_cpu(), true)
    }

    /// The uncharge through stock slot `cpu` (`< nr_cpus`), the common case
    /// inline: a live group, at most a batch, no level over its max, not
    /// reclaiming; everything else out of line.
    ///
    /// `checked`: an amount within a batch per CPU of the usage is checked
    /// against every CPU's stocked units too (`uncharge_raw`); a
    /// [`Charge`](super::Charge) guard, which charged its units, passes
    /// false, so a large guard's drop never takes every CPU's lock.
    #[inline(always)]
    pub(crate) fn uncharge_on(
        &self,
        group: &Group,
        n: u64,
        cpu: usize,
        checked: bool,
    ) -> Result<(), MemoryError> {
        let stocks = &self.inner.shared.stocks;
        if let Ok(m) = self.inner.ext.get(group) {
            // `try_refill` refuses 0 and amounts above the batch.
            if m.is_online()
                && stocks.may_stock(m)
                && !super::reclaim::in_reclaim()
                && stocks.try_refill(cpu, m, n, m.counter.usage())
            {
                self.count_on(group, STAT_UNCHARGED, n, cpu);
                return Ok(());
            }
        }
        self.uncharge_slow(group, n, cpu, checked)
    }

    /// The uncharge's out-of-line path; `checked` as for `uncharge_on`.
    #[inline(never)]
    fn uncharge_slow(
        &self,
        group: &Group,
        n: u64,
        cpu: usize,
        checked: bool,
    ) -> Result<(), MemoryError> {
        if n == 0 {
            return Ok(());
        }
        if n > PAGE_COUNTER_MAX {
            return Err(MemoryError::TooLarge { amount: n });
        }
        let t = self.target(group)?;
        let stocks = &self.inner.shared.stocks;
        let usage = t.memcg.counter.usage();
        // What the group's callers hold: its usage less its stocked units.
        // Those are at most a batch per CPU, so only an amount within that
        // of the usage needs them counted (each CPU's lock in turn).
        let slack = stocks.batch().saturating_mul(self.inner.nr_cpus as u64);
        let held = if !checked || n.saturating_add(slack) <= usage {
            usage
        } else {
            usage.saturating_sub(stocks.stocked(&t.memcg))
        };
        if n > held {
            return Err(MemoryError::Underflow {
                path: t.group.path(),
                amount: n,
                usage: held,
            });
        }
        uncharge_memcg(stocks, &t.memcg, cpu, n);
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
        if t.group.is_killed() {
            match on_oom {
                OnOom::Fail => {
                    return Err(MemoryError::Killed {
                        path: t.group.path(),
                    })
                }
                OnOom::Kill => {
                    let flags = self.force(&t, n)?;
                    self.count_on(&t.group, STAT_CHARGED, n, cpu);
                    return Ok((t, flags));
                }
                OnOom::Force => {}
            }
        }
        let flags = match charge_memcg(&self.inner.shared.stocks, &t.memcg, cpu, n) {
            Ok(false) => Charged::default(),
            Ok(true) => Charged {
                over_high: check_high(&t.memcg),
                forced: false,
            },
            Err(PageCounterError::OverLimit { level, .. }) => {
                // Draining, reclaiming, the OOM handler: a memory stall of
                // the charging work (module `group::pressure`).
                let t0 = crate::os::mono_ns();
                let r = self.charge_over_limit(&t, n, on_oom, cpu, level);
                let t1 = crate::os::mono_ns();
                t.group
                    .record_stall(crate::group::PressureKind::Memory, t0, t1, false);
                r?
            }
            Err(_) => return Err(MemoryError::TooLarge { amount: n }),
        };
        self.count_on(&t.group, STAT_CHARGED, n, cpu);
        Ok((t, flags))
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
