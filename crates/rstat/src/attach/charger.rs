//! The periodic charger: one background thread per process that charges
//! every thread inside a group for its CPU time so far, once per period
//! (default [`DEFAULT_CHARGE_PERIOD`], 1 s). Started by the first enter of
//! the process; it holds no group and enters none. It knows a thread only
//! by its [`Feed`], registered by `current` when a thread record is made,
//! and charges through `feed`: it needs nothing else of the record.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::feed::{self, Feed};
use crate::error::{Error, Result};

/// The charger's default period: a thread that stays inside a group is
/// charged for its CPU time at least this often, so an exact read shows
/// that time within this long. Set per process ([`set_charge_period`]).
///
/// Not the period of the engine's root flusher,
/// [`DEFAULT_FLUSH_PERIOD`](crate::DEFAULT_FLUSH_PERIOD), which bounds how
/// long charged updates wait for a flush; ["Two
/// periods"](super#two-periods) sets the two side by side.
pub const DEFAULT_CHARGE_PERIOD: Duration = Duration::from_secs(1);

/// The feed of every thread record ever made (records are never freed,
/// so neither are their feeds).
static FEEDS: Mutex<Vec<&'static Mutex<Feed>>> = Mutex::new(Vec::new());

struct State {
    period: Option<Duration>,
    /// The thread runs (or failed to start: `Some(false)`).
    started: Option<bool>,
}

static STATE: Mutex<State> = Mutex::new(State {
    period: Some(DEFAULT_CHARGE_PERIOD),
    started: None,
});
static WAKE: Condvar = Condvar::new();

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Add a new record's feed to those the charger visits, and start the
/// charger if this is the first.
pub(crate) fn register(feed: &'static Mutex<Feed>) {
    lock(&FEEDS).push(feed);
    let mut s = lock(&STATE);
    if s.started.is_none() {
        // Under Miri there are no thread clocks to read, and a thread left
        // running at exit is an error.
        s.started = Some(
            !cfg!(miri)
                && std::thread::Builder::new()
                    .name("rstat-cpu-charger".into())
                    .spawn(run)
                    .is_ok(),
        );
    }
}

fn run() {
    let mut next = None::<Instant>;
    let mut s = lock(&STATE);
    loop {
        let Some(period) = s.period else {
            next = None;
            s = WAKE.wait(s).unwrap_or_else(|p| p.into_inner());
            continue;
        };
        let now = Instant::now();
        let due = *next.get_or_insert(now + period);
        if now < due {
            s = WAKE
                .wait_timeout(s, due - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            // Re-check: the period may have changed or been turned off.
            if s.period != Some(period) {
                next = None;
            }
            continue;
        }
        drop(s);
        charge_all_threads();
        next = Some(due.max(now) + period);
        s = lock(&STATE);
    }
}

/// Charge every thread that is inside a group for its CPU time up to now
/// (what the periodic charger does each period). Cost: one lock and one
/// `clock_gettime` of another thread's clock per such thread, and the
/// charge; for a thread that ran ten clock ticks since its user/system
/// split was last sampled, a read of its /proc `stat` file (see the
/// [module docs](super#cpu-time)).
pub fn charge_all_threads() {
    let feeds = lock(&FEEDS);
    for f in feeds.iter() {
        feed::charge_from_outside(f);
    }
}

/// Set the periodic charger's period (1 ms to 24 h), or stop it (`None`):
/// then a thread's time is charged only when its current group changes
/// (and by [`charge_all_threads`] / [`charge_this_thread`](super::charge_this_thread)).
/// Process-wide: the charger serves every engine.
///
/// Errors: [`Error::InvalidChargePeriod`] outside 1 ms to 24 h, changing
/// nothing.
pub fn set_charge_period(period: Option<Duration>) -> Result<()> {
    if let Some(p) = period {
        if p < Duration::from_millis(1) || p > Duration::from_secs(24 * 3600) {
            return Err(Error::InvalidChargePeriod { period: p });
        }
    }
    lock(&STATE).period = period;
    WAKE.notify_all();
    Ok(())
}

/// The periodic charger's period, or `None` if it is stopped or its
/// thread could not be started.
pub fn charge_period() -> Option<Duration> {
    let s = lock(&STATE);
    match s.started {
        Some(false) => None,
        _ => s.period,
    }
}
