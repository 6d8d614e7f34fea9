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
#[cfg(not(any(rstat_loom, miri)))]
use crate::stat::backlog::PcpuLinks;
use crate::stat::css::Css;
#[cfg(not(any(rstat_loom, miri)))]
use crate::stat::css::{units_to_fold, UPDATE_BATCH_SHIFT};
use crate::sync::Ordering;

/// A copy of an engine's update path (`Css::section_limit`,
/// `Css::rseq_off`: the same in every css of the engine), for handles to
/// keep on their own line.
#[derive(Clone, Copy)]
pub(crate) struct PathCopy {
    pub(crate) section_limit: u32,
    #[cfg_attr(any(rstat_loom, miri), allow(dead_code))]
    pub(crate) rseq_off: i32,
}

/// One item's update path, resolved from its css once and kept by a
/// [`StatItem`](crate::StatItem): CPU 0's addresses of the item's slot and
/// of the node's links (CPU `c`'s are `c << UNIT_SHIFT` further), the
/// update path's copies and the item's unit shift. An update then loads
/// these words from the handle and, on the common path, nothing from the
/// css: the css is reached only to fold a crossing or to queue the node.
/// (A restartable section's `asm!` may write any memory as far as the
/// compiler knows, so every word an update needs is reloaded on each call:
/// the fewer, the cheaper, above all when a busy sibling hyperthread
/// shares the core.)
#[derive(Clone, Copy)]
pub(crate) struct ItemPath {
    css: *const Css,
    #[cfg_attr(any(rstat_loom, miri), allow(dead_code))]
    slot: *const u8,
    #[cfg_attr(any(rstat_loom, miri), allow(dead_code))]
    links: *const u8,
    #[cfg_attr(any(rstat_loom, miri), allow(dead_code))]
    path: PathCopy,
    item: usize,
    #[cfg_attr(any(rstat_loom, miri), allow(dead_code))]
    shift: u8,
}

impl ItemPath {
    /// The item's index.
    pub(crate) fn item(&self) -> usize {
        self.item
    }

    /// [`Css::update_here`] through the resolved addresses: on the rseq
    /// path one restartable section on the item's slot of this CPU, the
    /// boundary test in registers, and one load of this CPU's on-list flag.
    ///
    /// # Safety
    /// The css is live (its group is held) and `nr_cpus` is its engine's.
    #[inline(always)]
    pub(crate) unsafe fn update(&self, nr_cpus: usize, delta: i64) {
        #[cfg(not(any(rstat_loom, miri)))]
        if self.path.section_limit != 0 {
            // SAFETY: caller's guarantees; `slot` and `links` are the css's
            // addresses for `item` on CPU 0, `shift` the item's.
            return unsafe { section_update(self.path, self.slot, self.links, self, delta) };
        }
        // SAFETY: caller's guarantees; `item < nr_stats` (resolved).
        unsafe { (*self.css).update_here(nr_cpus, self.item, delta) }
    }
}

/// What the rare steps of a section update need (the css, to fold a
/// crossing or to queue the node, and the item's unit shift), reached only
/// when one is taken: the common path then loads nothing but the slot,
/// links and path words. A [`StatItem`](crate::StatItem)'s resolved path
/// gives them from the handle; [`Css::update_here`] from the css and the
/// item index.
#[cfg(not(any(rstat_loom, miri)))]
trait Rare: Copy {
    /// The css updated.
    fn css(self) -> *const Css;
    /// The updated item's unit shift.
    ///
    /// # Safety
    /// The css is live.
    unsafe fn shift(self) -> u8;
}

#[cfg(not(any(rstat_loom, miri)))]
impl Rare for &ItemPath {
    fn css(self) -> *const Css {
        self.css
    }
    unsafe fn shift(self) -> u8 {
        self.shift
    }
}

#[cfg(not(any(rstat_loom, miri)))]
impl Rare for (&Css, usize) {
    fn css(self) -> *const Css {
        self.0
    }
    unsafe fn shift(self) -> u8 {
        // SAFETY: the pair is a css and one of its items.
        unsafe { self.0.item_shift(self.1) }
    }
}

/// The rseq update itself, for [`Css::update_here`] and
/// [`ItemPath::update`]: one restartable section on this CPU's copy of
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
    // As `count_update`: the shift only past the cheap test, the css only
    // for a crossing of the item's own boundary.
    if changed >> UPDATE_BATCH_SHIFT != 0 {
        let old = new.wrapping_sub(delta);
        // SAFETY: the css is live.
        let v = units_to_fold(old, new, unsafe { rare.shift() });
        if v != 0 {
            // SAFETY: caller's guarantees; `at` is a unit offset below
            // `nr_cpus`.
            unsafe { section_fold(rare, at, v) };
        }
    }
    // SAFETY: `at` is the unit offset of a slot below `nr_cpus`: the links
    // of the css's node there, which outlive the css; the css is reached
    // only to queue the node.
    unsafe {
        let links = &*links.add(at).cast::<PcpuLinks>();
        backlog::mark_updated(links, || {
            (*rare.css())
                .backlog
                .raw(at >> crate::percpu::arena::UNIT_SHIFT)
        });
    }
}

/// The fold of [`section_update`]'s crossings, out of line: the css is
/// loaded here, not on the common path.
///
/// # Safety
/// As [`section_update`]; `at` is the unit offset the section returned,
/// `v` what [`units_to_fold`] gave (not 0).
#[cfg(not(any(rstat_loom, miri)))]
#[cold]
#[inline(never)]
unsafe fn section_fold(rare: impl Rare, at: usize, v: u64) {
    let cpu = at >> crate::percpu::arena::UNIT_SHIFT;
    // SAFETY: caller's guarantees; `cpu < nr_cpus`.
    unsafe { (*rare.css()).fold_updates(cpu, v) };
}

impl Css {
    /// The hot path: add `delta` to item `item` on this CPU's slot, and make
    /// sure a flush will visit this group.
    ///
    /// On the [`Rseq`](crate::UpdatePath::Rseq) path, one restartable
    /// section on the slot of the CPU the thread runs on (an unlocked load,
    /// add and store; `cpu` is not used), a compiler fence, and one load of
    /// that CPU's on-list flag. Otherwise (locked path, or a thread without
    /// a CPU id) one uncontended locked RMW on slot `cpu` and the same load.
    ///
    /// # Safety
    /// The css is live, `cpu < nr_cpus`, `item < nr_stats`.
    #[inline(always)]
    pub(crate) unsafe fn update(&self, cpu: usize, item: usize, delta: i64) {
        if self.section_limit != 0 {
            // SAFETY: caller's guarantees.
            return unsafe { self.update_in_section(self.path_copy(), cpu, item, delta) };
        }
        // SAFETY: caller's guarantees.
        unsafe { self.update_locked(cpu, item, delta) }
    }

    /// [`update`](Self::update) on this thread's CPU: the CPU id is read
    /// only on the locked path (a section reads its own; the simulated one
    /// under loom and Miri is given it). `nr_cpus` is the engine's, which
    /// every caller's handle already holds (no trip through the node).
    ///
    /// # Safety
    /// The css is live, `item < nr_stats`, `nr_cpus` is its engine's.
    #[inline(always)]
    pub(crate) unsafe fn update_here(&self, nr_cpus: usize, item: usize, delta: i64) {
        // SAFETY: caller's guarantees; the css's own copies.
        unsafe { self.update_here_via(self.path_copy(), nr_cpus, item, delta) }
    }

    /// This css's copy of its engine's update path.
    #[inline(always)]
    pub(crate) fn path_copy(&self) -> PathCopy {
        PathCopy {
            section_limit: self.section_limit,
            rseq_off: self.rseq_off,
        }
    }

    /// [`update_here`](Self::update_here) with the engine's update path
    /// given by the caller (a handle's copy, equal to this css's: every
    /// css of an engine has the same), so the path test and the section's
    /// limit and offset come from the caller's line rather than the css's.
    ///
    /// # Safety
    /// As [`update_here`](Self::update_here); `path` is the engine's.
    #[inline(always)]
    pub(crate) unsafe fn update_here_via(
        &self,
        path: PathCopy,
        nr_cpus: usize,
        item: usize,
        delta: i64,
    ) {
        let this_cpu = || crate::percpu::cpu::fold(crate::percpu::cpu::current(), nr_cpus);
        if path.section_limit != 0 {
            let cpu = if cfg!(any(rstat_loom, miri)) {
                this_cpu()
            } else {
                0
            };
            // SAFETY: caller's guarantees; `cpu` folded where it is used.
            return unsafe { self.update_in_section(path, cpu, item, delta) };
        }
        // SAFETY: caller's guarantees; `cpu` folded.
        unsafe { self.update_locked(this_cpu(), item, delta) }
    }

    /// A restartable section on this CPU's slot (see `percpu::rseq`).
    ///
    /// # Safety
    /// As [`update`](Self::update); `path` is the engine's, with
    /// `section_limit != 0`.
    #[cfg(not(any(rstat_loom, miri)))]
    #[inline(always)]
    unsafe fn update_in_section(&self, path: PathCopy, _cpu: usize, item: usize, delta: i64) {
        // SAFETY: `item < nr_stats`: the slot lies inside the allocation
        // in every unit; `cur` is its first field (repr(C)).
        let slot = unsafe { self.stats.raw(0).add(item) }.cast::<u8>();
        // SAFETY: caller's guarantees; the item's shift is looked up only
        // if an update crosses a batch boundary.
        unsafe { section_update(path, slot, self.links.raw(0).cast(), (self, item), delta) }
    }

    /// Under loom and Miri, a section is simulated: the slot's lock stands
    /// for "nothing else runs a section on this CPU", a plain load and a
    /// plain store for the unlocked add (as `percpu_ref` simulates its
    /// own). The fence pair is modelled by `SeqCst` fences (`crate::sync`).
    ///
    /// # Safety
    /// As [`update`](Self::update).
    #[cfg(any(rstat_loom, miri))]
    #[inline(always)]
    unsafe fn update_in_section(&self, _path: PathCopy, cpu: usize, item: usize, delta: i64) {
        // SAFETY: a css's node and domain outlive it; caller bounds `cpu`
        // and `item`.
        let (domain, slot) = unsafe { (&*(*self.node).domain, self.stats.elem(cpu, item)) };
        let on_cpu = crate::sync::lock(&domain.sim[cpu]);
        let old = slot.cur.load(Ordering::Relaxed);
        // Release: an x86 store.
        slot.cur.store(old.wrapping_add(delta), Ordering::Release);
        drop(on_cpu);
        // The light half of the asymmetric fence, modelled (with the heavy
        // half, `Domain::heavy_fence`) as a `SeqCst` fence: Miri's weak
        // memory emulation, like a real store buffer, lets the on-list load
        // below pass the plain store above without it.
        crate::sync::fence(Ordering::SeqCst);
        // SAFETY: as above.
        unsafe { self.after_add(cpu, item, old, delta) };
    }

    /// Add on slot `cpu` as if this thread ran there (`add_on_cpu`, for
    /// tests and simulations): the locked add, or under loom and Miri a
    /// simulated section on that slot. On the rseq path this races with
    /// sections of threads really running on CPU `cpu`: a section's add is
    /// not atomic against another CPU's RMW.
    ///
    /// # Safety
    /// As [`update`](Self::update).
    pub(crate) unsafe fn update_on(&self, cpu: usize, item: usize, delta: i64) {
        #[cfg(any(rstat_loom, miri))]
        // SAFETY: caller's guarantees.
        unsafe {
            self.update(cpu, item, delta)
        }
        #[cfg(not(any(rstat_loom, miri)))]
        // SAFETY: caller's guarantees.
        unsafe {
            self.update_locked(cpu, item, delta)
        }
    }

    /// The locked add on slot `cpu`.
    ///
    /// # Safety
    /// As [`update`](Self::update); on the rseq path, `cpu` is at or above
    /// the section limit (or the caller accepts racing sections there, as
    /// `add_on_cpu` documents).
    #[inline(always)]
    pub(crate) unsafe fn update_locked(&self, cpu: usize, item: usize, delta: i64) {
        // SAFETY: caller's guarantees; a css's node links and its domain's
        // backlog outlive the css.
        unsafe {
            let slot = self.stats.elem(cpu, item);
            let old = slot.cur.fetch_add(delta, Ordering::SeqCst);
            self.after_add(cpu, item, old, delta);
        }
    }

    /// After the add: count crossings, then the on-list check (in this
    /// order: see `fold_updates`).
    ///
    /// # Safety
    /// As [`update`](Self::update); `old` is the value of item `item`'s
    /// slot before the add of `delta` on `cpu`.
    #[inline(always)]
    unsafe fn after_add(&self, cpu: usize, item: usize, old: i64, delta: i64) {
        // SAFETY: caller's guarantees; links and backlog outlive the css.
        unsafe {
            self.count_update(cpu, item, old, delta);
            backlog::mark_updated(self.links.elem(cpu, 0), || self.backlog.raw(cpu));
        }
    }

    /// Resolve item `item`'s update path once, for a handle to keep (see
    /// [`ItemPath`]).
    ///
    /// # Safety
    /// `item < nr_stats`.
    pub(crate) unsafe fn item_path(&self, item: usize) -> ItemPath {
        ItemPath {
            css: self,
            // SAFETY: `item < nr_stats`: in bounds of every unit.
            slot: unsafe { self.stats.raw(0).add(item) }.cast(),
            links: self.links.raw(0).cast(),
            path: self.path_copy(),
            item,
            // SAFETY: `item < nr_stats`.
            shift: unsafe { self.item_shift(item) },
        }
    }

    /// Steps 2-4 of the update protocol (see `engine::backlog`).
    ///
    /// # Safety
    /// As [`update`](Self::update).
    #[inline(always)]
    pub(crate) unsafe fn mark(&self, cpu: usize) {
        // SAFETY: a css's node links and its domain's backlog outlive the
        // css.
        unsafe { backlog::mark_updated(self.links.elem(cpu, 0), || self.backlog.raw(cpu)) };
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
    pub fn as_str(self) -> &'static str {
        match self {
            UpdatePath::Rseq => "rseq",
            UpdatePath::Locked => "locked",
        }
    }
}

impl core::fmt::Display for UpdatePath {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}
