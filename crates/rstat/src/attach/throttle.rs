//! Delaying work over a limit: `memory.high`'s penalty and `cpu.max`'s
//! deferral, for scoped futures and threads.
//!
//! - **The penalty** (the kernel's `mem_cgroup_handle_over_high`, which
//!   it applies on a task's return to user space): the memory controller
//!   adds a delay to the allocating thread's pending penalty
//!   ([`add_penalty`]) when a charge leaves a group above `memory.high`
//!   after its reclaimers ran. It is never slept inside the allocator. A
//!   scoped future's poll takes what its own poll added and, if the poll
//!   returned pending, holds its next poll back by that much (the future
//!   is woken when the delay is over); a thread sleeps its pending penalty
//!   where it calls [`throttle_point`].
//! - **`cpu.max`**: a scoped future whose group (or an ancestor) spent its
//!   quota for the period returns pending before polling, and is woken at
//!   the period's end (see `group::bandwidth`).
//!
//! Both wake through one timer thread per process ("rstat-throttle",
//! started at its first use), which sleeps until the earliest deadline and
//! wakes the futures due; a held future polled again before its deadline
//! registers no second wake. (If the thread cannot be started, nothing is
//! held.) A task dropped while held stays referenced by its waker until
//! the deadline (at most [`MAX_PENALTY`] or a period). Nothing here stops
//! a poll in the middle: the executor's other tasks run while a future is
//! held.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Duration;

use super::clock;

thread_local! {
    /// Delay this thread's work owes, ns (no destructor, `const`).
    static PENALTY_NS: Cell<u64> = const { Cell::new(0) };
    /// CPU ns the scoped polls nested in the current timed poll were
    /// timed for; `u64::MAX` when no timed poll is running on this thread.
    static NESTED_NS: Cell<u64> = const { Cell::new(u64::MAX) };
}

/// A timed poll in progress: (the enclosing poll's nested total, or
/// `u64::MAX` if none; the thread's CPU clock at the start).
pub(crate) struct Timing(u64, u64);

/// Start timing a scoped poll if it is `limited` or nested in a timed one:
/// `None` if it need not be timed.
#[inline]
pub(crate) fn timing_begin(limited: bool) -> Option<Timing> {
    let outer = NESTED_NS.try_with(Cell::get).unwrap_or(u64::MAX);
    if !limited && outer == u64::MAX {
        return None;
    }
    let t0 = clock::thread_cpu_ns()?;
    let _ = NESTED_NS.try_with(|c| c.set(0));
    Some(Timing(outer, t0))
}

/// End a timed poll: its own CPU time (less its nested scoped polls'),
/// and add its whole time to the enclosing timed poll's nested total.
/// `None` if it was not timed or the clock failed.
#[inline]
pub(crate) fn timing_end(t: Option<Timing>) -> Option<u64> {
    let Timing(outer, t0) = t?;
    let nested = NESTED_NS.try_with(Cell::get).unwrap_or(0);
    let t1 = clock::thread_cpu_ns();
    let total = t1.map_or(0, |t1| t1.saturating_sub(t0));
    let _ = NESTED_NS.try_with(|c| {
        c.set(if outer == u64::MAX {
            u64::MAX
        } else {
            outer.saturating_add(total)
        })
    });
    t1.map(|_| total.saturating_sub(nested.min(total)))
}

/// The most one penalty holds a future or a thread back (the kernel's
/// 2 s cap).
pub const MAX_PENALTY: Duration = Duration::from_secs(2);

/// Add `ns` to the calling thread's pending penalty (capped at
/// [`MAX_PENALTY`]).
pub(crate) fn add_penalty(ns: u64) {
    let cap = MAX_PENALTY.as_nanos() as u64;
    let _ = PENALTY_NS.try_with(|p| p.set(p.get().saturating_add(ns).min(cap)));
}

/// Take the calling thread's pending penalty, ns.
pub(crate) fn take_penalty() -> u64 {
    PENALTY_NS.try_with(|p| p.replace(0)).unwrap_or(0)
}

/// Put back a penalty taken by [`take_penalty`] (one that belongs to the
/// thread's own work around a scoped poll).
pub(crate) fn restore_penalty(ns: u64) {
    if ns != 0 {
        add_penalty(ns);
    }
}

/// The calling thread's pending penalty, without taking it.
pub fn pending_penalty() -> Duration {
    Duration::from_nanos(PENALTY_NS.try_with(Cell::get).unwrap_or(0))
}

/// Sleep the calling thread's pending penalty (the delay `memory.high`
/// imposed on what it allocated since its last call) and clear it; call
/// it where the thread may wait: between requests, at a loop's head.
/// Returns the time slept (zero if none was owed). Scoped futures need no
/// call: their polls are held back instead (module docs).
pub fn throttle_point() -> Duration {
    let ns = take_penalty();
    if ns == 0 {
        return Duration::ZERO;
    }
    let d = Duration::from_nanos(ns);
    let g = super::current::current_group_ptr();
    if !g.is_null() {
        let now = clock::mono_ns();
        // SAFETY: the current group is kept allocated by the guard that
        // made it current, for as long as it is current (this call); the
        // borrowed handle is never dropped (`ManuallyDrop`).
        let g = unsafe {
            crate::group::Group::borrow_ptr(core::ptr::NonNull::new_unchecked(g.cast_mut()))
        };
        g.record_stall(
            crate::group::PressureKind::Memory,
            now,
            now.saturating_add(ns),
            false,
        );
    }
    std::thread::sleep(d);
    d
}

/// The timer: wakers by (deadline ns of the monotonic clock, sequence).
struct Timer {
    due: BTreeMap<(u64, u64), Waker>,
    seq: u64,
    started: bool,
    /// The thread could not be started: no holds in this process.
    failed: bool,
}

static TIMER: Mutex<Timer> = Mutex::new(Timer {
    due: BTreeMap::new(),
    seq: 0,
    started: false,
    failed: false,
});
static TICK: Condvar = Condvar::new();

fn lock() -> MutexGuard<'static, Timer> {
    TIMER.lock().unwrap_or_else(|p| p.into_inner())
}

/// Wake `waker` once the monotonic clock reaches `deadline` (ns). False
/// if there is no timer thread (it could not be started): then nothing is
/// registered, and the caller must not hold its future.
pub(crate) fn wake_at(deadline: u64, waker: &Waker) -> bool {
    if cfg!(miri) {
        // Miri reports a thread left running at exit: no timer thread
        // there. The hold stands and ends at the first poll past its
        // deadline (tests poll by hand); nothing wakes the task for it.
        let _ = (deadline, waker);
        return true;
    }
    // The timer's memory is the crate's, not the polling group's.
    crate::sync::untracked(|| {
        let mut t = lock();
        if t.failed {
            return false;
        }
        if !t.started {
            t.started = std::thread::Builder::new()
                .name("rstat-throttle".into())
                .spawn(run)
                .is_ok();
            if !t.started {
                t.failed = true;
                return false;
            }
        }
        let seq = t.seq;
        t.seq += 1;
        let first = t.due.keys().next().is_none_or(|&(d, _)| deadline < d);
        t.due.insert((deadline, seq), waker.clone());
        drop(t);
        if first {
            TICK.notify_one();
        }
        true
    })
}

fn run() {
    let mut t = lock();
    loop {
        let now = clock::mono_ns();
        let mut ready = Vec::new();
        while let Some((&(d, s), _)) = t.due.iter().next() {
            if d > now {
                break;
            }
            if let Some(w) = t.due.remove(&(d, s)) {
                ready.push(w);
            }
        }
        let next = t.due.keys().next().map(|&(d, _)| d);
        if !ready.is_empty() {
            drop(t);
            for w in ready {
                w.wake();
            }
            t = lock();
            continue;
        }
        t = match next {
            Some(d) => {
                TICK.wait_timeout(t, Duration::from_nanos(d.saturating_sub(now)))
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
            None => TICK.wait(t).unwrap_or_else(|p| p.into_inner()),
        };
    }
}
