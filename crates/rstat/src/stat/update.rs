//! The update path: how a change reaches this CPU's stat slot of (group,
//! controller) and makes sure a flush will visit the group.
//!
//! Two ways to add, one per update path: a restartable section on the
//! slot of the CPU the thread runs on ([`UpdatePath::Rseq`]), or a locked
//! add on the slot of the CPU id read just before (the default); after
//! either, the crossing count of the `Threshold` policy (`css.rs`) and the
//! on-list check that queues the group's node on this CPU's backlog
//! (`backlog.rs`, whose `# Synchronization` states the protocol). A handle
//! may resolve an item's addresses once ([`ItemPath`]).
//!
//! [`UpdatePath::Rseq`]: crate::UpdatePath::Rseq

use crate::stat::backlog;
#[cfg(not(rstat_loom))]
use crate::stat::backlog::PcpuLinks;
#[cfg(not(rstat_loom))]
use crate::stat::css::{may_cross, may_cross_a_batch, units_to_fold};
use crate::stat::css::{Css, Item, Slot};
use crate::sync::Ordering;

/// A copy of an engine's update path (`Css::section_limit`,
/// `Css::rseq_off`: the same in every css of the engine), for handles to
/// keep on their own line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PathCopy {
    section_limit: u32,
    #[cfg_attr(any(rstat_loom, miri), allow(dead_code))]
    rseq_off: i32,
}

/// One item's update path, resolved from its css once and kept by a
/// [`StatItem`](crate::StatItem) beside its handle's css pointer and path
/// copy: CPU 0's addresses of the item's slot and of the node's links (CPU
/// `c`'s are `unit_offset(c)` further), the item and its boundary shift
/// (also capped as the crossing test takes it), in 24 bytes, so that a
/// `StatItem` is one cache line. An update then loads these words from
/// the handle and, on the common path, nothing from the css: the css is
/// reached only to fold a crossing or to queue the node. (A restartable
/// section's `asm!` may write any memory as far as the compiler knows, so
/// every word an update needs is reloaded on each call: the fewer lines,
/// the cheaper; and the handle's css pointer is read where a rare step
/// needs it, not kept across the section.)
#[derive(Clone, Copy)]
pub(crate) struct ItemPath {
    #[cfg_attr(rstat_loom, allow(dead_code))]
    slot: *const u8,
    #[cfg_attr(rstat_loom, allow(dead_code))]
    links: *const u8,
    item: Item,
    #[cfg_attr(rstat_loom, allow(dead_code))]
    shift: u8,
    /// `shift` capped at 63, as [`may_cross`] takes it: the crossing test
    /// is then one shift of `old ^ new` by this byte of the handle.
    #[cfg_attr(rstat_loom, allow(dead_code))]
    cross: u8,
}

impl PathCopy {
    /// The update path of `domain`'s engine (every css of it copies the
    /// same: `Css::new`).
    pub(crate) fn of(domain: &crate::stat::tree::Domain) -> PathCopy {
        PathCopy {
            section_limit: domain.section_limit as u32,
            rseq_off: domain.rseq_off as i32,
        }
    }
}

impl ItemPath {
    /// The item's index.
    pub(crate) fn item(&self) -> usize {
        self.item.get()
    }

    /// [`Css::add`] through the resolved addresses: on the rseq path one
    /// restartable section on the item's slot of this CPU, on the locked
    /// path one locked RMW on it; then the boundary test in registers and
    /// one load of this CPU's on-list flag.
    ///
    /// # Safety
    /// `*css` is the css this path was resolved from ([`Css::item_path`]),
    /// live (its group is held); `path` and `nr_cpus` are its engine's.
    #[inline(always)]
    pub(crate) unsafe fn add(&self, css: &*const Css, path: PathCopy, nr_cpus: usize, delta: i64) {
        let rare = Resolved { path: self, css };
        #[cfg(not(any(rstat_loom, miri)))]
        if path.section_limit != 0 {
            // SAFETY: the css is live (caller); `slot` and `links` are its
            // addresses for `item` on CPU 0, `shift` the item's.
            return unsafe { section_update(path, self.slot, self.links, rare, delta) };
        }
        #[cfg(not(rstat_loom))]
        if path.section_limit == 0 {
            // SAFETY: as above; `nr_cpus` is the engine's (caller).
            return unsafe { self.add_locked(rare, nr_cpus, delta) };
        }
        let _ = rare;
        // SAFETY: the css is live (caller).
        let css = unsafe { &**css };
        css.add(path, || Slot::this_cpu(nr_cpus), self.item, delta)
    }

    /// [`Css::add_locked`] through the resolved addresses: the locked RMW
    /// on this CPU's copy of the item's slot, then the same crossing test
    /// and on-list check as a section's, so the common path loads the
    /// handle, the slot and the links, and not the css.
    ///
    /// # Safety
    /// As [`add`](Self::add), on an engine of the locked path
    /// (`section_limit == 0`: no section writes any slot).
    #[cfg(not(rstat_loom))]
    #[inline(always)]
    unsafe fn add_locked(&self, rare: Resolved<'_>, nr_cpus: usize, delta: i64) {
        let at = crate::percpu::arena::unit_offset(Slot::this_cpu(nr_cpus).get());
        // SAFETY: `slot` is CPU 0's address of the item's slot, whose
        // first field is its `AtomicI64` (`StatSlot` is `repr(C)`); CPU
        // `c`'s copy is `unit_offset(c)` bytes on, and `at` is a slot of
        // the engine, live while the css is (caller).
        let cur = unsafe { &*self.slot.add(at).cast::<crate::sync::AtomicI64>() };
        let old = cur.fetch_add(delta, Ordering::SeqCst);
        let new = old.wrapping_add(delta);
        // SAFETY: as above, for the links; `at` is a unit offset below
        // `nr_cpus`.
        unsafe { after_update(rare, self.links, at, old, new, (old ^ new) as u64) }
    }
}

/// A resolved path with where its css pointer is: what [`Rare`] needs of
/// a [`StatItem`](crate::StatItem)'s update. The pointer is read only by
/// the rare steps: a copy taken before the section would have to be kept
/// across it (on the stack, a store and a load per update).
#[derive(Clone, Copy)]
struct Resolved<'a> {
    #[cfg_attr(rstat_loom, allow(dead_code))]
    path: &'a ItemPath,
    #[cfg_attr(rstat_loom, allow(dead_code))]
    css: &'a *const Css,
}

/// What the rare steps of an update through resolved addresses need (the
/// css, to fold a crossing or to queue the node, and the item's unit
/// shift), reached only when one is taken: the common path then loads
/// nothing but the slot, links and path words. A [`StatItem`](crate::StatItem)'s resolved path
/// gives them from the handle; [`Css::add`] from the css and the
/// item index.
#[cfg(not(rstat_loom))]
trait Rare: Copy {
    /// The css updated.
    fn css(self) -> *const Css;
    /// The updated item's unit shift.
    ///
    /// # Safety
    /// The css is live.
    unsafe fn shift(self) -> u8;
    /// Whether an update that changed the slot's bits `changed` (`old ^
    /// new`), which passed [`may_cross_a_batch`], may have crossed one of
    /// the item's own boundaries ([`may_cross`]).
    ///
    /// # Safety
    /// The css is live.
    unsafe fn may_cross(self, changed: u64) -> bool;
}

#[cfg(not(rstat_loom))]
impl Rare for Resolved<'_> {
    fn css(self) -> *const Css {
        *self.css
    }
    unsafe fn shift(self) -> u8 {
        self.path.shift
    }
    /// From the capped shift in the handle, on the line the update loaded.
    #[inline(always)]
    unsafe fn may_cross(self, changed: u64) -> bool {
        changed >> u32::from(self.path.cross) != 0
    }
}

#[cfg(not(rstat_loom))]
impl Rare for (&Css, Item) {
    fn css(self) -> *const Css {
        self.0
    }
    unsafe fn shift(self) -> u8 {
        self.0.item_shift(self.1)
    }
    /// From the item's shift in the css.
    #[inline(always)]
    unsafe fn may_cross(self, changed: u64) -> bool {
        // SAFETY: the caller's guarantee.
        may_cross(changed, unsafe { self.shift() })
    }
}

/// The rseq update itself, for [`Css::add`] and
/// [`ItemPath::add`]: one restartable section on this CPU's copy of
/// `slot` (CPU 0's address of the item's slot), then, if it crossed a
/// batch boundary, the crossing count, and the on-list check on this CPU's
/// copy of `links` (CPU 0's links of the css's node). A thread the section
/// refuses (no CPU id) has taken a locked add on the first slot past the
/// section limit, which no section writes, and goes on as on that CPU.
///
/// # Safety
/// The css is live; `path` is its engine's, with `section_limit != 0`;
/// `slot`, `links` and `rare` are the css's for the item.
#[cfg(not(any(rstat_loom, miri)))]
#[inline(always)]
unsafe fn section_update(
    path: PathCopy,
    slot: *const u8,
    links: *const u8,
    rare: impl Rare,
    delta: i64,
) {
    // SAFETY: slots `0..section_limit` of the css are written only by
    // sections, slot `section_limit` (which exists: the engine keeps one
    // slot past the limit) only by locked RMWs, and all are live while
    // the css is.
    let (at, new, changed) = unsafe {
        crate::percpu::rseq::add_fetch_on_this_cpu(
            path.rseq_off as isize,
            slot,
            path.section_limit,
            delta,
        )
    };
    // The light half of the asymmetric fence: the store above may still
    // be in this CPU's store buffer; the flusher's membarrier stands in
    // for the barrier we do not execute.
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
    // SAFETY: caller's guarantees; `at` is the unit offset of a slot below
    // `nr_cpus`; `changed` is `old ^ new`.
    unsafe {
        after_update(
            rare,
            links,
            at,
            new.wrapping_sub(delta),
            new,
            changed as u64,
        )
    }
}

/// After the add that moved the slot at unit offset `at` from `old` to
/// `new` (`changed` is `old ^ new`):
/// if it may have crossed one of the item's boundaries
/// ([`may_cross_a_batch`], then [`Rare::may_cross`]),
/// the crossing count, then the on-list check on this CPU's copy of
/// `links` (CPU 0's links of the css's node). As `Css::count_update`; the
/// css only for a crossing of the item's own boundary or to queue the
/// node.
///
/// # Safety
/// The css is live; `links` and `rare` are its for the item; `at` is the
/// unit offset of a slot below the engine's `nr_cpus`.
#[cfg(not(rstat_loom))]
#[inline(always)]
unsafe fn after_update(
    rare: impl Rare,
    links: *const u8,
    at: usize,
    old: i64,
    new: i64,
    changed: u64,
) {
    // SAFETY: the css is live.
    if may_cross_a_batch(changed) && unsafe { rare.may_cross(changed) } {
        // SAFETY: caller's guarantees.
        unsafe { fold_crossings(rare, at, old, new) };
    }
    // SAFETY: `at` is the unit offset of a slot below `nr_cpus`: the links
    // of the css's node there, which outlive the css; the css is reached
    // only to queue the node.
    unsafe {
        let links = &*links.add(at).cast::<PcpuLinks>();
        backlog::mark_updated(links, || {
            let cpu = crate::percpu::arena::unit_of(at);
            let css = &*rare.css();
            (css.backlog.raw(cpu), cpu, css.node)
        });
    }
}

/// The fold of an update's crossings (its slot moved from `old` to `new`),
/// out of line: the units crossed are counted and the css is loaded here,
/// not on the common path.
///
/// # Safety
/// As [`after_update`]; `at` is the unit offset of the slot updated.
#[cfg(not(rstat_loom))]
#[cold]
#[inline(never)]
unsafe fn fold_crossings(rare: impl Rare, at: usize, old: i64, new: i64) {
    // SAFETY: the css is live (caller).
    let v = units_to_fold(old, new, unsafe { rare.shift() });
    if v == 0 {
        return;
    }
    // SAFETY: the css is live (caller), and so is its controller's domain.
    let css = unsafe { &*rare.css() };
    // SAFETY: as above.
    let nr_cpus = unsafe { &*css.ctl.domain }.nr_cpus;
    // The section ran on a slot of the engine: the check never fails.
    if let Some(at) = Slot::new(crate::percpu::arena::unit_of(at), nr_cpus) {
        css.fold_updates(at, v);
    }
}

impl Css {
    /// This css's copy of its engine's update path.
    #[inline(always)]
    pub(crate) fn path(&self) -> PathCopy {
        PathCopy {
            section_limit: self.section_limit,
            rseq_off: self.rseq_off,
        }
    }

    /// The update: add `delta` to `item` on this CPU's slot, and make sure
    /// a flush will visit this group. Every update of a css comes through
    /// here, [`add_many`](Self::add_many) or a resolved [`ItemPath`].
    ///
    /// On the [`Rseq`](crate::UpdatePath::Rseq) path, one restartable
    /// section on the slot of the CPU the thread runs on (an unlocked load,
    /// add and store; `at` is not called), a compiler fence, and one load
    /// of that CPU's on-list flag. Otherwise one uncontended locked RMW on
    /// slot `at()` and the same load ([`add_locked`](Self::add_locked)).
    ///
    /// `path` is the engine's update path, from a handle's copy (equal to
    /// this css's: every css of an engine has the same), so the path test
    /// comes from the caller's line; `at` gives the slot of the CPU the
    /// caller runs on (or stands for).
    #[inline(always)]
    pub(crate) fn add(&self, path: PathCopy, at: impl FnOnce() -> Slot, item: Item, delta: i64) {
        debug_assert!(path == self.path(), "a path copy of another engine");
        if path.section_limit != 0 {
            return self.add_section(path, at, item, delta);
        }
        self.add_locked(at(), item, delta)
    }

    /// The locked add on slot `at`: one locked RMW, then the crossing
    /// count and the on-list check. On the rseq path only for slots no
    /// section writes (at or past the section limit), or where the caller
    /// accepts racing sections there (`add_on_cpu` documents it).
    #[inline(always)]
    pub(crate) fn add_locked(&self, at: Slot, item: Item, delta: i64) {
        // SAFETY: `at` is a slot of the engine and `item` one of this
        // css's controller: in range of the css's per-CPU stat slots.
        let slot = unsafe { self.stats.elem(at.get(), item.get()) };
        let old = slot.cur.fetch_add(delta, Ordering::SeqCst);
        self.after_add(at, item, old, delta);
    }

    /// A restartable section on this CPU's slot (see `percpu::rseq`).
    #[cfg(not(any(rstat_loom, miri)))]
    #[inline(always)]
    fn add_section(&self, path: PathCopy, _at: impl FnOnce() -> Slot, item: Item, delta: i64) {
        // `cur` is a slot's first field (repr(C)): the section addresses it.
        let slot = self.stats.raw(0).wrapping_add(item.get()).cast::<u8>();
        // SAFETY: `path` is this css's engine's, whose section limit and
        // offset every css of it copies; `slot` is CPU 0's address of
        // `item`'s slot, in range of every unit; the item's shift is
        // looked up only if an update crosses a batch boundary.
        unsafe { section_update(path, slot, self.links.raw(0).cast(), (self, item), delta) }
    }

    /// Under loom and Miri, a section is simulated on slot `at()`: the
    /// slot's lock stands for "nothing else runs a section on this CPU", a
    /// plain load and a plain store for the unlocked add (as `percpu_ref`
    /// simulates its own). The fence pair is modelled by `SeqCst` fences
    /// (`crate::sync`).
    #[cfg(any(rstat_loom, miri))]
    #[inline(always)]
    fn add_section(&self, _path: PathCopy, at: impl FnOnce() -> Slot, item: Item, delta: i64) {
        let at = at();
        // SAFETY: a css's node and domain outlive it; `at` and `item` are
        // in range (their types).
        let (domain, slot) =
            unsafe { (&*(*self.node).domain, self.stats.elem(at.get(), item.get())) };
        let on_cpu = crate::sync::lock(&domain.sim[at.get()]);
        let old = slot.cur.load(Ordering::Relaxed);
        // Release: an x86 store.
        slot.cur.store(old.wrapping_add(delta), Ordering::Release);
        drop(on_cpu);
        // The light half of the asymmetric fence, modelled (with the heavy
        // half, `Domain::heavy_fence`) as a `SeqCst` fence: Miri's weak
        // memory emulation, like a real store buffer, lets the on-list load
        // below pass the plain store above without it.
        crate::sync::fence(Ordering::SeqCst);
        self.after_add(at, item, old, delta);
    }

    /// Several items at once (`(index, delta)` pairs; indexes out of range
    /// are skipped): one CPU id read and one on-list check for all of them
    /// on the locked path, one section per item on the rseq path (the
    /// thread may change CPU between two; each on-list check after the
    /// first loads a line the first brought in). Returns how many were
    /// applied.
    #[inline]
    pub(crate) fn add_many(&self, path: PathCopy, nr_cpus: usize, items: &[(usize, i64)]) -> usize {
        let nr_stats = self.ctl.nr_stats;
        let mut applied = 0;
        if path.section_limit != 0 {
            for &(item, delta) in items {
                if let Some(item) = Item::new(item, nr_stats) {
                    self.add_section(path, || Slot::this_cpu(nr_cpus), item, delta);
                    applied += 1;
                }
            }
            return applied;
        }
        let at = Slot::this_cpu(nr_cpus);
        for &(item, delta) in items {
            if let Some(item) = Item::new(item, nr_stats) {
                // SAFETY: `at` and `item` are in range (their types).
                let old = unsafe { self.stats.elem(at.get(), item.get()) }
                    .cur
                    .fetch_add(delta, Ordering::SeqCst);
                self.count_update(at, item, old, delta);
                applied += 1;
            }
        }
        if applied > 0 {
            self.mark(at);
        }
        applied
    }

    /// Add on slot `at` as if this thread ran there (`add_on_cpu`, for
    /// tests and simulations): the locked add, or under loom and Miri a
    /// simulated section on that slot. On the rseq path this races with
    /// sections of threads really running on CPU `at`: a section's add is
    /// not atomic against another CPU's RMW.
    pub(crate) fn add_on(&self, at: Slot, item: Item, delta: i64) {
        if cfg!(any(rstat_loom, miri)) {
            self.add(self.path(), || at, item, delta)
        } else {
            self.add_locked(at, item, delta)
        }
    }

    /// After the add: count crossings, then the on-list check (in this
    /// order: see `fold_updates`). `old` is the value of `item`'s slot
    /// `at` before the add of `delta`.
    #[inline(always)]
    fn after_add(&self, at: Slot, item: Item, old: i64, delta: i64) {
        self.count_update(at, item, old, delta);
        self.mark(at);
    }

    /// Resolve `item`'s update path once, for a handle to keep (see
    /// [`ItemPath`]).
    pub(crate) fn item_path(&self, item: Item) -> ItemPath {
        ItemPath {
            slot: self.stats.raw(0).wrapping_add(item.get()).cast(),
            links: self.links.raw(0).cast(),
            item,
            shift: self.item_shift(item),
            cross: self.item_shift(item).min(63),
        }
    }

    /// Steps 2-4 of the update protocol (see `stat::backlog`): queue this
    /// group's node on slot `at`'s backlog unless it is on it.
    #[inline(always)]
    pub(crate) fn mark(&self, at: Slot) {
        // SAFETY: a css's node links and its domain's backlog outlive the
        // css, with one element per slot of the engine (`at`'s type).
        unsafe {
            backlog::mark_updated(self.links.elem(at.get(), 0), || {
                (self.backlog.raw(at.get()), at.get(), self.node)
            })
        };
    }
}

/// How stat updates reach their per-CPU slot (see
/// [`Rstat::update_path`](crate::Rstat::update_path)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UpdatePath {
    /// A restartable sequence (rseq) on the slot of the CPU the thread runs
    /// on: an unlocked load, add and store that the kernel restarts if the
    /// thread is preempted or migrated in between, as the kernel's own
    /// `this_cpu_add`. Exact reads pay one `membarrier` system call per
    /// flush for it (see `engine::backlog`).
    Rseq,
    /// A locked atomic add on the slot of the CPU id read just before.
    Locked,
}

impl UpdatePath {
    /// `"rseq"` or `"locked"`.
    pub fn name(self) -> &'static str {
        match self {
            UpdatePath::Rseq => "rseq",
            UpdatePath::Locked => "locked",
        }
    }
}

impl core::fmt::Display for UpdatePath {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}
