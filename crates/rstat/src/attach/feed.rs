//! The cpu controller's feed: a thread's CPU time, charged to the group it
//! is in.
//!
//! Each thread record holds a [`Feed`]: the group its time goes to now,
//! and the thread-clock reading up to which that time was charged. Two
//! parties advance it, each under the feed's lock:
//!
//! 1. the thread itself, whenever its current group changes (an enter, a
//!    guard's drop, thread exit): read its own clock, charge the old group
//!    up to now, switch;
//! 2. the periodic charger (another thread): read the thread's clock
//!    through its clock id and charge its group up to then, so a thread
//!    that stays in a group for minutes shows its time within one period.
//!
//! Each party also re-samples the thread's user/system split before it
//! charges (the thread from `getrusage`, the charger from /proc once the
//! thread ran ten clock ticks since the last sample; see `clock.rs`), so
//! a long stay is split by its own time, not by the stay before it.
//!
//! # Rounding
//!
//! Clocks are in nanoseconds, `cpu.stat` in microseconds. A charge from
//! `since` to `now` is `now / 1000 - since / 1000` µs: the microsecond
//! boundaries the thread's clock crossed in that slice. Summed over a
//! thread's slices it telescopes, so the thread's total is exact to the
//! µs; each slice's charge is within 1 µs of its time, and no slice's
//! remainder is dropped or counted twice.
//!
//! # Synchronization
//!
//! `Feed::group` is a pointer without a reference of its own: the guard
//! whose level made it current holds one, and the owning thread switches
//! the feed to another group (under the lock) before that guard drops its
//! reference. The charger dereferences it only under the same lock, so it
//! never sees a group that may be freed. The thread's ids (clock id and
//! kernel thread id) are cleared (under the lock) when the thread starts
//! exiting, before it can die, so the charger never reads the clock or the
//! /proc entry of a thread that is gone (a dead thread's ids could name a
//! later thread). The split sample is written by both parties, under the
//! lock.

use std::sync::atomic::{AtomicBool, Ordering as StdOrdering};
use std::sync::{Mutex, MutexGuard};

use super::clock::{self, split, SplitSample, ThreadIds};
use crate::engine::CPU_STAT_NAMES;
use crate::group::GroupInner;
use crate::sync::Ordering;

/// How a thread's CPU time is attributed to its groups (process-wide).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CpuMode {
    /// Read the thread's CPU clock at every change of its current group
    /// and charge the slice to the group it leaves: exact to the µs, one
    /// `clock_gettime` system call per change (the default).
    Exact,
    /// No clock read on enter or exit: the periodic charger reads each
    /// thread's clock once per charge period and charges the whole
    /// interval to the group current at that moment (a sampling profiler's
    /// attribution). Enter and exit cost a lock and a store. Error: each
    /// interval's time goes to the group current at its end, so a stay in
    /// a group is charged the time from the last sample before it entered
    /// to the last sample before it left: off by up to one period at each
    /// end (over- and under-charge alike, so they cancel on average over
    /// many stays), and time a thread spends in no group is dropped only
    /// if it is in no group at a sample. Threads that switch groups many
    /// times per period are attributed in proportion to the chance of
    /// being in each group at a sample (their wall-clock share while
    /// running, not their CPU share if they block inside groups). Set the
    /// charge period to the granularity wanted ([`set_charge_period`],
    /// e.g. 10 ms). The user/system split is re-sampled by the charger
    /// only (from /proc, once a thread ran ten clock ticks since its last
    /// sample; see the [module docs](super#cpu-time)).
    ///
    /// [`set_charge_period`]: super::set_charge_period
    Sampled,
}

static SAMPLED: AtomicBool = AtomicBool::new(false);

/// Whether [`CpuMode::Sampled`] is on (one relaxed load: a mode change
/// needs no ordering with anything; see [`set_cpu_mode`]).
#[inline(always)]
pub(crate) fn sampled() -> bool {
    SAMPLED.load(StdOrdering::Relaxed)
}

/// Choose how CPU time is attributed, process-wide ([`CpuMode`]). Takes
/// effect at each thread's next change of group; a thread's first change
/// after a switch to [`CpuMode::Exact`] charges the time since the last
/// sample to the group it leaves.
pub fn set_cpu_mode(mode: CpuMode) {
    SAMPLED.store(mode == CpuMode::Sampled, StdOrdering::Relaxed);
}

/// The current [`CpuMode`].
pub fn cpu_mode() -> CpuMode {
    if sampled() {
        CpuMode::Sampled
    } else {
        CpuMode::Exact
    }
}

/// Where a thread's CPU time goes now; see the module docs.
pub(crate) struct Feed {
    /// The group charged for the thread's time now; null: none.
    pub(crate) group: *const GroupInner,
    /// The thread's CPU clock (ns) up to which its time was charged.
    pub(crate) since_ns: u64,
    /// The thread's clock and kernel thread ids, for the charger; `None`
    /// once the thread started exiting (or where there are none).
    pub(crate) thread: Option<ThreadIds>,
    /// The share of user time, in 1/[`clock::SPLIT_ONE`], that charges are
    /// split by: the proportion between the last two samples.
    pub(crate) user_frac: u32,
    /// The last sample of the thread's user/system split (by the thread
    /// or the charger).
    pub(crate) split: SplitSample,
}

// SAFETY: `group` is only dereferenced under the feed's lock, while the
// owning thread's guard holds a reference (module docs); the rest is
// plain data.
unsafe impl Send for Feed {}

impl Feed {
    pub(crate) const fn new() -> Feed {
        Feed {
            group: core::ptr::null(),
            since_ns: 0,
            thread: None,
            user_frac: clock::SPLIT_ONE,
            split: SplitSample {
                at_ns: 0,
                user_us: 0,
                sys_us: 0,
                coarse: false,
            },
        }
    }

    /// Charge the current group for the thread's time up to `now_ns`.
    #[inline]
    pub(crate) fn advance(&mut self, now_ns: u64) {
        if now_ns <= self.since_ns {
            // No time passed (or a reading older than the last: both read
            // the same monotonic clock, so only equal ones happen).
            return;
        }
        if !self.group.is_null() {
            // Whole µs boundaries crossed: see "Rounding".
            let usec = now_ns / 1000 - self.since_ns / 1000;
            if usec > 0 {
                // SAFETY: a non-null feed group is referenced by the
                // owner's guard while the caller holds the lock.
                unsafe { charge(&*self.group, usec, self.user_frac) };
            }
        }
        self.since_ns = now_ns;
    }
}

pub(crate) fn lock(f: &Mutex<Feed>) -> MutexGuard<'_, Feed> {
    f.lock().unwrap_or_else(|p| p.into_inner())
}

/// Add `usec` of CPU time to `group`'s `cpu` stats, split by `user_frac`.
/// Nothing if the group's engine has no `cpu` controller.
fn charge(group: &GroupInner, usec: u64, user_frac: u32) {
    let Some(id) = group.engine.cpu_ctl_id else {
        return;
    };
    // More than i64::MAX µs (292,000 years) in one slice cannot happen.
    let usec = i64::try_from(usec).unwrap_or(i64::MAX);
    let (user, system) = split(usec, user_frac);
    // Every group gets the cpu controller's state at creation (it is
    // registered with the engine), so the first probe finds it; the walk
    // up is the general rule for controllers registered later.
    let mut g = group;
    let css = loop {
        let css = g.css[id].load(Ordering::Acquire);
        if !css.is_null() {
            break css;
        }
        match g.parent.as_ref() {
            Some(p) => g = p.inner(),
            None => return,
        }
    };
    // SAFETY: the css lives as long as its group, which the caller keeps
    // referenced.
    let css = unsafe { &*css };
    let applied = css.add_many(
        css.path(),
        group.engine.nr_cpus,
        &[(0, usec), (1, user), (2, system)],
    );
    debug_assert_eq!(applied, CPU_STAT_NAMES.len());
}

/// Charge a thread's feed from another thread: read the thread's clock,
/// re-sample its user/system split from /proc if it ran ten clock ticks
/// since the last sample, and advance its feed (the periodic charger's
/// step). The /proc read happens under the feed's lock, which is what
/// keeps the thread alive (and its id its own) while it is read: the
/// thread's next group change may wait for it, once per such sample.
pub(crate) fn charge_from_outside(feed: &Mutex<Feed>) {
    let mut f = lock(feed);
    // In sampled mode the clock of a thread in no group is read too, so
    // that its time there is dropped now rather than charged to the group
    // it enters next.
    if f.group.is_null() && !sampled() {
        return;
    }
    let Some(ids) = f.thread else { return };
    if let Some(now) = clock::read_clock(ids.clock) {
        if let Some(fr) = f.split.resample_proc(now, ids.tid) {
            f.user_frac = fr;
        }
        f.advance(now);
    }
}
