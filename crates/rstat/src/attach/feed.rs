//! The cpu controller's feed: a thread's CPU time, charged to the groups
//! it was in.
//!
//! Each thread record holds a [`Feed`]: the group its time goes to now,
//! the wall-time segments it spent in groups since its last
//! reconciliation, and the thread-clock reading up to which its time was
//! charged. Two parties advance it, each under the feed's lock:
//!
//! 1. the thread itself, whenever its current group changes: close the
//!    open segment at the segment clock (`tick`; [`Feed::close_segment`]), and
//!    reconcile when one is due (the attach module's "CPU time" says
//!    when);
//! 2. the periodic charger (another thread): read the thread's clock
//!    through its clock id and reconcile, so a thread that stays in a
//!    group for minutes shows its time within one period.
//!
//! A reconciliation ([`Feed::reconcile`]) closes the open segment, shares
//! the CPU time since the last one among the segments (`apportion.rs`)
//! and charges each segment's group, split into user and system time so
//! that the thread's charges follow its last sample of its split (the
//! thread samples from `getrusage`, the charger from /proc once the thread
//! ran ten clock ticks since the last sample; see `clock.rs` and
//! `Feed::interval_user_frac`).
//!
//! # Rounding
//!
//! Clocks are in nanoseconds, `cpu.stat` in microseconds. A reconciliation
//! from `since` to `now` charges `now / 1000 - since / 1000` µs: the
//! microsecond boundaries the thread's clock crossed in the interval,
//! shared among the segments by the largest remainders. Summed over a
//! thread's reconciliations it telescopes, so the thread's total is exact
//! to the µs, and no remainder is dropped or counted twice.
//!
//! # Synchronization
//!
//! `Feed::group` is a pointer without a reference of its own: the guard
//! whose level made it current holds one, and the owning thread switches
//! the feed to another group (under the lock, after a segment took a
//! reference of its own or a reconciliation charged it) before that guard
//! drops its reference. Segments hold references, let go after the lock. The charger dereferences it only under the same lock, so it
//! never sees a group that may be freed. The thread's ids (clock id and
//! kernel thread id) are cleared (under the lock) when the thread starts
//! exiting, before it can die, so the charger never reads the clock or the
//! /proc entry of a thread that is gone (a dead thread's ids could name a
//! later thread). The split sample is written by both parties, under the
//! lock.

use std::sync::atomic::{AtomicBool, Ordering as StdOrdering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::apportion;
use super::clock::{self, split, SplitSample, ThreadIds};
use super::tick;
use crate::engine::CPU_STAT_NAMES;
use crate::group::{Group, GroupInner};
use crate::sync::Ordering;

/// How a thread's CPU time is attributed to its groups (process-wide).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CpuMode {
    /// Read a clock (the TSC or the vDSO's monotonic clock: no system
    /// call; see [`switch_clock`](crate::attach::switch_clock)) at every
    /// change of the current group and share the thread's CPU time among
    /// its groups by wall time at each reconciliation, read from its CPU
    /// clock: a thread's charges sum to its CPU time to the µs at every
    /// reconciliation, and the split among groups follows the error model
    /// of the [module docs](super#cpu-time) (the default).
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

/// Closed segments a thread keeps between reconciliations: a change of
/// group that would need one more (a group not among them) reconciles
/// first.
pub(crate) const MAX_SEGMENTS: usize = 32;

/// A thread reconciles (reads its CPU clock and apportions it) at its
/// first change of group once this much wall time passed since its last
/// reconciliation: the period within which wall-time shares stand in for
/// CPU time. The periodic charger and thread exit reconcile too.
pub const RECONCILE_PERIOD: Duration = Duration::from_millis(4);

/// A change of group after the thread stayed at least this long (wall
/// time) in the group it leaves reconciles at once, even if another
/// thread (the periodic charger, [`charge_all_threads`]) reconciled it
/// during the stay: one system call, a small part of such a stay, and the
/// stay's CPU time is then split only with the short segments since the
/// last reconciliation, and is all charged when the change returns.
///
/// [`charge_all_threads`]: crate::attach::charge_all_threads
pub const LONG_SEGMENT: Duration = Duration::from_micros(100);

const RECONCILE_PERIOD_NS: u64 = RECONCILE_PERIOD.as_nanos() as u64;
const LONG_SEGMENT_NS: u64 = LONG_SEGMENT.as_nanos() as u64;

/// Wall time a thread spent in one group since its last reconciliation.
pub(crate) struct Segment {
    /// `None`: in no group. A reference, so the group outlives the guard
    /// that made it current until the segment is charged.
    group: Option<Group>,
    wall_ns: u64,
}

impl Segment {
    const EMPTY: Segment = Segment {
        group: None,
        wall_ns: 0,
    };

    #[inline]
    fn ptr(&self) -> *const GroupInner {
        self.group
            .as_ref()
            .map_or(core::ptr::null(), |g| g.inner_ptr().as_ptr().cast_const())
    }
}

/// Group references a reconciliation let go of, to drop once the feed's
/// lock is released (a last reference frees the group, which flushes).
pub(crate) struct Released(#[allow(dead_code)] [Option<Group>; MAX_SEGMENTS]);

/// Where a thread's CPU time goes now; see the module docs.
pub(crate) struct Feed {
    /// The group charged for the thread's time now; null: none.
    pub(crate) group: *const GroupInner,
    /// The thread's CPU clock (ns) up to which its time was charged: the
    /// last reconciliation.
    pub(crate) since_ns: u64,
    /// The segment clock (ns, `tick`) at the last reconciliation.
    pub(crate) since_wall: u64,
    /// The segment clock (ns) at which the open segment (in `group`)
    /// began: the later of the change to `group` and the last
    /// reconciliation.
    pub(crate) seg_start: u64,
    /// The segment clock (ns) at the change to `group`: how long the
    /// thread has stayed there, whatever reconciled since
    /// ([`LONG_SEGMENT`]).
    stay_start: u64,
    /// Closed segments since the last reconciliation, one per group.
    segs: [Segment; MAX_SEGMENTS],
    nr_segs: usize,
    /// The thread's CPU clock when its record was taken (tests).
    pub(crate) start_ns: u64,
    /// µs apportioned to time in no group since then (tests).
    pub(crate) unattributed_us: u64,
    /// The thread's clock and kernel thread ids, for the charger; `None`
    /// once the thread started exiting (or where there are none).
    pub(crate) thread: Option<ThreadIds>,
    /// The prior share of user time, in 1/[`clock::SPLIT_ONE`]: the
    /// thread's split of its life before its record started, which charges
    /// follow until a sample shows time since (`interval_user_frac`).
    user_frac: u32,
    /// µs charged to groups since the record's start, and of those, µs of
    /// user time.
    split_total_us: u64,
    split_user_us: u64,
    /// The last sample of the thread's user/system split (by the thread
    /// or the charger).
    pub(crate) split: SplitSample,
}

// SAFETY: `group` is only dereferenced under the feed's lock, while the
// owning thread's guard holds a reference (module docs); segments hold
// references of their own; the rest is plain data.
unsafe impl Send for Feed {}

impl Feed {
    pub(crate) const fn new() -> Feed {
        Feed {
            group: core::ptr::null(),
            since_ns: 0,
            since_wall: 0,
            seg_start: 0,
            stay_start: 0,
            segs: [Segment::EMPTY; MAX_SEGMENTS],
            nr_segs: 0,
            start_ns: 0,
            unattributed_us: 0,
            thread: None,
            user_frac: clock::SPLIT_ONE,
            split_total_us: 0,
            split_user_us: 0,
            split: SplitSample::EMPTY,
        }
    }

    /// Start over at a thread's first enter: its CPU clock `cpu_ns`, the
    /// segment clock `wall_ns`, no segments (a pooled record has none).
    pub(crate) fn restart(
        &mut self,
        cpu_ns: u64,
        wall_ns: u64,
        thread: Option<ThreadIds>,
        split: (SplitSample, u32),
    ) {
        debug_assert!(self.group.is_null() && self.nr_segs == 0);
        self.group = core::ptr::null();
        self.since_ns = cpu_ns;
        self.since_wall = wall_ns;
        self.seg_start = wall_ns;
        self.stay_start = wall_ns;
        self.start_ns = cpu_ns;
        self.unattributed_us = 0;
        self.thread = thread;
        self.split = split.0;
        self.user_frac = split.1;
        self.split_total_us = 0;
        self.split_user_us = 0;
    }

    /// Make `to` current right after a reconciliation (so at its wall
    /// time, `seg_start`); a new stay only if `to` is another group.
    pub(crate) fn change_reconciled(&mut self, to: *const GroupInner) {
        if to != self.group {
            self.stay_start = self.seg_start;
        }
        self.group = to;
    }

    /// Whether the thread has time not charged yet in a group (so the
    /// charger has something to do).
    pub(crate) fn has_pending(&self) -> bool {
        !self.group.is_null() || self.nr_segs != 0
    }

    /// The owner's change of group at `now` (segment clock ns): close the open
    /// segment into the table. Returns `false` if the segment is kept,
    /// `true` if it was not and a reconciliation is due now (a long
    /// segment, the period passed, the table is full, or the group left
    /// was removed: a removed group is not held past the change).
    #[inline]
    pub(crate) fn close_segment(&mut self, now: u64) -> bool {
        let wall = now.saturating_sub(self.seg_start);
        // The stay, not the segment: a reconciliation by another thread
        // (the charger) in the middle of a long stay leaves a short open
        // segment, which must still be charged now.
        let stay = now.saturating_sub(core::mem::replace(&mut self.stay_start, now));
        if stay >= LONG_SEGMENT_NS || now.saturating_sub(self.since_wall) >= RECONCILE_PERIOD_NS {
            return true;
        }
        let g = self.group;
        for s in &mut self.segs[..self.nr_segs] {
            if s.ptr() == g {
                s.wall_ns += wall;
                self.seg_start = now;
                return false;
            }
        }
        if self.nr_segs == MAX_SEGMENTS {
            return true;
        }
        let group = match core::ptr::NonNull::new(g.cast_mut()) {
            None => None,
            Some(p) => {
                // SAFETY: a non-null feed group is referenced by the
                // owner's guard while the owner holds the lock.
                if !unsafe { p.as_ref() }.online.load(Ordering::Acquire) {
                    return true;
                }
                // SAFETY: as above; the segment's reference is its own.
                Some(unsafe { Group::clone_from_ptr(p) })
            }
        };
        self.segs[self.nr_segs] = Segment {
            group,
            wall_ns: wall,
        };
        self.nr_segs += 1;
        self.seg_start = now;
        false
    }

    /// Reconcile: close the open segment at `wall_now` and charge the CPU
    /// time from `since_ns` to `cpu_now` (the thread's clock, read beside
    /// `wall_now`) to the segments' groups, apportioned by their wall
    /// times ([`apportion`]). The thread's charges (with the µs in no
    /// group) then sum to its clock's µs boundaries crossed since its
    /// record was taken, exactly. Returns the references to drop once the
    /// lock is let go.
    pub(crate) fn reconcile(&mut self, cpu_now: u64, wall_now: u64) -> Released {
        const N: usize = MAX_SEGMENTS + 1;
        let mut groups = [core::ptr::null::<GroupInner>(); N];
        let mut walls = [0u64; N];
        let n = self.nr_segs;
        for i in 0..n {
            groups[i] = self.segs[i].ptr();
            walls[i] = self.segs[i].wall_ns;
        }
        // The open segment, in the group current now (referenced by the
        // owner's guard while the lock is held).
        let open = wall_now.saturating_sub(self.seg_start);
        let m = match groups[..n].iter().position(|&g| g == self.group) {
            Some(i) => {
                walls[i] += open;
                n
            }
            None => {
                groups[n] = self.group;
                walls[n] = open;
                n + 1
            }
        };
        if cpu_now > self.since_ns {
            let cpu = cpu_now - self.since_ns;
            let units = cpu_now / 1000 - self.since_ns / 1000;
            let mut shares = [0u64; N];
            apportion::fill_shortest_first(&walls[..m], cpu, &mut shares[..m]);
            let mut usec = [0u64; N];
            apportion::to_units(&shares[..m], cpu, units, &mut usec[..m]);
            let frac = self.interval_user_frac(units);
            for i in 0..m {
                if usec[i] == 0 {
                    continue;
                }
                // More than i64::MAX µs (292,000 years) in one slice
                // cannot happen.
                let us = i64::try_from(usec[i]).unwrap_or(i64::MAX);
                let (user, system) = split(us, frac);
                if groups[i].is_null() {
                    // Charged nowhere, but part of the thread's time its
                    // samples split: counted below as if it were.
                    self.unattributed_us += usec[i];
                } else {
                    // SAFETY: each non-null group is held by a segment's
                    // reference or (the open one) by the owner's guard.
                    unsafe { charge(&*groups[i], [us, user, system]) };
                }
                self.split_user_us += user as u64;
                self.split_total_us += usec[i];
            }
            self.since_ns = cpu_now;
        }
        self.since_wall = wall_now;
        self.seg_start = wall_now;
        let mut released = Released([const { None }; MAX_SEGMENTS]);
        for (s, r) in self.segs[..n].iter_mut().zip(released.0.iter_mut()) {
            *r = s.group.take();
            s.wall_ns = 0;
        }
        self.nr_segs = 0;
        released
    }

    /// The user share to split this reconciliation's `now` µs by: the
    /// share that brings the user µs counted since the record's start (its
    /// charges, and its time in no group split the same way) to the share
    /// of user time the thread's last sample shows since then, as near as
    /// this interval allows (none of it, or all). With a fresh sample that
    /// is the interval's own split; an earlier charge made with a stale
    /// one (a sample is taken at most each 10 ms of the thread's time, by
    /// the charger each ten ticks) is made good here, so the thread's
    /// charges follow the kernel's split of its time. The target is
    /// computed from the sample's microseconds, not a rounded fraction, so
    /// a thread that lived for days is split as finely as a new one.
    fn interval_user_frac(&self, now: u64) -> u32 {
        if now == 0 {
            return self.user_frac;
        }
        let total = u128::from(self.split_total_us) + u128::from(now);
        let target = match self.split.since_start() {
            Some((user, system)) => {
                total * u128::from(user) / (u128::from(user) + u128::from(system))
            }
            // No sample since the start yet: the prior.
            None => (total * u128::from(self.user_frac.min(clock::SPLIT_ONE))) >> 16,
        };
        let want = target
            .saturating_sub(u128::from(self.split_user_us))
            .min(u128::from(now));
        u32::try_from((want << 16) / u128::from(now)).unwrap_or(clock::SPLIT_ONE)
    }
}

pub(crate) fn lock(f: &Mutex<Feed>) -> MutexGuard<'_, Feed> {
    f.lock().unwrap_or_else(|p| p.into_inner())
}

/// Add `stats` (usage, user and system µs) to `group`'s `cpu` stats (or
/// its nearest ancestor's that has them); nothing if the group's engine
/// has no `cpu` controller.
fn charge(group: &GroupInner, stats: [i64; 3]) {
    let Some(id) = group.engine.cpu_ctl_id else {
        return;
    };
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
    let [usec, user, system] = stats;
    let applied = css.add_many(
        css.path(),
        group.engine.nr_cpus,
        &[(0, usec), (1, user), (2, system)],
    );
    debug_assert_eq!(applied, CPU_STAT_NAMES.len());
    // After the charge: a root read that loads this count and subtracts
    // it from its totals errs towards too little time charged by hand
    // (clamped at 0), never towards counting thread time twice.
    let attached = &group.engine.attached_cpu_us;
    for (a, v) in attached.iter().zip(stats) {
        a.fetch_add(v as u64, Ordering::Relaxed);
    }
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
    if !f.has_pending() && !sampled() {
        return;
    }
    let Some(ids) = f.thread else { return };
    let wall = tick::now_ns();
    let released = clock::read_clock(ids.clock).map(|now| {
        f.split.resample_proc(now, ids.tid);
        f.reconcile(now, wall)
    });
    drop(f);
    drop(released);
}
