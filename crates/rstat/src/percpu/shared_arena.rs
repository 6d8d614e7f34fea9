//! The engine's per-CPU arenas, shared by every thread that creates or
//! releases groups: an [`Arena`] behind a mutex, and in front of it, per
//! CPU slot, a small cache of freed offsets (the kernel's per-CPU page
//! lists, or a slab's per-CPU magazines, for the percpu allocator).
//!
//! **Why.** A group takes about a dozen per-CPU allocations when it is
//! made and gives them back when it is released. With the arena's one
//! mutex and free lists shared by every thread, each of those is a lock
//! and a few lines (the lock word, the free list's length and its last
//! entries, the counters) that the last thread to create or release a
//! group elsewhere still holds: with a group per request on several
//! workers, most of a group's cost became those lines moving between
//! cores. Here a group made and released on one CPU slot takes its
//! offsets from that slot's cache and puts them back there: a lock whose
//! line stays with that CPU, and no shared line at all.
//!
//! **How.** Each cache keeps, per (rounded size, zeroed or not), a stack
//! of at most [`CACHED`] offsets, which the arena counts as in use. An
//! allocation pops one; an empty stack takes [`REFILL`] at once from the
//! arena (one hold of its lock). A free pushes one; a full stack gives
//! half back to the arena (one hold). A cache has room for
//! [`CLASSES`] size classes, inline (it never allocates); sizes past
//! those go to the arena directly. A zeroed offset is all zero in
//! every unit while it is cached: a free of zeroed state zeroes the units
//! its caller names dirty first, as [`Arena::free_zeroed`] does, outside
//! every lock. The slot's cache is found by the CPU id (folded into the
//! slots); a cache held by another thread (one preempted on this CPU, or
//! migrated) is passed over for a free one, and only if all are held does
//! the caller wait for its own.
//!
//! **Cost.** An offset cached is not reusable by other slots' caches
//! until it goes back: at most [`CACHED`] per size class and slot,
//! offsets of chunks the arena has anyway; the stacks themselves take
//! about a kilobyte per CPU slot. Lock order: a cache, then the arena;
//! nothing takes a cache while holding the arena.

use core::ptr::NonNull;

use super::arena::{self, Arena, ArenaError, ArenaStats, PcpuPtr};
use super::cpu;
use super::CachePadded;
use crate::sync::{self, Locked, Mutex};

/// Offsets a cache keeps per size class at most.
pub(crate) const CACHED: usize = 16;

/// Offsets an empty size class takes from the arena at once.
pub(crate) const REFILL: usize = 8;

/// Size classes a cache has room for (a group's per-CPU state comes in a
/// few sizes: its nodes' links, and its stat slots, one size per item
/// count among the controllers).
pub(crate) const CLASSES: usize = 8;

/// An arena and its per-CPU-slot caches (module docs).
pub(crate) struct SharedArena {
    arena: Mutex<Arena>,
    caches: Box<[CachePadded<Mutex<Cache>>]>,
    nr_units: usize,
}

/// One CPU slot's cached offsets.
pub(crate) struct Cache {
    classes: [Class; CLASSES],
    /// Offsets held over every class, and their bytes per unit: counted in
    /// use by the arena, free for [`SharedArena::stats`].
    held: usize,
    held_bytes: usize,
}

/// Freed offsets of one rounded size, zeroed or not (`size` 0: unused).
#[derive(Clone, Copy)]
struct Class {
    size: usize,
    zeroed: bool,
    len: usize,
    /// `free[..len]`, a stack; one more than [`CACHED`], for the push that
    /// finds it full.
    free: [*mut u8; CACHED + 1],
}

const UNUSED: Class = Class {
    size: 0,
    zeroed: false,
    len: 0,
    free: [core::ptr::null_mut(); CACHED + 1],
};

// SAFETY: the offsets are addresses into the arena's chunks, only handed
// out under the cache's lock; the arena itself is `Send`.
unsafe impl Send for Cache {}

impl Cache {
    fn new() -> Cache {
        Cache {
            classes: [UNUSED; CLASSES],
            held: 0,
            held_bytes: 0,
        }
    }
}

/// The class of (`size`, `zeroed`) among `classes`, taking an unused one
/// if new; `None` if all are taken by other sizes.
fn class_of(classes: &mut [Class; CLASSES], size: usize, zeroed: bool) -> Option<&mut Class> {
    let k = classes
        .iter()
        .position(|c| c.size == size && c.zeroed == zeroed)
        .or_else(|| classes.iter().position(|c| c.size == 0))?;
    let c = &mut classes[k];
    c.size = size;
    c.zeroed = zeroed;
    Some(c)
}

impl SharedArena {
    /// An empty arena of `nr_units` units, with a cache per unit.
    pub(crate) fn new(nr_units: usize) -> Self {
        let arena = Arena::new(nr_units);
        let nr_units = arena.nr_units();
        SharedArena {
            arena: Mutex::new(arena),
            caches: (0..nr_units)
                .map(|_| CachePadded::new(Mutex::new(Cache::new())))
                .collect(),
            nr_units,
        }
    }

    /// The arena itself, locked (for what the caches do not serve: a
    /// domain's backlog heads, tests).
    pub(crate) fn arena(&self) -> Locked<'_, Arena> {
        sync::lock(&self.arena)
    }

    /// This CPU slot's cache, locked, to allocate and free through: the
    /// slot of the CPU this thread runs on; if another thread holds it, the
    /// first free one after it; if all are held, this slot's, waited for.
    pub(crate) fn local(&self) -> Local<'_> {
        let n = self.caches.len();
        let home = cpu::current_in(n);
        let cache = (0..n)
            .find_map(|k| sync::try_lock(&self.caches[(home + k) % n]))
            .unwrap_or_else(|| sync::lock(&self.caches[home]));
        Local {
            shared: self,
            cache,
        }
    }

    /// The arena's counters, with the cached offsets counted free: exact
    /// when no allocation or free runs meanwhile. Takes each cache's lock
    /// in turn, then the arena's.
    pub(crate) fn stats(&self) -> ArenaStats {
        let (mut held, mut held_bytes) = (0, 0);
        for c in self.caches.iter() {
            let c = sync::lock(c);
            held += c.held;
            held_bytes += c.held_bytes;
        }
        let mut s = self.arena().stats();
        debug_assert!(
            held <= s.live_allocations,
            "a cache holds more than the arena gave out"
        );
        s.live_allocations = s.live_allocations.saturating_sub(held);
        s.bytes_in_use_per_unit = s.bytes_in_use_per_unit.saturating_sub(held_bytes);
        s
    }
}

/// A CPU slot's cache, held: allocate and free per-CPU values through it
/// ([`SharedArena::local`]). The same calls as [`Arena`]'s, with the same
/// contracts.
pub(crate) struct Local<'a> {
    shared: &'a SharedArena,
    cache: Locked<'a, Cache>,
}

impl Local<'_> {
    /// Units per chunk (= the engine's CPU slots).
    pub(crate) fn nr_units(&self) -> usize {
        self.shared.nr_units
    }

    /// As [`Arena::alloc`].
    pub(crate) fn alloc<T>(
        &mut self,
        len: usize,
        mut init: impl FnMut(usize, usize) -> T,
    ) -> Result<PcpuPtr<T>, ArenaError> {
        arena::check_aligned::<T>();
        let ptr = PcpuPtr::from_offset(self.take(Arena::rounded_size::<T>(len), false)?, len);
        // SAFETY: an offset of `len` `T`s in every unit of a live chunk,
        // fresh or freed by `free` (which dropped its values).
        unsafe { arena::init_units(ptr, self.shared.nr_units, &mut init) };
        Ok(ptr)
    }

    /// As [`Arena::free`].
    ///
    /// # Safety
    /// As [`Arena::free`], for an allocation of [`alloc`](Self::alloc) on
    /// this arena (through any slot's cache).
    pub(crate) unsafe fn free<T>(&mut self, ptr: PcpuPtr<T>) {
        // SAFETY: the caller's guarantees.
        unsafe { arena::drop_units(ptr, self.shared.nr_units) };
        self.give(ptr.offset(), Arena::rounded_size::<T>(ptr.len()), false);
    }

    /// `len` values of `T`, zeroed and unwritten (as
    /// [`Arena::alloc_zeroed`]), except under loom, whose atomics are
    /// objects of its model, built by `init`.
    ///
    /// # Safety
    /// `init()`'s value is all-zero bytes, and `T` needs no drop.
    pub(crate) unsafe fn alloc_zero_state<T>(
        &mut self,
        len: usize,
        init: impl Fn() -> T,
    ) -> Result<PcpuPtr<T>, ArenaError> {
        #[cfg(rstat_loom)]
        return self.alloc(len, |_, _| init());
        #[cfg(not(rstat_loom))]
        {
            let _ = init;
            arena::check_zeroed::<T>();
            let base = self.take(Arena::rounded_size::<T>(len), true)?;
            Ok(PcpuPtr::from_offset(base, len))
        }
    }

    /// Free an allocation of [`alloc_zero_state`](Self::alloc_zero_state):
    /// zero the units of `dirty`, then cache the offset as zeroed (as
    /// [`Arena::free_zeroed`]; under loom, drop the values).
    ///
    /// # Safety
    /// As [`Arena::free_zeroed`], for an allocation of
    /// [`alloc_zero_state`](Self::alloc_zero_state) on this arena.
    pub(crate) unsafe fn free_zero_state<T>(
        &mut self,
        ptr: PcpuPtr<T>,
        dirty: impl Iterator<Item = usize>,
    ) {
        #[cfg(rstat_loom)]
        {
            let _ = dirty;
            // SAFETY: the caller's guarantees.
            unsafe { self.free(ptr) }
        }
        #[cfg(not(rstat_loom))]
        {
            // SAFETY: the caller's guarantees.
            unsafe { arena::scrub_units(ptr, dirty, self.shared.nr_units) };
            self.give(ptr.offset(), Arena::rounded_size::<T>(ptr.len()), true);
        }
    }

    /// An offset of `size` bytes (zero in every unit for `zeroed`): from
    /// this cache, else [`REFILL`] of them from the arena in one hold of
    /// its lock.
    fn take(&mut self, size: usize, zeroed: bool) -> Result<NonNull<u8>, ArenaError> {
        let cache = &mut *self.cache;
        let Some(c) = class_of(&mut cache.classes, size, zeroed) else {
            return self.shared.arena().take_offset(size, zeroed);
        };
        if c.len > 0 {
            c.len -= 1;
            let p = c.free[c.len];
            cache.held -= 1;
            cache.held_bytes -= size;
            // SAFETY: only offsets (never null) are pushed.
            return Ok(unsafe { NonNull::new_unchecked(p) });
        }
        let mut arena = self.shared.arena();
        let first = arena.take_offset(size, zeroed)?;
        for _ in 1..REFILL {
            // A failure here (no memory for a new chunk) only ends the
            // refill: the caller has its offset.
            let Ok(p) = arena.take_offset(size, zeroed) else {
                break;
            };
            c.free[c.len] = p.as_ptr();
            c.len += 1;
            cache.held += 1;
            cache.held_bytes += size;
        }
        Ok(first)
    }

    /// Cache a freed offset of `size` bytes (all zero in every unit for
    /// `zeroed`); a full class gives half of its offsets back to the arena
    /// in one hold of its lock.
    fn give(&mut self, base: NonNull<u8>, size: usize, zeroed: bool) {
        let cache = &mut *self.cache;
        let Some(c) = class_of(&mut cache.classes, size, zeroed) else {
            return self.shared.arena().give_offset(base, size, zeroed);
        };
        c.free[c.len] = base.as_ptr();
        c.len += 1;
        cache.held += 1;
        cache.held_bytes += size;
        if c.len > CACHED {
            let mut arena = self.shared.arena();
            while c.len > CACHED / 2 {
                c.len -= 1;
                // SAFETY: only offsets (never null) are pushed.
                arena.give_offset(
                    unsafe { NonNull::new_unchecked(c.free[c.len]) },
                    size,
                    zeroed,
                );
                cache.held -= 1;
                cache.held_bytes -= size;
            }
        }
    }
}
