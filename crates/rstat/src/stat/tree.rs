//! The locked side of rstat: per-CPU updated trees and the flush.
//!
//! A *domain* is one updated-tree family with one flush lock: per controller
//! in the default (separate, kernel v6.16+) mode, one for all controllers in
//! unified mode (before v6.16). Every group has one [`TreeNode`] per domain.
//!
//! Invariant (the kernel's, kept here): on each CPU, the updated tree is
//! closed under parents. Insertion is bottom-up and stops at the first node
//! already linked; removal cuts whole subtrees. So if a node is on a CPU's
//! tree, all its ancestors are, and a flush of any subtree finds every node
//! under it that changed on that CPU, touching no node that did not.
//!
//! Cost of a flush of subtree `R`: for each CPU, drain that CPU's backlog
//! (every node updated since the last drain, anywhere in the domain), then
//! visit only the updated nodes under `R`. Idle groups are never touched, so
//! the cost follows the number of groups that changed, not the tree's size.
//! A group's final flush (at its release) follows the CPUs it changed on
//! instead: each node keeps a mask of the CPUs whose backlog or tree it
//! ever went on ([`TreeNode::touched`]), and the release drains, cuts and
//! folds only those (none, and no lock, for a group never updated), so a
//! short-lived group on an engine of many CPU slots does not pay for
//! every slot there.
//!
//! A flush of `R` in a domain with a read pace stamps `R` with the time it
//! started ([`pace`]): every update that completed before then
//! is in the totals of `R` and of every node under it.

use core::ptr;
use std::sync::Arc;

use crate::percpu::arena::PcpuPtr;
use crate::percpu::cpu::CpuMask;
use crate::percpu::CachePadded;
use crate::stat::backlog::{self, BacklogHead, PcpuLinks};
use crate::stat::css::CssTable;
use crate::stat::fold::{fold_node, prefetch_css, prefetch_slots};
use crate::stat::ops::NodeOwner;
use crate::stat::pace::{self, Clock, Nudge};
use crate::stat::policy::Coalescer;
use crate::sync::{self, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Mutex, Ordering, UnsafeCell};

/// A group's membership in one domain.
pub(crate) struct TreeNode {
    /// The parent group's node in the same domain; null for the root.
    pub(crate) parent: *const TreeNode,
    /// The stat state of the group this node belongs to: its css of every
    /// controller (a flush folds those of this node's domain).
    pub(crate) css: *const CssTable,
    /// The group itself, as the flush sees it (its id and path, for
    /// [`FlushCtx`]). A group outlives its nodes and its css table: they
    /// are freed by its release, before it.
    ///
    /// [`FlushCtx`]: crate::FlushCtx
    pub(crate) owner: *const dyn NodeOwner,
    /// The domain.
    pub(crate) domain: *const Domain,
    /// Per-CPU links.
    pub(crate) links: PcpuPtr<PcpuLinks>,
    /// Domain lock. Set by the group's final release just before its last
    /// flush in this domain: a controller flush that panics on this node
    /// cannot be retried later (see `controller`'s `# A flush that
    /// panics`).
    pub(crate) releasing: UnsafeCell<bool>,
    /// When the last stamped flush of this node's subtree started
    /// ([`pace::encode`]d; 0: none yet): stored `Release` under the domain
    /// lock after that flush published its totals, loaded `Acquire` by
    /// paced reads ([`pace`]'s `# Synchronization`).
    pub(crate) flushed_at: AtomicU64,
    /// The CPUs whose backlog or updated tree this node has ever been on:
    /// bit `c % 64` for CPU `c` (exact up to 64 CPU slots, a superset
    /// beyond). Set (`Relaxed`) by the updater that claims the node for a
    /// CPU's backlog, before it pushes, and by a flush that links the node
    /// on a CPU's tree (under the lock); never cleared. A group's final
    /// flush and release visit only these CPUs (`touched_cpus`): a group
    /// updated on a few CPUs of a large engine is released for those few.
    /// Every setter's write happens before the final release (an updater's
    /// through its handle's drop, a flush through the lock it releases
    /// before the child that made it link this node drops its reference).
    pub(crate) touched: CpuMask,
}

// SAFETY: `flushed_at` and `touched` are atomic, the other fields are immutable after
// construction, and `releasing` is only accessed under the domain lock; the
// pointees are kept alive by the group hierarchy (a child holds its parent,
// a group holds its engine, which holds the domains).
unsafe impl Send for TreeNode {}
// SAFETY: as above.
unsafe impl Sync for TreeNode {}

impl TreeNode {
    /// # Safety
    /// The node is live and `cpu < nr_cpus`.
    #[inline(always)]
    pub(crate) unsafe fn links(&self, cpu: usize) -> &PcpuLinks {
        // SAFETY: caller's guarantee; links were allocated with one element.
        unsafe { self.links.elem(cpu, 0) }
    }

    /// The CPU slots below `nr_cpus` this node may be on a backlog or tree
    /// of (a superset of those it ever was on): see
    /// [`touched`](Self::touched). Complete for a node no updater can
    /// reach (its final release), or for its trees once the backlogs were
    /// drained under the lock.
    pub(crate) fn touched_cpus(&self, nr_cpus: usize) -> impl Iterator<Item = usize> + Clone {
        cpus_in(self.touched.bits(), nr_cpus)
    }
}

/// How many of a flush's first (node, CPU) folds it prefetches for
/// (`Domain::flush_locked_fenced`): a reader's flush of one group's
/// subtree is usually far smaller; a root flush of a large tree would
/// evict the lines of later folds before it reached them.
pub(super) const PREFETCH_FOLDS: usize = 64;

/// The nodes of the first [`PREFETCH_FOLDS`] folds of a flush whose cuts
/// are `order` split at `cuts`: one slice per CPU's cut, in the order the
/// folds take them (CPU after CPU, each cut from its end), ending where
/// the budget does.
pub(super) fn first_folds<'a>(
    order: &'a [*const TreeNode],
    cuts: &'a [usize],
) -> impl Iterator<Item = &'a [*const TreeNode]> + 'a {
    let mut budget = PREFETCH_FOLDS;
    let mut from = 0;
    cuts.iter().map_while(move |&to| {
        if budget == 0 {
            return None;
        }
        let cut = order.get(from..to).unwrap_or(&[]);
        from = to;
        let take = cut.len().min(budget);
        budget -= take;
        Some(&cut[cut.len() - take..])
    })
}

/// Scratch space reused by every flush, so flushing does not allocate once
/// warmed up. Lives inside the domain lock.
#[derive(Default)]
pub(crate) struct FlushScratch {
    stack: Vec<*const TreeNode>,
    /// The cut subtree's nodes, every CPU's in turn, each CPU's in
    /// pre-order.
    order: Vec<*const TreeNode>,
    /// Where each CPU's nodes end in `order`.
    cuts: Vec<usize>,
    pub(crate) deltas: Vec<i64>,
    /// Flushes performed (for tests and reports).
    pub(crate) flushes: u64,
    /// (node, CPU) folds performed.
    pub(crate) folds: u64,
}

// SAFETY: the raw pointers are only dereferenced by the lock holder.
unsafe impl Send for FlushScratch {}

/// One updated-tree family: a flush lock and a backlog per CPU.
pub(crate) struct Domain {
    pub(crate) nr_cpus: usize,
    /// The engine's restartable-section limit (0: locked updates) and rseq
    /// `cpu_id` offset (see `EngineInner`).
    pub(crate) section_limit: usize,
    pub(crate) rseq_off: isize,
    /// Under loom and Miri, the stand-in for "nothing else runs a section
    /// on this CPU": one lock per slot, held around a simulated section.
    #[cfg(any(rstat_loom, miri))]
    pub(crate) sim: Box<[Mutex<()>]>,
    /// On lines of its own: a flush writes its scratch (counters, vectors)
    /// for every node it folds, and must not take the line of the fields
    /// lock-free reads load (`root`, the pace, the clock) meanwhile.
    pub(crate) lock: CachePadded<Mutex<FlushScratch>>,
    pub(crate) backlog: PcpuPtr<BacklogHead>,
    /// The root group's node (set when the root is attached; the root
    /// outlives every other group, and every read holds a group).
    pub(crate) root: AtomicPtr<TreeNode>,
    /// `UnifiedRoot`: a root flush is running.
    pub(crate) root_flush_ongoing: AtomicBool,
    /// `Coalesced`: the root flusher and its waiters.
    pub(crate) coalescer: Coalescer,
    /// `Threshold`: how old a flush stamp a read over the threshold may
    /// rely on instead of flushing, in ns of `clock`; 0: none (such a read
    /// always flushes). See [`pace`].
    pub(crate) pace_ns: u64,
    /// What flushes stamp their start with (when `pace_ns` is not 0).
    pub(crate) clock: Clock,
    /// A paced read asked the background flusher for a root flush of this
    /// domain, which has not taken the ask yet (`Relaxed`: a hint).
    pub(crate) root_flush_asked: AtomicBool,
    /// The engine's background-flusher wake-up, shared by its domains.
    pub(crate) nudge: Arc<Nudge>,
    /// Bit `id`: the controller of that id flushes in this domain. Set
    /// (`Release`) when the controller registers, before any group gets a
    /// css of it; never cleared. A fold that loaded a css from a group's
    /// table (`Acquire`) thus sees its controller's bit if it is ours,
    /// and skips the other domains' css without reading them (each would
    /// cost the css's line and its controller entry's, cold in a flush).
    pub(crate) ctls: AtomicU32,
}

/// A flush stamp younger than the read pace ([`Domain::fresh_stamp`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fresh {
    /// When the flush started (ns of the domain's clock).
    pub(crate) start: u64,
    /// It started less than half the pace ago.
    pub(crate) young: bool,
}

/// A domain's read pace: how old a flush stamp a `Threshold` read may rely
/// on, the clock stamps are read from, and the nudge that asks for root
/// flushes.
#[derive(Clone)]
pub(crate) struct Pace {
    /// `None`: no pace (reads over the threshold always flush).
    pub(crate) pace: Option<std::time::Duration>,
    pub(crate) clock: Clock,
    pub(crate) nudge: Arc<Nudge>,
}

// SAFETY: `backlog` heads, `root` and the flags are atomics, the coalescer
// and the nudge are behind their own locks, the rest is immutable after
// construction or behind `lock`.
unsafe impl Send for Domain {}
// SAFETY: as above.
unsafe impl Sync for Domain {}

impl Domain {
    /// A domain of `nr_cpus` slots, whose update path is the engine's
    /// (`section_limit`, `rseq_off`), with its per-CPU `backlog` heads.
    pub(crate) fn new(
        nr_cpus: usize,
        section_limit: usize,
        rseq_off: isize,
        backlog: PcpuPtr<BacklogHead>,
        pace: Pace,
    ) -> Domain {
        Domain {
            nr_cpus,
            section_limit,
            rseq_off,
            #[cfg(any(rstat_loom, miri))]
            sim: (0..nr_cpus).map(|_| Mutex::new(())).collect(),
            lock: CachePadded::new(Mutex::new(FlushScratch::default())),
            backlog,
            root: AtomicPtr::new(ptr::null_mut()),
            root_flush_ongoing: AtomicBool::new(false),
            coalescer: Coalescer::default(),
            // A pace of a whole ns at least: 0 stands for none. Shortened
            // by the clock's slack, so a stamp younger than it on the
            // clock is younger than the pace in real time.
            pace_ns: pace.pace.map_or(0, |p| {
                pace::as_ns(p).saturating_sub(pace.clock.slack_ns()).max(1)
            }),
            clock: pace.clock,
            root_flush_asked: AtomicBool::new(false),
            nudge: pace.nudge,
            ctls: AtomicU32::new(0),
        }
    }

    /// Record that controller `id` flushes in this domain: before any css
    /// of it is installed in a group's table (see `ctls`).
    pub(crate) fn add_ctl(&self, id: usize) {
        debug_assert!(id < u32::BITS as usize);
        self.ctls.fetch_or(1 << id, Ordering::Release);
    }

    /// Whether controller `id` flushes in this domain. For a css loaded
    /// (`Acquire`) from a group's table: its controller's registration,
    /// and so its bit, came before it.
    #[inline]
    pub(crate) fn has_ctl(&self, id: usize) -> bool {
        id < u32::BITS as usize && self.ctls.load(Ordering::Relaxed) & (1 << id) != 0
    }

    /// # Safety
    /// `cpu < nr_cpus`.
    #[inline(always)]
    pub(crate) unsafe fn backlog(&self, cpu: usize) -> &BacklogHead {
        // SAFETY: the backlog lives as long as the domain; caller bounds cpu.
        unsafe { self.backlog.elem(cpu, 0) }
    }

    /// The heavy half of the update path's asymmetric fence (see
    /// `engine::backlog`): after the `OFF_LIST` stores of the nodes a flush
    /// folds, before any stat slot is read. `membarrier` makes every CPU running one of our
    /// threads execute a full barrier, so an update whose unlocked store
    /// that CPU still buffered is visible once it returns (or that updater's
    /// on-list check, after its compiler fence, sees `OFF_LIST` and pushes
    /// the node again). Under loom the updater's and this side's `SeqCst`
    /// fences model the pair (`crate::sync`).
    ///
    /// The plain barrier ([`rseq::barrier`](crate::percpu::rseq::barrier)),
    /// not the rseq command that also restarts sections: the pair needs a
    /// barrier between an updater's slot store and its on-list load, not a
    /// restart. Where the barrier lands on an updater's CPU: after its
    /// store, it orders the store before the load (or drains it before
    /// the flusher's slot loads, which follow the call's return); before
    /// its store (even inside the section, between the slot's load and
    /// store), the updater's on-list load comes after it and so after our
    /// `OFF_LIST` stores, which the call orders before its barriers: it
    /// sees `OFF_LIST` and pushes the node, and its update, concurrent
    /// with this flush, goes to the next one. A thread off its CPU passed
    /// a context switch (a full barrier), and its section restarts anyway.
    ///
    /// On the locked path it is free: the updaters' locked RMWs and the
    /// `SeqCst` `OFF_LIST` stores and slot loads already form the
    /// store-buffering pair (loom models that pair with the same fence).
    fn heavy_fence(&self) {
        #[cfg(not(any(rstat_loom, miri)))]
        if self.section_limit != 0 {
            // Detection proved the command works in this process; what can
            // still fail is an allocation in the kernel (ENOMEM). Retry, and
            // as a last resort wait far longer than any store buffer holds
            // a store (documented as the one unproven fallback).
            for _ in 0..8 {
                if crate::percpu::rseq::barrier().is_ok() {
                    return;
                }
                std::thread::yield_now();
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // The model of the pair: `SeqCst` fences on both sides (the
        // simulated section has the other one).
        #[cfg(any(rstat_loom, miri))]
        crate::sync::fence(Ordering::SeqCst);
    }

    /// Lock, flush the root's subtree, unlock.
    pub(crate) fn flush_root(&self) {
        let root = self.root.load(Ordering::Acquire);
        // SAFETY: the root node lives as long as any group of the engine;
        // callers hold a group (or the engine handle, which holds the root).
        if let Some(root) = unsafe { root.as_ref() } {
            let mut scratch = lock_domain(self);
            // SAFETY: lock held; the root is a live node of this domain.
            unsafe { self.flush_locked(&mut scratch, root) };
        }
    }

    /// Flush the subtree rooted at `root` on every CPU: after this returns,
    /// every update that completed before the call is in the totals of
    /// `root` and of every node under it.
    ///
    /// # Safety
    /// `scratch` is this domain's locked scratch; `root` is a live node of
    /// this domain.
    pub(crate) unsafe fn flush_locked(&self, scratch: &mut FlushScratch, root: &TreeNode) {
        // SAFETY: forwarded.
        unsafe { self.flush_locked_fenced(scratch, root, true) }
    }

    /// [`flush_locked`](Self::flush_locked), for a read (`fence`) or for
    /// the final release of `root`'s group (not `fence`).
    ///
    /// A read's flush runs the heavy half of the update path's asymmetric
    /// fence, and leaves `root` linked in its parent's list of updated
    /// children (emptied of its own): unlinking it would write its
    /// neighbours' links in that list (two more lines, on every read of a
    /// reader sweeping a busy parent's children), and `root` is as good a
    /// path node as any (a later flush of an ancestor folds it once more,
    /// for nothing if nothing changed). A final release runs no fence
    /// (every update to the group happened before it: each updater's
    /// handle drop did), and unlinks `root`, which is freed next: in
    /// constant time, whatever the number of its siblings on the list
    /// (the list is doubly linked), so removing one of many groups updated
    /// under one parent (a group per request under its tenant) does not
    /// cost a walk over the others.
    ///
    /// # Safety
    /// As [`flush_locked`](Self::flush_locked).
    pub(crate) unsafe fn flush_locked_fenced(
        &self,
        scratch: &mut FlushScratch,
        root: &TreeNode,
        fence: bool,
    ) {
        let detach = !fence;
        scratch.flushes += 1;
        // The stamp: the time before the first drain (under the lock, so
        // a node's stamps only grow). Only a fenced flush includes every
        // update completed before it starts, so only it stamps.
        // (No stamp if the clock cannot be read.)
        let start = if fence && self.pace_ns != 0 {
            self.clock.now()
        } else {
            None
        };
        let mut undone = false;
        // Every CPU's backlog first, then every CPU's cut of the subtree
        // (the nodes to fold, marked off-list), so one fence serves all of
        // them. Nodes the drain puts on a tree outside the subtree stay
        // there, on list, for a later flush of an ancestor. "Every CPU":
        // for a final release, the CPUs its node ever went on (a node with
        // no children: none of its subtree is anywhere else); for a read,
        // every CPU's backlog (any node under `root` may be on one), then
        // the CPUs the drains left `root` touched on (its subtree is on a
        // CPU's tree only if `root` is: trees are closed under parents).
        let drained = if detach {
            root.touched.bits()
        } else {
            u64::MAX
        };
        for cpu in cpus_in(drained, self.nr_cpus) {
            // SAFETY: we hold the lock (caller), nodes on backlogs are live.
            unsafe {
                backlog::drain(self.backlog(cpu), |l| {
                    link_updated(&*l.node.load(Ordering::Relaxed), cpu)
                })
            };
        }
        let cpus = root.touched_cpus(self.nr_cpus);
        scratch.cuts.clear();
        for cpu in cpus.clone() {
            let from = scratch.order.len();
            // SAFETY: lock held; `root` live.
            unsafe { self.cut_subtree(scratch, root, cpu, detach) };
            for &n in &scratch.order[from..] {
                // SAFETY: nodes on the tree are live; lock held; the fence
                // (or, without one, the caller's guarantee that every update
                // happened before) comes before the slot loads below.
                unsafe { backlog::unlist((*n).links(cpu)) };
            }
            scratch.cuts.push(scratch.order.len());
        }
        // The folds' loads chase pointers (node, css table, css, its
        // per-CPU lines and totals) through lines a reader sweeping many
        // groups finds cold, and each fold's locked RMWs keep the next
        // fold's loads from starting early: ask now for those of the
        // first folds, so their misses overlap one another and the fence.
        // (Only the first `PREFETCH_FOLDS`: a root flush of a large tree
        // would have evicted the rest again before folding them.)
        for nodes in first_folds(&scratch.order, &scratch.cuts) {
            // SAFETY: lock held; the nodes of the cuts are live.
            unsafe { prefetch_css(self, nodes) };
        }
        if fence {
            self.heavy_fence();
        }
        let mut order = core::mem::take(&mut scratch.order);
        // Their per-CPU lines last, after the fence: the updaters may have
        // taken them back meanwhile.
        for (nodes, cpu) in first_folds(&order, &scratch.cuts).zip(cpus.clone()) {
            // SAFETY: as above; `cpus` are below `nr_cpus`.
            unsafe { prefetch_slots(self, nodes, cpu) };
        }
        let mut from = 0;
        for (k, cpu) in cpus.enumerate() {
            let to = scratch.cuts[k];
            // Reverse pre-order: every node after all of its descendants.
            for &n in order[from..to].iter().rev() {
                scratch.folds += 1;
                // SAFETY: nodes on the tree are live; lock held.
                undone |= unsafe { fold_node(self, &*n, cpu, &mut scratch.deltas) };
            }
            from = to;
        }
        order.clear();
        scratch.order = order;
        // Release, after every total above was published: a paced read
        // that loads this stamp (`Acquire`) copies totals at least as new.
        // A flush with an undone fold (a contained panic) did not fold
        // everything that completed before `start`: no stamp.
        if let (Some(start), false) = (start, undone) {
            root.flushed_at
                .store(pace::encode(start), Ordering::Release);
        }
    }

    /// A paced read's test: if this domain has a pace and the last stamped
    /// flush of `node`'s subtree, or of the root's, started less than the
    /// pace ago, the newer such flush (its start, ns of [`Domain::clock`],
    /// and whether it is *young*: less than half the pace ago). Cost: a
    /// read of the clock and two or three loads, no lock.
    ///
    /// A read that relies on the returned stamp, copying published totals
    /// after this call, includes every update of `node`'s subtree that
    /// completed before that time (see `policy`'s "The bound").
    pub(crate) fn fresh_stamp(&self, node: &TreeNode) -> Option<Fresh> {
        if self.pace_ns == 0 {
            return None;
        }
        // A clock that cannot be read: no stamp is relied on (the read
        // falls back to the unit bound, or flushes).
        let now = self.clock.now()?;
        let fresh = |stamp: u64| {
            pace::fresh(stamp, now, self.pace_ns).map(|start| Fresh {
                start,
                young: now.saturating_sub(start) < self.pace_ns / 2,
            })
        };
        // The root's first: while the periodic flusher answers the asks,
        // it is young, and one line serves every group's reads.
        // SAFETY: the root node lives as long as any group of the engine,
        // and the caller holds one (`node`'s).
        let root = unsafe { self.root.load(Ordering::Acquire).as_ref() }
            .and_then(|r| fresh(r.flushed_at.load(Ordering::Acquire)));
        if root.is_some_and(|f| f.young) {
            return root;
        }
        match (root, fresh(node.flushed_at.load(Ordering::Acquire))) {
            (Some(r), Some(o)) => Some(if o.start > r.start { o } else { r }),
            (r, o) => r.or(o),
        }
    }

    /// Ask the background flusher for a root flush of this domain: one
    /// `Relaxed` load while an ask is pending; otherwise the reader that
    /// turns the flag on wakes the flusher ([`Nudge::wake`]). Nothing
    /// without a pace.
    pub(crate) fn ask_root_flush(&self) {
        if self.pace_ns != 0
            && !self.root_flush_asked.load(Ordering::Relaxed)
            && !self.root_flush_asked.swap(true, Ordering::Relaxed)
        {
            self.nudge.wake();
        }
    }

    /// The background flusher's half of [`ask_root_flush`](Self::ask_root_flush):
    /// whether a read asked for a root flush since the last take, turning
    /// the flag off (before the flush it asks for, so an ask that comes
    /// during that flush wakes the flusher again).
    #[cfg_attr(rstat_loom, allow(dead_code))]
    pub(crate) fn take_root_flush_ask(&self) -> bool {
        self.root_flush_asked.swap(false, Ordering::Relaxed)
    }

    /// Remove `root`'s subtree from `cpu`'s updated tree, leaving its nodes in
    /// pre-order (each node before its descendants) in `scratch.order`.
    /// With `detach`, `root` itself leaves the tree too (unlinked from its
    /// parent's list of updated children, in constant time); without,
    /// a `root` with a parent stays linked there, with no children, as a
    /// path node (its ancestors stay on the tree in any case).
    ///
    /// # Safety
    /// Lock held; `root` live; `cpu < nr_cpus`.
    unsafe fn cut_subtree(
        &self,
        scratch: &mut FlushScratch,
        root: &TreeNode,
        cpu: usize,
        detach: bool,
    ) {
        // SAFETY: lock held (caller) for every cell access below; all nodes
        // reachable from a tree are live.
        unsafe {
            let rl = root.links(cpu);
            if rl.updated_next.with(|p| (*p).is_null()) {
                return; // nothing under `root` changed on this CPU
            }
            // Unlink `root` from its parent's list of updated children (in
            // constant time: the list is doubly linked). The parent stays on
            // the tree: it may hold pending deltas from us.
            let detach = detach || root.parent.is_null();
            if let (true, Some(parent)) = (detach, root.parent.as_ref()) {
                let pl = parent.links(cpu);
                let next = rl.updated_next.with(|p| *p);
                let prev = rl.updated_prev.with(|p| *p);
                #[cfg(all(test, not(rstat_loom)))]
                UNLINK_VISITS.with(|v| v.set(v.get() + 1));
                match prev.as_ref() {
                    None => {
                        debug_assert!(
                            pl.updated_children.with(|p| core::ptr::eq(*p, root)),
                            "a node without a previous sibling heads its parent's list"
                        );
                        pl.updated_children.with_mut(|p| *p = next);
                    }
                    Some(prev) => prev.links(cpu).updated_next.with_mut(|p| *p = next),
                }
                // The parent ends the list; a sibling after us now follows
                // our predecessor.
                if !core::ptr::eq(next, parent) {
                    (*next).links(cpu).updated_prev.with_mut(|p| *p = prev);
                }
            }
            scratch.stack.push(root);
            while let Some(n) = scratch.stack.pop() {
                scratch.order.push(n);
                let nl = (*n).links(cpu);
                // An empty list is null (never written) or `n`.
                let mut c = nl.updated_children.with(|p| *p);
                while c != n && !c.is_null() {
                    let cl = (*c).links(cpu);
                    let next = cl.updated_next.with(|p| *p);
                    cl.updated_next.with_mut(|p| *p = ptr::null());
                    scratch.stack.push(c);
                    c = next;
                }
                nl.updated_children.with_mut(|p| *p = ptr::null());
            }
            if detach {
                rl.updated_next.with_mut(|p| *p = ptr::null());
            }
        }
    }
}

#[cfg(all(test, not(rstat_loom)))]
thread_local! {
    static UNLINK_VISITS: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
}

/// How many sibling links this thread's final releases visited to unlink
/// their nodes from their parents' lists (tests of the unlink).
#[cfg(all(test, not(rstat_loom)))]
pub(super) fn unlink_visits() -> usize {
    UNLINK_VISITS.with(core::cell::Cell::get)
}

/// The CPU slots below `nr_cpus` of a [`TreeNode::touched`] mask: slot
/// `c` if bit `c % 64` is set.
pub(crate) fn cpus_in(mask: u64, nr_cpus: usize) -> impl Iterator<Item = usize> + Clone {
    // Bit by bit (a few set bits: the CPUs a group was used on), each bit
    // naming slots `b`, `b + 64`, ... below `nr_cpus`; in increasing slot
    // order, as a pass over `0..nr_cpus` would give them.
    let rounds = nr_cpus.div_ceil(64);
    (0..rounds).flat_map(move |r| {
        let below = nr_cpus - r * 64;
        let m = if below >= 64 {
            mask
        } else {
            mask & ((1u64 << below) - 1)
        };
        SetBits(m).map(move |b| r * 64 + b)
    })
}

/// The set bits of a mask, lowest first.
#[derive(Clone)]
struct SetBits(u64);

impl Iterator for SetBits {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let b = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(b)
    }
}

/// Put `node` and its ancestors on `cpu`'s updated tree, bottom-up, stopping
/// at the first one already there.
///
/// # Safety
/// The domain lock is held; `node` and its ancestors are live.
unsafe fn link_updated(node: &TreeNode, cpu: usize) {
    let mut cur: *const TreeNode = node;
    // SAFETY: lock held (caller); ancestors of a live node are live.
    unsafe {
        loop {
            let n = &*cur;
            let l = n.links(cpu);
            if !l.updated_next.with(|p| (*p).is_null()) {
                return;
            }
            n.touched.mark(cpu);
            match n.parent.as_ref() {
                None => {
                    l.updated_next.with_mut(|p| *p = cur);
                    return;
                }
                Some(parent) => {
                    let pl = parent.links(cpu);
                    // The parent ends its list: an empty one's head is
                    // null (never written) or the parent itself.
                    let head = match pl.updated_children.with(|p| *p) {
                        h if h.is_null() => parent as *const TreeNode,
                        h => h,
                    };
                    l.updated_next.with_mut(|p| *p = head);
                    l.updated_prev.with_mut(|p| *p = ptr::null());
                    if !core::ptr::eq(head, parent) {
                        (*head).links(cpu).updated_prev.with_mut(|p| *p = cur);
                    }
                    pl.updated_children.with_mut(|p| *p = cur);
                    cur = parent;
                }
            }
        }
    }
}

/// Lock a domain's flush lock.
pub(crate) fn lock_domain(d: &Domain) -> sync::Locked<'_, FlushScratch> {
    sync::lock(&d.lock)
}
