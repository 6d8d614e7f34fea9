//! The atomics, locks and `UnsafeCell` of the library's shared-memory
//! protocols.
//!
//! Under `--cfg rstat_loom` they are loom's model-checked versions, so each
//! shared access of those protocols is visible to the model checker;
//! otherwise they are `std`'s. Code elsewhere names `std::sync` (or
//! `core::sync::atomic`) directly only where loom cannot stand in, and no
//! protocol a loom model checks rests on those uses:
//!
//! - state in a `static`, which needs a `const` constructor that loom's
//!   types lack: process-wide settings and caches read `Relaxed` (the CPU-id
//!   source and CPU count in `percpu::cpu`, whether rseq is available,
//!   `attach`'s CPU mode, clock tick and /proc fallback), id counters
//!   (`memory`'s reclaimer ids and handle serials), the accounting
//!   allocator's bindings (`memory::alloc`), and `attach`'s thread-record
//!   pool and periodic charger, whose per-thread feed locks are `std`'s as
//!   well (`attach` has no loom model);
//! - what loom cannot run: the words restartable sections write
//!   (`percpu::rseq`'s bare counter), and the compiler fence that is the
//!   section update's half of its asymmetric fence with `membarrier`.
//!
//! # Sequentially consistent pairs
//!
//! Some protocols here (the updated-list claim, page_counter's `set_max`
//! against `try_charge`) are store-buffering pairs: each side writes one location and then
//! reads the other, and at least one side must see the other's write. We
//! write both sides with `SeqCst` accesses, which the C++20 model (and thus
//! Rust's) guarantees is enough, and which costs nothing extra on x86-64 (a
//! locked RMW is already a full barrier; an SC load is a plain `mov`).
//! loom models `SeqCst` accesses as acquire/release (tokio-rs/loom#180) but
//! models `SeqCst` fences exactly, so [`sc_fence_for_model`] inserts a
//! `SeqCst` fence at those points under loom only. For a store-buffering
//! pair, "SC access; SC access" and "access; SC fence; access" forbid the
//! same outcome, so the model checks the protocol we run.

// Not every module uses every type.
#[allow(unused_imports)]
#[cfg(not(rstat_loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
#[cfg(not(rstat_loom))]
pub(crate) use std::sync::{
    Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError,
};

#[allow(unused_imports)]
#[cfg(rstat_loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
#[cfg(rstat_loom)]
pub(crate) use loom::sync::{
    Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
#[cfg(rstat_loom)]
pub(crate) use std::sync::TryLockError;

/// A `SeqCst` fence under loom, nothing otherwise. See the module docs:
/// placed between the two `SeqCst` accesses of a store-buffering pair.
#[inline(always)]
pub(crate) fn sc_fence_for_model() {
    #[cfg(rstat_loom)]
    fence(Ordering::SeqCst);
}

/// Wait until `done()` holds, on the read side of a protocol whose writer
/// is a few instructions from making it hold (it may be preempted there).
/// Spins briefly, then yields the CPU (so a writer preempted on this CPU can
/// run), then sleeps in short steps. Under loom every retry yields to the
/// model's scheduler.
pub(crate) fn spin_wait(mut done: impl FnMut() -> bool) {
    let mut tries = 0u32;
    while !done() {
        #[cfg(rstat_loom)]
        loom::thread::yield_now();
        #[cfg(not(rstat_loom))]
        {
            if tries < 64 {
                core::hint::spin_loop();
            } else if tries < 64 + 1000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
        tries = tries.saturating_add(1);
    }
}

thread_local! {
    /// How many of the crate's mutexes this thread holds (see [`Locked`]).
    /// `const`, no destructor: readable from a global allocator at any
    /// point of a thread's life.
    static HELD: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
}

/// Whether this thread holds one of the crate's mutexes: the accounting
/// allocator then charges without running reclaimers or waiting for
/// stocks, which could need a lock this thread holds (an allocation the
/// crate makes under its own lock). One thread-local load.
#[inline(always)]
pub(crate) fn locks_held() -> bool {
    HELD.try_with(|h| h.get() > 0).unwrap_or(true)
}

fn held_add(d: i32) {
    let _ = HELD.try_with(|h| h.set(h.get().wrapping_add_signed(d)));
}

/// A held mutex of the crate: the guard, counted in this thread's
/// [`locks_held`] while it lives.
pub(crate) struct Locked<'a, T> {
    guard: core::mem::ManuallyDrop<MutexGuard<'a, T>>,
}

impl<'a, T> Locked<'a, T> {
    fn new(g: MutexGuard<'a, T>) -> Self {
        held_add(1);
        Locked {
            guard: core::mem::ManuallyDrop::new(g),
        }
    }

    /// Wait on `cv` (releasing the mutex meanwhile), poisoning recovered.
    pub(crate) fn wait(mut self, cv: &Condvar) -> Self {
        // SAFETY: `self` is forgotten right after, so the guard is taken
        // out once and never dropped through `self`.
        let g = unsafe { core::mem::ManuallyDrop::take(&mut self.guard) };
        core::mem::forget(self); // the count moves to the returned guard
        let g = match cv.wait(g) {
            Ok(g) => g,
            #[cfg(not(rstat_loom))]
            Err(p) => p.into_inner(),
            #[cfg(rstat_loom)]
            Err(_) => panic!("loom mutex poisoned"),
        };
        Locked {
            guard: core::mem::ManuallyDrop::new(g),
        }
    }

    /// As [`wait`](Self::wait), returning after `dur` at the latest (or
    /// spuriously: callers re-check their condition). loom has no time:
    /// there it waits for a notification.
    #[cfg_attr(rstat_loom, allow(dead_code))]
    pub(crate) fn wait_timeout(mut self, cv: &Condvar, dur: std::time::Duration) -> Self {
        // SAFETY: as in `wait`: taken once, `self` forgotten right after.
        let g = unsafe { core::mem::ManuallyDrop::take(&mut self.guard) };
        core::mem::forget(self);
        let g = match cv.wait_timeout(g, dur) {
            Ok((g, _)) => g,
            #[cfg(not(rstat_loom))]
            Err(p) => p.into_inner().0,
            #[cfg(rstat_loom)]
            Err(_) => panic!("loom mutex poisoned"),
        };
        Locked {
            guard: core::mem::ManuallyDrop::new(g),
        }
    }
}

impl<T> core::ops::Deref for Locked<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> core::ops::DerefMut for Locked<'_, T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

impl<T> Drop for Locked<'_, T> {
    fn drop(&mut self) {
        // SAFETY: dropped once, here (`wait` forgets `self` after taking it).
        unsafe { core::mem::ManuallyDrop::drop(&mut self.guard) };
        held_add(-1);
    }
}

/// Lock a mutex, treating poisoning as recoverable: every structure the crate
/// protects with a mutex is left consistent at each point where user code
/// could panic (no user callback runs with a half-applied change).
pub(crate) fn lock<T>(m: &Mutex<T>) -> Locked<'_, T> {
    Locked::new(recover(m.lock()))
}

/// A lock's guard, poisoned or not (see [`lock`]); loom's locks are never
/// poisoned in a model that does not panic.
fn recover<G>(r: std::sync::LockResult<G>) -> G {
    match r {
        Ok(g) => g,
        #[cfg(not(rstat_loom))]
        Err(poisoned) => poisoned.into_inner(),
        #[cfg(rstat_loom)]
        Err(_) => panic!("loom lock poisoned"),
    }
}

/// A held read or write side of one of the crate's reader-writer locks,
/// counted in this thread's [`locks_held`] while it lives (as [`Locked`]).
pub(crate) struct RwHeld<G> {
    guard: core::mem::ManuallyDrop<G>,
}

impl<G> RwHeld<G> {
    fn new(g: G) -> Self {
        held_add(1);
        RwHeld {
            guard: core::mem::ManuallyDrop::new(g),
        }
    }
}

impl<G: core::ops::Deref> core::ops::Deref for RwHeld<G> {
    type Target = G::Target;
    #[inline(always)]
    fn deref(&self) -> &G::Target {
        &self.guard
    }
}

impl<G: core::ops::DerefMut> core::ops::DerefMut for RwHeld<G> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

impl<G> Drop for RwHeld<G> {
    fn drop(&mut self) {
        // SAFETY: dropped once, here.
        unsafe { core::mem::ManuallyDrop::drop(&mut self.guard) };
        held_add(-1);
    }
}

/// Take the shared side of a reader-writer lock (poisoning recovered as
/// in [`lock`]). Never take it twice on one thread: a writer waiting
/// between the two would block the second forever.
pub(crate) fn read<T>(l: &RwLock<T>) -> RwHeld<RwLockReadGuard<'_, T>> {
    RwHeld::new(recover(l.read()))
}

/// Take the exclusive side of a reader-writer lock (poisoning recovered as
/// in [`lock`]).
pub(crate) fn write<T>(l: &RwLock<T>) -> RwHeld<RwLockWriteGuard<'_, T>> {
    RwHeld::new(recover(l.write()))
}

/// Try to lock without waiting; poisoning is recovered as in [`lock`].
pub(crate) fn try_lock<T>(m: &Mutex<T>) -> Option<Locked<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(Locked::new(g)),
        Err(TryLockError::WouldBlock) => None,
        #[cfg(not(rstat_loom))]
        Err(TryLockError::Poisoned(p)) => Some(Locked::new(p.into_inner())),
        #[cfg(rstat_loom)]
        Err(TryLockError::Poisoned(_)) => panic!("loom mutex poisoned"),
    }
}

/// An `UnsafeCell` whose accesses loom can track (the sharded-slab pattern):
/// `with` for shared reads, `with_mut` for writes. Callers guarantee the
/// exclusion (always: "holds the owning domain's flush lock").
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(
    #[cfg(not(rstat_loom))] core::cell::UnsafeCell<T>,
    #[cfg(rstat_loom)] loom::cell::UnsafeCell<T>,
);

impl<T> UnsafeCell<T> {
    pub(crate) fn new(v: T) -> Self {
        #[cfg(not(rstat_loom))]
        return Self(core::cell::UnsafeCell::new(v));
        #[cfg(rstat_loom)]
        return Self(loom::cell::UnsafeCell::new(v));
    }

    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        #[cfg(not(rstat_loom))]
        return f(self.0.get());
        #[cfg(rstat_loom)]
        return self.0.with(f);
    }

    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        #[cfg(not(rstat_loom))]
        return f(self.0.get());
        #[cfg(rstat_loom)]
        return self.0.with_mut(f);
    }
}

// The accounting allocator's re-entry flag, here at the lowest layer so
// that any module can keep its own allocations out of the groups'
// accounts ([`untracked`]).

thread_local! {
    /// Whether this thread is inside the accounting allocator's
    /// accounting, or in code whose allocations are the crate's own
    /// ([`untracked`]). No destructor, `const`: usable in any phase of the
    /// thread's life.
    static INSIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The re-entry guard: `None` if this thread is already inside.
pub(crate) struct Inside;

impl Inside {
    #[inline(always)]
    pub(crate) fn enter() -> Option<Inside> {
        // `try_with` cannot fail for a slot without a destructor; treat it
        // as "inside" (pass through) if it ever did.
        let was = INSIDE.try_with(|c| c.replace(true)).unwrap_or(true);
        // Not `then_some(Inside)`: that builds (and, when already inside,
        // drops) a guard either way, and the drop would clear the flag.
        if was {
            None
        } else {
            Some(Inside)
        }
    }
}

impl Drop for Inside {
    #[inline(always)]
    fn drop(&mut self) {
        let _ = INSIDE.try_with(|c| c.set(false));
    }
}

/// Whether this thread is inside the allocator (or treated so: see
/// [`Inside::enter`]).
#[inline(always)]
pub(crate) fn inside() -> bool {
    INSIDE.try_with(std::cell::Cell::get).unwrap_or(true)
}

/// Run `f` with this thread's allocations passing through the accounting
/// allocator uncharged (counted in its `pass_through`): for the crate's
/// own memory, which must not be billed to whatever group the thread
/// happens to be in: owner handles, the per-CPU arena's bookkeeping, a
/// group's final release (which may run inside any other group's work,
/// wherever the last handle is dropped).
pub(crate) fn untracked<R>(f: impl FnOnce() -> R) -> R {
    let _inside = Inside::enter();
    f()
}

/// `Box::new(value)`, allocated with the allocator's `alloc`, never its
/// `alloc_zeroed`.
///
/// The compiler turns an allocation that is then filled with zeros (a
/// struct of null pointers and zero counters, as most of a new group's
/// parts are) into one `alloc_zeroed` call, which `System` serves with
/// `calloc`. glibc's `calloc` bypasses its per-thread cache (the tcache,
/// until glibc 2.41) and takes the arena's slow path every time, while the
/// matching `free` fills the cache that `calloc` never drains: a group
/// made of such parts paid the slow path on every creation and most
/// removals. Hiding the pointer from the optimizer between the allocation
/// and the write keeps the plain `malloc` (one store pass over the value,
/// the same work `calloc`'s zeroing does).
pub(crate) fn boxed<T>(value: T) -> Box<T> {
    let mut b = Box::<T>::new_uninit();
    core::hint::black_box(&mut b);
    Box::write(b, value)
}
