//! A reader-writer lock whose readers take only their CPU slot's lock: for
//! data read on hot paths of every thread and written almost never (the
//! engine's topology: read by every group creation and removal, written
//! when a controller or extension is registered). The kernel's
//! `percpu_rw_semaphore`, reduced to its idea.
//!
//! A plain reader-writer lock makes every reader write the lock's word:
//! two threads creating groups on two CPUs then take that line from each
//! other twice per creation. Here each CPU slot has a lock of its own, on
//! its own line; a reader read-locks its slot's (the slot of the CPU it
//! runs on, folded into the slots), and a writer write-locks every slot's,
//! in order. So readers on different CPUs share no line, and a writer
//! excludes every reader, wherever it runs.
//!
//! A reader that migrates keeps the lock it took (any slot's excludes
//! writers). As with the one-word lock this replaces, a thread must not
//! read-lock again while it holds a read lock (a waiting writer may hold
//! the second slot's lock and wait for the first), nor write-lock while
//! it holds either.

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};

use super::{cpu, CachePadded};
use crate::sync::{self, RwHeld, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// A reader-writer lock with a lock per CPU slot (module docs).
pub(crate) struct PercpuRwLock<T> {
    slots: Box<[CachePadded<RwLock<()>>]>,
    data: UnsafeCell<T>,
}

// SAFETY: `data` is shared by readers (`&T`, so `T: Sync`) and written by
// one writer at a time, which may be another thread (`T: Send`); the slot
// locks order every access (a writer holds all of them).
unsafe impl<T: Send + Sync> Sync for PercpuRwLock<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for PercpuRwLock<T> {}

impl<T> PercpuRwLock<T> {
    /// `value` behind a lock per CPU slot, `nr_slots` of them (at least
    /// one; one under loom, whose models need no more).
    pub(crate) fn new(nr_slots: usize, value: T) -> Self {
        let n = if cfg!(rstat_loom) { 1 } else { nr_slots.max(1) };
        PercpuRwLock {
            slots: (0..n).map(|_| CachePadded::new(RwLock::new(()))).collect(),
            data: UnsafeCell::new(value),
        }
    }

    /// Shared access: this CPU slot's lock, read-locked (poisoning
    /// recovered, as [`sync::read`]). Cost: one uncontended lock on a line
    /// that only this CPU's readers write.
    pub(crate) fn read(&self) -> ReadGuard<'_, T> {
        self.read_slot(cpu::current())
    }

    /// [`read`](Self::read) through slot `slot` (folded into the slots),
    /// whatever CPU this thread runs on: for tests.
    pub(crate) fn read_slot(&self, slot: usize) -> ReadGuard<'_, T> {
        let slot = cpu::fold(slot, self.slots.len());
        let held = sync::read(&self.slots[slot]);
        ReadGuard {
            data: self.data.get(),
            _held: held,
            _ref: core::marker::PhantomData,
        }
    }

    /// Exclusive access: every slot's lock, write-locked in order. Cost:
    /// one lock per CPU slot, and an allocation for the guards.
    pub(crate) fn write(&self) -> WriteGuard<'_, T> {
        // The engine's memory, not the caller's group's.
        let held = sync::untracked(|| self.slots.iter().map(|s| sync::write(s)).collect());
        WriteGuard {
            data: self.data.get(),
            _held: held,
            _ref: core::marker::PhantomData,
        }
    }
}

/// Shared access to a [`PercpuRwLock`]'s value. The value as a pointer,
/// not a reference: the lock is released inside the guard's drop, while
/// a reference field would still be live (and a writer could take the
/// lock and write meanwhile).
pub(crate) struct ReadGuard<'a, T> {
    data: *mut T,
    _held: RwHeld<RwLockReadGuard<'a, ()>>,
    _ref: core::marker::PhantomData<&'a T>,
}

impl<T> Deref for ReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: a slot's read lock is held while `self` lives: no
        // writer runs.
        unsafe { &*self.data }
    }
}

/// Exclusive access to a [`PercpuRwLock`]'s value (a pointer, as in
/// [`ReadGuard`]).
pub(crate) struct WriteGuard<'a, T> {
    data: *mut T,
    _held: Vec<RwHeld<RwLockWriteGuard<'a, ()>>>,
    _ref: core::marker::PhantomData<&'a mut T>,
}

impl<T> Deref for WriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: every slot's write lock is held while `self` lives: no
        // reader or other writer runs.
        unsafe { &*self.data }
    }
}

impl<T> DerefMut for WriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`.
        unsafe { &mut *self.data }
    }
}
