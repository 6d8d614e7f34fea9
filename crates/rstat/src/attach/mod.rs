//! Attach a program to groups: the current group of a thread.
//!
//! `let _g = group.enter();` makes `group` the calling thread's *current
//! group* until the guard drops; [`current_group`] returns it. This is how
//! work done by a thread is attributed to a tenant, a request or a job: the
//! accounting allocator charges the current group, and so on.
//!
//! # Entering and leaving
//!
//! 1. [`Group::enter`] takes a reference on the group (the guard holds it),
//!    pushes it on the thread's stack of entered groups and makes it
//!    current.
//! 2. Guards nest: dropping the innermost guard makes the group entered
//!    before it current again.
//! 3. The guard is `!Send`: it belongs to the thread that entered (see the
//!    compile-fail example on [`EnterGuard`]).
//!
//! A thread that never entered a group, or left them all, is in no group:
//! [`current_group`] returns `None`, and an engine treats the thread as in
//! its root ([`Rstat::current_group`](crate::Rstat::current_group)).
//!
//! # CPU time
//!
//! The time a thread spends inside a group is charged to the group's `cpu`
//! stats (`usage_usec`, `user_usec`, `system_usec`, as in the kernel's
//! `cpu.stat`), cut from the thread's own CPU clock
//! (`CLOCK_THREAD_CPUTIME_ID`, a system call) without reading it at each
//! change of the current group:
//!
//! 1. whenever the thread's current group changes (an enter of another
//!    group, a guard's drop), it reads a wall clock, no system call: the
//!    TSC where the kernel keeps time with it, scaled to nanoseconds,
//!    else the vDSO's monotonic clock ([`switch_clock`] says which), and
//!    adds the wall time since the last change to the
//!    group it leaves: a *segment*, kept in the thread's record (up to
//!    32 groups, each held by a reference); entering the group that is
//!    already current reads nothing;
//! 2. at a *reconciliation* the thread's CPU clock is read once, and the
//!    CPU time since the last one is shared among the segments by their
//!    wall times: no segment gets more than its wall time, and the time
//!    the thread did not run (it blocked or was preempted) is taken from
//!    the longest segments first (see `apportion.rs`). A thread
//!    reconciles at a change of group once [`RECONCILE_PERIOD`] of wall
//!    time passed since its last reconciliation, at a change that ends a
//!    stay of [`LONG_SEGMENT`] or more in one group (even one the
//!    periodic charger reconciled in the middle), when its segment table is
//!    full, when it leaves a removed group, at exit, and at
//!    [`charge_this_thread`];
//! 3. a periodic charger thread ([`set_charge_period`], default
//!    [`DEFAULT_CHARGE_PERIOD`], 1 s) reconciles each thread from outside
//!    (its clock through `pthread_getcpuclockid`), so a thread that stays
//!    inside a group for minutes shows its time within one period
//!    ([`charge_all_threads`] does the same on demand).
//!
//! **Exactness.** At every reconciliation a thread's charges, with the
//! time it spent in no group, sum to its CPU time to the microsecond: the
//! µs boundaries its clock crossed since the last one are shared out
//! whole (largest remainders), so nothing is lost or counted twice, and a
//! thread that stays in one group (a hog) is charged its own clock.
//!
//! **Error model.** Between two reconciliations the split among groups is
//! an estimate from wall time. It is exact when the thread ran all along,
//! and when the time it did not run falls in the longest segment (a
//! request that sleeps, waits or is preempted for longer than the others
//! around it ran). Otherwise a group can be charged up to the wall time
//! of its segments shorter than [`LONG_SEGMENT`] in that interval that
//! the thread did not run (preemption inside short segments), taken from
//! another group's: the error is bounded by what happens within one
//! reconciliation period per thread, and per group it is at most the
//! off-CPU time inside its short segments. A segment of [`LONG_SEGMENT`]
//! or more ends a reconciliation, so it shares its interval only with
//! the short segments before it. `rstat bench enter` measures the error
//! on a mix of CPU-bound and sleeping requests.
//!
//! **Removed groups.** A segment holds a reference on its group until the
//! next reconciliation, so a group removed after a thread left it stays
//! a zombie ([`Rstat::zombie_count`](crate::Rstat::zombie_count)) until
//! that thread reconciles: within [`RECONCILE_PERIOD`] while it changes
//! groups, else within the charge period ([`charge_this_thread`] or
//! [`charge_all_threads`] at once).
//!
//! **The root is the process.** Time outside every group is charged to
//! no group; a read of the root's `cpu` stats takes the process's CPU
//! clock (`CLOCK_PROCESS_CPUTIME_ID`: every thread, those that never
//! touched rstat and those that exited too) as the root's `usage_usec`,
//! and the root's own time is that less its children's, split into user
//! and system time by the process's `getrusage`. So a parent's total is
//! still its own plus its children's, at the root too.
//!
//! **A cheaper mode.** [`CpuMode::Sampled`] ([`set_cpu_mode`]) reads no
//! clock on enter or exit (a lock and a store instead of a system
//! call): the charger attributes each period's time to the group
//! current at its end, off by up to one period at each end of a stay in
//! a group (see [`CpuMode`] for its error). `rstat bench enter` measures
//! both side by side.
//!
//! **User and system time.** The kernel only samples a thread's
//! user/system split at ticks and scales it to the runtime, and reading it
//! costs a system call more. So charges follow the thread's split as of
//! its last sample: each charge is split so that the user µs counted for
//! the thread since it first entered a group (its charges, and its time in
//! no group split the same way) come as near as the charge allows to the
//! share of user time its samples show over that time (computed from the
//! samples' microseconds, so a thread that lived for days is split as
//! finely as a new one), and
//! `user_usec + system_usec == usage_usec` always. With a fresh sample
//! that is the interval's own split; a charge made with an older one (or,
//! before the first, with the thread's split of its life so far) is made
//! good by the next charges. Samples are taken
//!
//! - by the thread, at its reconciliations (`getrusage(RUSAGE_THREAD)`,
//!   to the µs), once 10 ms of its CPU time passed since the last sample;
//! - by the periodic charger (and [`charge_all_threads`]), at its charges
//!   (the thread's `/proc/self/task/TID/stat`, in whole clock ticks, 10 ms
//!   at the usual 100 Hz), once the thread ran ten ticks since the last
//!   sample.
//!
//! So the split of a thread's charges lags what the thread does by at
//! most 10 ms of its CPU time when it reconciles itself, and by at most
//! ten ticks (100 ms) inside a long stay charged by the charger; the
//! charges after a sample make up the difference, so a stay is split by
//! its own user and system time except for what was charged in it before
//! its first sample. A sample from /proc is short by less than one tick
//! in each figure, of the thread's whole time since its first enter.
//! Where /proc cannot be read, long stays keep the split of the thread's
//! last own sample until it reconciles itself.
//!
//! # Two periods
//!
//! Two background threads run on a timer, with two separate settings:
//!
//! | thread | default period | what the period bounds | set with |
//! |---|---|---|---|
//! | the CPU-time charger (this module, one per process) | [`DEFAULT_CHARGE_PERIOD`] (1 s) | how long a thread that stays inside a group runs uncharged: CPU time not yet in any counter | [`set_charge_period`] |
//! | the root flusher (one per engine) | [`DEFAULT_FLUSH_PERIOD`](crate::DEFAULT_FLUSH_PERIOD) (2 s, the kernel's) | how long charged updates of every controller wait in per-CPU counters before a flush folds them into the totals, whatever the flush policy | [`Builder::periodic_flush`](crate::Builder::periodic_flush), [`Rstat::set_periodic_flush`](crate::Rstat::set_periodic_flush) |
//!
//! They are two concepts, not one: the charger turns CPU time into
//! updates, for every engine at once and only for attached threads; the
//! flusher turns updates into totals, for one engine and every controller,
//! attached or not. Turning either off leaves the other's bound intact. An
//! attached thread's CPU time passes both: it is charged within one charge
//! period, and from then on an exact read
//! ([`read_exact`](crate::ControllerHandle::read_exact)) shows it, and any
//! read does after the next periodic flush.
//!
//! # Async tasks
//!
//! An executor polls a task on whichever worker is free, so a thread's
//! current group says nothing about a task. [`Group::scope`] (or
//! [`FutureExt::in_group`]) wraps a future so that each poll enters the
//! group: the poll's CPU time is charged to it and whatever the poll
//! allocates sees it as current. It relies only on `poll`, so it works on
//! any executor, with tasks migrating between workers.
//!
//! **Spawned tasks do not inherit a group.** A task spawned from inside a
//! scoped future is polled by the executor on its own, outside this
//! future's polls, so it runs in no group. Pass the group on explicitly:
//! `spawn(group.scope(fut))`, or `spawn(fut.in_current_group())`, which
//! captures the group current where the future is *created* (inside a
//! scoped poll: the scope's group).
//!
//! # At the edges
//!
//! - **Guards dropped out of order.** The current group is always the
//!   group of the innermost guard still alive. Dropping a guard that is
//!   not the innermost removes only its own level: nothing changes until
//!   the inner guards drop too (entered A, then B; dropping A keeps B
//!   current; dropping B then leaves the thread in no group).
//! - **A guard that is leaked** (`mem::forget`) keeps its level on the
//!   thread's stack for the rest of the thread: its group is current
//!   whenever no level above it is (like a leaked lock guard keeps its
//!   lock), and its reference is never dropped. The thread is charged up
//!   to its exit.
//! - **Removed groups.** [`Group::enter`] on a group that was removed
//!   enters its nearest live ancestor instead (the root is live while its
//!   `Rstat` is); [`Group::try_enter`] refuses with [`Error::Removed`]
//!   instead. A group removed while threads are inside stays current for
//!   them: what they charge to it reaches its ancestors' totals and, when
//!   its last reference drops, its parent's (a removed subtree loses no
//!   history), so nothing is lost.
//! - **Groups of another `Rstat`.** A thread has one current group, of any
//!   engine: entering a group of engine B inside a group of engine A makes
//!   B's group current; A's group is current again when that guard drops.
//!   [`Rstat::current_group`](crate::Rstat::current_group) of engine A
//!   answers A's root while the thread is in B's group.
//! - **A guard held across `.await`.** An [`EnterGuard`] is `!Send`, so a
//!   future that holds one across an `.await` cannot be spawned on a
//!   multi-threaded executor. On a single-threaded one (a `LocalSet`, a
//!   `block_on`), though, the thread stays in the guard's group while the
//!   future is suspended, and the other tasks that thread polls meanwhile
//!   are charged to it. In async code use [`Group::scope`] /
//!   [`FutureExt::in_group`], which enter only around each poll, never a
//!   guard held across `.await`.
//! - **Thread exit.** A thread whose guard is still alive when its
//!   thread-locals are destroyed (a guard kept in a thread-local, or
//!   leaked) keeps that group current through the destructors; the
//!   thread's record goes back to a pool once its last guard is gone.
//!
//! # Cost
//!
//! | call | cost |
//! |---|---|
//! | [`Group::enter`] | a group reference (one uncontended add on this CPU's slot), a push on the thread's stack (allocation-free after the first few levels), two thread-local stores; the first enter on a thread also takes a record from a pool (a lock, at most one allocation) |
//! | dropping an [`EnterGuard`] | a pop (a scan when dropped out of order), a thread-local store, the reference put |
//! | [`current_group`] | a thread-local load and, when in a group, a reference get |
//! | a change of the current group (enter of another group, drop back to another) | one wall clock read (an `rdtsc` where the kernel's clocksource is the TSC, else `clock_gettime(CLOCK_MONOTONIC)` in the vDSO: [`switch_clock`]), an uncontended lock, a scan of the thread's segments (at most 32); a group's first segment since the last reconciliation also takes a reference on it |
//! | a reconciliation (each [`RECONCILE_PERIOD`] of wall time at a change, at a change ending a stay of [`LONG_SEGMENT`] or more, a full table) | one `clock_gettime(CLOCK_THREAD_CPUTIME_ID)` system call, the charge of each segment's group (three counter updates), the segments' references put; once per 10 ms of the thread's CPU time a `getrusage` |
//! | a read of the root's `cpu` stats | the read, plus `clock_gettime(CLOCK_PROCESS_CPUTIME_ID)` and `getrusage` |
//! | a poll of a [`Scoped`] or [`Killable`] future | the change of group in and out (above); a [`Killable`] also one load of the kill flag; under a `cpu.max` ([`Group::set_cpu_max`]) two reads of the thread's CPU clock and the quota's atomics; a held poll (a `memory.high` penalty or a spent quota) a monotonic clock read and a timer entry (one lock), and no poll of the inner future |
//! | [`current_killed`] | a thread-local load and one load of the group's flag |
//! | [`throttle_point`] | a thread-local swap, and a sleep of what `memory.high` imposed |
//! | the periodic charger | per period, per thread inside a group or with segments: a lock, a `clock_gettime` of that thread's clock, a reconciliation; once per ten clock ticks of the thread's CPU time a read of its /proc `stat` file, under the lock (the thread's next group change may wait for it) |
//!
//! # Synchronization
//!
//! The current group and the stack are per thread and touched only by
//! their thread, so they need no atomics. The feed (which group the
//! thread's time goes to, its segments, and up to which clock reading it
//! was charged) is shared with the periodic charger under a per-thread lock; see
//! `feed.rs` for why the charger never touches a freed group or a dead
//! thread's clock. A thread's record moves between
//! threads only through the pool's lock. The group a stack entry points at
//! stays allocated because its guard holds a reference, which it drops
//! only after the entry is gone and the current group updated.

mod apportion;
mod charger;
mod clock;
pub(crate) mod current;
mod feed;
mod scope;
pub(crate) mod throttle;
mod tick;

use core::marker::PhantomData;

use crate::controller::ItemHandle;
use crate::engine::Rstat;
use crate::error::{Error, Result};
use crate::group::Group;
use current::Level;

pub use charger::{charge_all_threads, charge_period, set_charge_period, DEFAULT_CHARGE_PERIOD};
pub use clock::thread_cpu_time;
pub use feed::{cpu_mode, set_cpu_mode, CpuMode, LONG_SEGMENT, RECONCILE_PERIOD};
pub use scope::{FutureExt, Killable, Scoped};
pub use throttle::{pending_penalty, throttle_point, MAX_PENALTY};
pub use tick::source as switch_clock;

/// Charge the calling thread's current group for its CPU time up to now,
/// without leaving it (a guard's drop and the periodic charger do this
/// too). Cost: one `clock_gettime` and a lock, and the charge.
pub fn charge_this_thread() {
    current::charge_this_thread();
}

// The accounting allocator's read of the current group (`memory::alloc`).
#[allow(unused_imports)]
pub(crate) use current::current_group_ptr;

// Test hooks (`testing`).
pub(crate) use clock::own_clock_reads;

/// The calling thread's ledger (`testing::this_thread_cpu_ledger`): its
/// CPU clock at its record's start and at its last reconciliation (ns),
/// and the µs apportioned to time in no group.
pub(crate) fn this_thread_ledger() -> Option<(u64, u64, u64)> {
    let r = current::CURRENT.try_with(|c| c.rec.get()).ok()?;
    if r.is_null() {
        return None;
    }
    // SAFETY: records are never freed.
    let f = feed::lock(&unsafe { &*r }.feed);
    Some((f.start_ns, f.since_ns, f.unattributed_us))
}

#[cfg(all(test, not(rstat_loom)))]
mod tests;

/// The calling thread's current group: the group of its innermost live
/// [`EnterGuard`], or `None` if it is in no group (then each engine counts
/// it in its root: see [`Rstat::current_group`]). The group may belong to
/// any engine. Cost: a thread-local load and, when in a group, a reference
/// get (one uncontended add on this CPU's slot).
///
/// ```
/// let rs = rstat::Rstat::new();
/// let tenant = rs.root().create_child("tenant")?;
/// assert_eq!(rstat::current_group(), None);
/// {
///     let _g = tenant.enter();
///     assert_eq!(rstat::current_group(), Some(tenant.clone()));
/// }
/// assert_eq!(rstat::current_group(), None);
/// # Ok::<(), rstat::Error>(())
/// ```
pub fn current_group() -> Option<Group> {
    current::current_group()
}

/// Whether the calling thread's current group was killed
/// ([`Group::kill`]): the cheap check a thread makes where it can stop
/// (one thread-local load and one load of the group's flag; false in no
/// group).
#[inline]
pub fn current_killed() -> bool {
    let g = current::current_group_ptr();
    // SAFETY: the current group is kept allocated by the guard or scoped
    // poll that made it current (see `current_group_ptr`).
    !g.is_null() && unsafe { &*g }.is_killed()
}

/// Keeps a group current on this thread while it lives; see
/// [`Group::enter`] and the [module docs](self).
///
/// The guard is neither `Send` nor `Sync`: the group is current on the
/// thread that entered it, and only that thread can leave it.
///
/// ```compile_fail,E0277
/// let rs = rstat::Rstat::new();
/// let g = rs.root().create_child("a").unwrap();
/// let guard = g.enter();
/// std::thread::spawn(move || drop(guard)); // error: `*const ()` cannot be sent
/// ```
#[must_use = "the group is current only while the guard lives; `let _g = group.enter();`"]
pub struct EnterGuard {
    /// The level on the thread's stack; dropped first (fields drop in
    /// declaration order), so the group is no longer current when its
    /// reference goes. Held for its `Drop`.
    #[allow(dead_code)]
    level: Level,
    /// The entered group; the reference keeps it allocated while the
    /// level exists.
    group: Group,
    /// `!Send` and `!Sync` (the raw pointer above already is; explicit for
    /// readers).
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for EnterGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnterGuard")
            .field("group", &self.group)
            .finish()
    }
}

impl EnterGuard {
    /// The group this guard entered (for a removed group, the live
    /// ancestor [`Group::enter`] fell back to).
    pub fn group(&self) -> &Group {
        &self.group
    }
}

impl Group {
    /// Make this group the calling thread's current group until the
    /// returned guard drops (see the [module docs](crate::attach)).
    ///
    /// A removed group is not entered: its nearest live ancestor is
    /// ([`EnterGuard::group`] says which); use [`try_enter`](Self::try_enter)
    /// to get an error instead. Never fails, never panics.
    ///
    /// Cost: a reference get, a push on the thread's stack, two
    /// thread-local stores; the thread's first enter also takes a record
    /// from a process-wide pool (one lock, at most one allocation).
    ///
    /// ```
    /// let rs = rstat::Rstat::new();
    /// let a = rs.root().create_child("a")?;
    /// let b = a.create_child("b")?;
    /// let outer = a.enter();
    /// {
    ///     let _inner = b.enter();
    ///     assert_eq!(rstat::current_group(), Some(b.clone()));
    /// }
    /// assert_eq!(rstat::current_group(), Some(a.clone()));
    /// drop(outer);
    /// # Ok::<(), rstat::Error>(())
    /// ```
    pub fn enter(&self) -> EnterGuard {
        let mut g = self;
        while !g.is_online() {
            match g.parent_ref() {
                Some(p) => g = p,
                // A root taken offline (its `Rstat` was dropped): enter it
                // anyway; charges to it are kept as for any removed group.
                None => break,
            }
        }
        push(g.clone())
    }

    /// As [`enter`](Self::enter), but a removed group is an error
    /// ([`Error::Removed`]) instead of entering its nearest live ancestor,
    /// and so is a killed one ([`Error::Killed`]: [`Group::kill`] is
    /// final, new work belongs in a new group; `enter` still enters it, for
    /// work that must unwind inside it). The group may still be removed or
    /// killed while the guard lives (see the [module docs](crate::attach)).
    pub fn try_enter(&self) -> Result<EnterGuard> {
        if !self.is_online() {
            return Err(Error::Removed {
                path: self.inner().path(),
            });
        }
        if self.is_killed() {
            return Err(Error::Killed {
                path: self.inner().path(),
            });
        }
        Ok(push(self.clone()))
    }
}

/// Push `group` on this thread's stack and make it current.
fn push(group: Group) -> EnterGuard {
    // SAFETY: the guard holds `group` and drops the level first (field
    // order).
    let level = unsafe { Level::push(group.inner_ptr().as_ptr()) };
    EnterGuard {
        level,
        group,
        _not_send: PhantomData,
    }
}

impl Rstat {
    /// The calling thread's current group in this engine: its current
    /// group if that is one of this engine's, else this engine's root (a
    /// thread in no group, or in another engine's group, counts in the
    /// root). Cost: as [`current_group`].
    pub fn current_group(&self) -> Group {
        match current_group() {
            Some(g) if g.belongs_to(self) => g,
            _ => self.root().clone(),
        }
    }
}

impl ItemHandle {
    /// Add `delta` to this item of the calling thread's current group in
    /// this item's engine: the group of its innermost live [`EnterGuard`]
    /// (or scoped poll, or tracing span) if that is one of this engine's,
    /// else the engine's root, as [`Rstat::current_group`] answers. So a
    /// thread in no group, or in another engine's group, counts in the
    /// root; a current group that was removed while the thread is inside
    /// is charged, and its history reaches its parent (as every update of
    /// a removed group does). Cannot fail.
    ///
    /// Cost: [`current_group`]'s thread-local load without its reference
    /// get, an engine compare, the group's entry for this controller (one
    /// load), then the update of
    /// [`ControllerHandle::add`](crate::ControllerHandle::add): no lock,
    /// no allocation, no reference count touched.
    #[inline]
    pub fn add_current(&self, delta: i64) {
        let g = current_group_ptr();
        // SAFETY: a non-null current group stays allocated until this
        // thread next enters or leaves a group (the guard that made it
        // current holds a reference; see `current_group_ptr`), and
        // `add_to_ptr` does neither.
        unsafe { self.add_to_ptr(g, delta) };
    }
}

impl Group {
    /// The parent, without taking a reference.
    pub(crate) fn parent_ref(&self) -> Option<&Group> {
        self.inner().parent.as_ref()
    }

    /// Whether this group belongs to `rs`.
    pub fn belongs_to(&self, rs: &Rstat) -> bool {
        std::sync::Arc::ptr_eq(&self.inner().engine, &rs.root().inner().engine)
    }
}
