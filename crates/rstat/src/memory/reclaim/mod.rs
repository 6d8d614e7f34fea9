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
//! [`Memory::reclaim`]: super::Memory::reclaim
//! [`Memory::uncharge_raw`]: super::Memory::uncharge_raw

// This file holds the types the rest of `memory/` stores (reclaimers, OOM
// handlers, the per-group cursor) and the reclaiming thread's mark, so it
// sits below the group state; the files that reclaim sit above the
// `Memory` handle: `share` (how much to ask of each group), `walk` (the
// passes, the cursor's use, the entry points, over `share`) and
// `registry` (registering reclaimers and OOM handlers).
mod registry;
mod share;
mod walk;

use std::sync::{Arc, Weak};

use super::config::MAX_RECLAIM_ROUNDS;
use crate::group::Group;

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
/// [`Memory::unregister_reclaimer`](super::Memory::unregister_reclaimer).
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

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

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

/// Where the last reclaim under a target stopped (the kernel's per-target
/// reclaim iterator position), kept in the target's state. Generic over
/// that state (`MemCg`, which stores the cursor and so sits above this
/// file).
pub(crate) struct ReclaimCursor<T> {
    /// The group the walk last granted a quantum to. Weak: the cursor does
    /// not keep a removed group's state alive, and while it is held the
    /// address cannot be reused by another group's state, so comparing
    /// addresses is exact.
    at: Option<Weak<T>>,
    /// What that group may still be asked for in the current round.
    credit: u64,
}

impl<T> Default for ReclaimCursor<T> {
    fn default() -> Self {
        ReclaimCursor {
            at: None,
            credit: 0,
        }
    }
}
