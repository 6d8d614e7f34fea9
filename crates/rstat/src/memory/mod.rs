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
//! charges write. (An earlier guard cloned the `Memory` handle, an `Arc`
//! every thread shares: two contended atomic operations per charge, which
//! made the guard path several times slower than the raw calls at two
//! threads.)
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

pub mod alloc;
mod charge;
mod error;
mod events;
mod heap;
mod limits;
pub(crate) mod objcg;
pub mod reclaim;
pub mod stock;

#[cfg(all(test, not(rstat_loom)))]
mod tests;
#[cfg(all(test, rstat_loom))]
mod tests_loom;
#[cfg(all(test, not(rstat_loom)))]
mod tests_prop;
#[cfg(all(test, not(rstat_loom)))]
mod tests_reclaim;

use std::borrow::Cow;
use std::sync::Arc;

use crate::controller::counters::{ControllerHandle, GroupStats};
use crate::engine::Rstat;
use crate::group::ext::{Ext, GroupExt};
use crate::group::Group;
use crate::page_counter::PageCounter;
use crate::sync::{self, AtomicBool, AtomicPtr, Mutex, Ordering};

pub use charge::{Charge, Charged, OnOom, OwnedCharge};
pub use error::{parse_limit, MemoryError, OverLimit};
pub use events::{MemoryEvent, MemoryEvents};
pub use heap::HeapLimitMode;
pub use limits::{Limit, LimitWrite};
pub use reclaim::{OomContext, OomHandler, Reclaimer, ReclaimerId};
pub use stock::NR_STOCK;

use events::Events;
use objcg::ObjCg;
use reclaim::{ReclaimCursor, ReclaimerList};
use stock::Stocks;

/// The kernel's `MEMCG_CHARGE_BATCH`: the default [`MemoryConfig::batch`].
pub const MEMCG_CHARGE_BATCH: u64 = 64;

/// The kernel's `MAX_RECLAIM_RETRIES`: the default
/// [`MemoryConfig::max_reclaim_retries`].
pub const MAX_RECLAIM_RETRIES: u32 = 16;

/// The most reclaim rounds one charge over `memory.max` (or one
/// `memory.max` / `memory.high` write) makes, counting those that freed
/// something, when [`MemoryConfig::max_reclaim_retries`] is smaller: the
/// bound on "retry while reclaim makes progress".
pub const MAX_RECLAIM_ROUNDS: u32 = 256;

/// The largest [`MemoryConfig::batch`] (2³²).
pub const MAX_BATCH: u64 = 1 << 32;

/// The declared unit ([`Controller::stat_units`](crate::Controller::stat_units))
/// of the `memory.stat` items counted in charge units (`charged`,
/// `uncharged`, `reclaimed`, `forced`) for a [`MemoryConfig::batch`]:
/// `batch / 64` rounded down to a power of two, at least 1.
///
/// Why: the batch is the caller's statement of its charge granularity (64
/// of it, as the kernel's `MEMCG_CHARGE_BATCH` is 64 pages): a caller
/// charging bytes sets 64 pages of bytes (256 KiB) and gets 4096, the
/// kernel's own normalization of byte stats to pages; one charging pages
/// keeps the default 64 and gets 1. A CPU then walks the ancestors'
/// pending-update counters once per batch of change of an item, as often
/// as its stock refills from the page counter, whatever the charge size;
/// and a `Threshold` read of `memory.stat` may miss less than one batch of
/// each item per (group, CPU), besides the 64 × nr_cpus units the
/// threshold allows: the scale at which `memory.current` is already
/// inexact (stocks hold up to a batch per (group, CPU) charged but unused).
pub fn stat_unit(batch: u64) -> u64 {
    match batch / crate::controller::UPDATE_BATCH {
        0 => 1,
        q => 1 << q.ilog2(),
    }
}

/// Names of the `memory.stat` items, in index order: units `charged` and
/// `uncharged` by callers, units `reclaimed` by reclaimers, units `forced`
/// past `memory.max`, and `failcnt`, charges refused; then the accounting
/// allocator's ([`crate::alloc`]): `heap`, bytes of live heap objects
/// (as the program asked for them), `heap_overhead`, the bytes the
/// allocator added to them (its per-object trailer and padding; `heap +
/// heap_overhead` is what the objects charge), `heap_allocs` and
/// `heap_frees`, objects allocated and freed (a `realloc` is neither),
/// and `heap_reparented`, bytes of objects of removed groups uncharged
/// (freed, or shrunk by `realloc`) from the group (their nearest live
/// ancestor) that took them over, counted there when it happens. Heap
/// bytes are counted on the group the object's owner handle names: its
/// own group while that lives; after its removal (whose stats fold into
/// the parent's hierarchical totals) the nearest live ancestor. So a
/// subtree's hierarchical `heap + heap_overhead` is exactly its live heap,
/// while a group's local figure is its own objects' bytes less those of
/// removed descendants' objects freed since their removal.
pub const MEMORY_STAT_NAMES: [&str; 10] = [
    "charged",
    "uncharged",
    "reclaimed",
    "forced",
    "failcnt",
    "heap",
    "heap_overhead",
    "heap_allocs",
    "heap_frees",
    "heap_reparented",
];

const STAT_CHARGED: usize = 0;
const STAT_UNCHARGED: usize = 1;
const STAT_RECLAIMED: usize = 2;
const STAT_FORCED: usize = 3;
const STAT_FAILCNT: usize = 4;
const STAT_HEAP: usize = 5;
const STAT_HEAP_OVERHEAD: usize = 6;
const STAT_HEAP_ALLOCS: usize = 7;
const STAT_HEAP_FREES: usize = 8;
const STAT_HEAP_REPARENTED: usize = 9;

/// Settings of a memory controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryConfig {
    /// Units charged to a page counter at once when a stock runs dry, and
    /// the most one CPU's stock holds for one group. Up to `batch ×
    /// nr_cpus` units per group may be charged but held by nobody. 0
    /// disables the stock: every charge goes to the page counter. At most
    /// [`MAX_BATCH`]. Default [`MEMCG_CHARGE_BATCH`].
    ///
    /// It also sets the declared unit of the `memory.stat` items counted in
    /// charge units ([`stat_unit`]: `batch / 64`, rounded down to a power
    /// of two, at least 1; `failcnt` counts refusals, in unit 1).
    pub batch: u64,
    /// Reclaim rounds that free nothing a charge over `memory.max` (or a
    /// `memory.max` / `memory.high` write) makes before giving up. Rounds
    /// that free something do not count: it keeps reclaiming while reclaim
    /// makes progress, up to [`MAX_RECLAIM_ROUNDS`] rounds in all (or this
    /// many, if larger). At most 1000. Default [`MAX_RECLAIM_RETRIES`].
    pub max_reclaim_retries: u32,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            batch: MEMCG_CHARGE_BATCH,
            max_reclaim_retries: MAX_RECLAIM_RETRIES,
        }
    }
}

/// One group's memory state (the kernel's `struct mem_cgroup`, for this
/// controller). Shared by the group, stock slots naming it, and in-flight
/// operations; outlives the group if they do.
pub(crate) struct MemCg {
    pub(crate) counter: Arc<PageCounter>,
    pub(crate) parent: Option<Arc<MemCg>>,
    /// False once the group is removed (see the stock's offline protocol).
    online: AtomicBool,
    /// Possibly above its `memory.max` (see the stock's "Over the limit").
    pub(crate) over: AtomicBool,
    pub(crate) events: Events,
    pub(crate) reclaimers: Mutex<ReclaimerList>,
    /// Where the last reclaim under this group stopped: the next one
    /// resumes there (see [`reclaim`], "Where to start").
    pub(crate) reclaim_cursor: Mutex<ReclaimCursor>,
    /// Units reclaimers are being asked to free from this group right now
    /// (see [`reclaim`], "Concurrent reclaims").
    pub(crate) reclaim_reserved: Mutex<u64>,
    pub(crate) oom_handler: Mutex<Option<Arc<dyn OomHandler>>>,
    /// The accounting allocator's [`HeapLimitMode`] here: enforce if true.
    pub(crate) heap_enforce: AtomicBool,
    /// The group's owner handle for heap objects ([`objcg`]), bound to
    /// the group by the extension's `online` hook.
    objcg: ObjCgPtr,
    /// Its serial (`ObjCg::serial`), copied so that stock slots read it
    /// without dereferencing the handle.
    objcg_serial: u64,
    /// The group's address (set by the extension's `online` hook; null in
    /// models), for the heap stat deltas the stocks keep. Dereferenced only
    /// under a stock lock while a slot names this state (the group is live
    /// then: its removal drains its slots first).
    group: AtomicPtr<()>,
    /// Whether this state still holds the handle's base reference: until
    /// the group is removed (or, for the root, until this state is
    /// dropped). Cleared under [`Shared::objcg_lock`].
    objcg_base: AtomicBool,
}

/// The handle pointer, immutable for the state's life.
struct ObjCgPtr(core::ptr::NonNull<ObjCg>);

// SAFETY: the handle is made of atomics and a plain identity, shared by
// reference counts (`objcg`); the pointer itself is never written.
unsafe impl Send for ObjCgPtr {}
// SAFETY: as above.
unsafe impl Sync for ObjCgPtr {}

impl Drop for MemCg {
    fn drop(&mut self) {
        // The root's base reference (a removed group's went at removal).
        // Nobody else reaches this state now, so no lock is needed.
        if self.objcg_base.swap(false, Ordering::Relaxed) {
            // SAFETY: the base reference was ours.
            unsafe { ObjCg::put(self.objcg.0, 1) };
        }
    }
}

impl MemCg {
    /// A state for a group of no engine (the loom models).
    #[cfg(all(test, rstat_loom))]
    pub(crate) fn new(parent: Option<&Arc<MemCg>>) -> Self {
        Self::new_in(parent, 0, core::ptr::null())
    }

    /// A state for a group of the engine at `engine` (an identity for
    /// its owner handle), charging through `stocks`
    /// (`Stocks::as_handle_word`, kept by the handle).
    pub(crate) fn new_in(parent: Option<&Arc<MemCg>>, engine: usize, stocks: *const ()) -> Self {
        let objcg = ObjCg::new(engine, stocks);
        // SAFETY: just made; nobody else has it yet.
        let objcg_serial = unsafe { objcg.as_ref() }.serial();
        MemCg {
            objcg: ObjCgPtr(objcg),
            objcg_serial,
            group: AtomicPtr::new(core::ptr::null_mut()),
            objcg_base: AtomicBool::new(true),
            counter: Arc::new(PageCounter::new(parent.map(|p| Arc::clone(&p.counter)))),
            parent: parent.cloned(),
            online: AtomicBool::new(true),
            over: AtomicBool::new(false),
            events: Events::new(),
            reclaimers: Mutex::new(ReclaimerList::default()),
            reclaim_cursor: Mutex::new(ReclaimCursor::default()),
            reclaim_reserved: Mutex::new(0),
            oom_handler: Mutex::new(None),
            // Relaxed: a setting read on its own; a child starts with its
            // parent's.
            heap_enforce: AtomicBool::new(
                parent.is_some_and(|p| p.heap_enforce.load(Ordering::Relaxed)),
            ),
        }
    }

    /// The group's owner handle. Dereferenced only while a reference on it
    /// is held, or while this state is online and a stock lock is held
    /// (its base reference is held until a drain that waits for the lock).
    #[inline(always)]
    pub(crate) fn objcg(&self) -> core::ptr::NonNull<ObjCg> {
        self.objcg.0
    }

    /// The owner handle's serial, never another handle's (see `objcg`).
    #[inline(always)]
    pub(crate) fn objcg_serial(&self) -> u64 {
        self.objcg_serial
    }

    /// Add heap stat deltas `d` (see [`stock::HeapStats`]) to the group's
    /// stat items on CPU slot `cpu` of stat controller `ctl`. Called under
    /// a stock lock by a slot naming this state.
    pub(crate) fn add_heap_stats(&self, ctl: usize, cpu: usize, d: stock::HeapStats) {
        // Relaxed: written before the state was published.
        let g = self
            .group
            .load(Ordering::Relaxed)
            .cast::<crate::group::GroupInner>();
        if g.is_null() || ctl == usize::MAX {
            return;
        }
        // SAFETY: the group is live (see `group`).
        let css = unsafe { &*g }.css[ctl].load(Ordering::Acquire);
        if css.is_null() {
            return;
        }
        for (k, v) in d.into_iter().enumerate() {
            if v != 0 {
                // SAFETY: a non-null css lives as long as its group (live);
                // `cpu` is a stock index, below the engine's CPU count;
                // the items are the heap ones of MEMORY_STAT_NAMES.
                unsafe { (*css).update(cpu, STAT_HEAP + k, v) };
            }
        }
    }

    /// Drop `n` references on the handle.
    ///
    /// # Safety
    /// The caller owns them.
    #[inline]
    pub(crate) unsafe fn put_objcg(&self, n: usize) {
        // SAFETY: caller's guarantee.
        unsafe { ObjCg::put(self.objcg.0, n) };
    }

    /// Link this (removed) group's handle to the handle of its nearest
    /// ancestor that still holds its base reference (`parent`, unless it is
    /// being removed too), taking a reference on it.
    fn reparent_objcg(&self, lock: &Mutex<()>, parent: &Arc<MemCg>) {
        let _l = sync::lock(lock);
        let mut a: &MemCg = parent;
        // Relaxed, here and in `drop_objcg_base`: the flag is written and
        // read under `lock`.
        while !a.objcg_base.load(Ordering::Relaxed) {
            match a.parent.as_deref() {
                Some(p) => a = p,
                None => break,
            }
        }
        debug_assert!(
            a.objcg_base.load(Ordering::Relaxed),
            "no live ancestor handle"
        );
        // SAFETY: `a`'s base reference is held, and dropped only under
        // `lock`, which we hold.
        unsafe { ObjCg::get(a.objcg.0, 1) };
        // SAFETY: our base reference is still held.
        unsafe { self.objcg.0.as_ref() }.reparent(a.objcg.0);
    }

    /// Drop the base reference on the handle (after removal's drain).
    fn drop_objcg_base(&self, lock: &Mutex<()>) {
        let _l = sync::lock(lock);
        if self.objcg_base.swap(false, Ordering::Relaxed) {
            // SAFETY: the base reference was ours.
            unsafe { ObjCg::put(self.objcg.0, 1) };
        }
    }

    /// Whether the group is live. Relaxed: a flag read on its own, except
    /// in the stock's refill, where the stock lock orders it (see `stock`).
    #[inline(always)]
    pub(crate) fn is_online(&self) -> bool {
        self.online.load(Ordering::Relaxed)
    }

    /// Uncharge `n` from the page counter (and every ancestor's). Stock
    /// units were charged, so this cannot underflow unless a caller
    /// over-uncharged; the page counter then clamps and counts it.
    #[inline]
    pub(crate) fn uncharge_counter(&self, n: u64) {
        let _ = self.counter.uncharge(n);
    }

    /// Whether `self` is `root` or below it. O(depth).
    pub(crate) fn is_in_subtree(&self, root: &MemCg) -> bool {
        let mut m = self;
        loop {
            if core::ptr::eq(m, root) {
                return true;
            }
            match m.parent.as_deref() {
                Some(p) => m = p,
                None => return false,
            }
        }
    }

    /// Count `ev` here (local and hierarchical) and in every ancestor
    /// (hierarchical).
    pub(crate) fn raise(&self, ev: MemoryEvent) {
        self.events.add_local(ev);
        let mut m = Some(self);
        while let Some(c) = m {
            c.events.add_hierarchical(ev);
            m = c.parent.as_deref();
        }
    }

    /// The offline hook: see "Removed groups" in the module docs.
    pub(crate) fn offline(&self, shared: &Shared, parent: Option<&Arc<MemCg>>) {
        let stocks = &shared.stocks;
        // Relaxed: the stock locks order it against refills (see `stock`).
        self.online.store(false, Ordering::Relaxed);
        // The owner handle: objects freed from now on uncharge the parent.
        if let Some(p) = parent {
            self.reparent_objcg(&shared.objcg_lock, p);
        }
        // Takes every CPU's stock lock once: also the handles' grace period
        // (see `objcg`): after it, no free still uses this group through a
        // handle, and no charge still takes a reference through our base.
        stocks.drain(|m| core::ptr::eq(m, self));
        self.counter.set_min(0);
        self.counter.set_low(0);
        // Reparent: what the group still holds stays in the parent (and
        // above), which counted it all along; later uncharges of it go to
        // the nearest live ancestor. A charge or uncharge that resolved this
        // group just before it went offline may land after this: the
        // ancestors stay exact, this (dead) counter may keep a residue or
        // clamp at zero.
        let left = self.counter.usage();
        if left > 0 {
            let _ = self.counter.cancel(left);
        }
        stocks.clear_over(self);
        if let Some(p) = parent {
            let moved = core::mem::take(&mut *sync::lock(&self.reclaimers));
            sync::lock(&p.reclaimers).append(moved);
        }
        *sync::lock(&self.oom_handler) = None;
        self.drop_objcg_base(&shared.objcg_lock);
    }

    /// The root's offline hook, at its engine's drop: no more stocking
    /// (the drain is ordered against refills as a removed group's is), so
    /// the accounting allocator finds no slot of the root and passes
    /// through. The root keeps its counter, handle and reclaimers: objects
    /// charged to it are still uncharged from it exactly, and its handle's
    /// base reference stays held (a charge racing the drop may still take
    /// a reference on it).
    pub(crate) fn root_offline(&self, shared: &Shared) {
        // Relaxed: the stock locks order it against refills (see `stock`).
        self.online.store(false, Ordering::Relaxed);
        shared.stocks.drain(|m| core::ptr::eq(m, self));
        shared.stocks.clear_over(self);
    }
}

/// The state every group's hooks and the handle share.
pub(crate) struct Shared {
    pub(crate) stocks: Stocks,
    pub(crate) max_retries: u32,
    /// Serialises reparenting of owner handles with dropping their base
    /// references ([`objcg`]).
    pub(crate) objcg_lock: Mutex<()>,
    /// The engine's address, an identity for owner handles.
    pub(crate) engine: usize,
}

impl Shared {
    pub(crate) fn new(stocks: Stocks, max_retries: u32, engine: usize) -> Self {
        Shared {
            stocks,
            max_retries,
            objcg_lock: Mutex::new(()),
            engine,
        }
    }
}

/// The group extension: creates each group's [`MemCg`] and runs the
/// offline and release hooks.
struct MemExt {
    shared: Arc<Shared>,
}

impl GroupExt for MemExt {
    type State = Arc<MemCg>;

    fn name(&self) -> &str {
        "memory"
    }

    fn create(&self, parent: Option<&Arc<MemCg>>) -> Arc<MemCg> {
        Arc::new(MemCg::new_in(
            parent,
            self.shared.engine,
            self.shared.stocks.as_handle_word(),
        ))
    }

    fn online(&self, state: &Arc<MemCg>, group: &Group) {
        let g = group.inner_ptr().as_ptr().cast::<()>();
        // Relaxed: the state is published afterwards (Release).
        state.group.store(g, Ordering::Relaxed);
        // SAFETY: nobody else reaches the handle before the state is
        // published.
        unsafe { state.objcg.0.as_ref() }.bind(group.inner_ptr().as_ptr().cast_const().cast());
    }

    fn offline(&self, state: &Arc<MemCg>, parent: Option<&Arc<MemCg>>) {
        state.offline(&self.shared, parent);
    }

    fn root_offline(&self, state: &Arc<MemCg>) {
        state.root_offline(&self.shared);
    }

    fn release(&self, state: &Arc<MemCg>, _parent: Option<&Arc<MemCg>>) {
        // Offline groups were drained already and are never stocked again;
        // this is for the root (released with the engine).
        self.shared.stocks.drain(|m| core::ptr::eq(m, &**state));
        self.shared.stocks.clear_over(state);
    }
}

/// A memory controller's shared state (what a [`Memory`] handle points at).
pub(crate) struct MemoryInner {
    ext: Ext<MemExt>,
    stats: ControllerHandle,
    shared: Arc<Shared>,
    nr_cpus: usize,
    cfg: MemoryConfig,
    /// The root group's state.
    root: Arc<MemCg>,
}

/// A memory controller registered on an engine. Cheap to clone (one
/// reference count, on a line every clone shares: clone it per thread or
/// per owner, not per charge; [`Charge`] borrows it). See the module docs.
#[derive(Clone)]
pub struct Memory {
    inner: Arc<MemoryInner>,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory")
            .field("config", &self.inner.cfg)
            .field("nr_cpus", &self.inner.nr_cpus)
            .finish()
    }
}

/// The group an operation acts on: the group itself, or if it was removed
/// its nearest live ancestor; and that group's state.
pub(crate) struct Target<'g> {
    pub(crate) group: Cow<'g, Group>,
    pub(crate) memcg: Cow<'g, Arc<MemCg>>,
}

impl Memory {
    /// Register a memory controller with the default [`MemoryConfig`]:
    /// every group, present and future, gets its memory state. Cost: the
    /// topology lock, one allocation per live group; a per-CPU stock of
    /// two cache lines per CPU.
    pub fn register(rs: &Rstat) -> Result<Memory, MemoryError> {
        Self::register_with(rs, MemoryConfig::default())
    }

    /// Register with explicit settings. Fails if a memory controller is
    /// already registered on `rs` or a setting is out of range.
    pub fn register_with(rs: &Rstat, cfg: MemoryConfig) -> Result<Memory, MemoryError> {
        if cfg.batch > MAX_BATCH {
            return Err(MemoryError::InvalidConfig {
                reason: format!(
                    "batch {} is above MAX_BATCH ({MAX_BATCH}); use a smaller batch",
                    cfg.batch
                ),
            });
        }
        if cfg.max_reclaim_retries > 1000 {
            return Err(MemoryError::InvalidConfig {
                reason: format!(
                    "max_reclaim_retries {} is above 1000; a few tens is plenty",
                    cfg.max_reclaim_retries
                ),
            });
        }
        let unit = stat_unit(cfg.batch);
        let items: Vec<(&str, u64)> = MEMORY_STAT_NAMES
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let counts = matches!(i, STAT_FAILCNT | STAT_HEAP_ALLOCS | STAT_HEAP_FREES);
                (n, if counts { 1 } else { unit })
            })
            .collect();
        let stats = rs.register_counters_with_units("memory", &items)?;
        let shared = Arc::new(Shared::new(
            Stocks::new(rs.nr_cpus(), cfg.batch, stats.ctl.id),
            cfg.max_reclaim_retries,
            rs.engine_ptr().addr(),
        ));
        let ext = rs.register_ext(MemExt {
            shared: Arc::clone(&shared),
        })?;
        let root = Arc::clone(ext.get(rs.root())?);
        let inner = Arc::new(MemoryInner {
            root,
            ext,
            stats,
            shared,
            nr_cpus: rs.nr_cpus(),
            cfg,
        });
        // Registering the `memory` counters above succeeded, so this is the
        // engine's first memory controller and the cell is empty.
        let _ = rs.engine().memory.set(Arc::downgrade(&inner));
        Ok(Memory { inner })
    }

    /// The memory controller registered on `rs`, while some handle to it
    /// is alive (the engine keeps only a weak reference). This is how
    /// [`report`](crate::report) finds `memory.*` files from an engine or
    /// a group alone. Cost: the upgrade of a weak reference.
    pub fn of(rs: &Rstat) -> Option<Memory> {
        Self::of_engine(rs.engine())
    }

    pub(crate) fn of_engine(engine: &crate::engine::EngineInner) -> Option<Memory> {
        let inner = engine.memory.get()?.upgrade()?;
        Some(Memory { inner })
    }

    /// The engine this controller belongs to (an identity to compare).
    pub(crate) fn engine_ptr(&self) -> *const crate::engine::EngineInner {
        Arc::as_ptr(&self.inner.ext.engine)
    }

    /// The settings.
    pub fn config(&self) -> &MemoryConfig {
        &self.inner.cfg
    }

    /// `group`'s own memory state (a group removed before registration
    /// uses its nearest ancestor's). A few loads.
    #[inline]
    fn memcg<'g>(&self, group: &'g Group) -> Result<&'g Arc<MemCg>, MemoryError> {
        Ok(self.inner.ext.get(group)?)
    }

    /// The group that operations on `group` act on. The common case (a live
    /// group) is a few loads and no reference count.
    #[inline]
    pub(crate) fn target<'g>(&self, group: &'g Group) -> Result<Target<'g>, MemoryError> {
        let m = self.memcg(group)?;
        // The root is its own target even offline (its engine dropped:
        // `MemCg::root_offline`): it was not removed, and what is uncharged
        // from it is its own, not reparented.
        if m.is_online() || m.parent.is_none() {
            return Ok(Target {
                group: Cow::Borrowed(group),
                memcg: Cow::Borrowed(m),
            });
        }
        self.target_of_removed(group)
    }

    #[cold]
    fn target_of_removed(&self, group: &Group) -> Result<Target<'static>, MemoryError> {
        let mut g = group.clone();
        loop {
            let m = Arc::clone(self.memcg(&g)?);
            let parent = if m.is_online() { None } else { g.parent() };
            match parent {
                Some(p) => g = p,
                None => {
                    return Ok(Target {
                        group: Cow::Owned(g),
                        memcg: Cow::Owned(m),
                    })
                }
            }
        }
    }

    /// `group`'s state, refusing removed groups (for limit writes).
    fn live_memcg<'g>(&self, group: &'g Group) -> Result<&'g Arc<MemCg>, MemoryError> {
        let m = self.memcg(group)?;
        if !m.is_online() || !group.is_online() {
            return Err(MemoryError::Removed { path: group.path() });
        }
        Ok(m)
    }

    /// Add to a stat item of `group` on this CPU (per-CPU, no lock).
    #[inline]
    fn count(&self, group: &Group, item: usize, delta: u64) {
        let delta = i64::try_from(delta).unwrap_or(i64::MAX);
        // Cannot fail: our own item index, a group of our engine (checked
        // by the ext lookup before any call).
        let _ = self.inner.stats.add(group, item, delta);
    }

    /// [`count`](Self::count) on the hot path: `cpu` already folded, and
    /// no second lookup of the engine or the CPU id.
    ///
    /// `group` must belong to this controller's engine (callers looked its
    /// state up through the extension first, which checks that).
    #[inline(always)]
    fn count_on(&self, group: &Group, item: usize, delta: u64, cpu: usize) {
        self.count_signed(group, item, i64::try_from(delta).unwrap_or(i64::MAX), cpu);
    }

    /// [`count_on`](Self::count_on) of a signed delta.
    #[inline(always)]
    fn count_signed(&self, group: &Group, item: usize, delta: i64, cpu: usize) {
        debug_assert!(item < MEMORY_STAT_NAMES.len() && cpu < self.inner.nr_cpus);
        let css = group.inner().css[self.inner.stats.ctl.id].load(Ordering::Acquire);
        if css.is_null() {
            // Removed before the controller was registered: the ancestor's.
            let _ = self.inner.stats.add(group, item, delta);
            return;
        }
        // SAFETY: a non-null css of `group` lives as long as the group,
        // which `group` keeps alive; `cpu` was folded below the engine's
        // CPU count (the stock has as many slots); `item` is one of our
        // MEMORY_STAT_NAMES indices.
        unsafe { (*css).update(cpu, item, delta) };
    }

    /// This CPU's stock index.
    #[inline(always)]
    fn this_cpu(&self) -> usize {
        crate::percpu::cpu::fold(crate::percpu::cpu::current(), self.inner.nr_cpus)
    }

    fn check_cpu(&self, cpu: usize) -> usize {
        crate::percpu::cpu::fold(cpu, self.inner.nr_cpus)
    }

    /// `memory.current`: `group`'s usage, hierarchical, including units
    /// pre-charged in stocks. One load. A removed group reads its own
    /// (reparented, so normally 0) counter.
    pub fn current(&self, group: &Group) -> Result<u64, MemoryError> {
        Ok(self.memcg(group)?.counter.usage())
    }

    /// `memory.peak`: the highest usage since creation or
    /// [`reset_peak`](Self::reset_peak). One load.
    pub fn peak(&self, group: &Group) -> Result<u64, MemoryError> {
        Ok(self.memcg(group)?.counter.watermark())
    }

    /// Reset `memory.peak` to the current usage. Takes the counter's setter
    /// lock.
    pub fn reset_peak(&self, group: &Group) -> Result<(), MemoryError> {
        self.memcg(group)?.counter.reset_watermark();
        Ok(())
    }

    /// `memory.events`: events of `group` and its descendants. Five loads.
    pub fn events(&self, group: &Group) -> Result<MemoryEvents, MemoryError> {
        Ok(self.memcg(group)?.events.hierarchical())
    }

    /// `memory.events.local`: events of `group` itself.
    pub fn events_local(&self, group: &Group) -> Result<MemoryEvents, MemoryError> {
        Ok(self.memcg(group)?.events.local())
    }

    /// `memory.stat`: the [`MEMORY_STAT_NAMES`] items, local and
    /// hierarchical, as fresh as the controller's flush policy makes them
    /// (see [`ControllerHandle::read`]), after adding the accounting
    /// allocator's pending deltas ([`flush_heap_stats`](Self::flush_heap_stats):
    /// each CPU's stock lock once).
    pub fn stat(&self, group: &Group) -> Result<GroupStats, MemoryError> {
        self.flush_heap_stats(group)?;
        Ok(self.inner.stats.read(group)?)
    }

    /// `memory.stat`, exact: every update completed before the call is in,
    /// the accounting allocator's included. Takes each CPU's stock lock
    /// once ([`flush_heap_stats`](Self::flush_heap_stats)), then the
    /// controller's flush lock.
    pub fn stat_exact(&self, group: &Group) -> Result<GroupStats, MemoryError> {
        self.flush_heap_stats(group)?;
        Ok(self.inner.stats.read_exact(group)?)
    }

    /// Add the heap stat deltas the stocks keep for `group`'s subtree to
    /// its groups' stat items (every CPU's stock lock in turn), so a read
    /// of the stat items that follows includes every heap operation
    /// completed before this call. [`stat`](Self::stat) and
    /// [`stat_exact`](Self::stat_exact) call it; call it before reading the
    /// raw controller ([`stats`](Self::stats)) for the same.
    pub fn flush_heap_stats(&self, group: &Group) -> Result<(), MemoryError> {
        let t = self.target(group)?;
        self.inner
            .shared
            .stocks
            .flush_stats(|m| m.is_in_subtree(&t.memcg));
        Ok(())
    }

    /// The controller behind `memory.stat` (flush policy, raw reads).
    pub fn stats(&self) -> &ControllerHandle {
        &self.inner.stats
    }

    /// Return every stock slot of `group` and its descendants to the page
    /// counters. Returns the units uncharged. Cost: each CPU's stock lock in
    /// turn (waiting for it), O(slots × depth). Allocates nothing, so it is
    /// exact for the caller's own group too: with no other thread charging
    /// the subtree, its `memory.current` afterwards is exactly what its
    /// callers hold (with the accounting allocator, its live objects'
    /// bytes and overhead).
    pub fn drain_stocks(&self, group: &Group) -> Result<u64, MemoryError> {
        let t = self.target(group)?;
        Ok(self.drain_subtree(&t.memcg))
    }

    pub(crate) fn drain_subtree(&self, root: &MemCg) -> u64 {
        self.inner.shared.stocks.drain(|m| m.is_in_subtree(root))
    }

    /// Units pre-charged to `group` itself (not its descendants) sitting in
    /// the stocks, over all CPUs: at most `batch × nr_cpus`. Cost: each
    /// CPU's stock lock in turn.
    pub fn stocked(&self, group: &Group) -> Result<u64, MemoryError> {
        Ok(self.inner.shared.stocks.stocked(self.memcg(group)?))
    }

    /// How many times units given back to `group`'s page counter would
    /// have taken it below zero (clamped there instead): an uncharge of
    /// more than was charged. [`uncharge_raw`](Self::uncharge_raw) refuses
    /// an excess over the group's whole usage at once, but a smaller one
    /// can sit in a stock (whose units count in the usage) and reaches the
    /// counter only when the stock gives its units back; this count is
    /// where it shows, as the kernel warns on a page counter underflow.
    /// Counted on each level that underflowed. Non-zero means some caller
    /// uncharges more than it charged: the group's usage is understated
    /// until then. One load.
    pub fn uncharge_underflows(&self, group: &Group) -> Result<u64, MemoryError> {
        Ok(self.memcg(group)?.counter.cancel_underflows())
    }

    /// `group`'s page counter, for what this API does not show (failcnt,
    /// effective protection, local watermark).
    pub fn page_counter(&self, group: &Group) -> Result<Arc<PageCounter>, MemoryError> {
        Ok(Arc::clone(&self.memcg(group)?.counter))
    }

    /// Turn recursive protection (cgroup2's `memory_recursiveprot`) on or
    /// off for the whole tree.
    pub fn set_recursive_protection(&self, on: bool) -> Result<(), MemoryError> {
        self.inner
            .root
            .counter
            .set_recursive_protection(on)
            .map_err(|_| MemoryError::InvalidConfig {
                reason: "the root's page counter has a parent".into(),
            })
    }
}
