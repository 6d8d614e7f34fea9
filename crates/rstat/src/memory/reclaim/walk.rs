//! The reclaim walk (module docs, "Where to start", "Progress", "Cost"):
//! the entry points ([`Memory::reclaim`], [`Memory::reclaim_high`] and
//! the charge path's and limit writes' `reclaim_memcg`), the subtree they
//! walk, the passes over it, and the claims on the target's cursor that
//! decide whom each visit asks next. How much each visit asks is `share`'s.

use std::collections::HashMap;
use std::sync::Arc;

use super::share::{call_reclaimers, candidates, div_ceil, round_up, Candidate, Node, Reservation};
use crate::group::Group;
use crate::memory::config::STAT_RECLAIMED;
use crate::memory::error::MemoryError;
use crate::memory::events::MemoryEvent;
use crate::memory::handle::Memory;
use crate::memory::memcg::MemCg;
use crate::page_counter::PAGE_COUNTER_MAX;
use crate::sync;

/// Reclaim passes per reclaim call (the kernel's priority loop, shortened).
const RECLAIM_PASSES: usize = 4;

/// A round of the walk hands out at least 1/`ROUND_DIVISOR` of the
/// candidates' scaled sizes (module docs, "Where to start"): small enough
/// that a round stays a small slice of what is reclaimable, large enough
/// that rounding each group's quantum up to a whole unit skews little.
const ROUND_DIVISOR: u128 = 64;

/// A claim on the cursor: ask candidate `cand` for `amount` units.
struct Claim {
    cand: usize,
    amount: u64,
    /// Whether this claim granted the candidate a fresh quantum (as opposed
    /// to continuing one granted earlier, by this reclaim or another).
    fresh: bool,
}

impl Memory {
    /// Reclaim up to `amount` units from `group`'s subtree now (cgroup v2's
    /// `memory.reclaim`), honouring protections as a charge's reclaim does.
    /// Returns what the reclaimers reported freeing. Stocks are not drained.
    /// Cost: walks the subtree (cloning handles), calls reclaimers.
    pub fn reclaim(&self, group: &Group, amount: u64) -> Result<u64, MemoryError> {
        let t = self.target(group)?;
        Ok(self.reclaim_memcg(&t.group, &t.memcg, amount.min(PAGE_COUNTER_MAX)))
    }

    /// Reclaim `group` and each ancestor that is above its `memory.high`
    /// down toward it (the kernel's `reclaim_high`, run when a task that
    /// charged over `high` returns to userspace): call it after a charge
    /// reports [`over_high`](crate::memory::Charge::over_high), as the
    /// throttle. Returns what was reclaimed.
    pub fn reclaim_high(&self, group: &Group) -> Result<u64, MemoryError> {
        let t = self.target(group)?;
        let mut g = Some(t.group.into_owned());
        let mut total = 0u64;
        while let Some(cur) = g {
            let m = Arc::clone(self.memcg(&cur)?);
            let (usage, high) = (m.counter.usage(), m.counter.high());
            if usage > high {
                total = total.saturating_add(self.reclaim_memcg(&cur, &m, usage - high));
            }
            g = cur.parent();
        }
        Ok(total)
    }

    /// Reclaim `nr` units under `target` (whose state is `tm`). Returns
    /// what the reclaimers reported freeing.
    pub(crate) fn reclaim_memcg(&self, target: &Group, tm: &Arc<MemCg>, nr: u64) -> u64 {
        self.reclaim_memcg_counted(target, tm, nr).0
    }

    /// As [`reclaim_memcg`](Self::reclaim_memcg), also telling whether the
    /// subtree has any reclaimer at all.
    pub(crate) fn reclaim_memcg_counted(
        &self,
        target: &Group,
        tm: &Arc<MemCg>,
        nr: u64,
    ) -> (u64, bool) {
        let nodes = self.subtree(target, tm);
        let any = nodes
            .iter()
            .any(|n| !sync::lock(&n.memcg.reclaimers).0.is_empty());
        if nr == 0 || !any {
            return (0, any);
        }
        let index: HashMap<*const MemCg, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (Arc::as_ptr(&n.memcg), i))
            .collect();
        let mut total = 0u64;
        let mut low_reclaim = false;
        let mut passes = 0;
        while passes < RECLAIM_PASSES && total < nr {
            passes += 1;
            let (freed, low_skipped) =
                self.shrink_pass(&nodes, &index, tm, nr - total, low_reclaim);
            total = total.saturating_add(freed);
            if freed == 0 {
                // The kernel breaches `low` only when nothing at all was
                // reclaimed from unprotected memory.
                if total == 0 && low_skipped && !low_reclaim {
                    low_reclaim = true;
                    passes = 0;
                    continue;
                }
                break;
            }
        }
        (total, true)
    }

    /// The live groups under `target`, parents before children.
    fn subtree(&self, target: &Group, tm: &Arc<MemCg>) -> Vec<Node> {
        let mut nodes = vec![Node {
            group: target.clone(),
            memcg: Arc::clone(tm),
            parent: None,
        }];
        let mut i = 0;
        while i < nodes.len() {
            for child in nodes[i].group.children() {
                if let Ok(m) = self.memcg(&child) {
                    let memcg = Arc::clone(m);
                    nodes.push(Node {
                        group: child,
                        memcg,
                        parent: Some(i),
                    });
                }
            }
            i += 1;
        }
        nodes
    }

    /// One pass over the subtree: choose the groups to reclaim from and how
    /// much (module docs), and call their reclaimers, resuming at the
    /// target's cursor. Returns (freed, whether a group was skipped for its
    /// `low`).
    fn shrink_pass(
        &self,
        nodes: &[Node],
        index: &HashMap<*const MemCg, usize>,
        tm: &MemCg,
        want: u64,
        low_reclaim: bool,
    ) -> (u64, bool) {
        let (cands, mut low_skipped) = candidates(nodes, tm, low_reclaim);
        if cands.is_empty() {
            return (0, low_skipped);
        }
        let total_scan: u128 = cands.iter().map(|c| u128::from(c.scan)).sum();
        // What one round hands out: the whole request when it is large, so
        // a single request is shared in proportion within one round; else a
        // fixed slice of what is reclaimable, so that small requests take
        // turns at it.
        let round = u128::from(want).max(total_scan.div_ceil(ROUND_DIVISOR));
        let mut freed = 0u64;
        let mut fresh = 0usize;
        // Bound the visits even if concurrent reclaims keep moving the
        // cursor: each candidate once per round, twice over.
        let mut visits = 2 * cands.len() + 2;
        while freed < want && fresh < cands.len() && visits > 0 {
            visits -= 1;
            let claim = claim(tm, nodes, index, &cands, round, total_scan, want - freed);
            fresh += usize::from(claim.fresh);
            let c = &cands[claim.cand];
            let n = &nodes[c.node];
            let reservation =
                Reservation::take(&n.memcg, c.protection, claim.amount, c.granularity);
            let ask = reservation.amount;
            let mut got = 0;
            if ask > 0 {
                if c.breaches_low {
                    n.memcg.raise(MemoryEvent::Low);
                }
                got = call_reclaimers(&c.reclaimers, c.size, ask);
                if got > 0 {
                    self.count(&n.group, STAT_RECLAIMED, got);
                }
                freed = freed.saturating_add(got);
            }
            drop(reservation);
            if got < claim.amount {
                // It had less than its claim above its protection, or its
                // reclaimers freed less: its turn is over.
                end_turn(tm, &n.memcg);
            }
            // Less than a granule left above its `low`: only a low-reclaim
            // pass can free it (module docs, "Granularity").
            low_skipped |= ask < claim.amount && c.held_by_low;
        }
        (freed, low_skipped)
    }
}

/// Take the next claim from `tm`'s cursor, under its lock (held for the
/// bookkeeping only): continue the group the cursor is at while it has
/// credit and is a candidate of this pass; otherwise move to the next
/// candidate after it in tree order (wrapping, or the first if the cursor's
/// group is gone) and grant it its quantum, `round × scan / total_scan`
/// rounded up, at most its `scan` (a credit carried over is capped at its
/// current quantum too). The claim is at most `want`, then rounded up to
/// the group's granularity; the credit pays for the rounding as far as it
/// goes.
fn claim(
    tm: &MemCg,
    nodes: &[Node],
    index: &HashMap<*const MemCg, usize>,
    cands: &[Candidate],
    round: u128,
    total_scan: u128,
    want: u64,
) -> Claim {
    // Saturating: scans are below 2⁶³ each, so the product overflows only
    // with hundreds of groups each near PAGE_COUNTER_MAX, and then the
    // quantum is still capped at the group's scan.
    let quantum =
        |c: &Candidate| div_ceil(round.saturating_mul(u128::from(c.scan)), total_scan).min(c.scan);
    let mut cur = sync::lock(&tm.reclaim_cursor);
    let at = cur
        .at
        .as_ref()
        .and_then(|w| index.get(&w.as_ptr()).copied());
    if let Some(node) = at {
        if cur.credit > 0 {
            if let Ok(cand) = cands.binary_search_by_key(&node, |c| c.node) {
                // A credit granted by an earlier, larger request (or when
                // the group was larger) is worth at most a quantum now.
                let c = &cands[cand];
                let credit = cur.credit.min(quantum(c));
                let amount = round_up(credit.min(want), c.granularity);
                cur.credit = credit.saturating_sub(amount);
                return Claim {
                    cand,
                    amount,
                    fresh: false,
                };
            }
        }
    }
    // Candidates are in tree order: the first one after the cursor's node.
    let cand = at.map_or(0, |node| {
        cands.partition_point(|c| c.node <= node) % cands.len()
    });
    let c = &cands[cand];
    let quantum = quantum(c);
    let amount = round_up(quantum.min(want), c.granularity);
    cur.at = Some(Arc::downgrade(&nodes[c.node].memcg));
    cur.credit = quantum.saturating_sub(amount);
    Claim {
        cand,
        amount,
        fresh: true,
    }
}

/// End `m`'s turn if `tm`'s cursor is still at it: it freed less than it
/// was asked, so the next claim moves on.
fn end_turn(tm: &MemCg, m: &Arc<MemCg>) {
    let mut cur = sync::lock(&tm.reclaim_cursor);
    if cur
        .at
        .as_ref()
        .is_some_and(|w| core::ptr::eq(w.as_ptr(), Arc::as_ptr(m)))
    {
        cur.credit = 0;
    }
}
