//! Controllers: what is counted per group, and how it is folded.
//!
//! A controller declares a list of stat items. The engine gives every
//! (group, controller) pair one signed 64-bit counter per item per CPU in the
//! per-CPU arena (the kernel's memcg stats, base cputime stats and BPF
//! `cgroup_hierarchical_stats` are all arrays of counters), plus
//! local/hierarchical totals and a pending array for deltas handed up by
//! children. On flush the engine computes each counter's per-CPU delta since
//! the last flush (the "prev" scheme) and calls [`Controller::flush`] once per
//! changed (group, CPU), children before parents. The default fold is the
//! kernel's: local += delta; hierarchical += delta + pending; parent's pending
//! += delta + pending.
//!
//! Built in: [`cpu`](crate::Rstat::cpu_stat) base stats and user counter sets
//! ([`Rstat::register_counters`](crate::Rstat::register_counters)). Each
//! controller has its own updated trees and flush lock unless the engine is
//! built in unified mode.

use std::sync::Arc;

use crate::engine::backlog::{self, BacklogHead, PcpuLinks};
use crate::engine::tree::{Domain, TreeNode};
use crate::percpu::arena::PcpuPtr;
use crate::sync::{AtomicI64, AtomicU32, AtomicU64, Ordering, UnsafeCell};

pub mod counters;

/// A controller: a named list of stat items and how its deltas are folded.
///
/// Implement this to get your own per-group, per-CPU, hierarchically
/// aggregated stats with their own updated trees and flush lock (the
/// userspace analog of BPF's `cgroup_hierarchical_stats`). For plain
/// counters [`Rstat::register_counters`](crate::Rstat::register_counters) is
/// enough.
pub trait Controller: Send + Sync + 'static {
    /// The controller's name, unique in its engine (e.g. `"io"`).
    fn name(&self) -> &str;

    /// The stat items: one per-CPU signed counter each. Must be non-empty,
    /// unique, and not change after registration.
    fn stat_names(&self) -> &[String];

    /// Fold one (group, CPU)'s deltas. Called under this controller's flush
    /// lock, children before parents; must not panic or block. The default
    /// is the kernel's sum fold, [`FlushCtx::fold`].
    fn flush(&self, ctx: &mut FlushCtx<'_>) {
        ctx.fold();
    }
}

/// What a [`Controller::flush`] call sees: one (group, CPU)'s per-item
/// deltas since the last flush, this group's totals, and the parent's pending
/// array.
pub struct FlushCtx<'a> {
    cpu: usize,
    deltas: &'a [i64],
    totals: &'a mut Totals,
    parent_pending: Option<&'a mut [i64]>,
}

impl FlushCtx<'_> {
    /// The CPU whose counters these deltas come from.
    pub fn cpu(&self) -> usize {
        self.cpu
    }

    /// Per-item change of this group's own counters on this CPU since the
    /// last flush.
    pub fn deltas(&self) -> &[i64] {
        self.deltas
    }

    /// Whether this group has no parent (the root).
    pub fn is_root(&self) -> bool {
        self.parent_pending.is_none()
    }

    /// This group's totals, to fold into by hand.
    pub fn totals_mut(&mut self) -> &mut Totals {
        self.totals
    }

    /// The parent's pending array (what the parent will add to its
    /// hierarchical totals when it is flushed); `None` at the root.
    pub fn parent_pending_mut(&mut self) -> Option<&mut [i64]> {
        self.parent_pending.as_deref_mut()
    }

    /// The standard fold: local += delta; the delta plus what children left
    /// pending goes into hierarchical and up to the parent's pending.
    pub fn fold(&mut self) {
        let t = &mut *self.totals;
        for (i, &d) in self.deltas.iter().enumerate() {
            t.local[i] = t.local[i].wrapping_add(d);
            let up = d.wrapping_add(core::mem::take(&mut t.pending[i]));
            t.hierarchical[i] = t.hierarchical[i].wrapping_add(up);
            if let Some(pp) = self.parent_pending.as_deref_mut() {
                pp[i] = pp[i].wrapping_add(up);
            }
        }
    }
}

/// Per-group totals of one controller (protected by its flush lock).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// The group's own updates.
    pub local: Box<[i64]>,
    /// The group's and all its descendants' (including removed ones).
    pub hierarchical: Box<[i64]>,
    /// Deltas handed up by flushed children, not yet in `hierarchical`.
    pub pending: Box<[i64]>,
}

impl Totals {
    fn zeroed(n: usize) -> Self {
        Totals {
            local: vec![0; n].into(),
            hierarchical: vec![0; n].into(),
            pending: vec![0; n].into(),
        }
    }
}

/// A registered controller.
pub(crate) struct CtlEntry {
    pub(crate) id: usize,
    /// Index of its domain in the engine (and in each group's `nodes`).
    pub(crate) domain_idx: usize,
    pub(crate) name: Box<str>,
    pub(crate) nr_stats: usize,
    pub(crate) imp: Box<dyn Controller>,
    /// The domain its state joins (its own, or the unified one).
    pub(crate) domain: *const Domain,
    /// The flush policy (`FlushPolicy` as u32).
    pub(crate) policy: AtomicU32,
}

// SAFETY: `domain` points into the engine, which outlives every entry's use.
unsafe impl Send for CtlEntry {}
// SAFETY: as above; the other fields are immutable.
unsafe impl Sync for CtlEntry {}

/// One per-CPU stat counter and the value it had at the last flush.
///
/// A css has `nr_stats + 1` of them per CPU: the last one's `cur` is the
/// (css, CPU)'s count of pending-update units folded into the shared
/// counters and not yet consumed by a flush (see `Css::count_update`); its
/// `prev` is unused.
pub(crate) struct StatSlot {
    pub(crate) cur: AtomicI64,
    /// Domain lock.
    pub(crate) prev: UnsafeCell<i64>,
}

// SAFETY: `prev` is only touched by the domain lock holder.
unsafe impl Sync for StatSlot {}
// SAFETY: as above.
unsafe impl Send for StatSlot {}

impl Default for StatSlot {
    fn default() -> Self {
        StatSlot {
            cur: AtomicI64::new(0),
            prev: UnsafeCell::new(0),
        }
    }
}

/// The state of one controller in one group ("css" in the kernel).
pub(crate) struct Css {
    pub(crate) ctl: Arc<CtlEntry>,
    /// The parent group's css of the same controller; null at the root.
    pub(crate) parent: *const Css,
    pub(crate) stats: PcpuPtr<StatSlot>,
    /// This group's node in the controller's domain.
    pub(crate) node: *const TreeNode,
    /// Copies of the node's links and the domain's backlog heads, so the
    /// hot path reaches both without dereferencing the node.
    pub(crate) links: PcpuPtr<PcpuLinks>,
    pub(crate) backlog: PcpuPtr<BacklogHead>,
    /// Domain lock.
    pub(crate) totals: UnsafeCell<Totals>,
    /// The last folded totals, for reads that do not take the lock:
    /// `local` in `[..n]`, `hierarchical` in `[n..]`. Written under the
    /// domain lock (hierarchical first, then local with `Release`); read
    /// local (`Acquire`) first, then hierarchical, so a lock-free reader
    /// never sees `local > hierarchical` where counts only grow.
    pub(crate) published: Box<[AtomicI64]>,
    /// Pending-update counter (the `Threshold` policy, kernel v6.8): units
    /// folded up from this group's and its descendants' per-CPU slots (64
    /// per batch boundary crossed) that are not yet in this group's
    /// hierarchical totals. A flush subtracts exactly the units it folded
    /// (see `fold_node`), never resets: a unit folded while the flush runs
    /// stays counted. Not padded to its own line (padding would cost every
    /// group ~700 bytes); it is written once per 64 units of change.
    pub(crate) updates: AtomicU64,
    /// Units consumed by flushes of this group's children (their folded
    /// crossings, now in `totals.pending`), to subtract from `updates` when
    /// this group folds that pending in. Changed by flushers and by a
    /// child's release.
    pub(crate) consumed: AtomicU64,
    /// 64 × nr_cpus: `updates` beyond this makes a `Threshold` read flush.
    pub(crate) flush_threshold: u64,
}

// SAFETY: pointers are immutable after construction and kept alive by the
// hierarchy; `totals` is behind the domain lock; stats are atomics.
unsafe impl Send for Css {}
// SAFETY: as above.
unsafe impl Sync for Css {}

impl Css {
    pub(crate) fn new(
        ctl: Arc<CtlEntry>,
        parent: *const Css,
        stats: PcpuPtr<StatSlot>,
        node: &TreeNode,
    ) -> Self {
        let n = ctl.nr_stats;
        // SAFETY: a node's domain outlives it.
        let (backlog, nr_cpus) = unsafe { ((*node.domain).backlog, (*node.domain).nr_cpus) };
        Css {
            ctl,
            parent,
            stats,
            node,
            links: node.links,
            backlog,
            totals: UnsafeCell::new(Totals::zeroed(n)),
            published: (0..2 * n).map(|_| AtomicI64::new(0)).collect(),
            updates: AtomicU64::new(0),
            consumed: AtomicU64::new(0),
            flush_threshold: UPDATE_BATCH * nr_cpus as u64,
        }
    }

    /// The hot path: add `delta` to item `item` on `cpu`, and make sure a
    /// flush will visit this group. One uncontended RMW on a CPU-local line
    /// and one load of a CPU-local line in the common case.
    ///
    /// # Safety
    /// The css is live, `cpu < nr_cpus`, `item < nr_stats`.
    #[inline(always)]
    pub(crate) unsafe fn update(&self, cpu: usize, item: usize, delta: i64) {
        // SAFETY: caller's guarantees; a css's node links and its domain's
        // backlog outlive the css.
        unsafe {
            // Addresses first: loads issued after a locked RMW wait for it,
            // so only the on-list load itself should come after.
            let slot = self.stats.elem(cpu, item);
            let links = self.links.elem(cpu, 0);
            let head = self.backlog.raw(cpu);
            let old = slot.cur.fetch_add(delta, Ordering::SeqCst);
            // Count before marking: see `fold_updates`.
            self.count_update(cpu, old, delta);
            backlog::mark_updated(links, head);
        }
    }

    /// The `Threshold` policy's pending-update counting (kernel v6.8's
    /// per-CPU `stats_updates`, in our own design): the per-CPU counter is
    /// the stat slot itself. Each time an update moves a slot across a
    /// multiple of [`UPDATE_BATCH`], 64 units per boundary crossed are folded
    /// into the group's and every ancestor's shared counter. The boundary
    /// test uses the value the stat RMW already returned, so the hot path
    /// gains no memory access at all (no second RMW, not even a load or a
    /// store), and, unlike a separate racy counter, it loses nothing when a
    /// thread migrates mid-update.
    ///
    /// Why it bounds staleness: since a slot was last folded (`prev`), its
    /// value moved by less than 64 × (boundaries crossed + 1) units, and the
    /// crossings are in the shared counter (the policy module states the
    /// bound and its proof).
    ///
    /// # Safety
    /// As [`update`](Self::update); `old` is what the stat RMW on `cpu`
    /// returned.
    #[inline(always)]
    pub(crate) unsafe fn count_update(&self, cpu: usize, old: i64, delta: i64) {
        let crossed = (old.wrapping_add(delta) >> UPDATE_BATCH_SHIFT) - (old >> UPDATE_BATCH_SHIFT);
        if crossed != 0 {
            // SAFETY: caller's guarantees.
            unsafe { self.fold_updates(cpu, crossed.unsigned_abs().saturating_mul(UPDATE_BATCH)) };
        }
    }

    /// Fold `v` units into this group's and every ancestor's shared
    /// counter, then record them in this (css, CPU)'s `counted` slot, which
    /// the flusher reads *before* the stat slots: units it reads there are
    /// units whose stat change its slot reads include (the `Release` here
    /// and its `Acquire`), so it can subtract exactly those. Every ancestor
    /// is counted, even one already due for a flush (kernel v6.8 skips
    /// those; then a flush could not know what to subtract).
    ///
    /// The caller marks the node updated *after* this: the `counted` add
    /// and the flusher's `OFF_LIST` store then form a store-buffering pair
    /// with the on-list check and the flusher's `counted` load (all
    /// `SeqCst`), so either this flush consumes the units or the node goes
    /// back on a backlog and the next flush does. No unit outlives the
    /// flushes that include its change.
    ///
    /// # Safety
    /// As [`update`](Self::update).
    #[cold]
    #[inline(never)]
    unsafe fn fold_updates(&self, cpu: usize, v: u64) {
        let mut css: *const Css = self;
        // SAFETY: a css keeps its ancestors' alive (through the groups).
        while let Some(c) = unsafe { css.as_ref() } {
            c.updates.fetch_add(v, Ordering::Relaxed);
            css = c.parent;
        }
        // SAFETY: caller's guarantees; slot `nr_stats` is `counted`.
        let counted = unsafe { self.stats.elem(cpu, self.ctl.nr_stats) };
        counted.cur.fetch_add(v as i64, Ordering::SeqCst);
    }

    /// Whether the `Threshold` policy wants a flush before reading: more
    /// than 64 × nr_cpus units pending. `Acquire`: a count that a flush
    /// lowered comes with the totals that flush published.
    pub(crate) fn needs_flush(&self) -> bool {
        self.updates.load(Ordering::Acquire) > self.flush_threshold
    }

    /// Copy the published totals, without the lock.
    pub(crate) fn totals_published(&self) -> Totals {
        let n = self.ctl.nr_stats;
        let local: Box<[i64]> = self.published[..n]
            .iter()
            .map(|a| a.load(Ordering::Acquire))
            .collect();
        let hierarchical: Box<[i64]> = self.published[n..]
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect();
        Totals {
            local,
            hierarchical,
            pending: vec![0; n].into(),
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
        unsafe { backlog::mark_updated(self.links.elem(cpu, 0), self.backlog.raw(cpu)) };
    }

    /// Copy the totals (caller holds the domain lock).
    ///
    /// # Safety
    /// The domain lock is held.
    pub(crate) unsafe fn totals_locked(&self) -> Totals {
        // SAFETY: lock held.
        self.totals.with(|t| unsafe { (*t).clone() })
    }
}

/// Units of |delta| a CPU accumulates before folding them into the shared
/// pending-update counters (the kernel's `MEMCG_CHARGE_BATCH`).
pub const UPDATE_BATCH: u64 = 1 << UPDATE_BATCH_SHIFT;
const UPDATE_BATCH_SHIFT: u32 = 6;

/// Fold every css of `node`'s group that belongs to `domain`, for `cpu`.
///
/// # Safety
/// The domain lock is held; `node` is a live node of `domain`; `cpu <
/// nr_cpus`.
pub(crate) unsafe fn fold_node(
    domain: &Domain,
    node: &TreeNode,
    cpu: usize,
    deltas: &mut Vec<i64>,
) {
    // SAFETY: a node's group is live while the node is.
    let tables = unsafe { &*node.group };
    for slot in tables.css.iter() {
        let css = slot.load(Ordering::Acquire);
        if css.is_null() {
            continue;
        }
        // SAFETY: installed css are live as long as their group.
        let css = unsafe { &*css };
        if !core::ptr::eq(css.ctl.domain, domain) {
            continue;
        }
        deltas.clear();
        // SAFETY: live css, `cpu` in range.
        let (slots, counted) = unsafe { css.stats.slot(cpu) }.split_at(css.ctl.nr_stats);
        let counted = &counted[0].cur;
        // Before the stat loads: the units read here are units whose change
        // those loads include (see `Css::fold_updates`).
        let units = counted.load(Ordering::SeqCst);
        // Lock held for `prev`.
        for s in slots {
            let cur = s.cur.load(Ordering::SeqCst);
            // SAFETY: `prev` is only touched under the domain lock, held.
            let prev = s
                .prev
                .with_mut(|p| unsafe { core::mem::replace(&mut *p, cur) });
            deltas.push(cur.wrapping_sub(prev));
        }
        let deltas: &[i64] = deltas;
        css.totals.with_mut(|t| {
            // SAFETY: lock held; the parent css (another cell) is live
            // because a child keeps its parent group alive.
            let totals = unsafe { &mut *t };
            // SAFETY: as above: a child's css keeps its parent's alive.
            match unsafe { css.parent.as_ref() } {
                None => css.ctl.imp.flush(&mut FlushCtx {
                    cpu,
                    deltas,
                    totals,
                    parent_pending: None,
                }),
                Some(p) => p.totals.with_mut(|pt| {
                    // SAFETY: lock held; distinct cell from `t`.
                    let pp = unsafe { &mut (*pt).pending };
                    css.ctl.imp.flush(&mut FlushCtx {
                        cpu,
                        deltas,
                        totals,
                        parent_pending: Some(pp),
                    })
                }),
            }
        });
        // Publish for lock-free readers (before the count drops below).
        css.totals.with(|t| {
            // SAFETY: lock held.
            let t = unsafe { &*t };
            let n = t.local.len();
            for (a, v) in css.published[n..].iter().zip(t.hierarchical.iter()) {
                a.store(*v, Ordering::Relaxed);
            }
            for (a, v) in css.published[..n].iter().zip(t.local.iter()) {
                a.store(*v, Ordering::Release);
            }
        });
        // Subtract exactly the units now in this group's hierarchical
        // totals: its own crossings read above, and its children's that
        // this fold took from `pending`. Hand them to the parent, which
        // subtracts them when it folds its pending in. A unit counted after
        // our `counted` load stays counted (at worst a later read flushes
        // early); none is subtracted before its change is in the totals.
        counted.fetch_sub(units, Ordering::Relaxed);
        let total = (units as u64).wrapping_add(css.consumed.swap(0, Ordering::Acquire));
        if total != 0 {
            // Release: pairs with `needs_flush`'s Acquire (totals above).
            css.updates.fetch_sub(total, Ordering::Release);
            // SAFETY: a child's css keeps its parent's alive.
            if let Some(p) = unsafe { css.parent.as_ref() } {
                p.consumed.fetch_add(total, Ordering::Release);
            }
        }
    }
}
