//! One group's memory state ([`MemCg`], the kernel's `struct mem_cgroup`
//! for this controller): its page counter, events, reclaimers, reclaim
//! cursor and reservation, OOM handler, heap limit mode, and its owner
//! handle for heap objects ([`objcg`](super::objcg)) with the reference
//! bookkeeping on it.
//!
//! Below the stock (whose slots hold states) and the group extension
//! (`ext`, which makes states and takes them offline); above the owner
//! handle, the events and the reclaim types it stores.

use std::sync::Arc;

use super::config::{HeapStats, MEMORY_STAT_NAMES, STAT_HEAP};
use super::events::{Events, MemoryEvent};
use super::objcg::ObjCg;
use super::reclaim::{OomHandler, ReclaimCursor, ReclaimerList};
use crate::page_counter::PageCounter;
use crate::percpu::cpu::CpuMask;
use crate::stat::css::{Item, Slot};
use crate::sync::{self, AtomicBool, AtomicPtr, AtomicU8, Mutex, Ordering};

/// One group's memory state (the kernel's `struct mem_cgroup`, for this
/// controller). Shared by the group, stock slots naming it, and in-flight
/// operations; outlives the group if they do.
pub(crate) struct MemCg {
    pub(crate) counter: Arc<PageCounter>,
    pub(crate) parent: Option<Arc<MemCg>>,
    /// False once the group is removed (see the stock's offline protocol).
    pub(super) online: AtomicBool,
    /// The CPUs whose stock has held a slot of this group, marked by the
    /// slot's creation under that CPU's stock lock: so a test of CPU `c`
    /// under `c`'s lock is exact, and a lookup of the group's slot there
    /// (`Stocks::drain_one`, `Stocks::stocked`) can be skipped when it
    /// says no.
    pub(crate) stocked_on: CpuMask,
    /// Possibly above its `memory.max` (see the stock's "Over the limit").
    pub(crate) over: AtomicBool,
    pub(crate) events: Events,
    pub(crate) reclaimers: Mutex<ReclaimerList>,
    /// Where the last reclaim under this group stopped: the next one
    /// resumes there (see [`reclaim`](super::reclaim), "Where to start").
    pub(crate) reclaim_cursor: Mutex<ReclaimCursor<MemCg>>,
    /// Units reclaimers are being asked to free from this group right now
    /// (see [`reclaim`](super::reclaim), "Concurrent reclaims").
    pub(crate) reclaim_reserved: Mutex<u64>,
    pub(crate) oom_handler: Mutex<Option<Arc<dyn OomHandler>>>,
    /// The accounting allocator's [`HeapLimitMode`](super::HeapLimitMode)
    /// here (`HeapLimitMode as u8`).
    pub(crate) heap_mode: AtomicU8,
    /// The first refusal of an allocation here was reported on standard
    /// error (`Memory::report_refusal`).
    pub(crate) refusal_reported: AtomicBool,
    /// The group's owner handle for heap objects ([`objcg`](super::objcg)), bound to
    /// the group by the extension's `online` hook.
    objcg: ObjCgPtr,
    /// Its serial (`ObjCg::serial`), copied so that stock slots read it
    /// without dereferencing the handle.
    objcg_serial: u64,
    /// The group's address (set by the extension's `online` hook; null in
    /// models), for the heap stat deltas the stocks keep. Dereferenced only
    /// under a stock lock while a slot names this state (the group is live
    /// then: its removal drains its slots first).
    pub(super) group: AtomicPtr<()>,
    /// Whether this state still holds the handle's base reference: until
    /// the group is removed (or, for the root, until this state is
    /// dropped). Cleared under `Shared::objcg_lock` (`ext`).
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
            stocked_on: CpuMask::new(),
            over: AtomicBool::new(false),
            events: Events::new(),
            reclaimers: Mutex::new(ReclaimerList::default()),
            reclaim_cursor: Mutex::new(ReclaimCursor::default()),
            reclaim_reserved: Mutex::new(0),
            oom_handler: Mutex::new(None),
            // Relaxed: a setting read on its own; a child starts with its
            // parent's.
            heap_mode: AtomicU8::new(parent.map_or(0, |p| p.heap_mode.load(Ordering::Relaxed))),
            refusal_reported: AtomicBool::new(false),
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

    /// Add heap stat deltas `d` (see [`HeapStats`]) to the group's
    /// stat items on CPU slot `cpu` of stat controller `ctl`. Called under
    /// a stock lock by a slot naming this state.
    pub(crate) fn add_heap_stats(&self, ctl: usize, cpu: usize, d: HeapStats) {
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
        // SAFETY: a non-null css lives as long as its group (live).
        let (css, nr_cpus) = unsafe { (&*css, (&*g).engine.nr_cpus) };
        // A stock index is below the engine's CPU count: the fold keeps it.
        let at = Slot::fold(cpu, nr_cpus);
        for (k, v) in d.into_iter().enumerate() {
            // The heap items of MEMORY_STAT_NAMES: always in range.
            let item = Item::new(STAT_HEAP + k, MEMORY_STAT_NAMES.len());
            if let (true, Some(item)) = (v != 0, item) {
                css.add(css.path(), || at, item, v);
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
    pub(super) fn reparent_objcg(&self, lock: &Mutex<()>, parent: &Arc<MemCg>) {
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
    pub(super) fn drop_objcg_base(&self, lock: &Mutex<()>) {
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
}
