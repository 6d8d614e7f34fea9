//! The `Threshold` policy's pace in time: the clock a flush stamps its
//! start with, and the nudge a paced read gives the background flusher.
//! Why a read may rely on a stamp, and the bound that gives, is
//! [`policy`](super::policy)'s "The bound"; this module holds the parts.
//!
//! - [`Clock`]: nanoseconds since the engine was built, from the monotonic
//!   clock (or, for tests and models, from a [`ManualTime`] they move).
//! - Flush stamps: a flush that ran the update path's fence (every flush
//!   but a group's final one) reads the clock once it holds the domain
//!   lock, before it drains a backlog, and when it is done stores that
//!   time in the flushed subtree root's `TreeNode::flushed_at`
//!   ([`encode`]d, so 0 means "never"). A flush in which a controller's
//!   fold panicked and was undone stores none: it did not fold
//!   everything.
//! - [`Nudge`]: a reader past its unit threshold whose stamps are not
//!   young (half the pace or older) asks the background (periodic) flusher
//!   for a root flush, so the next reads find a young root stamp instead
//!   of summing counters or flushing themselves. The ask is one flag per
//!   domain (`Domain::root_flush_asked`): only the reader that turns it on
//!   takes the nudge's lock and wakes the flusher, which takes every
//!   domain's flag before flushing that root. The nudge carries no
//!   guarantee (a reader whose stamps are too old flushes itself): it only
//!   keeps readers from having to.
//!
//! # Synchronization
//!
//! - `flushed_at`: stored `Release` by the flush, after it published every
//!   total it folded (`fold_node`), under the domain lock; loaded `Acquire`
//!   by a paced read before it loads any published total. A read that sees
//!   a stamp thus copies totals at least as new as that flush's (a later
//!   flush only adds to them).
//! - A manual clock is stored `SeqCst` by the test and loaded `Acquire`:
//!   whatever the test did before it moved the clock to t happens before
//!   a flush that read t or later. (The real clock gives the same order in
//!   time: a flush's drain, fence and slot loads all follow its clock
//!   read.)
//! - `root_flush_asked` is `Relaxed`: a hint, which orders nothing. A
//!   reader that turns it on sets the nudge's `asked` under its mutex, and
//!   the flusher tests `asked` under the same mutex before it sleeps, so
//!   no wake is lost; a flag the flusher takes (turns off) before a
//!   reader's ask lands is turned on again by that reader, who wakes it
//!   again.

use std::sync::Arc;
use std::time::Duration;
#[cfg(not(rstat_loom))]
use std::time::Instant;

use crate::sync::{self, AtomicU64, Condvar, Mutex, Ordering};

/// Where a domain's time comes from.
#[derive(Clone)]
pub(crate) enum Clock {
    /// The monotonic clock, from this origin.
    Real(std::time::Instant),
    /// The coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`, Linux), in
    /// ns since `origin_ns` of that clock: the time of the kernel's last
    /// tick, so it never leads the monotonic clock and lags it by at most
    /// its resolution, `res_ns` (one tick), while the tick runs. A paced
    /// read compares two readings of it, so its pace is shortened by that
    /// lag (see [`Clock::slack_ns`]). `id` is the clock's id
    /// (`CLOCK_MONOTONIC_COARSE`; a test gives one that cannot be read).
    Coarse {
        origin_ns: u64,
        res_ns: u64,
        id: i32,
    },
    /// A clock a test moves by hand.
    Manual(Arc<ManualTime>),
}

/// The coarse clock serves a pace of at least this many of its ticks (the
/// default pace spans that many at the usual kernel tick rates); a
/// shorter pace uses the monotonic clock.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const COARSE_TICKS_PER_PACE: u64 = 8;

impl Clock {
    /// The clock for a domain paced at `pace`: the coarse monotonic clock
    /// where the system has one whose resolution is at most
    /// 1/[`COARSE_TICKS_PER_PACE`] of the pace, else the monotonic clock,
    /// counting from now.
    ///
    /// Why: a paced read reads the clock once, and the vDSO's monotonic
    /// clock costs tens of ns on some virtual machines (the hypervisor's
    /// clock source) where the coarse one is a few loads. Reading the
    /// time of the last tick costs a read at most one tick of its pace
    /// (the pace is shortened by it), which a pace of many ticks can
    /// afford.
    pub(crate) fn real(pace: Option<Duration>) -> Clock {
        #[cfg(all(target_os = "linux", not(miri)))]
        if let (Some(pace), Some(res), Some(origin_ns)) = (
            pace,
            coarse_resolution_ns(),
            crate::os::clock_ns(libc::CLOCK_MONOTONIC_COARSE),
        ) {
            if res > 0 && res.saturating_mul(COARSE_TICKS_PER_PACE) <= as_ns(pace) {
                return Clock::Coarse {
                    origin_ns,
                    res_ns: res,
                    id: libc::CLOCK_MONOTONIC_COARSE,
                };
            }
        }
        let _ = pace;
        Clock::Real(std::time::Instant::now())
    }

    /// Nanoseconds since the clock's origin. Real: one read of the
    /// monotonic clock (no system call where the vDSO has it); coarse: one
    /// read of the coarse clock (the vDSO's copy of the last tick's time).
    /// `None` if the clock could not be read: then a flush stamps nothing
    /// and a read relies on no stamp (a reading taken as 0 would make
    /// every stamp look young, and a read copy totals of any age).
    #[inline]
    pub(crate) fn now(&self) -> Option<u64> {
        match self {
            Clock::Real(origin) => Some(as_ns(origin.elapsed())),
            #[cfg(target_os = "linux")]
            Clock::Coarse { origin_ns, id, .. } => {
                crate::os::clock_ns(*id).map(|ns| ns.saturating_sub(*origin_ns))
            }
            #[cfg(not(target_os = "linux"))]
            Clock::Coarse { .. } => None,
            Clock::Manual(t) => Some(t.ns.load(Ordering::Acquire)),
        }
    }

    /// How much later than a reading of this clock the real time can be
    /// (0 for the monotonic and manual clocks, one tick for the coarse
    /// one). Two readings `a` then `b` of the clock were taken at most
    /// `b - a + slack` apart: a domain shortens its pace by this much, so
    /// a stamp that reads younger than the shortened pace is younger than
    /// the pace in real time.
    pub(crate) fn slack_ns(&self) -> u64 {
        match self {
            Clock::Coarse { res_ns, .. } => *res_ns,
            Clock::Real(_) | Clock::Manual(_) => 0,
        }
    }
}

/// The coarse monotonic clock's resolution, ns (`clock_getres`).
#[cfg(all(target_os = "linux", not(miri)))]
fn coarse_resolution_ns() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; an unknown clock id is an error
    // return, not UB.
    if unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) } != 0 {
        return None;
    }
    u64::try_from(ts.tv_sec)
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(u64::try_from(ts.tv_nsec).ok()?)
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Clock::Real(_) => f.write_str("Clock::Real"),
            Clock::Coarse { res_ns, .. } => write!(f, "Clock::Coarse({res_ns} ns ticks)"),
            Clock::Manual(t) => write!(f, "Clock::Manual({} ns)", t.now()),
        }
    }
}

/// A `Duration` in nanoseconds, saturating (at 584 years).
pub(crate) fn as_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The time a manual [`Clock`] shows, in nanoseconds: only ever set by the
/// test that owns it (`rstat::testing::ManualClock`, and the loom models).
pub(crate) struct ManualTime {
    ns: AtomicU64,
}

impl ManualTime {
    pub(crate) fn new(ns: u64) -> Self {
        ManualTime {
            ns: AtomicU64::new(ns),
        }
    }

    /// Move the clock to `ns` (`SeqCst`: see the module's
    /// `# Synchronization`). A clock that goes back makes stamps look
    /// newer than they are: tests only move it forward.
    pub(crate) fn set(&self, ns: u64) {
        self.ns.store(ns, Ordering::SeqCst);
    }

    pub(crate) fn now(&self) -> u64 {
        self.ns.load(Ordering::Acquire)
    }
}

/// A flush's start time as `TreeNode::flushed_at` keeps it: `ns + 1`, so
/// that 0 means "never stamped".
#[inline]
pub(crate) fn encode(ns: u64) -> u64 {
    ns.saturating_add(1)
}

/// Whether the stamp `stamp` ([`encode`]d, 0 for none) is younger than
/// `pace` nanoseconds at `now`; if so, the flush's start time.
#[inline]
pub(crate) fn fresh(stamp: u64, now: u64, pace: u64) -> Option<u64> {
    let start = stamp.checked_sub(1)?;
    (now.saturating_sub(start) < pace).then_some(start)
}

/// The background flusher's wake-up: paced reads ask for a root flush
/// through it, and the flusher sleeps on it until its next period, an ask,
/// or its stop. One per engine, shared by its domains.
#[derive(Default)]
pub(crate) struct Nudge {
    state: Mutex<NudgeState>,
    cv: Condvar,
}

#[derive(Default)]
struct NudgeState {
    /// A reader turned a domain's `root_flush_asked` on since the flusher
    /// last looked.
    asked: bool,
    /// The flusher must return.
    stopped: bool,
}

/// Why [`Nudge::wait`] returned.
#[cfg_attr(rstat_loom, allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Woken {
    /// Stop: return.
    Stopped,
    /// The period is up: flush every root.
    Tick,
    /// Readers asked: flush the roots of the domains that asked.
    Asked,
}

impl Nudge {
    /// Wake the flusher for a root flush: called by the reader that turned
    /// a domain's `root_flush_asked` on. Cost: the nudge's lock and a
    /// condvar notify (a futex wake when the flusher sleeps).
    pub(crate) fn wake(&self) {
        sync::lock(&self.state).asked = true;
        self.cv.notify_one();
    }

    /// Set (`true`: the flusher's wait returns [`Woken::Stopped`]) or clear
    /// the stop, for a flusher thread that stops or starts.
    #[cfg_attr(rstat_loom, allow(dead_code))]
    pub(crate) fn set_stopped(&self, stopped: bool) {
        sync::lock(&self.state).stopped = stopped;
        self.cv.notify_all();
    }

    /// The flusher's sleep: until stopped, until `tick` ([`Woken::Tick`],
    /// which also takes a pending ask: the tick flushes every root), or
    /// until a reader asked and `asks_from` has come ([`Woken::Asked`]; an
    /// ask before then waits for it, so a storm of readers cannot turn the
    /// flusher into a flush loop).
    #[cfg(not(rstat_loom))]
    pub(crate) fn wait(&self, tick: Instant, asks_from: Instant) -> Woken {
        let mut st = sync::lock(&self.state);
        loop {
            if st.stopped {
                return Woken::Stopped;
            }
            let now = Instant::now();
            if now >= tick {
                st.asked = false;
                return Woken::Tick;
            }
            if st.asked && now >= asks_from {
                st.asked = false;
                return Woken::Asked;
            }
            let until = if st.asked { tick.min(asks_from) } else { tick };
            st = st.wait_timeout(&self.cv, until - now);
        }
    }

    /// The flusher's sleep as the loom models see it (no time): until a
    /// reader asked (true) or the stop (false).
    #[cfg(all(test, rstat_loom))]
    pub(crate) fn wait_asked(&self) -> bool {
        let mut st = sync::lock(&self.state);
        loop {
            if st.stopped {
                return false;
            }
            if st.asked {
                st.asked = false;
                return true;
            }
            st = st.wait(&self.cv);
        }
    }
}
