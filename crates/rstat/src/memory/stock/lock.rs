//! One CPU's stock lock ([`CpuStock`]): a flag taken with one
//! compare-and-swap, and [`Held`], the proof that this thread holds it,
//! through which alone the CPU's [`Slots`] are reached. The protocol is
//! the stock's `# Synchronization` (`mod.rs`); a held lock is also the read
//! side of the owner handles' grace period (`objcg`).

use super::slots::Slots;
use crate::sync::{AtomicBool, Ordering, UnsafeCell};

/// One CPU's slots and their lock.
pub(super) struct CpuStock {
    locked: AtomicBool,
    slots: UnsafeCell<Slots>,
}

// SAFETY: `slots` is only reached through `Held`, which exists only while
// this thread holds `locked`; its contents (`Arc<MemCg>`, integers, and
// the handle addresses in `keys`, compared and never dereferenced) are
// Send + Sync.
unsafe impl Sync for CpuStock {}
// SAFETY: as above.
unsafe impl Send for CpuStock {}

/// Proof that this thread holds one CPU's lock; releases it on drop. The
/// accounting allocator's read side ([`crate::memory::objcg`]).
pub(crate) struct Held<'a>(&'a CpuStock);

impl Held<'_> {
    #[inline(always)]
    pub(super) fn with<R>(&mut self, f: impl FnOnce(&mut Slots) -> R) -> R {
        // SAFETY: we hold the lock, so no other thread reaches the slots
        // (module docs); `&mut self` makes this the only access here.
        self.0.slots.with_mut(|p| f(unsafe { &mut *p }))
    }
}

impl Drop for Held<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        // Release: publishes our slot writes to the next holder's Acquire.
        self.0.locked.store(false, Ordering::Release);
    }
}

impl CpuStock {
    /// An unlocked stock holding `slots`.
    pub(super) fn new(slots: Slots) -> CpuStock {
        CpuStock {
            locked: AtomicBool::new(false),
            slots: UnsafeCell::new(slots),
        }
    }

    #[inline(always)]
    pub(super) fn try_lock(&self) -> Option<Held<'_>> {
        // Acquire on success: pairs with the Release in `Held::drop`.
        // Relaxed on failure: we then touch nothing.
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Held(self))
    }

    pub(super) fn lock(&self) -> Held<'_> {
        loop {
            if let Some(h) = self.try_lock() {
                return h;
            }
            // Relaxed: only a hint of when to try again.
            while self.locked.load(Ordering::Relaxed) {
                spin_wait();
            }
        }
    }
}

/// Let the lock holder run (it may be preempted on this very CPU).
#[cold]
fn spin_wait() {
    #[cfg(rstat_loom)]
    loom::thread::yield_now();
    #[cfg(not(rstat_loom))]
    std::thread::yield_now();
}
