//! The memory controller: charge, limit, protect and reclaim memory per
//! group, the cgroup v2 way.
//!
//! [`Memory::register`] attaches to an [`Rstat`] engine: every group gets a
//! [`PageCounter`] chained to its parent's (`memory.current`, `memory.peak`,
//! `memory.max/high/low/min`), event counts (`memory.events`,
//! `memory.events.local`), a list of reclaimers, and `memory.stat` items
//! counted through rstat (per-CPU on the charge path, flushed on read):
//! [`MEMORY_STAT_NAMES`].
//!
//! Units are whatever the caller charges: bytes by default, pages or
//! objects if you prefer. Set [`MemoryConfig::batch`] to match (the
//! kernel's 64 pages are 256 KiB of bytes).
//!
//! # The charge path
//!
//! [`Memory::try_charge`] (or [`charge_raw`](Memory::charge_raw) /
//! [`uncharge_raw`](Memory::uncharge_raw), which hold no reference):
//!
//! 1. **Stock** ([`stock`]): a charge of at most `batch` units is taken
//!    from this CPU's pre-charged stock for the group if it has enough: no
//!    shared cache line is written. An uncharge puts its units back there.
//! 2. **Page counter**: otherwise `max(batch, n)` units are charged up the
//!    ancestors and the surplus is stocked. If some ancestor's `memory.max`
//!    refuses, the batch is dropped to `n` and tried again.
//! 3. **Over the limit** ([`reclaim`]): count a `max` event on the group
//!    that refused, drain the stocks of its subtree, then reclaim from its
//!    subtree with the registered [`Reclaimer`]s, retrying while reclaim
//!    makes progress (up to [`MAX_RECLAIM_ROUNDS`] rounds) and up to
//!    [`MemoryConfig::max_reclaim_retries`] rounds that free nothing; drain
//!    again; then
//!    declare OOM (`oom` event), give the group's [`OomHandler`] one
//!    chance, and fail with [`MemoryError::OverLimit`], or with
//!    [`OnOom::Force`] charge anyway and count it.
//! 4. **Over `high`**: a charge that reached the page counter checks every
//!    level's `memory.high`, counts a `high` event on each level above it,
//!    and reports [`Charge::over_high`] so the caller can throttle (for
//!    instance with [`Memory::reclaim_high`]).
//!
//! Stat items are updated on every charge and uncharge (one per-CPU atomic
//! add, no lock); limits, usage and events are read without a flush.
//!
//! # The `Charge` guard
//!
//! [`try_charge`](Memory::try_charge) returns a [`Charge<'a>`](Charge)
//! that borrows the [`Memory`] handle and the [`Group`] it was given, and
//! uncharges on drop. Charging and dropping it cost the raw calls' path
//! (above: served from the stock, each way a few loads, one uncontended
//! compare-and-swap on this CPU's stock lock, one per-CPU stat add; no
//! allocation) plus a guard of five words on the caller's stack. The guard
//! writes no reference count, so it touches no cache line that other CPUs'
//! charges write. (A guard that cloned the `Memory` handle, an `Arc` every
//! thread shares, would add two contended atomic operations to every
//! charge, making the guard path much slower than the raw calls as soon as
//! two threads charge.)
//!
//! The borrow is what keeps the group valid while it is charged: the
//! caller's handle outlives the guard. (Only a charge that landed on the
//! nearest live ancestor of a removed group holds a handle of its own to
//! that ancestor, one reference on its per-CPU count.) A charge that must
//! outlive the borrow (kept in a cache, a reclaimer, a `'static` structure)
//! becomes an [`OwnedCharge`] by [`Charge::into_owned`], which clones the
//! `Memory` handle once (a shared reference count, written again when it
//! drops) and takes a per-CPU reference on the group:
//!
//! ```
//! use rstat::memory::{Memory, OwnedCharge};
//! use rstat::Rstat;
//! use std::sync::Mutex;
//!
//! let rs = Rstat::new();
//! let mem = Memory::register(&rs)?;
//! let g = rs.root().create_child("cache")?;
//! // A cache that outlives the borrows: 'static charges.
//! static CACHE: Mutex<Vec<OwnedCharge>> = Mutex::new(Vec::new());
//! {
//!     let hot = mem.try_charge(&g, 64)?; // borrowing guard: no refcount
//!     CACHE.lock().unwrap().push(hot.into_owned());
//! }
//! assert_eq!(CACHE.lock().unwrap()[0].amount(), 64);
//! CACHE.lock().unwrap().clear(); // uncharges
//! mem.drain_stocks(&g)?;
//! assert_eq!(mem.current(&g)?, 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A structure that already keeps the `Memory` and the group can instead
//! keep bare amounts and give them back with
//! [`uncharge_raw`](Memory::uncharge_raw) (see
//! [`Charge::into_raw`]), at the raw calls' cost.
//!
//! # Removed groups
//!
//! Removal (`Group::remove`) takes the group's memory state offline: its
//! stock slots are drained and it is never stocked again; its remaining
//! charges are **reparented**: taken off its own counter and left on its
//! parent's, which already counted them (so the parent's usage is
//! unchanged and exact); its reclaimers move to the parent; its `min` and
//! `low` drop to 0. From then on every operation through a handle to it,
//! charge or uncharge, acts on its nearest live ancestor, the kernel's
//! `obj_cgroup` reparenting. A guard borrows its group's handle (an owned
//! one holds a handle), so a removed group's memory is freed only after its
//! last guard goes.
//!
//! Heap objects charged by the accounting allocator ([`alloc`]) do not
//! hold their group: each points to the group's owner handle, which
//! removal links to the parent's (`objcg`, the kernel's `obj_cgroup`
//! reparenting), so a removed group is released as soon as its last handle
//! goes, while its objects live on; their frees uncharge the nearest live
//! ancestor. The drain at removal doubles as the grace period that makes
//! this safe against frees racing it.
//!
//! # Synchronization
//!
//! The charge path takes no lock but this CPU's stock lock (tried, never
//! waited for; see [`stock`]). Page counters synchronize themselves (see
//! [`crate::page_counter`]), stat items are rstat's per-CPU counters,
//! events are `Relaxed` counts ([`MemoryEvent`]). Each group's state has
//! two flags: `online`, cleared when the group is removed, ordered against
//! stock refills by the stock locks (the offline protocol in [`stock`]) and
//! otherwise read `Relaxed` as a flag on its own: an operation racing the
//! removal may act on the group just removed, whose charges its parent
//! counts anyway; and `over` (see the stock's "Over the limit"), a `Relaxed`
//! hint. Reclaimer lists and OOM handlers sit behind per-group mutexes,
//! never held while a reclaimer or handler runs; so do each group's reclaim
//! cursor (where the next reclaim under it resumes) and its reclaim
//! reservation (units being reclaimed from it, held off its protection),
//! each locked for a few loads and stores (see [`reclaim`]).
//!
//! ```
//! use rstat::memory::{Memory, MemoryEvent};
//! use rstat::Rstat;
//!
//! let rs = Rstat::new();
//! let mem = Memory::register(&rs)?;
//! let tenant = rs.root().create_child("tenant")?;
//! mem.write_limit(&tenant, rstat::memory::Limit::Max, "1K")?;
//!
//! let buf = mem.try_charge(&tenant, 1000)?;
//! assert!(mem.try_charge(&tenant, 100).is_err()); // over memory.max
//! assert_eq!(mem.events(&tenant)?.get(MemoryEvent::Oom), 1);
//! drop(buf); // uncharges
//! mem.drain_stocks(&tenant)?;
//! assert_eq!(mem.current(&tenant)?, 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`Rstat`]: crate::Rstat
//! [`Group`]: crate::Group
//! [`PageCounter`]: crate::page_counter::PageCounter

// The files form layers: each imports only from files earlier in this
// list (and from the crate's lower layers), none from this file, which
// only declares them and re-exports:
//   config, error, events, alloc/reentry (the allocator's re-entry flag);
//   objcg (owner handles); reclaim/mod.rs (reclaim's types);
//   memcg (one group's state); stock/ (the per-CPU stocks);
//   ext (the group extension, the offline protocol); handle (`Memory`);
//   register, read, charge, reclaim/{share, walk, registry};
//   over_limit, guard, limits, heap; the rest of alloc/.
pub mod alloc;
mod charge;
mod config;
mod error;
mod events;
mod ext;
mod guard;
mod handle;
mod heap;
mod limits;
mod memcg;
pub(crate) mod objcg;
mod over_limit;
mod read;
pub mod reclaim;
mod register;
pub mod stock;

#[cfg(all(test, not(rstat_loom)))]
mod tests;
#[cfg(all(test, rstat_loom))]
mod tests_loom;
#[cfg(all(test, not(rstat_loom)))]
mod tests_prop;
#[cfg(all(test, not(rstat_loom)))]
mod tests_reclaim;

pub use charge::{Charged, OnOom};
pub use config::{
    stat_unit, MemoryConfig, BYTES_BATCH, MAX_BATCH, MAX_RECLAIM_RETRIES, MAX_RECLAIM_ROUNDS,
    MEMCG_CHARGE_BATCH, MEMORY_STAT_NAMES,
};
pub use error::{parse_limit, MemoryError, OverLimit};
pub use events::{MemoryEvent, MemoryEvents};
pub use guard::{Charge, OwnedCharge};
pub use handle::Memory;
pub use heap::{HeapLimitMode, HIGH_PENALTY_AT_FULL_OVERAGE};
pub use limits::{Limit, LimitWrite};
pub use reclaim::{OomContext, OomHandler, Reclaimer, ReclaimerId};
pub use stock::NR_STOCK;
