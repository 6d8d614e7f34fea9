//! The accounting allocator: every heap byte charged to the group of the
//! thread that allocated it, and uncharged from that same group when the
//! object is freed, by whichever thread frees it.
//!
//! [`Accounted<A>`] wraps any [`GlobalAlloc`] (`System`, mimalloc, …) and is
//! meant to be the program's `#[global_allocator]`:
//!
//! ```
//! use rstat::alloc::Accounted;
//! use std::alloc::System;
//!
//! #[global_allocator]
//! static ALLOC: Accounted<System> = Accounted::new(System);
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let rs = rstat::Rstat::new();
//!     let mem = rstat::memory::Memory::register_with(&rs, rstat::alloc::heap_config())?;
//!     ALLOC.install(&rs, &mem)?; // from here on, allocations are charged
//!     let tenant = rs.root().create_child("tenant")?;
//!     let buf = {
//!         let _in = tenant.enter(); // this thread's current group
//!         vec![0u8; 10_000]
//!     };
//!     mem.drain_stocks(&tenant)?;
//!     assert!(mem.current(&tenant)? >= 10_000);
//!     drop(buf); // uncharged from `tenant`, on any thread
//!     mem.drain_stocks(&tenant)?;
//!     assert_eq!(mem.current(&tenant)?, 0);
//!     Ok(())
//! }
//! ```
//!
//! # The path of an allocation
//!
//! 1. **Layout**: the object gets an 8-byte *trailer* after its bytes,
//!    rounded up to 8 ([`overhead`]); the inner allocator is asked for
//!    `round_up(size, 8) + 8` bytes at `max(align, 8)`. The object starts
//!    where the inner block starts, so **every alignment works at the same
//!    cost**: the overhead is `8 + (8 - size % 8) % 8` bytes, 8 to 15, for
//!    any alignment (a header before the object would cost `align` bytes
//!    for alignments above 16).
//! 2. **Whom to charge**: the thread's current group
//!    ([`Group::enter`](crate::Group::enter), read through a destructor-free
//!    thread-local, no allocation), or the bound engine's root if the
//!    thread is in no group or in another engine's group.
//! 3. **Charge** `size + overhead` bytes, once the inner allocator
//!    returned a block (a null from it is no object: nothing is charged or
//!    counted, not even in `memory.peak`; a refused charge frees the block
//!    and returns null), through this CPU's stock
//!    ([`crate::memory::stock`]): the common case writes no shared cache
//!    line. A miss charges a batch to the page counters. Over
//!    `memory.max`: the group's [`HeapLimitMode`](super::HeapLimitMode) (account: force and count
//!    `max`/`oom`; enforce: drain, reclaim, retry, then return null). Over
//!    `memory.high`: the registered reclaimers run
//!    ([`Memory::reclaim_high`]).
//! 4. **Owner**: the trailer records the group's *owner handle*
//!    (`memory::objcg`, the kernel's `obj_cgroup`: a small
//!    reference-counted object each group's memory state owns), holding one
//!    reference on it. The reference is taken from this CPU's stock slot,
//!    which fetches them 64 at a time: no shared write on the common path.
//! 5. **Stats**: `heap`, `heap_overhead` and `heap_allocs` in
//!    `memory.stat` (see [`MEMORY_STAT_NAMES`](crate::memory::MEMORY_STAT_NAMES)),
//!    counted in the same stock slot, under the lock already held (plain
//!    adds), and added to the group's per-CPU stat items every
//!    [`HEAP_STAT_BATCH`](crate::memory::stock::HEAP_STAT_BATCH) operations
//!    or when the slot is emptied. **Reads stay exact:**
//!    [`Memory::stat`] and [`Memory::stat_exact`] first add every slot's
//!    pending deltas for the group's subtree
//!    ([`Memory::flush_heap_stats`]: each CPU's stock lock once); a read
//!    of the raw stat controller ([`Memory::stats`]) without that may miss
//!    fewer than 64 operations per (group, CPU).
//!
//! **Where reclaim runs.** Reclaimers (for `memory.high`, and for
//! `memory.max` in enforce mode) run on the allocating thread, inside the
//! allocation, with the re-entry flag set (their own allocations pass
//! through). A reclaimer must therefore not wait for a lock the program
//! may hold while allocating. The crate's own locks are handled: while a
//! thread holds one (the crate allocates under some of them), its
//! allocations are charged without reclaim or waiting, forced past
//! `memory.max` if need be and counted as such; the next allocation made
//! outside catches up.
//!
//! A free reads the trailer and gives the object's bytes and its reference
//! on the handle back to the group that was charged, whatever thread frees
//! it (not the freeing thread's group), counting `heap_frees`. **Fast
//! path**: this CPU's stock (under its lock) has a slot for the handle's
//! group, found by the handle's address alone: the bytes and the reference
//! go into it, without reading the handle's word or the group. **Full
//! path** (no such slot, the lock busy, a level over its `memory.max`, or
//! reclaiming): holding a stock lock (any CPU's; its own if free), read the
//! group the handle names now (its own, or after removals an ancestor) and
//! uncharge it through that stock.
//!
//! **Why a slot is enough.** A slot names a group's state only until the
//! group's removal drains it (every CPU's stock, under each lock), and the
//! state holds its handle's base reference until after that drain. So a
//! fast path that finds a slot under the lock is ordered before the drain
//! of this CPU: the group it charges or uncharges is the right one (a
//! handle is reparented during the removal, before the drain; the drain
//! then moves the slot's units to that group's counter, whose ancestors
//! hold them), and the handle is live. The allocation's fast path goes one
//! step further: it remembers, per thread, which handle the full path last
//! charged for the thread's current group (`ChargeCache`: the binding, the
//! group's address, engine and id, and the handle's *serial*), and while
//! those match it charges that handle from this CPU's stock without
//! resolving the group; it reaches the handle only through a slot carrying
//! its serial, which proves it live. It holds no reference on the handle,
//! so the thread's group may be removed under it (the thread still inside)
//! and the handle freed, and a new group's handle may then be made at the
//! same address with a slot on this CPU: a serial is never reused, so that
//! slot never matches, and the charge takes the full path to the removed
//! group's nearest live ancestor. **A group is never charged for an object
//! allocated in another group.** The loom models
//! `memory::tests_loom::fast_charge_and_free_racing_removal` and
//! `fast_charge_never_takes_a_slot_of_a_handle_at_a_reused_address` check
//! both paths against a racing removal and address reuse.
//! `realloc` keeps the inner allocator's in-place growth: it charges (or
//! uncharges) only the difference to the group the object's handle names
//! and moves the trailer. A growth is charged *before* the inner allocator
//! is asked, as the kernel charges before it uses (undoing a reallocation
//! the charge then refused could itself fail): if the inner allocator
//! refuses, the growth is uncharged again, and the object's counts are
//! unchanged, but `memory.peak` keeps the level the pre-charge reached.
//! (An object allocated while the allocator passed through stays
//! uncharged, counted as pass-through, through its reallocs and its free.)
//!
//! # Removed groups
//!
//! When a group is removed its remaining charges are reparented
//! ([`crate::memory`], "Removed groups"): its parent's counter, which
//! counted them all along, keeps them. Its owner handle is reparented too:
//! linked to the parent's handle (and, if the parent is removed later,
//! through it to the next live ancestor). A later free of one of its
//! objects uncharges the nearest live ancestor and counts both its `heap`
//! bytes (negative) and `heap_reparented` there: the removed group's own
//! stats stop at its removal (they were folded into the parent's
//! hierarchical totals), so a group's *local* `heap` is its own objects'
//! bytes less those of removed descendants' objects freed since, and its
//! *hierarchical* `heap` is exactly its subtree's live heap.
//!
//! **Objects do not pin their group.** Nothing an object holds points at
//! its group: the removed group (its per-CPU stat slots, tables, memory
//! state) is released as soon as the last handle on it is dropped, while
//! its objects live on. They keep only their owner handle (three words)
//! and the handles linked above it, freed with the last object. Costs: a
//! free of an object of a removed group takes the slow path (a per-CPU
//! reference on the live ancestor, the page counter, one link per removed
//! ancestor); frees of live groups' objects are unchanged.
//!
//! The allocator never releases a group itself: its caller may hold the
//! engine's locks (rstat's own code frees memory under them). A reference
//! it took for a slow path is dropped with `Group::drop_deferred`: if it
//! was the last, the group is released at the next `create_child`,
//! `remove`, engine drop or
//! [`Rstat::release_deferred`](crate::Rstat::release_deferred). Owner
//! handles are freed inside `dealloc` when their last reference goes; they
//! were allocated uncharged (pass-through), so that free does not recurse
//! into the charge path.
//!
//! # Binding: how a `static` allocator finds its controller
//!
//! An [`Accounted`] starts unbound: a pass-through that still adds the
//! trailer (so any object can be freed later, bound or not) with no owner,
//! and counts what passes through ([`Accounted::pass_through`]). This is
//! what happens before `main` and until [`install`](Accounted::install).
//! `install(&rstat, &memory)` binds it to a controller (it keeps a clone of the
//! [`Memory`] handle). It falls back to pass-through, counted:
//!
//! - while the thread is already inside the allocator (a nested
//!   allocation made by the charge path's slow parts: errors, reclaimers),
//!   so it never recurses and never waits for itself;
//! - after the engine's [`Rstat`] is dropped (its root is offline, and
//!   its stock slots are drained and never refilled, so the fast path
//!   finds none), for threads in a group and in none alike;
//! - after [`uninstall`](Accounted::uninstall).
//!
//! Objects charged before any of these are still uncharged exactly when
//! freed: the binding they were charged through is never freed
//! (`uninstall` keeps it on a list, with the controller it holds: a few
//! words and one controller per install, meant to happen once per
//! process).
//!
//! The allocator's own state is a re-entry flag and the current group,
//! both in `const` thread-locals without destructors, so it works in TLS
//! destructors and during thread exit.
//!
//! # Costs
//!
//! An allocation on the fast path: three thread-local loads (the re-entry
//! flag, the current group, the cache) and the binding, the group's id,
//! one uncontended compare-and-swap on this CPU's stock lock, a scan of at
//! most 7 slot keys, plain adds in the slot (units, the handle reference:
//! a shared atomic add once per 64 objects; the stat deltas: the per-CPU
//! stat adds once per 64 operations), the trailer store. A free on the
//! fast path: the trailer and the handle's `stocks` field, the lock, the
//! same scan and adds. On this machine that is about 22 ns per allocation
//! and free pair over mimalloc's own, on one thread (`rstat bench alloc`
//! measures it at two). A stock miss: one atomic add per ancestor's usage. A
//! group removal: every CPU's stock lock once (the drain it makes anyway
//! doubles as the handles' grace period, see `memory::objcg`).
//! Drift: at quiescent points, a group's `memory.current` exceeds its live
//! objects' bytes (plus overhead) by what sits in the stocks, at most
//! `batch × nr_cpus` ([`drift_bound`]); 0 after
//! [`Memory::drain_stocks`].
//!
//! # Verification
//!
//! One test binary per `#[global_allocator]` configuration:
//! `tests/alloc_system.rs` (exactness per group at quiescent points with
//! frees on other threads and groups removed while their objects live,
//! each removed group seen released, through an extension's `release`
//! hook, while its objects live; every alignment, realloc, limits,
//! reclaim, allocations under the crate's locks), `tests/alloc_lifecycle.rs`
//! (before install, TLS destructors, a removed group released at once
//! while its object lives, the engine dropped, uninstall) and
//! `tests/alloc_mimalloc.rs` (`--features mimalloc`). CI runs the first two
//! under Miri with Tree Borrows (Stacked Borrows rejects reading the
//! trailer through the pointer a `Box` gives back, whose tag covers only
//! the object) and under AddressSanitizer; the owner handle's reparenting
//! against a racing free has a loom model in `memory::tests_loom`, the
//! deferred-release stack one in `group`.
//!
//! # Synchronization
//!
//! The binding pointer is published with a `Release` compare-and-swap and
//! read with `Acquire`, so a thread that sees it sees the binding's
//! fields; bindings are never freed, so a racing `uninstall` cannot leave
//! a reader with a dangling one. The retired list is push-only (`Release`
//! push, `Acquire` reads). Pass-through counters are `Relaxed` counts.
//! The owner handle in each object's trailer is written before the block
//! is returned and read by the free, which the program orders after the
//! allocation. Where a handle's objects go is read under a stock lock and
//! changed only by a group's removal, which then waits for every stock
//! lock once before the group can be freed: a lock-based grace period, in
//! place of the kernel's RCU (`memory::objcg`, `# Synchronization`; loom
//! model in `memory::tests_loom`). Everything else is the memory
//! controller's (see [`crate::memory`]).

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::ptr::NonNull;

use super::config::MemoryConfig;
use super::handle::Memory;
use super::objcg::ObjCg;
use super::stock::Stocks;
use crate::engine::{EngineInner, Rstat};
use crate::group::{Group, GroupInner};
// std's atomics, not `crate::sync`'s: the allocator must be constructible
// in a `static` (const), and loom's atomics allocate, which a global
// allocator cannot model. Its own protocol (publish-once bindings, a
// push-only retired list) is two single-word CASes; the group and stock
// protocols it calls into are modelled with loom where they live.
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Bytes of the trailer after each object.
pub const TRAILER: usize = 8;

/// The [`MemoryConfig`] to register a controller fed by the allocator
/// with: bytes as the unit, a batch of 256 KiB (the kernel's 64 pages).
/// With the default batch of 64 units, most allocations would miss the
/// stock.
pub fn heap_config() -> MemoryConfig {
    MemoryConfig {
        batch: HEAP_BATCH,
        ..MemoryConfig::default()
    }
}

/// The batch of [`heap_config`]: 64 pages of 4 KiB, in bytes.
pub const HEAP_BATCH: u64 = 64 * 4096;

/// The bytes the allocator adds to an object of `size` bytes (any
/// alignment): its trailer and the padding before it, 8 to 15.
#[inline(always)]
pub const fn overhead(size: usize) -> usize {
    size.next_multiple_of(TRAILER) - size + TRAILER
}

/// The documented drift bound: how far, at a quiescent point, a group's
/// `memory.current` may exceed its live heap bytes (the units in the
/// stocks): one batch per CPU.
pub fn drift_bound(mem: &Memory) -> u64 {
    mem.config().batch.saturating_mul(mem.inner.nr_cpus as u64)
}

/// The inner layout for `layout` and the overhead; `None` if it does not
/// fit `isize`.
#[inline(always)]
fn inner_layout(layout: Layout) -> Option<(Layout, usize)> {
    let body = layout.size().checked_next_multiple_of(TRAILER)?;
    let total = body.checked_add(TRAILER)?;
    let l = Layout::from_size_align(total, layout.align().max(TRAILER)).ok()?;
    Some((l, total - layout.size()))
}

/// The trailer of the object at `ptr` of `size` bytes.
///
/// # Safety
/// `ptr` came from [`Accounted`] for a layout of `size` bytes.
#[inline(always)]
unsafe fn trailer(ptr: *mut u8, size: usize) -> *mut *mut ObjCg {
    // SAFETY: the inner block has `round_up(size, 8) + 8` bytes, aligned to
    // at least 8; the trailer is its last 8, aligned.
    unsafe { ptr.add(size.next_multiple_of(TRAILER)).cast() }
}

thread_local! {
    /// Whether this thread is inside the allocator's accounting. No
    /// destructor, `const`: usable in any phase of the thread's life.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
    /// The fast path's memory of whom the last full-path charge went to:
    /// see [`ChargeCache`]. No destructor, `const`.
    static CHARGE_CACHE: Cell<ChargeCache> = const { Cell::new(ChargeCache::EMPTY) };
}

/// Whom this thread's allocations were last charged to by the full path:
/// while the binding and the thread's current group are the same (the same
/// group, not a new one at the same address: its engine and its id, unique
/// in that engine, are compared), allocations go to the same owner handle,
/// and the fast path charges it from this CPU's stock without resolving
/// the group again. Nothing here is dereferenced unless it matches; the
/// handle is used only if this CPU's stock still has a slot for it (the
/// proof that its group has not been removed: see
/// `Stocks::heap_charge_fast`).
#[derive(Clone, Copy)]
struct ChargeCache {
    binding: *const Binding,
    /// The current group's address (null: no group, so the root).
    group: *const GroupInner,
    /// Its id (0 for the root case).
    id: u64,
    /// The serial of the owner handle the full path charged (the handle
    /// itself is found through this CPU's stock slot carrying it: its
    /// address alone could be another handle's by now).
    serial: u64,
    /// The binding's stocks (which live as long as the binding: forever).
    stocks: *const Stocks,
}

impl ChargeCache {
    const EMPTY: ChargeCache = ChargeCache {
        binding: core::ptr::null(),
        group: core::ptr::null(),
        id: 0,
        serial: 0,
        stocks: core::ptr::null(),
    };
}

/// The re-entry guard: `None` if this thread is already inside.
struct Inside;

impl Inside {
    #[inline(always)]
    fn enter() -> Option<Inside> {
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

/// Run `f` with this thread's allocations passing through the accounting
/// allocator uncharged (counted in [`Accounted::pass_through`]): for the
/// crate's own metadata that must be freeable from inside `dealloc`
/// without charging anything (owner handles).
pub(crate) fn untracked<R>(f: impl FnOnce() -> R) -> R {
    let _inside = Inside::enter();
    f()
}

/// A controller bound to the allocator. Never freed (see the module docs).
struct Binding {
    mem: Memory,
    root: Group,
    engine: *const EngineInner,
    /// The next retired binding.
    next: AtomicPtr<Binding>,
}

/// What went through an [`Accounted`] uncharged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassThrough {
    /// Objects allocated without an owner (unbound, nested in the
    /// allocator, or the engine dropped).
    pub allocs: u64,
    /// Objects without an owner freed.
    pub frees: u64,
    /// Bytes (with overhead) of live objects without an owner.
    pub live_bytes: u64,
}

/// Why [`Accounted::install`] refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstallError {
    /// Already bound to a controller: call [`Accounted::uninstall`] first.
    AlreadyInstalled,
    /// The controller is registered on another engine than the one given.
    ForeignController,
}

impl std::fmt::Display for InstallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InstallError::AlreadyInstalled => f.write_str(
                "the accounting allocator is already bound to a memory controller; \
                 call uninstall() first",
            ),
            InstallError::ForeignController => f.write_str(
                "the memory controller belongs to another Rstat; pass the one it was registered on",
            ),
        }
    }
}

impl std::error::Error for InstallError {}

/// A [`GlobalAlloc`] that charges every object to the current group's
/// memory controller. See the [module docs](self).
pub struct Accounted<A> {
    inner: A,
    bind: AtomicPtr<Binding>,
    retired: AtomicPtr<Binding>,
    pass_allocs: AtomicU64,
    pass_frees: AtomicU64,
    /// Bytes allocated and freed without owner (two counters, so each only
    /// grows and `live = allocated - freed`).
    pass_bytes_in: AtomicU64,
    pass_bytes_out: AtomicU64,
}

// SAFETY: the raw pointers are to bindings, which are never freed and whose
// contents are thread-safe (`Memory`, `Group`, an address used as an
// identity); the rest is atomics and the inner allocator, itself `Sync`
// when `A` is.
unsafe impl<A: Sync> Sync for Accounted<A> {}
// SAFETY: as above.
unsafe impl<A: Send> Send for Accounted<A> {}

impl<A> Accounted<A> {
    /// An unbound allocator over `inner` (usable in a `static`).
    pub const fn new(inner: A) -> Self {
        Accounted {
            inner,
            bind: AtomicPtr::new(core::ptr::null_mut()),
            retired: AtomicPtr::new(core::ptr::null_mut()),
            pass_allocs: AtomicU64::new(0),
            pass_frees: AtomicU64::new(0),
            pass_bytes_in: AtomicU64::new(0),
            pass_bytes_out: AtomicU64::new(0),
        }
    }

    /// The inner allocator.
    pub fn inner(&self) -> &A {
        &self.inner
    }

    /// Bind to `mem`, a memory controller of `rs`: allocations from now on
    /// are charged to the current group (in `rs`; else `rs`'s root). Keeps a clone of `mem` (and so its engine)
    /// for as long as objects charged through it may be freed: for the
    /// rest of the process. Cost: one allocation (uncharged).
    pub fn install(&self, rs: &Rstat, mem: &Memory) -> Result<(), InstallError> {
        if mem.engine_ptr() != rs.engine_ptr() {
            return Err(InstallError::ForeignController);
        }
        let root = rs.root().clone();
        let b = Box::into_raw(Box::new(Binding {
            mem: mem.clone(),
            root,
            engine: mem.engine_ptr(),
            next: AtomicPtr::new(core::ptr::null_mut()),
        }));
        // Release: publishes the binding's fields to the Acquire loads.
        match self.bind.compare_exchange(
            core::ptr::null_mut(),
            b,
            Ordering::Release,
            Ordering::Relaxed,
        ) {
            Ok(_) => Ok(()),
            Err(_) => {
                // SAFETY: never published.
                drop(unsafe { Box::from_raw(b) });
                Err(InstallError::AlreadyInstalled)
            }
        }
    }

    /// Unbind: allocations from now on pass through (counted). Objects
    /// charged before are still uncharged exactly when freed. Returns
    /// whether a controller was bound.
    pub fn uninstall(&self) -> bool {
        let b = self.bind.swap(core::ptr::null_mut(), Ordering::AcqRel);
        if b.is_null() {
            return false;
        }
        // SAFETY: bindings are never freed.
        let bref = unsafe { &*b };
        let mut head = self.retired.load(Ordering::Relaxed);
        loop {
            bref.next.store(head, Ordering::Relaxed);
            // Release: publishes `next` to the Acquire walk in `binding_for`.
            match self
                .retired
                .compare_exchange_weak(head, b, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(h) => head = h,
            }
        }
    }

    /// The controller bound now, if any.
    pub fn memory(&self) -> Option<&Memory> {
        // SAFETY: bindings are never freed.
        unsafe { self.bind.load(Ordering::Acquire).as_ref() }.map(|b| &b.mem)
    }

    /// What went through uncharged so far. Three `Relaxed` loads: exact
    /// when no thread allocates.
    pub fn pass_through(&self) -> PassThrough {
        let i = self.pass_bytes_in.load(Ordering::Relaxed);
        let o = self.pass_bytes_out.load(Ordering::Relaxed);
        PassThrough {
            allocs: self.pass_allocs.load(Ordering::Relaxed),
            frees: self.pass_frees.load(Ordering::Relaxed),
            live_bytes: i.wrapping_sub(o),
        }
    }

    /// The binding objects of `engine` were charged through: the current
    /// one, else a retired one.
    #[inline(always)]
    fn binding_for(&self, engine: *const EngineInner) -> Option<&Binding> {
        // SAFETY: bindings are never freed.
        let cur = unsafe { self.bind.load(Ordering::Acquire).as_ref() };
        if let Some(b) = cur {
            if b.engine == engine {
                return Some(b);
            }
        }
        self.retired_binding_for(engine)
    }

    #[cold]
    fn retired_binding_for(&self, engine: *const EngineInner) -> Option<&Binding> {
        let mut p = self.retired.load(Ordering::Acquire);
        // SAFETY: bindings are never freed; `next` was published before
        // the push that made it reachable.
        while let Some(b) = unsafe { p.as_ref() } {
            if b.engine == engine {
                return Some(b);
            }
            p = b.next.load(Ordering::Acquire);
        }
        None
    }

    #[cold]
    fn count_pass_alloc(&self, bytes: usize) {
        self.pass_allocs.fetch_add(1, Ordering::Relaxed);
        self.pass_bytes_in
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    #[cold]
    fn count_pass_free(&self, bytes: usize) {
        self.pass_frees.fetch_add(1, Ordering::Relaxed);
        self.pass_bytes_out
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// The fast charge of a new object: the owner handle this thread
    /// charged last ([`ChargeCache`]), if it is still the right one, charged
    /// from this CPU's stock. `None`: take the full path. Writes nothing
    /// but this CPU's stock slot (under its lock), allocates nothing, so
    /// it needs no re-entry flag (only checks it).
    #[inline(always)]
    fn charge_fast(&self, size: usize, overhead: usize) -> Option<NonNull<ObjCg>> {
        if INSIDE.try_with(Cell::get).unwrap_or(true) {
            return None;
        }
        let b = self.bind.load(Ordering::Acquire).cast_const();
        let c = CHARGE_CACHE.try_with(Cell::get).ok()?;
        let cur = crate::attach::current_group_ptr();
        if b.is_null() || !core::ptr::eq(c.binding, b) || !core::ptr::eq(c.group, cur) {
            return None;
        }
        if !cur.is_null() {
            // SAFETY: the current group is kept alive by the guard that made
            // it current (see `current_group_ptr`); the binding is never
            // freed.
            let g = unsafe { &*cur };
            // SAFETY: bindings are never freed.
            let engine = unsafe { (*b).engine };
            if g.id != c.id || !core::ptr::eq(engine_of(g), engine) {
                return None;
            }
        }
        if c.serial == 0 {
            return None;
        }
        // SAFETY: the binding's stocks, which it keeps forever. The handle
        // is reached only through this CPU's stock slot carrying its
        // serial, which proves it live (its group was removed, and the
        // handle perhaps freed, only if no slot names it: see
        // `heap_charge_fast`).
        let stocks = unsafe { &*c.stocks };
        stocks.heap_charge_fast(stocks.this_cpu(), c.serial, size as u64, overhead as u64)
    }

    /// Charge a new object of `size` bytes. `Ok(None)`: pass through;
    /// `Err(())`: refused (enforced limit).
    #[inline(always)]
    fn charge_new(&self, size: usize, overhead: usize) -> Result<Option<NonNull<ObjCg>>, ()> {
        if let Some(x) = self.charge_fast(size, overhead) {
            return Ok(Some(x));
        }
        self.charge_full(size, overhead)
    }

    /// [`charge_new`](Self::charge_new)'s full path: resolve the group,
    /// charge it, and remember the handle for the fast path.
    #[inline(never)]
    fn charge_full(&self, size: usize, overhead: usize) -> Result<Option<NonNull<ObjCg>>, ()> {
        let Some(_inside) = Inside::enter() else {
            return Ok(None);
        };
        // SAFETY: bindings are never freed.
        let Some(b) = (unsafe { self.bind.load(Ordering::Acquire).as_ref() }) else {
            return Ok(None);
        };
        if !b.root.is_online() {
            return Ok(None); // the engine was dropped
        }
        let cur = crate::attach::current_group_ptr();
        // The group to charge, and the id the fast path's cache keys it by
        // (`None`: not cached, for a group of another engine).
        let (group, cache_id) = match NonNull::new(cur.cast_mut()) {
            // SAFETY: the current group is kept alive by the guard that
            // made it current, until this thread enters or leaves a group
            // (see `current_group_ptr`): not during this call.
            Some(p) if core::ptr::eq(engine_of(unsafe { p.as_ref() }), b.engine) => {
                // SAFETY: as above.
                (
                    unsafe { Group::borrow_ptr(p) },
                    Some(unsafe { p.as_ref() }.id),
                )
            }
            // SAFETY: the binding holds a reference on its root.
            p => (
                unsafe { Group::borrow_ptr(b.root.inner_ptr()) },
                p.is_none().then_some(0),
            ),
        };
        let cpu = b.mem.this_cpu();
        let x = b
            .mem
            .heap_charge(&group, size as u64, overhead as u64, cpu)
            .ok_or(())?;
        // Remember whom this went to, if it is the group's own handle (not
        // an ancestor's, after a removal) and the group is of this binding's
        // engine.
        if let Some(id) = cache_id.filter(|_| b.mem.heap_objcg_of(&group) == Some(x)) {
            let _ = CHARGE_CACHE.try_with(|c| {
                c.set(ChargeCache {
                    binding: b,
                    group: cur,
                    id,
                    // SAFETY: the new object's reference keeps `x` live.
                    serial: unsafe { x.as_ref() }.serial(),
                    stocks: b.mem.stocks(),
                })
            });
        }
        Ok(Some(x))
    }

    /// The fast uncharge of a freed object: its units and its reference on
    /// `owner` into this CPU's stock, if that has a slot for the handle's
    /// group. False: take the full path ([`uncharge`](Self::uncharge)).
    /// Allocates nothing.
    #[inline(always)]
    fn uncharge_fast(&self, owner: NonNull<ObjCg>, size: usize, overhead: usize) -> bool {
        // SAFETY: the object holds a reference on its handle.
        let stocks = Stocks::of_handle(unsafe { owner.as_ref() });
        if stocks.is_null() || super::reclaim::in_reclaim() {
            return false;
        }
        // SAFETY: the stocks of the controller the object was charged
        // through, which its binding keeps for the rest of the process.
        let stocks = unsafe { &*stocks };
        stocks.heap_uncharge_fast(
            stocks.this_cpu(),
            owner.as_ptr(),
            size as u64,
            overhead as u64,
        )
    }

    /// Uncharge the object whose trailer holds `owner`, giving back its
    /// reference on the handle.
    #[inline(always)]
    fn uncharge(&self, owner: NonNull<ObjCg>, size: usize, overhead: usize) {
        // The re-entry flag is only for new allocations: this object's
        // bytes must leave its group whatever the nesting (the uncharge
        // path allocates only on errors, which then pass through).
        let _inside = Inside::enter();
        // SAFETY: the object holds a reference on its handle.
        let engine =
            core::ptr::without_provenance::<EngineInner>(unsafe { owner.as_ref() }.engine());
        match self.binding_for(engine) {
            Some(b) => {
                let cpu = b.mem.this_cpu();
                // SAFETY: the object's reference, given back once (its
                // trailer is not read again: the object is being freed).
                unsafe {
                    b.mem
                        .heap_uncharge(owner, size as u64, overhead as u64, cpu)
                }
            }
            // Cannot happen (a handle is only written through a binding,
            // and bindings are never freed); keep the count right anyway.
            // SAFETY: as above.
            None => drop(unsafe { ObjCg::put(owner, 1) }),
        }
    }

    /// Charge (grow) or uncharge (shrink) the difference of a resized
    /// object to its owner, counting the size and overhead changes. False
    /// if a growth was refused.
    fn resize(&self, owner: NonNull<ObjCg>, old: (usize, usize), new: (usize, usize)) -> bool {
        let _inside = Inside::enter();
        // SAFETY: the object holds a reference on its handle.
        let engine =
            core::ptr::without_provenance::<EngineInner>(unsafe { owner.as_ref() }.engine());
        let Some(b) = self.binding_for(engine) else {
            return true;
        };
        let cpu = b.mem.this_cpu();
        // SAFETY: the object's reference is held for the whole call.
        unsafe {
            b.mem.heap_resize(
                owner,
                (old.0 as u64, old.1 as u64),
                (new.0 as u64, new.1 as u64),
                cpu,
            )
        }
    }
}

/// The engine a group belongs to (an identity).
#[inline(always)]
fn engine_of(g: &GroupInner) -> *const EngineInner {
    std::sync::Arc::as_ptr(&g.engine)
}

// SAFETY: every block handed out comes from `inner` with a layout at least
// as large and as aligned as the caller's (`inner_layout`), starting at the
// inner block's start; `dealloc` and `realloc` recompute the same inner
// layout from the caller's layout, as `GlobalAlloc` requires callers to
// pass the layout the block was allocated with. The trailer lies past the
// caller's bytes, inside the inner block. Nothing here unwinds (no panic
// on any path: the charge path's errors are values).
unsafe impl<A: GlobalAlloc> GlobalAlloc for Accounted<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract; `alloc_with` is given `inner.alloc`.
        unsafe { self.alloc_with(layout, |l| self.inner.alloc(l)) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe { self.alloc_with(layout, |l| self.inner.alloc_zeroed(l)) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some((il, overhead)) = inner_layout(layout) else {
            // Cannot happen: the same layout fitted when allocated.
            return;
        };

        // SAFETY: `ptr` came from `alloc_with` for `layout`.
        let owner = unsafe { *trailer(ptr, layout.size()) };
        match NonNull::new(owner) {
            Some(o) => {
                if !self.uncharge_fast(o, layout.size(), overhead) {
                    self.uncharge(o, layout.size(), overhead);
                }
            }
            None => self.count_pass_free(il.size()),
        }
        // SAFETY: allocated by `inner` with `il` (module invariant).
        unsafe { self.inner.dealloc(ptr, il) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Some((il, old_ovh)) = inner_layout(layout) else {
            return core::ptr::null_mut();
        };
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return core::ptr::null_mut();
        };
        let Some((new_il, new_ovh)) = inner_layout(new_layout) else {
            return core::ptr::null_mut();
        };

        // SAFETY: `ptr` came from us for `layout`.
        let owner = unsafe { *trailer(ptr, layout.size()) };
        let old = (layout.size(), old_ovh);
        let new = (new_size, new_ovh);
        let Some(o) = NonNull::new(owner) else {
            // SAFETY: `ptr` was allocated by `inner` with `il`; the new
            // size is non-zero and fits (checked by `inner_layout`).
            let p = unsafe { self.inner.realloc(ptr, il, new_il.size()) };
            if !p.is_null() {
                // SAFETY: `p` is a block of `new_il`; the trailer is inside.
                unsafe { *trailer(p, new_size) = core::ptr::null_mut() };
                // Relaxed: counts (see `pass_through`).
                self.pass_bytes_out
                    .fetch_add(il.size() as u64, Ordering::Relaxed);
                self.pass_bytes_in
                    .fetch_add(new_il.size() as u64, Ordering::Relaxed);
            }
            return p;
        };
        let grow = new.0 + new.1 > old.0 + old.1;
        if grow && !self.resize(o, old, new) {
            return core::ptr::null_mut(); // refused; the old block is intact
        }
        // SAFETY: as above.
        let p = unsafe { self.inner.realloc(ptr, il, new_il.size()) };
        if p.is_null() {
            if grow {
                // Give back what was charged for the growth.
                self.resize(o, new, old);
            }
            return p;
        }
        // SAFETY: `p` is a block of `new_il`; the trailer is inside. The
        // owner's reference moves with it.
        unsafe { *trailer(p, new_size) = owner };
        if !grow {
            self.resize(o, old, new);
        }
        p
    }
}

impl<A: GlobalAlloc> Accounted<A> {
    /// `alloc` and `alloc_zeroed`: allocate with `f`, then charge. A block
    /// the inner allocator refuses is no object: nothing is charged or
    /// counted (not even in `memory.peak`). A charge refused (an enforced
    /// limit) frees the block at once and returns null.
    ///
    /// # Safety
    /// `layout` has a non-zero size (`GlobalAlloc::alloc`'s contract).
    #[inline(always)]
    unsafe fn alloc_with(&self, layout: Layout, f: impl FnOnce(Layout) -> *mut u8) -> *mut u8 {
        let Some((il, overhead)) = inner_layout(layout) else {
            return core::ptr::null_mut();
        };
        let p = f(il);
        if p.is_null() {
            return p;
        }
        let owner = match self.charge_new(layout.size(), overhead) {
            Ok(o) => o,
            Err(()) => {
                // SAFETY: `p` was just allocated by `inner` with `il`, and
                // nobody else has it.
                unsafe { self.inner.dealloc(p, il) };
                return core::ptr::null_mut();
            }
        };
        if owner.is_none() {
            self.count_pass_alloc(il.size());
        }
        // SAFETY: `p` is a block of `il`, whose last 8 bytes are the
        // trailer (aligned to 8).
        unsafe {
            *trailer(p, layout.size()) = owner.map_or(core::ptr::null_mut(), NonNull::as_ptr)
        };
        p
    }
}
