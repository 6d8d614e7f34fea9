//! The owner handle of heap objects (the kernel's `obj_cgroup`, in our own
//! design): what each object charged by the accounting allocator
//! ([`crate::alloc`]) points to, instead of its group.
//!
//! Each group's memory state owns one handle, made with it and bound to the
//! group before the state is published. An object holds one reference on
//! the handle it was charged through; the group's memory state holds the
//! base reference until the group is removed. A handle says where its
//! objects' bytes go now, in one word:
//!
//! - **bound**: the address of its group (the origin), live;
//! - **reparented**: the parent group's handle (tagged with the low bit),
//!   on which it holds one reference. It is set when the origin is removed.
//!   If the parent is removed later, the parent's handle is reparented in
//!   turn, so a free follows the links to the nearest live ancestor.
//!
//! So a removed group is pointed to by nothing its objects hold: it is
//! released as soon as its last handle goes, whatever objects of it still
//! live; those objects keep only their handle (a few words) and the chain of
//! handles above it alive. A handle is freed when its last reference goes:
//! its last object freed (or moved out of the stocks) after its group was
//! removed; the reference it held on its parent's handle is then dropped
//! too.
//!
//! **Where the kernel differs.** The kernel moves every handle that points
//! at a removed group to the parent (a list per group, one global lock), so
//! a free is one pointer read. Here a handle is linked to its parent's
//! handle once, at its group's removal, and never moved again: no list and
//! no lock to keep, and a free of an object of a removed group walks one
//! link per removed ancestor (at most the tree's depth; only objects that
//! outlived their group pay it).
//!
//! # Synchronization: a grace period made of the stock locks
//!
//! A free reads its handle's word and then uses the group it names (its
//! memory state, stat slots, stock slot); removal rewrites the word, and
//! the group may be freed as soon as its removal returns. The kernel
//! protects the reader with RCU. Here, every reader of a handle's word
//! holds one of the per-CPU stock locks ([`super::stock`], taken by the
//! free anyway) from its load until its last use of the group, or until it
//! took a reference of its own on the group for a slow path. Removal first
//! rewrites the word, then takes and releases every CPU's stock lock once
//! (the drain it makes anyway): a reader whose critical section began
//! before the rewrite has ended when that drain returns (the drain waited
//! for its lock); one that began after acquired a lock the drain released
//! after the rewrite, so its load sees the new word. Only then does the
//! removal return and the group become releasable. `ObjCg::current` must be
//! called under a stock lock; the loom model `memory::tests_loom` checks
//! the protocol with a stand-in group that is "freed" after the removal.
//!
//! References: `get` is a `Relaxed` add (the caller holds a reference, or
//! the handle's base is held: see the callers); `put` is a `Release`
//! subtraction and the last one an `Acquire` fence before the free (the
//! `Arc` pattern). A handle's memory is allocated without being charged
//! ([`crate::alloc`]'s pass-through, counted there), so freeing it inside
//! the allocator's own `dealloc` does not recurse into the charge path.

use core::ptr::NonNull;

use super::alloc::reentry::untracked;
use crate::sync::{fence, AtomicPtr, AtomicUsize, Ordering};

/// The tag of a reparented handle's word.
const REPARENTED: usize = 1;

/// The parent handle a reparented word points to.
#[inline(always)]
fn untag(s: *mut ()) -> *mut ObjCg {
    s.map_addr(|a| a & !REPARENTED).cast()
}

/// An owner handle. See the module docs.
pub(crate) struct ObjCg {
    /// The group (bound) or the parent's handle with the low bit set
    /// (strict provenance: the tag is set and cleared with `map_addr`).
    state: AtomicPtr<()>,
    /// The base reference (the group's memory state, until removal),
    /// objects, the stocks' cached references, reparented children.
    refs: AtomicUsize,
    /// The engine the group belongs to, as an identity (the allocator
    /// finds its binding by it).
    engine: usize,
    /// The stocks of the memory controller the group's state belongs to
    /// (null in models): the allocator's free goes straight to them on its
    /// fast path. They outlive every object charged through this handle
    /// (the allocator's binding keeps the controller for the rest of the
    /// process). Untyped: the stock sits above the handle (its slots hold
    /// references on handles), so it converts both ways
    /// (`Stocks::as_handle_word`, `Stocks::of_handle`).
    stocks: *const (),
    /// This handle's serial: unique in the process and never reused, unlike
    /// its address (a handle freed after its group's removal leaves its
    /// block to the next allocation, perhaps another group's handle). Stock
    /// slots carry it, so whoever remembers a handle without holding a
    /// reference on it finds its slot by the serial (see
    /// `Stocks::heap_charge_fast`).
    serial: u64,
}

/// The next handle serial (from 1: 0 marks an empty stock slot). A 64-bit
/// counter does not wrap in the life of a process. std's atomic, not
/// `crate::sync`'s: an id source, not part of any protocol (and usable in
/// a `static` under loom).
static NEXT_SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Where a handle's objects are charged now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Current {
    /// The group; null if the handle was never bound.
    pub(crate) group: *mut (),
    /// Whether that is an ancestor of the handle's own group (the group
    /// was removed).
    pub(crate) reparented: bool,
}

impl ObjCg {
    /// A new, unbound handle with its base reference, for a group of
    /// engine `engine` (an identity) whose memory state charges through
    /// `stocks` (`Stocks::as_handle_word`). Its memory is not charged by
    /// the accounting allocator.
    pub(crate) fn new(engine: usize, stocks: *const ()) -> NonNull<ObjCg> {
        let b = untracked(|| {
            Box::new(ObjCg {
                state: AtomicPtr::new(core::ptr::null_mut()),
                refs: AtomicUsize::new(1),
                engine,
                stocks,
                // Relaxed: only uniqueness matters.
                serial: NEXT_SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            })
        });
        NonNull::from(Box::leak(b))
    }

    /// Bind an unbound handle to its group (before any object can be
    /// charged through it).
    pub(crate) fn bind(&self, group: *const ()) {
        debug_assert_eq!(group.addr() & REPARENTED, 0);
        // Relaxed: the group's state, and with it this handle, is published
        // afterwards (a Release store of the state pointer in its tables).
        self.state.store(group.cast_mut(), Ordering::Relaxed);
    }

    /// The engine identity given at creation.
    #[inline(always)]
    pub(crate) fn engine(&self) -> usize {
        self.engine
    }

    /// The serial given at creation (never another handle's).
    #[inline(always)]
    pub(crate) fn serial(&self) -> u64 {
        self.serial
    }

    /// The stocks given at creation (null in models), untyped
    /// (`Stocks::of_handle` reads them).
    #[inline(always)]
    pub(crate) fn stocks(&self) -> *const () {
        self.stocks
    }

    /// Where the objects go now: follow the reparent links to a bound
    /// handle.
    ///
    /// The caller holds one of the stock locks and a reference on `self`;
    /// the group returned stays allocated until it releases that lock (see
    /// the module docs).
    #[inline(always)]
    pub(crate) fn current(&self) -> Current {
        // Acquire: the parent's handle linked here was made (and bound)
        // before the Release swap that linked it.
        let s = self.state.load(Ordering::Acquire);
        if s.addr() & REPARENTED == 0 {
            return Current {
                group: s,
                reparented: false,
            };
        }
        Self::current_reparented(s)
    }

    #[cold]
    fn current_reparented(mut s: *mut ()) -> Current {
        while s.addr() & REPARENTED != 0 {
            // SAFETY: a reparented handle holds a reference on its parent's
            // handle for as long as it lives, and our caller holds one on
            // the first of the chain.
            let p = unsafe { &*untag(s) };
            s = p.state.load(Ordering::Acquire);
        }
        Current {
            group: s,
            reparented: true,
        }
    }

    /// Link this handle to `parent`'s, giving it one reference on
    /// `parent` that the caller took. The caller serialises reparenting
    /// and, before the old group may be freed, waits out the readers (the
    /// stock locks). Returns the previous word.
    pub(crate) fn reparent(&self, parent: NonNull<ObjCg>) -> *mut () {
        let tagged = parent.as_ptr().cast::<()>().map_addr(|a| a | REPARENTED);
        // Release: publishes the parent's handle to the Acquire loads of
        // `current`.
        self.state.swap(tagged, Ordering::AcqRel)
    }

    /// Take `n` references.
    ///
    /// # Safety
    /// The handle is live and stays so during the call: the caller holds a
    /// reference, or the base reference is known to be held (see the
    /// callers).
    #[inline(always)]
    pub(crate) unsafe fn get(p: NonNull<ObjCg>, n: usize) {
        // SAFETY: caller's guarantee.
        let refs = unsafe { &p.as_ref().refs };
        // Relaxed: a reference is only taken from one already held.
        refs.fetch_add(n, Ordering::Relaxed);
    }

    /// Drop `n` references; the last one frees the handle and drops its
    /// reference on its parent's (iteratively up the chain). Returns how
    /// many handles were freed.
    ///
    /// # Safety
    /// The caller owns `n` references on the handle and gives them up.
    pub(crate) unsafe fn put(p: NonNull<ObjCg>, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        let (mut p, mut n, mut freed) = (p, n, 0);
        loop {
            // SAFETY: we own `n` references, so it is live.
            let h = unsafe { p.as_ref() };
            // Release: our uses of the handle happen before its free.
            let before = h.refs.fetch_sub(n, Ordering::Release);
            debug_assert!(before >= n, "objcg reference count underflow");
            if before != n {
                return freed;
            }
            // Acquire: every other holder's uses happen before the free.
            fence(Ordering::Acquire);
            let s = h.state.load(Ordering::Relaxed);
            // SAFETY: made by `Box` in `new`; no reference remains.
            drop(unsafe { Box::from_raw(p.as_ptr()) });
            freed += 1;
            match NonNull::new(untag(s)) {
                Some(parent) if s.addr() & REPARENTED != 0 => {
                    p = parent;
                    n = 1;
                }
                _ => return freed,
            }
        }
    }

    /// The reference count (for tests and debug checks).
    #[allow(dead_code)]
    pub(crate) fn refs(&self) -> usize {
        self.refs.load(Ordering::Relaxed)
    }
}
