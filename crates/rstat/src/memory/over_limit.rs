//! Step 3 of the charge path (module docs, "The charge path"): a charge
//! the page counter refused. Drain the refusing level's subtree, reclaim
//! while reclaim makes progress, drain again, then OOM: the group's
//! handler gets one chance, then the charge fails or (with
//! [`OnOom::Force`]) is forced past the limit, flagging the levels it left
//! over their `memory.max` for the stock.

use super::charge::{ancestor, charge_memcg, check_high, Charged, OnOom};
use super::config::{STAT_FAILCNT, STAT_FORCED};
use super::error::{MemoryError, OverLimit};
use super::events::MemoryEvent;
use super::handle::{Memory, Target};
use super::reclaim::ReclaimBudget;
use crate::page_counter::PageCounterError;

/// Most subtree drains one over-limit charge makes before its final one.
const MAX_DRAINS: u32 = 8;

impl Memory {
    /// Step 3 of the charge path (module docs): the charge of `n` was
    /// refused by the ancestor `level` steps up.
    #[cold]
    #[inline(never)]
    pub(super) fn charge_over_limit(
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
                    OnOom::Kill => {
                        // The allocating work's group (and its subtree)
                        // stops at its next check; this charge goes
                        // through so it can get there. Never the root
                        // (work in no group is charged there): forced only.
                        // One oom_kill per kill, not per thread that saw it.
                        if t.group.parent_ref().is_some() && t.group.kill() > 0 {
                            over_m.raise(MemoryEvent::OomKill);
                        }
                        self.force(t, n)
                    }
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
