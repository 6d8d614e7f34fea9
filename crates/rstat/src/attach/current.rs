//! The thread's current group: a destructor-free thread-local, the
//! per-thread record that holds the stack of entered groups, and a level
//! on that stack ([`Level`]: what an enter guard and a scoped future's poll
//! hold, pushed on entry and popped on drop).
//!
//! Two thread-locals, on purpose:
//!
//! - `CURRENT` is `const`-initialised, holds only `Cell`s of raw pointers
//!   and has no destructor, so std keeps it in a plain `#[thread_local]`
//!   slot: reading it never allocates, never registers anything, never
//!   panics, and works before `main`, in other thread-locals' destructors
//!   and during thread exit. The global allocator reads it
//!   ([`current_group_ptr`]).
//! - `EXIT` is a zero-sized value whose destructor tells the record the
//!   thread is exiting. It is touched once per thread, when the thread
//!   first enters a group.
//!
//! The record ([`ThreadRec`]) lives in a process-wide pool and is never
//! freed: a thread takes one at its first enter and gives it back when it
//! has exited and left its last group. `CURRENT.rec` points at it, so a
//! guard can reach its record in any phase of the thread's life.

use std::cell::{Cell, UnsafeCell};
use std::ptr::{self, NonNull};
use std::sync::Mutex;

use super::charger;
use super::clock::{self, SplitSample};
use super::feed::{self, Feed};
use super::tick;
use crate::group::{Group, GroupInner};

/// The thread's current group and record. No destructor (checked below).
pub(crate) struct Current {
    /// The innermost entered group (the top of the record's stack), or
    /// null when the thread is in no group. The stack entry's guard holds
    /// a reference on it.
    pub(crate) group: Cell<*const GroupInner>,
    /// This thread's record, or null before the first enter (and after it
    /// was given back).
    pub(crate) rec: Cell<*const ThreadRec>,
}

// The allocator's contract depends on this: a thread-local without a
// destructor is never "destroyed", so `try_with` on it cannot fail.
const _: () = assert!(!std::mem::needs_drop::<Current>());

thread_local! {
    pub(crate) static CURRENT: Current = const {
        Current { group: Cell::new(ptr::null()), rec: Cell::new(ptr::null()) }
    };
}

/// Marks the thread's record as exited when the thread's thread-locals are
/// destroyed.
struct ExitHook;

impl Drop for ExitHook {
    fn drop(&mut self) {
        thread_exiting();
    }
}

thread_local! {
    static EXIT: ExitHook = const { ExitHook };
}

/// The calling thread's current group, for code that may not allocate,
/// touch a reference count or panic: the accounting allocator's
/// `GlobalAlloc::alloc` / `dealloc` hooks.
///
/// Returns null when the thread is in no group (it never entered one, or
/// it left them all); callers then use their engine's default (the root).
///
/// Contract:
/// - **Cost**: one thread-local load (`const`-initialised, no destructor,
///   so no lazy-init check and no registration). No allocation, no
///   atomic, no lock, no panic.
/// - **When**: any time on any thread: before `main`, in thread-local
///   destructors, during thread exit (the slot has no destructor, so it is
///   never torn down); before the first enter it is null.
/// - **Validity**: a non-null result points at a live `GroupInner`: the
///   guard that made it current holds a reference, and a guard only drops
///   that reference *after* it has made another group current. So the
///   pointer may be dereferenced until this thread next enters or leaves a
///   group. It must not be handed to another thread or kept past that
///   point without taking a reference (`Group::clone_from_ptr`).
/// - **Which engine**: the group may belong to any `Rstat`; compare
///   `(*ptr).engine` with the caller's engine before charging it.
/// - **Removed groups**: the group may be offline (removed while the
///   thread was inside): charging it is still right, its totals fold into
///   its parent when its last reference drops.
#[inline(always)]
pub(crate) fn current_group_ptr() -> *const GroupInner {
    // `try_with` cannot fail on a slot without a destructor; null keeps
    // even that impossible case panic-free.
    CURRENT.try_with(|c| c.group.get()).unwrap_or(ptr::null())
}

/// One entered level of a thread's stack.
#[derive(Clone, Copy)]
pub(crate) struct Entry {
    /// The guard's token, unique on this record.
    pub(crate) token: u64,
    /// The group, referenced by the guard.
    pub(crate) group: *const GroupInner,
}

/// State only the record's owning thread touches.
pub(crate) struct Owner {
    /// Entered groups, innermost last.
    pub(crate) stack: Vec<Entry>,
    pub(crate) next_token: u64,
    /// The thread's thread-locals are being destroyed (or already were
    /// when it first entered): give the record back once the stack is
    /// empty.
    pub(crate) exited: bool,
}

/// A thread's attach state. Lives in [`POOL`]'s storage for the rest of
/// the process (leaked, reused by later threads).
pub(crate) struct ThreadRec {
    /// Only the owning thread (the one whose `CURRENT.rec` points here)
    /// reads or writes it.
    owner: UnsafeCell<Owner>,
    /// Where the thread's CPU time goes; shared with the periodic charger.
    pub(crate) feed: Mutex<Feed>,
}

// SAFETY: `owner` is accessed only by the thread the record is assigned
// to; assignment changes hands under `POOL`'s lock, which orders the
// previous owner's last access before the next owner's first.
unsafe impl Sync for ThreadRec {}

impl ThreadRec {
    /// # Safety
    /// The caller is the owning thread and holds no other reference from
    /// `owner_mut` (each call site uses it and lets it go).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn owner_mut(&self) -> &mut Owner {
        // SAFETY: per the caller's contract, exclusive access.
        unsafe { &mut *self.owner.get() }
    }
}

/// Free records, for reuse by new threads.
static POOL: Mutex<Vec<&'static ThreadRec>> = Mutex::new(Vec::new());

fn lock_pool() -> std::sync::MutexGuard<'static, Vec<&'static ThreadRec>> {
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// This thread's record, taken from the pool (or made) at the first call.
/// `None` only if the thread-local is unavailable, which cannot happen
/// (it has no destructor).
pub(crate) fn this_thread_rec() -> Option<&'static ThreadRec> {
    CURRENT
        .try_with(|c| {
            let r = c.rec.get();
            if !r.is_null() {
                // SAFETY: records are never freed.
                return unsafe { &*r };
            }
            let pooled = lock_pool().pop();
            let rec: &'static ThreadRec = match pooled {
                Some(r) => r,
                None => {
                    let r: &'static ThreadRec = Box::leak(Box::new(ThreadRec {
                        owner: UnsafeCell::new(Owner {
                            stack: Vec::with_capacity(8),
                            next_token: 0,
                            exited: false,
                        }),
                        feed: Mutex::new(Feed::new()),
                    }));
                    charger::register(&r.feed);
                    r
                }
            };
            // Register the exit hook; if this thread's thread-locals are
            // already being destroyed, it never runs: the thread counts as
            // exited from the start, and the charger must not read its
            // clock (it may die without telling).
            let hooked = EXIT.try_with(|_| ()).is_ok();
            let now = clock::thread_cpu_ns().unwrap_or(0);
            let wall = tick::now_ns();
            let split = SplitSample::first(now);
            // SAFETY: the record was just taken from the pool, so this
            // thread is its only user.
            let owner = unsafe { rec.owner_mut() };
            owner.exited = !hooked;
            let mut f = feed::lock(&rec.feed);
            debug_assert!(f.group.is_null(), "a pooled record was in a group");
            let ids = if hooked { clock::own_ids() } else { None };
            f.restart(now, wall, ids, split);
            drop(f);
            c.rec.set(rec);
            rec
        })
        .ok()
}

/// The thread's thread-locals are being destroyed: remember it, and give
/// the record back now if no guard is alive (else the last guard's drop
/// does).
fn thread_exiting() {
    let _ = CURRENT.try_with(|c| {
        let r = c.rec.get();
        if r.is_null() {
            return;
        }
        // SAFETY: records are never freed; this thread owns it.
        let rec = unsafe { &*r };
        // SAFETY: we own the record; the borrow ends in this block.
        let owner = unsafe { rec.owner_mut() };
        owner.exited = true;
        // Charge up to now, and stop the charger reading this thread's
        // clock before the thread can die. Guards that drop later (in other
        // thread-locals' destructors) still charge from their own clock
        // reads.
        let (mut f, released) = charged_to_now(rec, owner);
        f.thread = None;
        drop(f);
        drop(released);
        if owner.stack.is_empty() {
            release_rec(c, rec);
        }
    });
}

/// Give `rec` back to the pool (its stack is empty).
pub(crate) fn release_rec(c: &Current, rec: &'static ThreadRec) {
    c.rec.set(ptr::null());
    // SAFETY: still ours until it is in the pool.
    let owner = unsafe { rec.owner_mut() };
    owner.exited = false;
    lock_pool().push(rec);
}

/// The thread's current group changes to `to` (null: none): close the
/// segment spent in the feed's group (a segment clock read, `tick`) and switch
/// the feed; reconcile with the thread's CPU clock only when one is due
/// (see `feed.rs`).
#[inline]
pub(crate) fn switch(rec: &ThreadRec, owner: &mut Owner, to: *const GroupInner) {
    if feed::sampled() {
        // No clock read: the charger attributes the time at its samples.
        feed::lock(&rec.feed).group = to;
        return;
    }
    let now = tick::now_ns();
    let mut f = feed::lock(&rec.feed);
    // An exiting thread is out of the charger's reach: it reconciles at
    // each change.
    if f.close_segment(now) || owner.exited {
        return switch_reconciling(f, owner, now, to);
    }
    f.group = to;
}

/// [`switch`]'s reconciliation, out of line: the common change moves no
/// list of released references.
#[cold]
#[inline(never)]
fn switch_reconciling(
    mut f: std::sync::MutexGuard<'_, feed::Feed>,
    owner: &mut Owner,
    now: u64,
    to: *const GroupInner,
) {
    let released = reconcile_own(&mut f, owner, now);
    f.group = to;
    drop(f);
    drop(released);
}

/// [`switch`] with a reconciliation whatever the mode.
pub(crate) fn switch_exact(rec: &ThreadRec, owner: &mut Owner, to: *const GroupInner) {
    let (mut f, released) = charged_to_now(rec, owner);
    f.change_reconciled(to);
    drop(f);
    drop(released);
}

/// Read this thread's CPU clock (and, at most every 10 ms of CPU time,
/// its user/system split) and reconcile the feed at `wall` (the segment
/// clock, `tick`).
/// `_owner` witnesses that the caller is the record's thread: the clock
/// and `getrusage` read the calling thread.
fn reconcile_own(f: &mut feed::Feed, _owner: &mut Owner, wall: u64) -> feed::Released {
    let now = clock::thread_cpu_ns().unwrap_or(f.since_ns);
    // Under the lock: the charger may have sampled since (the check then
    // sees less time passed than the interval and reads nothing).
    f.split.resample_own(now);
    f.reconcile(now, wall)
}

/// Reconcile now, and return the feed still locked, for the caller's
/// change, with the references to drop after it.
fn charged_to_now<'r>(
    rec: &'r ThreadRec,
    owner: &mut Owner,
) -> (std::sync::MutexGuard<'r, feed::Feed>, feed::Released) {
    let wall = tick::now_ns();
    let mut f = feed::lock(&rec.feed);
    let released = reconcile_own(&mut f, owner, wall);
    (f, released)
}

/// Charge this thread's current group up to now (no switch).
pub(crate) fn charge_this_thread() {
    let _ = CURRENT.try_with(|c| {
        let r = c.rec.get();
        if r.is_null() {
            return;
        }
        // SAFETY: records are never freed; this thread owns it.
        let rec = unsafe { &*r };
        // SAFETY: as above; the borrow ends here.
        let owner = unsafe { rec.owner_mut() };
        let top = owner.stack.last().map_or(ptr::null(), |e| e.group);
        switch_exact(rec, owner, top);
    });
}

/// A handle on the current group (one more reference), if any.
pub(crate) fn current_group() -> Option<Group> {
    let p = NonNull::new(current_group_ptr().cast_mut())?;
    // SAFETY: the guard that made `p` current holds a reference while it
    // is current (see `current_group_ptr`).
    Some(unsafe { Group::clone_from_ptr(p) })
}

/// One level on this thread's stack: what [`EnterGuard`](super::EnterGuard) and a scoped
/// future's poll hold. Leaving it (drop) pops the level. `!Send`.
pub(crate) struct Level {
    /// This thread's record (never freed); null for a level that entered
    /// nothing (the impossible case of an unavailable thread-local).
    rec: *const ThreadRec,
    /// This level's token on the record's stack.
    token: u64,
}

impl Level {
    /// Push `p` on this thread's stack and make it current.
    ///
    /// # Safety
    /// The caller holds a reference on the group at `p` until the returned
    /// level is dropped (after which the group may be freed).
    #[inline]
    pub(crate) unsafe fn push(p: *const GroupInner) -> Level {
        let Some(rec) = this_thread_rec() else {
            return Level {
                rec: ptr::null(),
                token: 0,
            };
        };
        // SAFETY: this thread owns `rec`; the borrow ends in this function.
        let owner = unsafe { rec.owner_mut() };
        let token = owner.next_token;
        owner.next_token = token.wrapping_add(1);
        let old_top = owner.stack.last().map_or(ptr::null(), |e| e.group);
        owner.stack.push(Entry { token, group: p });
        let _ = CURRENT.try_with(|c| c.group.set(p));
        if old_top != p {
            switch(rec, owner, p);
        }
        Level { rec, token }
    }
}

impl Drop for Level {
    /// Leave this level (see the `attach` module docs for out-of-order
    /// drops). The caller's reference on the group is dropped after this.
    #[inline]
    fn drop(&mut self) {
        if self.rec.is_null() {
            return;
        }
        // SAFETY: records are never freed, and a level is dropped on the
        // thread that pushed it (it is `!Send`), which owns the record
        // while the level is on its stack.
        let rec: &'static ThreadRec = unsafe { &*self.rec };
        // SAFETY: as above; the borrow ends before `release_rec`.
        let owner = unsafe { rec.owner_mut() };
        let old_top = owner.stack.last().map_or(ptr::null(), |e| e.group);
        // Searched from the innermost level, usually this one: one
        // comparison, and removing the last element is a pop.
        match owner.stack.iter().rposition(|e| e.token == self.token) {
            Some(i) => {
                owner.stack.remove(i);
            }
            None => debug_assert!(false, "an enter guard's level was not on its stack"),
        }
        let top = owner.stack.last().map_or(ptr::null(), |e| e.group);
        if top != old_top {
            // Charge the group being left before its reference can go.
            switch(rec, owner, top);
        }
        let release = owner.stack.is_empty() && owner.exited;
        let _ = CURRENT.try_with(|c| {
            c.group.set(top);
            if release {
                release_rec(c, rec);
            }
        });
    }
}
