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
//! 1. **Layout**: the object gets an 8-byte *owner word*
//!    ([`OWNER_WORD`]); the inner allocator is asked for
//!    `round_up(size, 8) + 8` bytes at `max(align, 8)`, so **every
//!    alignment costs the same**: the overhead is `8 + (8 - size % 8) % 8`
//!    bytes, 8 to 15 ([`overhead`]). For alignments up to 8 (nearly every
//!    object) the word is a *header*: the block's first 8 bytes, the
//!    object right after. A free then reads a line the program and the
//!    inner allocator's own free (its free-list link) touch anyway, so an
//!    object gone cold in another thread's cache costs one miss, not two.
//!    Above 8 it is a *trailer* after the object's bytes rounded up to 8
//!    (the object starts where the block does), as a header would have to
//!    be a whole alignment long.
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
//!    `max`, never `oom`, as nothing failed; enforce: drain, reclaim, retry, then return null;
//!    kill: drain, reclaim, then kill the allocating group's work and
//!    charge anyway). Over `memory.high`: the registered reclaimers run
//!    ([`Memory::reclaim_high`]), and the allocating work owes a delay
//!    ([`crate::attach::throttle_point`]; a scoped future's next poll is
//!    held back).
//! 4. **Owner**: the owner word records the group's *owner handle*
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
//!    [`Memory::read`] and [`Memory::read_exact`] first add every slot's
//!    pending deltas for the group's subtree
//!    ([`Memory::flush_heap_stats`]: each CPU's stock lock once); a read
//!    through the stat controller ([`Memory::stat_controller`]) without
//!    that may miss fewer than 64 operations per (group, CPU).
//!
//! **Where reclaim runs.** Reclaimers (for `memory.high`, and for
//! `memory.max` in enforce and kill modes) run on the allocating thread, inside the
//! allocation, with the re-entry flag set (their own allocations pass
//! through). A reclaimer must therefore not wait for a lock the program
//! may hold while allocating. The crate's own locks are handled: while a
//! thread holds one (the crate allocates under some of them), its
//! allocations are charged without reclaim or waiting, forced past
//! `memory.max` if need be and counted as such; the next allocation made
//! outside catches up.
//!
//! A free reads the owner word and gives the object's bytes and its reference
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
//! and rewrites the owner word (a trailer moves; a header moved with the
//! bytes). A growth is charged *before* the inner allocator
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
//! owner word (so any object can be freed later, bound or not) with no owner,
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
//! one uncontended compare-and-swap on this CPU's stock lock, a probe of
//! the slot keys from the handle's preferred index (usually one key: see
//! [`NR_STOCK`](crate::memory::NR_STOCK)), plain adds in the slot (units,
//! the handle reference: a shared atomic add once per 64 objects; the
//! stat deltas: the per-CPU stat adds once per 64 operations), the
//! owner word's store. A free on the fast path: the owner word and the handle's
//! `stocks` field, the lock, the same probe and adds. So the fast path
//! adds a cost of its own to each allocation and free, over the inner
//! allocator's, that does not depend on the tree's depth; and since it
//! writes lines of this CPU's stock (a shared line once per 64 objects),
//! not lines every CPU writes, more threads allocating do not make it
//! dearer, where an eager tracker's shared counters would. `rstat bench
//! alloc` measures it against the inner allocator alone and an eager
//! tracker; BENCHMARKS.md keeps the results. A stock miss: a probe of
//! every slot key, then one atomic add per ancestor's usage. A group
//! removal: every CPU's stock lock once (the drain it makes anyway doubles
//! as the handles' grace period, see `memory::objcg`).
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
//! owner word through the pointer a `Box` gives back, whose tag covers
//! only the object) and under AddressSanitizer; the owner handle's reparenting
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
//! The owner handle in each object's owner word is written before the block
//! is returned and read by the free, which the program orders after the
//! allocation. Where a handle's objects go is read under a stock lock and
//! changed only by a group's removal, which then waits for every stock
//! lock once before the group can be freed: a lock-based grace period, in
//! place of the kernel's RCU (`memory::objcg`, `# Synchronization`; loom
//! model in `memory::tests_loom`). Everything else is the memory
//! controller's (see [`crate::memory`]).
//!
//! [`GlobalAlloc`]: std::alloc::GlobalAlloc
//! [`Rstat`]: crate::Rstat
//! [`Memory`]: crate::memory::Memory
//! [`Memory::reclaim_high`]: crate::memory::Memory::reclaim_high
//! [`Memory::read`]: crate::memory::Memory::read
//! [`Memory::read_exact`]: crate::memory::Memory::read_exact
//! [`Memory::flush_heap_stats`]: crate::memory::Memory::flush_heap_stats
//! [`Memory::stat_controller`]: crate::memory::Memory::stat_controller
//! [`Memory::drain_stocks`]: crate::memory::Memory::drain_stocks

// The files, lowest first: `reentry` (the thread's re-entry flag, which
// the owner handles use too), `layout`, `accounted` (the type and its
// bindings), `charge` (the charge and uncharge paths), `global` (the
// `GlobalAlloc` impl). This file only re-exports.
mod accounted;
mod charge;
mod global;
mod layout;
pub(super) mod reentry;

pub use accounted::{Accounted, InstallError, PassThrough};
#[allow(deprecated)]
pub use layout::TRAILER;
pub use layout::{drift_bound, heap_config, overhead, HEAP_BATCH, OWNER_WORD};
