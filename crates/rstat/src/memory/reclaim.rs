//! Reclaim: reclaimers (the shrinker analog), proportional reclaim that
//! honours `memory.min` and `memory.low`, the OOM handler, and the
//! `memory.max` / `memory.high` writes that reclaim toward a new limit.
//!
//! # How much to take from each group
//!
//! The kernel's `shrink_node_memcgs` and `get_scan_count`, in our design.
//! A reclaim of `nr` units under a target group walks its subtree top-down,
//! computing each group's effective protection (`emin`, `elow`) relative to
//! the target ([`PageCounter::calculate_protection`]; the target itself is
//! unprotected). Then for each group that has reclaimers:
//!
//! - usage ≤ `emin`: skipped: **`memory.min` is never reclaimed from**;
//! - usage ≤ `elow`: skipped while unprotected memory remains; when a whole
//!   pass found nothing unprotected, a second pass takes from these too,
//!   counting a `low` event on each;
//! - otherwise its reclaimable size (what its reclaimers report, or its own
//!   usage: usage minus its children's) is scaled by how far its usage is
//!   above its protection, the kernel's formula
//!   `size − size × protection / (usage + 1)`, and capped at
//!   `usage − protection`, so no request takes it below its protection.
//!
//! The `nr` units are shared among the groups in proportion to those
//! scaled sizes; a group's share is split among its reclaimers in
//! proportion to their sizes. A pass that frees something but not enough
//! is repeated (a few times, like the kernel's priority loop).
//!
//! # Where to start: the walk resumes
//!
//! Sharing each request in proportion is not enough when requests are
//! small: a charge of one page over `memory.max` asks for one unit, every
//! group's share of it rounds up to that one unit, and the first group in
//! tree order would give it every time (300 and 100 reclaimable units,
//! reclaimed one unit at a time, would end at 200/100 instead of 225/75).
//! The kernel resumes its walk of the target's subtree where the previous
//! reclaim stopped (`mem_cgroup_iter` with a per-target position). We do
//! the same, deficit round robin style:
//!
//! - each reclaim target (the group whose limit was hit, or the group
//!   passed to [`Memory::reclaim`]) keeps a **cursor**: the group last
//!   visited and the *credit* it has left in the current round;
//! - a visit continues the cursor's group while it has credit; otherwise it
//!   moves to the next candidate in tree order (wrapping around) and grants
//!   it a quantum: `round × scan / total_scan` rounded up, where `scan` is
//!   the group's scaled size, `total_scan` the sum over the candidates, and
//!   a round is the larger of the request and 1/64 of `total_scan`. One
//!   large request is thus shared in proportion within one round, as
//!   before; small requests take turns through rounds whose slices are in
//!   proportion, so that over many requests each group gives in proportion
//!   to its scaled size (300/100 reclaimed one unit at a time ends at about
//!   228/72: quanta round up, which favours the smaller group a little);
//! - a credit carried from an earlier request is worth at most the group's
//!   quantum at the current sizes, so a group that shrank meanwhile does
//!   not spend an old, larger credit;
//! - a group that frees less than it was asked (it reached its protection,
//!   or its reclaimers had less) ends its turn;
//! - a pass ends when the request is met or every candidate had a fresh
//!   quantum; concurrent reclaims of one target share its cursor (it is
//!   locked for the bookkeeping of each visit only), so they spread over
//!   the groups instead of all starting at the first.
//!
//! The cursor holds its group weakly; if that group is removed the walk
//! starts again at the top.
//!
//! # Granularity
//!
//! A reclaimer may free in units larger than the charges' (a cache of
//! 4 KiB pages charged in bytes): it declares them with
//! [`Reclaimer::granularity`]. Each request to a group is rounded up to the
//! largest granularity among its reclaimers (and each reclaimer's share up
//! to its own), so a reclaimer that never frees more than asked is never
//! asked for a fraction of what it can free; a request may thus free up to
//! one granule more than it needed. Rounding never reaches into
//! protection: if the rounded request does not fit above the group's
//! protection it is rounded *down*, possibly to nothing. A group held back
//! that way by its `low` counts as skipped for its `low`, so that when
//! nothing else is left a low-reclaim pass takes a whole granule from it
//! (counting a `low` event); one held back by its `min` gives nothing.
//!
//! # Concurrent reclaims
//!
//! Two reclaims (two charges over one limit, or a charge and a limit write)
//! may visit one group at once. Each would see the same usage above the
//! group's protection and ask for all of it, and together they would take
//! the group below its protection. So a visit first **reserves** what it
//! asks for: under the group's reservation lock it reads the group's usage,
//! takes off its protection and what other visits have reserved, and
//! reserves what fits (rounded down to the granularity); it releases the
//! reservation after the reclaimers return. A reclaimer uncharges what it
//! frees before returning, so a visit that reserves after another released
//! reads a usage without what that one freed (the lock orders the release
//! after the uncharge, and the usage read after the release). Reservations
//! bound what reclaim takes; an uncharge by the group's own users racing a
//! reclaim lowers usage under it, and the group may then end below its
//! protection by at most what they uncharged, as in the kernel.
//!
//! # Progress
//!
//! A charge over `memory.max` reclaims in rounds (each up to four passes)
//! and retries the charge after each. A round that frees something does
//! not count against [`MemoryConfig::max_reclaim_retries`]; only rounds
//! that free nothing do, and at most [`MAX_RECLAIM_ROUNDS`] rounds run in
//! all (so charges racing for the room freed cannot hold one forever).
//! `memory.max` and `memory.high` writes do the same. So a charge fails
//! only when its rounds stop freeing anything: every candidate was asked,
//! in a full round, for at least a granule it could give above its
//! protection and freed nothing (unprotected reclaimable memory is
//! exhausted, or the reclaimers refuse), or after [`MAX_RECLAIM_ROUNDS`]
//! rounds.
//!
//! # Cost
//!
//! One reclaim round (a charge's, a limit write's, or [`Memory::reclaim`])
//! walks the target's subtree once, cloning each group's handle and state
//! and indexing them by address (a few allocations, O(groups)). Each pass
//! then computes every group's effective protection and its reclaimable
//! size (O(groups), a `reclaimable()` call per reclaimer), and makes at
//! most 2 × candidates + 2 visits; a visit locks the target's cursor for
//! its bookkeeping (twice at most) and calls the group's reclaimers with no
//! lock held. A round makes at most four passes, eight when `low` is
//! breached. Small requests thus cost a subtree walk each, as in the
//! kernel; what the cursor adds is a few loads and an uncontended lock per
//! visit.
//!
//! A reclaimer must uncharge what it frees (drop its [`OwnedCharge`]s, or
//! call [`Memory::uncharge_raw`]) before it returns, and must not free more than
//! asked: the protections are only as good as that. While it runs, its
//! thread's uncharges bypass the stock (so the room shows at once) and its
//! charges over a limit are forced rather than reclaimed for (the kernel's
//! `PF_MEMALLOC`).
//!
//! [`OwnedCharge`]: super::OwnedCharge
//! [`MemoryConfig::max_reclaim_retries`]: super::MemoryConfig::max_reclaim_retries
//! [`PageCounter::calculate_protection`]: crate::page_counter::PageCounter::calculate_protection

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use super::config::{MAX_RECLAIM_ROUNDS, STAT_RECLAIMED};
use super::error::MemoryError;
use super::events::MemoryEvent;
use super::handle::Memory;
use super::memcg::MemCg;
use crate::group::Group;
use crate::page_counter::PAGE_COUNTER_MAX;
use crate::sync;

/// Frees memory charged to a group on request (the kernel's shrinker).
///
/// Any `Fn(u64) -> u64 + Send + Sync + 'static` closure is one: given a
/// target, free up to that many units, uncharge them, return how many.
///
/// A reclaimer is kept until it is unregistered or its group's memory state
/// is freed. One that owns charges ([`OwnedCharge`]s: a reclaimer is
/// `'static`, so a borrowing [`Charge`] cannot be kept in it) or handles of
/// its own group would keep that group alive through its own registration:
/// hold such state through a `Weak`.
///
/// [`Charge`]: super::Charge
/// [`OwnedCharge`]: super::OwnedCharge
pub trait Reclaimer: Send + Sync + 'static {
    /// Free up to `target` units (uncharging them before returning); return
    /// how many were freed. Must not free more than `target`, a multiple of
    /// [`granularity`](Self::granularity). Called without any of the
    /// controller's locks held, on the thread that needs the memory.
    fn reclaim(&self, target: u64) -> u64;

    /// How many units this reclaimer could free now (the shrinker's
    /// `count_objects`; the LRU size). `None`, the default, means "all of
    /// the group's own usage" (its usage minus its children's).
    fn reclaimable(&self) -> Option<u64> {
        None
    }

    /// The unit this reclaimer frees in (a cache of 4 KiB pages charged in
    /// bytes: 4096): every request to it is a whole multiple of this, so a
    /// reclaimer that never frees more than asked is never asked for less
    /// than it can free. A request is rounded **up** to a multiple, unless
    /// that would take the group below its protection (`memory.min`, or
    /// `memory.low` while it holds); then it is rounded down, possibly to
    /// nothing (module docs, "Granularity"). The default, 1, is for
    /// reclaimers that can free any amount; 0 is taken as 1.
    fn granularity(&self) -> u64 {
        1
    }
}

impl<F> Reclaimer for F
where
    F: Fn(u64) -> u64 + Send + Sync + 'static,
{
    fn reclaim(&self, target: u64) -> u64 {
        self(target)
    }
}

/// Identifies a registered reclaimer, for
/// [`Memory::unregister_reclaimer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReclaimerId(u64);

/// What an [`OomHandler`] is told.
#[derive(Debug)]
pub struct OomContext<'a> {
    /// The group whose `memory.max` cannot be met.
    pub group: &'a Group,
    /// The charge that needs room (for a `memory.max` write: how far usage
    /// is above the new limit).
    pub amount: u64,
    /// The group's usage.
    pub usage: u64,
    /// The group's `memory.max`.
    pub max: u64,
}

/// Called when reclaim cannot bring a group under its `memory.max` (the
/// OOM killer's analog): free something (cancel a query, evict a tenant)
/// and return true, and the charge retries once more and an `oom_kill`
/// event is counted; return false to let the charge fail.
///
/// Any `Fn(&OomContext) -> bool + Send + Sync + 'static` closure is one.
pub trait OomHandler: Send + Sync + 'static {
    /// See the trait docs.
    fn on_oom(&self, ctx: &OomContext<'_>) -> bool;
}

impl<F> OomHandler for F
where
    F: Fn(&OomContext<'_>) -> bool + Send + Sync + 'static,
{
    fn on_oom(&self, ctx: &OomContext<'_>) -> bool {
        self(ctx)
    }
}

/// A group's reclaimers.
#[derive(Default)]
pub(crate) struct ReclaimerList(Vec<(ReclaimerId, Arc<dyn Reclaimer>)>);

impl ReclaimerList {
    pub(crate) fn append(&mut self, mut other: ReclaimerList) {
        self.0.append(&mut other.0);
    }
}

/// Ids for reclaimers: process-wide, part of no protocol (std's atomic,
/// not the model checker's, so it can be a static).
static NEXT_RECLAIMER_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

#[cfg(not(rstat_loom))]
thread_local! {
    static IN_RECLAIM: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Whether this thread is running a reclaimer.
#[inline(always)]
pub(crate) fn in_reclaim() -> bool {
    #[cfg(not(rstat_loom))]
    return IN_RECLAIM.try_with(|c| c.get()).unwrap_or(false);
    #[cfg(rstat_loom)]
    false
}

/// Run `f` marked as reclaiming (restoring the previous mark after).
fn reclaiming<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(not(rstat_loom))]
    {
        struct Restore(bool);
        impl Drop for Restore {
            fn drop(&mut self) {
                let _ = IN_RECLAIM.try_with(|c| c.set(self.0));
            }
        }
        let _restore = Restore(IN_RECLAIM.try_with(|c| c.replace(true)).unwrap_or(false));
        f()
    }
    #[cfg(rstat_loom)]
    f()
}

/// How many reclaim rounds a charge or a limit write may still make: rounds
/// that free nothing count against the configured retries, rounds that
/// free something do not (the kernel retries a small charge while reclaim
/// makes progress); no more than [`MAX_RECLAIM_ROUNDS`] (or the retries, if
/// more) in all, so concurrent charges that keep taking the room freed
/// cannot hold a charge forever.
pub(crate) struct ReclaimBudget {
    retries: u32,
    rounds: u32,
}

impl ReclaimBudget {
    pub(crate) fn new(retries: u32) -> Self {
        ReclaimBudget {
            retries,
            rounds: MAX_RECLAIM_ROUNDS.max(retries),
        }
    }

    /// Whether another round may run.
    pub(crate) fn may_retry(&self) -> bool {
        self.retries > 0 && self.rounds > 0
    }

    /// Count a round that freed `freed` units; `any_reclaimer` false (the
    /// subtree has none) ends the budget: retrying cannot help.
    pub(crate) fn record(&mut self, freed: u64, any_reclaimer: bool) {
        self.rounds = self.rounds.saturating_sub(1);
        if !any_reclaimer {
            self.retries = 0;
        } else if freed == 0 {
            self.retries = self.retries.saturating_sub(1);
        }
    }
}

/// Reclaim passes per reclaim call (the kernel's priority loop, shortened).
const RECLAIM_PASSES: usize = 4;

/// A round of the walk hands out at least 1/`ROUND_DIVISOR` of the
/// candidates' scaled sizes (module docs, "Where to start"): small enough
/// that a round stays a small slice of what is reclaimable, large enough
/// that rounding each group's quantum up to a whole unit skews little.
const ROUND_DIVISOR: u128 = 64;

/// Where the last reclaim under a target stopped (the kernel's per-target
/// reclaim iterator position), kept in the target's state.
#[derive(Default)]
pub(crate) struct ReclaimCursor {
    /// The group the walk last granted a quantum to. Weak: the cursor does
    /// not keep a removed group's state alive, and while it is held the
    /// address cannot be reused by another group's state, so comparing
    /// addresses is exact.
    at: Option<Weak<MemCg>>,
    /// What that group may still be asked for in the current round.
    credit: u64,
}

/// One group of the subtree being reclaimed.
struct Node {
    group: Group,
    memcg: Arc<MemCg>,
    parent: Option<usize>,
}

/// A reclaimer of a group chosen in a pass, with what it reported.
struct Sized {
    reclaimer: Arc<dyn Reclaimer>,
    /// Its reclaimable size.
    size: u64,
    /// Its granularity, at least 1.
    granularity: u64,
}

/// A group chosen in a pass.
struct Candidate {
    node: usize,
    reclaimers: Vec<Sized>,
    size: u64,
    /// The largest of its reclaimers' granularities: what a request to the
    /// group is rounded to.
    granularity: u64,
    scan: u64,
    protection: u64,
    /// Its protection in this pass is its `elow`, above its `emin`.
    held_by_low: bool,
    breaches_low: bool,
}

/// A claim on the cursor: ask candidate `cand` for `amount` units.
struct Claim {
    cand: usize,
    amount: u64,
    /// Whether this claim granted the candidate a fresh quantum (as opposed
    /// to continuing one granted earlier, by this reclaim or another).
    fresh: bool,
}

impl Memory {
    /// Register a reclaimer for `group` (a removed group's goes to its
    /// nearest live ancestor; a group's reclaimers move to its parent when
    /// it is removed). Cost: the group's reclaimer lock.
    pub fn register_reclaimer<R: Reclaimer>(
        &self,
        group: &Group,
        reclaimer: R,
    ) -> Result<ReclaimerId, MemoryError> {
        let t = self.target(group)?;
        // Relaxed: a unique number, nothing else.
        let id = ReclaimerId(NEXT_RECLAIMER_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        sync::lock(&t.memcg.reclaimers)
            .0
            .push((id, Arc::new(reclaimer)));
        Ok(id)
    }

    /// Remove a reclaimer registered on `group` (found there or on an
    /// ancestor it moved to). Returns whether it was found. A call to it
    /// already under way may still complete.
    pub fn unregister_reclaimer(
        &self,
        group: &Group,
        id: ReclaimerId,
    ) -> Result<bool, MemoryError> {
        let mut m = Some(Arc::clone(self.memcg(group)?));
        while let Some(c) = m {
            let mut list = sync::lock(&c.reclaimers);
            if let Some(i) = list.0.iter().position(|(r, _)| *r == id) {
                let (_, r) = list.0.remove(i);
                drop(list);
                drop(r);
                return Ok(true);
            }
            drop(list);
            m = c.parent.clone();
        }
        Ok(false)
    }

    /// Set `group`'s OOM handler (replacing any). Dropped when the group is
    /// removed.
    pub fn set_oom_handler<H: OomHandler>(
        &self,
        group: &Group,
        handler: H,
    ) -> Result<(), MemoryError> {
        let m = self.live_memcg(group)?;
        *sync::lock(&m.oom_handler) = Some(Arc::new(handler));
        Ok(())
    }

    /// Remove `group`'s OOM handler; returns whether it had one.
    pub fn clear_oom_handler(&self, group: &Group) -> Result<bool, MemoryError> {
        let m = self.memcg(group)?;
        Ok(sync::lock(&m.oom_handler).take().is_some())
    }

    pub(crate) fn call_oom_handler(&self, group: &Group, m: &MemCg, amount: u64) -> bool {
        let h = sync::lock(&m.oom_handler).clone();
        h.is_some_and(|h| {
            h.on_oom(&OomContext {
                group,
                amount,
                usage: m.counter.usage(),
                max: m.counter.max(),
            })
        })
    }

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
    /// reports [`over_high`](super::Charge::over_high), as the throttle.
    /// Returns what was reclaimed.
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

/// The groups a pass may reclaim from, in tree order, and whether a group
/// was skipped for its `low` (module docs).
fn candidates(nodes: &[Node], tm: &MemCg, low_reclaim: bool) -> (Vec<Candidate>, bool) {
    let mut low_skipped = false;
    // Each group's own usage: its usage minus its children's.
    let usage: Vec<u64> = nodes.iter().map(|n| n.memcg.counter.usage()).collect();
    let mut own = usage.clone();
    for (i, n) in nodes.iter().enumerate() {
        if let Some(p) = n.parent {
            own[p] = own[p].saturating_sub(usage[i]);
        }
    }
    let mut cands = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let c = &n.memcg.counter;
        // Top-down: each group's parent was computed just before it.
        c.calculate_protection(&tm.counter);
        if usage[i] == 0 {
            continue;
        }
        let (emin, elow) = if i == 0 { (0, 0) } else { (c.emin(), c.elow()) };
        if usage[i] <= emin {
            continue;
        }
        let breaches_low = usage[i] <= elow;
        if breaches_low && !low_reclaim {
            low_skipped = true;
            continue;
        }
        // Cloned out of the lock: reclaimers are called without it.
        let reclaimers: Vec<Arc<dyn Reclaimer>> = sync::lock(&n.memcg.reclaimers)
            .0
            .iter()
            .map(|(_, r)| Arc::clone(r))
            .collect();
        let reclaimers: Vec<Sized> = reclaimers
            .into_iter()
            .map(|r| Sized {
                size: r.reclaimable().unwrap_or(own[i]),
                granularity: r.granularity().max(1),
                reclaimer: r,
            })
            .collect();
        let size = reclaimers
            .iter()
            .fold(0u64, |a, r| a.saturating_add(r.size));
        if size == 0 {
            continue;
        }
        let granularity = reclaimers.iter().map(|r| r.granularity).max().unwrap_or(1);
        // Held back by `low` rather than `min`: what `low` keeps from
        // this pass, a low-reclaim pass may take.
        let held_by_low = !low_reclaim && elow > emin;
        let protection = if held_by_low { elow } else { emin };
        let scan = scaled_size(size, usage[i], protection);
        if scan == 0 {
            low_skipped |= held_by_low;
            continue;
        }
        cands.push(Candidate {
            node: i,
            reclaimers,
            size,
            granularity,
            scan,
            protection,
            held_by_low,
            breaches_low,
        });
    }
    (cands, low_skipped)
}

/// Units reserved above a group's protection for one visit: what its
/// reclaimers are asked for, not yet freed. Released on drop (also if a
/// reclaimer panics).
struct Reservation<'a> {
    memcg: &'a MemCg,
    amount: u64,
}

impl<'a> Reservation<'a> {
    /// Reserve what `amount` (a multiple of `g`) fits, as [`fit`] does, in
    /// the room `memcg` has above `protection` less what other visits have
    /// reserved; possibly nothing. Usage is read under the lock, after the
    /// reclaims that released their reservations uncharged what they freed
    /// (module docs, "Concurrent reclaims").
    fn take(memcg: &'a MemCg, protection: u64, amount: u64, g: u64) -> Self {
        let mut reserved = sync::lock(&memcg.reclaim_reserved);
        let room = memcg
            .counter
            .usage()
            .saturating_sub(protection)
            .saturating_sub(*reserved);
        let amount = fit(amount, room, g);
        *reserved += amount;
        Reservation { memcg, amount }
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.amount > 0 {
            *sync::lock(&self.memcg.reclaim_reserved) -= self.amount;
        }
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

/// The kernel's protection scaling of a reclaimable `size`:
/// `size − size × protection / (max(usage, protection) + 1)`, capped at
/// `usage − protection` so a request never reaches into the protection.
fn scaled_size(size: u64, usage: u64, protection: u64) -> u64 {
    if protection == 0 {
        return size;
    }
    let cgroup_size = u128::from(usage.max(protection)) + 1;
    let kept = u128::from(size) * u128::from(protection) / cgroup_size;
    // kept ≤ size because protection < cgroup_size.
    let scan = size - kept as u64;
    scan.min(usage.saturating_sub(protection))
}

/// `n` rounded up to a multiple of `g` (≥ 1), saturating at the largest
/// multiple that fits.
fn round_up(n: u64, g: u64) -> u64 {
    n.checked_next_multiple_of(g)
        .unwrap_or(u64::MAX - u64::MAX % g)
}

/// What to ask of a group for a claim of `amount` (a multiple of `g`) when
/// `room` is all it has above its protection: the claim if it fits, else
/// the largest multiple of `g` that does (possibly 0). Never more than
/// `room`: rounding up to the granularity never reaches into protection.
fn fit(amount: u64, room: u64, g: u64) -> u64 {
    if amount <= room {
        amount
    } else {
        room - room % g
    }
}

/// ⌈a / b⌉ for b > 0, saturating into u64.
fn div_ceil(a: u128, b: u128) -> u64 {
    u64::try_from(a.div_ceil(b)).unwrap_or(u64::MAX)
}

/// Ask a group's reclaimers for `ask` units in proportion to their sizes
/// (which sum to `size`), each share rounded up to the reclaimer's
/// granularity but never past `ask` in all (so never into the group's
/// protection: `ask` was fitted to its room). Returns what they reported
/// freeing.
fn call_reclaimers(rs: &[Sized], size: u64, ask: u64) -> u64 {
    reclaiming(|| {
        let mut got = 0u64;
        for r in rs {
            if got >= ask {
                break;
            }
            let left = ask - got;
            let share = div_ceil(u128::from(ask) * u128::from(r.size), u128::from(size))
                .min(r.size)
                .min(left);
            let share = fit(round_up(share, r.granularity), left, r.granularity);
            if share > 0 {
                got = got.saturating_add(r.reclaimer.reclaim(share));
            }
        }
        got
    })
}

#[cfg(all(test, not(rstat_loom)))]
mod unit {
    use super::*;

    #[test]
    fn scaled_size_follows_the_kernel_formula_and_never_reaches_protection() {
        assert_eq!(scaled_size(100, 100, 0), 100);
        // 100 − 100·60/101 = 100 − 59 = 41, capped at 100 − 60 = 40.
        assert_eq!(scaled_size(100, 100, 60), 40);
        // Local size smaller than usage: 10 − 10·50/201 = 10 − 2 = 8.
        assert_eq!(scaled_size(10, 200, 50), 8);
        assert_eq!(scaled_size(10, 50, 50), 0);
        assert_eq!(
            scaled_size(u64::MAX, PAGE_COUNTER_MAX, 1),
            PAGE_COUNTER_MAX - 1
        );
    }

    #[test]
    fn requests_round_up_to_the_granularity_but_never_past_the_room() {
        assert_eq!(round_up(0, 4096), 0);
        assert_eq!(round_up(1, 4096), 4096);
        assert_eq!(round_up(4096, 4096), 4096);
        assert_eq!(round_up(7, 1), 7);
        assert_eq!(round_up(u64::MAX, 4096), u64::MAX - u64::MAX % 4096);
        assert_eq!(fit(4096, 10_000, 4096), 4096);
        assert_eq!(fit(8192, 6000, 4096), 4096);
        assert_eq!(fit(4096, 2000, 4096), 0);
    }

    #[test]
    fn div_ceil_rounds_up() {
        assert_eq!(div_ceil(10, 3), 4);
        assert_eq!(div_ceil(9, 3), 3);
        assert_eq!(div_ceil(u128::MAX, 1), u64::MAX);
    }
}
