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
//! wakes the futures due. Nothing here stops a poll in the middle: the
//! executor's other tasks run while a future is held.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Duration;

use super::clock;

thread_local! {
    /// Delay this thread's work owes, ns (no destructor, `const`).
    static PENALTY_NS: Cell<u64> = const { Cell::new(0) };
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
}

static TIMER: Mutex<Timer> = Mutex::new(Timer {
    due: BTreeMap::new(),
    seq: 0,
    started: false,
});
static TICK: Condvar = Condvar::new();

fn lock() -> MutexGuard<'static, Timer> {
    TIMER.lock().unwrap_or_else(|p| p.into_inner())
}

/// Wake `waker` once the monotonic clock reaches `deadline` (ns).
pub(crate) fn wake_at(deadline: u64, waker: &Waker) {
    // The timer's memory is the crate's, not the polling group's.
    crate::sync::untracked(|| {
        let mut t = lock();
        if !t.started {
            t.started = std::thread::Builder::new()
                .name("rstat-throttle".into())
                .spawn(run)
                .is_ok();
            if !t.started {
                // No timer thread: wake at once (the hold is then a yield).
                drop(t);
                waker.wake_by_ref();
                return;
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
