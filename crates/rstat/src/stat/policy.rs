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
//! | `Threshold` | flushes its subtree only if the group's pending-update counter exceeds B × nr_cpus units and no flush of its subtree or of the root's started less than the read pace P ago (with one that did, it copies, and asks the periodic flusher for a root flush) | for an item declared in unit u: u × B × nr_cpus + (B × u − 1) × nr_cpus × groups in the subtree (less than B × nr_cpus × (groups + 1) units), plus B × u − 1 per update in progress when the read began; or, when it relied on a recent flush, every update that completed P before the read began |
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
//! **The bound.** A `Threshold` read of group G flushes (and is exact),
//! or is within the *unit part* below, or relied on a flush that started
//! less than the read pace P before it and includes every update of G's
//! subtree that completed P before it began (the *time part*, "The pace"
//! below). [`FlushPolicy::staleness_bound`] states the unit part,
//! [`Rstat::read_pace`] the time part.
//!
//! The unit part. Let a `read` of group G begin after a set of updates
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
//! **The pace.** Under a steady stream of updates the unit threshold is
//! crossed between almost any two reads of a busy group, and a read past
//! it flushes as [`ControllerHandle::read_exact`] does. A flush of any
//! subtree drains every CPU's backlog (each group first updated since it
//! was last folded, anywhere in the tree: groups outside the subtree stay
//! on the updated tree, on list, and are not pushed again) and folds the
//! subtree's groups that changed, so a reader of many busy groups still
//! pays for each group's changes, and a fence, once per group read. The
//! read pace P
//! ([`Builder::read_pace`]) bounds such reads in time instead, as the
//! kernel's rate-limited memcg reads do: a flush stamps the root of the
//! subtree it flushed with the time it *started* (`stat::pace`). A read
//! then goes, cheapest first:
//!
//! 1. if the root's stamp, or its group's, is younger than P/2: it copies
//!    the published totals (a clock read and a few loads; not even the
//!    group's per-CPU pending counters, which a stream of updates keeps
//!    writing);
//! 2. else, within the unit threshold: it copies, as before;
//! 3. else it asks the periodic flusher for a root flush, and copies if the
//!    stamp of step 1 is younger than P; otherwise it flushes as before,
//!    unless a flush that ran while it waited for the lock (most often the
//!    root flush its ask woke) left a fresh stamp by the time the lock is
//!    its own.
//!
//! The ask is one flag test while an ask is pending; the reader that turns
//! the flag on wakes the flusher. The flusher answers with a root flush, at
//! most once per P/4, so while it keeps up the root's stamp is renewed
//! about every P/2 and readers do not flush at all. When it falls behind,
//! or runs with a long period, or is off ([`Builder::periodic_flush`]),
//! readers flush themselves, and each such flush stamps their group: the
//! bound needs no background thread, and a group's reads still flush at
//! most about once per P. With no stream (nothing past the threshold),
//! nobody asks and the flusher keeps its period.
//!
//! The time part of the bound, and why it holds. A flush F of subtree R
//! reads the clock, giving s, once it holds the domain's lock and before
//! it drains a backlog. Every update of R's subtree that completed before
//! s is in the totals F publishes for each group under R: F's drains,
//! fence and slot loads all come after s, and a flush includes every
//! update completed before it begins (`backlog`'s `# Synchronization`;
//! with the monotonic clock "before s" is in time: the update's add and
//! on-list check returned before F read the clock). F stores s as R's
//! stamp after it has published those totals (`Release`), and only if it
//! ran the update path's fence (a group's final flush does not) and undid
//! no fold (a user controller's flush that panicked leaves its deltas for
//! the next flush). A read of G under R that loads the stamp (`Acquire`)
//! then copies totals at least as new as F's: published totals only move
//! forward (a later fold adds to them; a flush of a child adds to its
//! parent's pending, which the parent's next fold takes in). So the copy
//! includes every update of G's subtree completed before s. The read
//! relies on s only if now − s < P, `now` being the clock at its start:
//! every update that completed before now − P completed before s. Stamps
//! of a node only grow (read under the lock from a monotonic clock), so a
//! reader sees the last one, or a newer one. The clock is the coarse
//! monotonic one on Linux for a pace of at least eight of its ticks
//! (`pace::Clock::real`; cheaper to read): it shows the time of the last
//! tick, never later than the real time and at most a tick (its
//! resolution) earlier, so s is at most the real start and `now` at most
//! a tick early. The domain compares against P less one tick: a stamp
//! younger than that on the coarse clock is younger than P in real time.
//! Should the clock fail to read, a flush stamps nothing and a read relies
//! on no stamp (it is then bounded by the unit part, or flushes). Like the unit part, the copy
//! never shows an update that had not started. The loom models in
//! `stat::tests_loom::pace` check it with a clock a writer moves after
//! each update it completes (they fail if the stamp is stored before the
//! totals are published, is stored or loaded `Relaxed`, or is the time
//! the flush ended); `tests/exact_while_running.rs` checks the combined
//! bound while threads update, flush and read, and `tests/policy.rs`
//! against a sequential model, both on a clock the test moves.
//!
//! The default pace, [`DEFAULT_READ_PACE`] (100 ms): a bounded read is
//! then at most a tenth of a second behind: well inside the interval at
//! which a dashboard refreshes or a metrics scraper reads, and a twentieth
//! of the periodic flusher's default period, so the time part is far
//! tighter than the periodic flush alone would give.
//! The cost it buys back is the flush per read: the background thread runs
//! at most four root flushes per pace, each paying only for what changed
//! since the last, however many readers ask. Set a shorter pace for reads
//! that must be fresher (or call `read_exact`), a longer one where reads
//! are frequent and freshness matters less, and `None` for reads bounded
//! in units only (every read past the threshold flushes). The pace is per
//! engine and applies to the `Threshold` policy only; the other policies
//! and `read_exact` ignore it.
//!
//! The periodic flusher (default every 2 s, [`Builder::periodic_flush`])
//! flushes every controller's root regardless of policy and thresholds,
//! and in between answers the paced reads' asks.
//!
//! [`ControllerHandle::set_flush_policy`]: crate::ControllerHandle::set_flush_policy
//! [`ControllerHandle::read_exact`]: crate::ControllerHandle::read_exact
//! [`Builder::periodic_flush`]: crate::Builder::periodic_flush
//! [`Builder::read_pace`]: crate::Builder::read_pace
//! [`Rstat::read_pace`]: crate::Rstat::read_pace
//! [`DEFAULT_READ_PACE`]: crate::DEFAULT_READ_PACE
//! [`Controller::stat_units`]: crate::Controller::stat_units

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::Error;
use crate::stat::css::{Css, UPDATE_BATCH};
use crate::stat::ops::TotalsCopy;
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
    /// declared unit), and then only if no flush of the subtree or of the
    /// root's started within the engine's read pace (see the module's "The
    /// pace").
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
    /// `u64::MAX`. This is the unit part of the `Threshold` bound: a read
    /// may instead be as stale as the engine's read pace allows
    /// ([`Rstat::read_pace`](crate::Rstat::read_pace), the time part: it
    /// includes every update completed that long before it began).
    /// `None` where the policy has no
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
    within(p, PERIOD_RANGE, |period| Error::InvalidPeriod { period })
}

/// Shortest and longest accepted read paces
/// ([`Builder::read_pace`](crate::Builder::read_pace)).
pub const PACE_RANGE: (Duration, Duration) =
    (Duration::from_millis(1), Duration::from_secs(24 * 60 * 60));

/// Check a read pace.
pub(crate) fn check_pace(p: Duration) -> Result<(), Error> {
    within(p, PACE_RANGE, |pace| Error::InvalidReadPace { pace })
}

/// `Ok` if `p` is in `range` (both ends included), else `err(p)`.
fn within(
    p: Duration,
    range: (Duration, Duration),
    err: impl FnOnce(Duration) -> Error,
) -> Result<(), Error> {
    if (range.0..=range.1).contains(&p) {
        Ok(())
    } else {
        Err(err(p))
    }
}

impl FlushPolicy {
    /// A read of `css`'s totals as this policy makes them fresh: the
    /// policy's whole read side, so a controller handle only resolves the
    /// css and calls this (see the module's table for each policy's cost
    /// and bound).
    pub(crate) fn read(self, domain: &Domain, css: &Css) -> TotalsCopy {
        match self {
            FlushPolicy::Always => read_flushed(domain, css),
            FlushPolicy::Threshold => read_threshold(domain, css).0,
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

/// What a `Threshold` read relied on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadBy {
    /// A copy, relying on a flush that started at this time (ns of the
    /// domain's clock) less than the pace before the read: the time part.
    Stamp(u64),
    /// A copy within the unit threshold: the unit part.
    Units,
    /// A flush of the subtree: exact.
    Flush,
}

/// The `Threshold` policy's read (the module's "The pace"), in the order
/// that makes the common read cheapest:
///
/// 1. a stamped flush of `css`'s subtree or of the root's that started less
///    than half the pace ago: copy (a clock read and a few loads; not even
///    the per-CPU pending counters, which a stream of updates keeps
///    writing);
/// 2. within the unit threshold (nr_cpus counter loads): copy;
/// 3. past it: ask the periodic flusher for a root flush, then copy if the
///    stamp of step 1 is younger than the pace, else flush (unless a flush
///    that ran while this read waited for the lock left a fresh stamp).
///
/// Returns the totals and what they rely on.
pub(crate) fn read_threshold(domain: &Domain, css: &Css) -> (TotalsCopy, ReadBy) {
    // SAFETY: a css's node is live as long as the css (the caller holds
    // its group).
    let fresh = domain.fresh_stamp(unsafe { &*css.node });
    // Every copy below comes after the stamps' `Acquire` loads (in
    // `fresh_stamp`): at least as new as the totals a stamped flush
    // published.
    match fresh {
        Some(f) if f.young => return (css.totals_published(), ReadBy::Stamp(f.start)),
        _ => {}
    }
    if !css.needs_flush() {
        return (css.totals_published(), ReadBy::Units);
    }
    domain.ask_root_flush();
    match fresh {
        Some(f) => (css.totals_published(), ReadBy::Stamp(f.start)),
        None => match read_flushed_unless_paced(domain, css) {
            (totals, Some(start)) => (totals, ReadBy::Stamp(start)),
            (totals, None) => (totals, ReadBy::Flush),
        },
    }
}

/// The end of a `Threshold` read past its threshold that found no fresh
/// stamp: flush `css`'s subtree under the domain's lock, unless by the
/// time the lock is ours a flush that ran while we waited for it (most
/// often the periodic flusher's root flush, which this read's ask woke)
/// has left a fresh stamp; then copy. The stamp is judged against a clock
/// read after the read began, so the time part of the bound holds as for
/// [`read_threshold`]'s copies. Returns the totals, and the start of the flush they
/// come from if this read did not flush.
pub(crate) fn read_flushed_unless_paced(domain: &Domain, css: &Css) -> (TotalsCopy, Option<u64>) {
    let mut scratch = lock_domain(domain);
    // SAFETY: `css.node` is live (the caller holds the css's group) and in
    // `domain`.
    let node = unsafe { &*css.node };
    let fresh = domain.fresh_stamp(node).map(|f| f.start);
    if fresh.is_none() {
        // SAFETY: we hold the domain's lock; `node` is live and in `domain`.
        unsafe { domain.flush_locked(&mut scratch, node) };
    }
    // SAFETY: we hold the domain's lock.
    (unsafe { css.totals_locked() }, fresh)
}

/// An exact read of `css`'s totals: flush its subtree under the domain's
/// lock and copy them (every policy's `read_exact`).
pub(crate) fn read_flushed(domain: &Domain, css: &Css) -> TotalsCopy {
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
