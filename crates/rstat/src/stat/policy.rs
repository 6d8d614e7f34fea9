//! Flush policies: who flushes, when, and how much.
//!
//! What the kernel's rstat tried for readers racing writers (always
//! flushing, a threshold of pending updates, one root flush at a time, a
//! coalesced root flush), as policies
//! selectable per controller at run time ([`ControllerHandle::set_flush_policy`]),
//! so the debate can be re-run on one workload. [`FlushPolicy::Threshold`]
//! (where upstream ended, kernel v6.8) is the default.
//! [`ControllerHandle::read_exact`] is exact under every policy.
//!
//! Below, B is the update batch, [`UPDATE_BATCH`]
//! (64, the kernel's stat update batch).
//!
//! | policy | a read... | staleness bound, per item |
//! |---|---|---|
//! | `Always` | flushes its subtree | 0 |
//! | `Threshold` | flushes its subtree only if the group's pending-update counter exceeds B × nr_cpus units | for an item declared in unit u: u × B × nr_cpus + (B × u − 1) × nr_cpus × groups in the subtree (less than B × nr_cpus × (groups + 1) units), plus B × u − 1 per update in progress when the read began |
//! | `UnifiedRoot` | flushes the root, or returns at once if a flush is running | unbounded between flushes (the periodic flusher bounds it in time, not units) |
//! | `Coalesced` | tries the subtree flush without waiting for the lock; if taken, waits for the ongoing root flush (all waiters wake together); beyond nr_cpus waiters, returns at once | 0 when the trylock succeeds or it starts the root flush; when it waits, the updates made after that flush passed their CPU; unbounded beyond nr_cpus waiters |
//!
//! **Units.** The `Threshold` counting measures significance, not raw
//! magnitude: each stat item declares a unit u, a power of two
//! ([`Controller::stat_units`], default 1; e.g. 4096 for bytes charged in
//! pages, as the kernel counts memcg byte stats in pages). "Units" below
//! are each item's own declared unit; an item's value is in its own terms
//! (bytes, say), so u × k of its value is k units.
//!
//! Where the `Threshold` bound comes from: the per-CPU pending-update
//! counter is each stat slot itself; every time an update carries a slot of
//! an item declared in unit u across a multiple of B × u, B units per
//! boundary crossed are added to this CPU's pending-update counter of the
//! group and of every ancestor (kernel v6.8's `stats_updates`, kept per
//! CPU: see `UPDATES` in `stat::css`), and then to the (group, CPU)'s own
//! `counted` slot. One update folds at most once, whatever its delta: a CPU
//! walks the ancestors at most once per B × u of change of the item on it
//! (plus once), at any depth. A flush of a (group, CPU) reads `counted`
//! *before* the stat slots, so the units it reads there belong to changes
//! its slot reads include; it subtracts exactly those units (plus those its
//! children's flushes on the same CPU handed up with their pending deltas)
//! from the group's counter of that CPU once they are in the group's
//! totals. It never resets a counter, so a crossing that races a flush, of
//! any size, stays counted until a flush folds it.
//!
//! Why per CPU: with one shared counter per group (the kernel's shape), two
//! threads updating one group contend on the group's and the root's counter
//! every B units, and an exact count cannot take the kernel's way out
//! (skip ancestors already due for a flush: a skipped unit cannot be
//! subtracted exactly). Per CPU, a crossing writes only lines its own CPU
//! owns; a `Threshold` read pays for it by summing nr_cpus counters instead
//! of loading one.
//!
//! **The bound.** Let a `read` of group G begin after a set of updates
//! completed. If it does not flush, the sum of G's per-CPU counters, each
//! as the read loaded it, was at most B × nr_cpus; every boundary those
//! updates crossed after the value their slot last contributed to G's
//! published totals was still in its CPU's counter when the read loaded
//! that counter (counted before the update completed, subtracted only after
//! a flush that read the slot later had published its change, and the
//! read's `Acquire` load of that counter orders the published totals, read
//! after all the counters, after every subtraction it saw). So, all items and slots of G's subtree
//! together, at most nr_cpus such crossings. Take one item, declared in
//! unit u, and one of its slots. Since that value, the completed updates
//! moved the slot in runs, separated by the adds of updates that were in
//! progress when the read began (started, not completed: at most one per
//! updating thread; only such an add can land between two completed ones):
//! such an add may have crossed a boundary it has not counted yet, moving
//! where the next run crosses. A run of net change L crosses at least
//! (L − (B × u − 1)) / (B × u) multiples of B × u, so the completed
//! updates moved the slot by at most B × u × (their crossings) +
//! (B × u − 1) × (1 + updates of the slot in progress). Summed over the
//! item's nr_cpus × groups slots (`groups` = groups in G's subtree,
//! including removed ones not yet released), the read is below the
//! completed updates' sum of that item by at most
//!
//! ```text
//! u × B × nr_cpus + (B × u − 1) × (nr_cpus × groups + in_progress)
//! ```
//!
//! of the item's value, where `in_progress` counts the updates of the item
//! in G's subtree in progress when the read began: with none (what
//! [`FlushPolicy::staleness_bound`] states), less than
//! B × nr_cpus × (groups + 1) units. This holds for every interleaving
//! with concurrent flushes and every delta size, and the read never shows
//! an update that had not started. Each item has its bound whatever the
//! controller's other items do: they share the first term (their crossings
//! count against the same B × nr_cpus), so with no update in progress the
//! items' staleness, each divided by its unit, sums to less than
//! B × nr_cpus × (1 + groups × items).
//!
//! **Wrapping slots and huge deltas.** Slots are modular, so an add may
//! carry one across `i64::MAX`: its crossings are counted on the unwrapped
//! move (as many boundaries as its delta spans), not between the wrapped
//! ends. One update folds at most 2^32 units, far above any threshold (a
//! capped fold still makes the next read flush), so an item swinging up
//! and down by ±2^61 does not wrap the per-CPU counters; a counter that
//! still grew past 2^63 reads as "must flush". The one sequence left that
//! can defeat the bound is 2^32 updates of at least 2^26 boundaries each
//! on one CPU with no flush of the group or an ancestor in between (the
//! periodic flusher, on by default, flushes long before that).
//!
//! A unit can outlive its change's flush only between that flush and the
//! next one of the same (group, CPU), which
//! the update's on-list check guarantees (an over-count: a read flushes a
//! little early). Migration costs nothing: the boundary test uses the stat
//! RMW's own result. Unlike kernel v6.8, ancestors already due for a flush
//! are still counted: skipping them would leave a flush nothing exact to
//! subtract. loom checks the counting against a racing flush (in units of
//! 1 and of 4), and `tests/exact_while_running.rs` checks the bound while
//! threads add deltas up to 10^6 units, on items in units of 1 and 4096,
//! and flush.
//!
//! The periodic flusher (default every 2 s, [`Builder::periodic_flush`])
//! flushes every controller's root regardless of policy and thresholds.
//!
//! [`ControllerHandle::set_flush_policy`]: crate::ControllerHandle::set_flush_policy
//! [`ControllerHandle::read_exact`]: crate::ControllerHandle::read_exact
//! [`Builder::periodic_flush`]: crate::Builder::periodic_flush
//! [`Controller::stat_units`]: crate::Controller::stat_units

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::Error;
use crate::stat::css::{Css, UPDATE_BATCH};
use crate::stat::ops::Totals;
use crate::stat::tree::{lock_domain, Domain};
use crate::sync::Ordering;
use crate::sync::{self, Condvar, Mutex};

/// Who flushes, when, and how much. See the [module docs](self).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FlushPolicy {
    /// Every read flushes its subtree: exact.
    Always,
    /// Kernel v6.8 (the default): flush the subtree only when its pending
    /// updates exceed B × nr_cpus units (B = [`UPDATE_BATCH`]; each item counted in its
    /// declared unit).
    #[default]
    Threshold,
    /// Kernel v5.16-6.7: flush the root; skip (stale) if a flush is running.
    UnifiedRoot,
    /// Seed 004's proposal: trylock the subtree flush; else wait for the
    /// ongoing root flush (bounded waiters), else stale.
    Coalesced,
}

impl FlushPolicy {
    /// Every policy, in the seed's order.
    pub const ALL: [FlushPolicy; 4] = [
        FlushPolicy::Always,
        FlushPolicy::Threshold,
        FlushPolicy::UnifiedRoot,
        FlushPolicy::Coalesced,
    ];

    /// The policy's name, as accepted by [`FromStr`].
    pub fn name(self) -> &'static str {
        match self {
            FlushPolicy::Always => "always",
            FlushPolicy::Threshold => "threshold",
            FlushPolicy::UnifiedRoot => "unified-root",
            FlushPolicy::Coalesced => "coalesced",
        }
    }

    /// The documented staleness bound of a read for one stat item declared
    /// in `unit` ([`Controller::stat_units`](crate::Controller::stat_units);
    /// 1 for plain counts), in the item's own value terms (bytes, for a
    /// byte counter in units of 4096), with or without concurrent flushes,
    /// for a subtree of `groups` groups on `nr_cpus` CPU slots. `Threshold`:
    /// `unit × B × nr_cpus + (B × unit − 1) × nr_cpus × groups`, less
    /// than B × nr_cpus × (groups + 1) units (B = [`UPDATE_BATCH`]),
    /// whatever the controller's other items and their units; add
    /// `B × unit − 1` for each update of
    /// the item in the subtree in progress when the read began (see the
    /// [module docs](self) for why, and the proof). Saturates at
    /// `u64::MAX`. `None` where the policy has no
    /// bound in units (`UnifiedRoot`; `Coalesced`, whose reads are exact
    /// when they flush but unbounded when they wait or give up).
    pub fn staleness_bound(self, nr_cpus: usize, groups: usize, unit: u64) -> Option<u64> {
        let (c, g) = (nr_cpus as u64, groups as u64);
        match self {
            FlushPolicy::Always => Some(0),
            FlushPolicy::Threshold => {
                let batch = UPDATE_BATCH.saturating_mul(unit);
                let slots = c.saturating_mul(g);
                Some(
                    batch
                        .saturating_mul(c)
                        .saturating_add(batch.saturating_sub(1).saturating_mul(slots)),
                )
            }
            FlushPolicy::UnifiedRoot | FlushPolicy::Coalesced => None,
        }
    }

    pub(crate) fn to_u8(self) -> u8 {
        self as u8
    }

    pub(crate) fn from_u8(v: u8) -> Self {
        match v {
            0 => FlushPolicy::Always,
            2 => FlushPolicy::UnifiedRoot,
            3 => FlushPolicy::Coalesced,
            _ => FlushPolicy::Threshold,
        }
    }
}

impl fmt::Display for FlushPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FlushPolicy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        FlushPolicy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| Error::UnknownPolicy {
                name: s.chars().take(64).collect(),
            })
    }
}

/// Shortest and longest accepted periodic-flush periods.
pub const PERIOD_RANGE: (Duration, Duration) =
    (Duration::from_millis(1), Duration::from_secs(24 * 60 * 60));

/// Check a periodic-flush period.
pub(crate) fn check_period(p: Duration) -> Result<(), Error> {
    if p < PERIOD_RANGE.0 || p > PERIOD_RANGE.1 {
        return Err(Error::InvalidPeriod { period: p });
    }
    Ok(())
}

impl FlushPolicy {
    /// A read of `css`'s totals as this policy makes them fresh: the
    /// policy's whole read side, so a controller handle only resolves the
    /// css and calls this (see the module's table for each policy's cost
    /// and bound).
    pub(crate) fn read(self, domain: &Domain, css: &Css) -> Totals {
        match self {
            FlushPolicy::Always => read_flushed(domain, css),
            FlushPolicy::Threshold => {
                if css.needs_flush() {
                    read_flushed(domain, css)
                } else {
                    css.totals_published()
                }
            }
            FlushPolicy::UnifiedRoot => {
                // Read before exchanging, so readers that will skip do not
                // bounce the line while a flush runs.
                if !domain.root_flush_ongoing.load(Ordering::Relaxed)
                    && !domain.root_flush_ongoing.swap(true, Ordering::Acquire)
                {
                    domain.flush_root();
                    domain.root_flush_ongoing.store(false, Ordering::Release);
                }
                css.totals_published()
            }
            FlushPolicy::Coalesced => {
                // A root's read is the root flush: go straight to it.
                let subtree = if css.parent.is_null() {
                    None
                } else {
                    sync::try_lock(&domain.lock)
                };
                match subtree {
                    Some(mut scratch) => {
                        // SAFETY: we hold the domain's lock; the css's node
                        // is live (the caller holds the css's group).
                        unsafe {
                            domain.flush_locked(&mut scratch, &*css.node);
                            css.totals_locked()
                        }
                    }
                    None => {
                        domain
                            .coalescer
                            .coalesce(domain.nr_cpus, || domain.flush_root());
                        css.totals_published()
                    }
                }
            }
        }
    }
}

/// An exact read of `css`'s totals: flush its subtree under the domain's
/// lock and copy them (every policy's `read_exact`).
pub(crate) fn read_flushed(domain: &Domain, css: &Css) -> Totals {
    let mut scratch = lock_domain(domain);
    // SAFETY: we hold the domain's lock; `css.node` is live (the caller
    // holds the css's group) and in `domain`.
    unsafe {
        domain.flush_locked(&mut scratch, &*css.node);
        css.totals_locked()
    }
}

/// The `Coalesced` policy's meeting point: one root flusher at a time,
/// everyone else waits for it to finish and wakes together.
#[derive(Default)]
pub(crate) struct Coalescer {
    state: Mutex<CoState>,
    done: Condvar,
}

#[derive(Default)]
struct CoState {
    /// A root flush is running.
    ongoing: bool,
    /// Root flushes completed.
    generation: u64,
    /// Readers waiting for the ongoing root flush.
    waiters: usize,
}

/// What a `Coalesced` reader ended up doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Coalesce {
    /// It ran the root flush itself.
    Flushed,
    /// It waited for another reader's root flush.
    Waited,
    /// Too many waiters: it returns stale.
    GaveUp,
}

impl Coalescer {
    /// Either become the root flusher (run `flush_root`, then wake every
    /// waiter), or wait for the ongoing root flush, or give up when
    /// `max_waiters` are already waiting.
    pub(crate) fn coalesce(&self, max_waiters: usize, flush_root: impl FnOnce()) -> Coalesce {
        let mut st = sync::lock(&self.state);
        if st.ongoing {
            if st.waiters >= max_waiters {
                return Coalesce::GaveUp;
            }
            st.waiters += 1;
            let gen = st.generation;
            while st.generation == gen {
                st = st.wait(&self.done);
            }
            st.waiters -= 1;
            return Coalesce::Waited;
        }
        st.ongoing = true;
        drop(st);
        flush_root();
        let mut st = sync::lock(&self.state);
        st.ongoing = false;
        st.generation += 1;
        drop(st);
        self.done.notify_all();
        Coalesce::Flushed
    }
}
