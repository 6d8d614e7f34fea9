//! The lock-free side of rstat: per-(domain, CPU) backlog lists.
//!
//! Since kernel v6.17 an update never takes a lock: each (controller, CPU)
//! has a lock-free list of nodes with pending updates, and flushers move
//! them into the updated tree under the controller's lock. This module is
//! that list, in our own design.
//!
//! Every (group, domain, CPU) has a [`PcpuLinks`] in the per-CPU arena. Its
//! `lnext` field is both the list link and the on-list flag: [`OFF_LIST`]
//! means "not on any backlog". Links start all zero, which is a node on no
//! backlog and no tree, and are written only on the CPUs whose updates
//! claim the node or whose flushes put it on their tree: a group's links,
//! like its stat slots, take memory on the CPUs that used it (the arena's
//! pages are written only where something was), and are zeroed at its
//! release on those CPUs only. An updater:
//!
//! 1. adds to its stat slot: on the rseq update path, an unlocked add in a
//!    restartable section followed by a compiler fence; on the locked path,
//!    a `SeqCst` RMW,
//! 2. loads `lnext` (`SeqCst`); anything but `OFF_LIST` means the node is
//!    claimed, so a flush is already due to visit it: it is done;
//! 3. otherwise announces a push on the (domain, CPU) head (`pushing += 1`),
//!    and *claims* the node with a compare-and-swap `OFF_LIST -> END`; of
//!    racing updaters exactly one wins; a loser withdraws its announcement;
//! 4. the winner records the node in the links (only its claimer writes
//!    it, so a CPU that never claims the node never writes it), pushes the
//!    node on the (domain, CPU) head with a CAS loop (the last node's link
//!    is [`END`], since null means `OFF_LIST`), then withdraws its
//!    announcement (`pushing -= 1`).
//!
//! A flusher, holding the domain lock (so it is the only consumer), first
//! waits until no push is announced on the head, then takes the whole list
//! with one swap and, for each node, saves its link, stores [`IN_TREE`]
//! and hands the node to the tree builder. The node stays *on list* while
//! it waits on the updated tree: updates to it do not push it again, so a
//! flush of one subtree does not make every node it left on the tree come
//! back through a backlog (and be drained again, one cache miss each, by
//! the next flush). Once every CPU's list is drained, the flusher cuts the
//! subtree it folds from each CPU's tree and stores `OFF_LIST` (`SeqCst`)
//! in the nodes of it that are `IN_TREE` ([`unlist`]); then it issues the
//! heavy fence (`membarrier` on the rseq path; nothing more on the locked
//! path), and only then reads their stat slots, with `SeqCst` loads. So
//! `OFF_LIST` is stored, as before, between the last moment the flush
//! relies on an updater having seen the node on list and the flush's read
//! of its slot.
//!
//! ## Why the flusher waits for announced pushes
//!
//! Several threads can update the same (group, CPU) node at once: a thread
//! preempted between reading its CPU id and updating shares that CPU's slot
//! with the thread that runs next there, the thread-hash CPU-id fallback
//! shares slots, and `Builder::nr_cpus(n)` below the CPU count always does.
//! An updater that finds the node claimed returns at once (it must not wait
//! for the claimer: that would put an unbounded wait on the update path).
//! If the claimer is preempted between its claim and its push, the node is
//! on no backlog and, if the last flush cut it from the updated tree, on no
//! tree either: a flush that only drained the lists would miss the returned
//! updater's completed update. The announcement closes that window from the
//! read side: the claimer announces *before* it claims, so an updater that
//! saw the claim also sees (happens-after) the announcement, and the flusher
//! that starts later waits for the matching withdrawal, which comes after
//! the push. The wait is on the read side only, and only as long as a
//! claimer takes between two of its own instructions (longer only if the
//! scheduler preempts it there); updaters never wait.
//!
//! # Synchronization
//!
//! - Push CAS on the head is `Release`; the flusher's swap is `Acquire`. They
//!   pair so the flusher sees each node's `lnext` as its pusher wrote it,
//!   and every stat update sequenced before a push. Head CASes are RMWs, so
//!   one swap synchronizes with every push in the chain (release sequences
//!   continue through RMWs).
//! - The exactness pairing is a store-buffering pair on two locations:
//!   updater `stat.fetch_add (SC); lnext.load (SC)` against flusher
//!   `lnext.store(OFF_LIST) (SC); stat.load (SC)`. In the single total
//!   order of SC operations one of the two stores comes first, so either the
//!   updater sees `OFF_LIST` (and pushes the node again: the next flush sees
//!   the update) or the flusher's stat load sees the update. No update that
//!   completed before a read began can be missed by that read's flush.
//! - On the rseq path the updater's add is a plain store, which may wait in
//!   its CPU's store buffer while the `lnext` load runs ahead: the pair
//!   needs a barrier on both sides. It is asymmetric (folly's
//!   `asymmetric_thread_fence_light/heavy`): the updater only keeps the
//!   compiler from reordering (a compiler fence, free), and the flusher,
//!   after its `OFF_LIST` stores, calls `membarrier` (the plain private
//!   expedited command: see `Domain::heavy_fence`), which runs a full
//!   barrier on every CPU executing one of our threads (a thread not
//!   running has passed a context switch, itself a full barrier). The pair
//!   then forbids the same outcome as two `SeqCst` fences: either the
//!   updater's load sees `OFF_LIST` or the flusher's load sees the add.
//!   Updates pay nothing; each flush that reads slots pays one system call.
//!   loom checks both paths with `SeqCst` fences standing for the pair
//!   (see `crate::sync`; sections are simulated with a per-slot lock).
//! - An updater that sees the node claimed (`lnext` not `OFF_LIST`) leaves.
//!   Every value of `lnext` other than `OFF_LIST` is written by a claimer
//!   (the claim CAS, or the link store before its push CAS), both with
//!   release semantics, after the claimer's `pushing` increment. The
//!   updater's `SeqCst` load acquires that value, so the increment happens
//!   before the updater returns, and before any read that begins after it.
//!   The flusher's `Acquire` load of `pushing` then reads the increment or a
//!   later value; it waits until it reads 0. Every increment is followed by
//!   its own decrement (`Release`), and `pushing` is only changed by RMWs,
//!   so a 0 read after the increment comes from the claimer's decrement or
//!   an RMW after it in its release sequence: the push happens before the
//!   flusher's swap, which therefore finds the node (or an earlier flush
//!   already took it, and the SC pairing above applies to that flush).
//! - The claim CAS is `SeqCst` (it is one of the accesses to `lnext` the
//!   argument above orders); the `lnext` store before the push CAS is
//!   `Release` for the previous point (a plain `mov` on x86-64).
//! - `OFF_LIST` can only be stored by the (single) flusher, in a node it
//!   took off its list (it is `IN_TREE` then: read back under the lock),
//!   so a node is never on two lists, and never twice on one. An update
//!   that sees `IN_TREE` leaves: the node is on the tree, and every flush
//!   of a subtree holding it cuts it, stores `OFF_LIST` and then reads its
//!   slot, the same store-buffering pair as above.
//! - Liveness: the flusher waits for `pushing` to read 0, not for a given
//!   set of pushes. Each announcement lasts a few instructions and is made
//!   at most once per (node, CPU) per flush, so under any real load the
//!   counter is 0 almost always; a stream of claims that kept it above 0
//!   forever would need a new first update per flush interval on every
//!   instruction.

use core::ptr;

use crate::stat::tree::TreeNode;
use crate::sync::{self, AtomicPtr, AtomicUsize, Ordering, UnsafeCell};

/// The value of `lnext` for a node on no backlog and on no updated tree:
/// null, so that all-zero links (a new group's, on every CPU) are off list.
pub(crate) const OFF_LIST: *mut PcpuLinks = ptr::null_mut();

/// The value of `lnext` for the last node of a backlog, and for a node its
/// claimer has not pushed yet. Never dereferenced.
pub(crate) const END: *mut PcpuLinks = ptr::without_provenance_mut(1);

/// The value of `lnext` for a node a flush took off its backlog and put on
/// the updated tree, not folded yet: still *on list* for updaters (not
/// `OFF_LIST`, so they do not push it again). The flush that folds it
/// stores `OFF_LIST` ([`unlist`]). Never dereferenced.
pub(crate) const IN_TREE: *mut PcpuLinks = ptr::without_provenance_mut(2);

/// One backlog per (domain, CPU), in the per-CPU arena: the list head and
/// the count of announced pushes (see the module docs).
pub(crate) struct BacklogHead {
    /// The last node pushed; null when the list is empty.
    head: AtomicPtr<PcpuLinks>,
    /// Claims made (or being tried) and not yet pushed on `head`.
    pushing: AtomicUsize,
}

impl BacklogHead {
    pub(crate) fn new() -> Self {
        BacklogHead {
            head: AtomicPtr::new(ptr::null_mut()),
            pushing: AtomicUsize::new(0),
        }
    }
}

/// The per-CPU part of a tree node: backlog link plus updated-tree links.
///
/// All zero until the node is first claimed or linked on this CPU (see the
/// module docs): a zeroed arena allocation is valid links.
pub(crate) struct PcpuLinks {
    /// Backlog link; `OFF_LIST` when the node is on no backlog.
    pub(crate) lnext: AtomicPtr<PcpuLinks>,
    /// The node these links belong to, for the flusher that drains them:
    /// written by each claimer before its push (`Relaxed`: the push's
    /// `Release` CAS publishes it to the drain's `Acquire` swap; every
    /// claimer writes the same value, and none while a drain reads it,
    /// since the node is `IN_TREE` then). Null before the first claim.
    pub(crate) node: AtomicPtr<TreeNode>,
    /// Head of this node's list of updated children on this CPU; null, or
    /// the node itself, when the list is empty. Domain lock.
    pub(crate) updated_children: UnsafeCell<*const TreeNode>,
    /// Next sibling in the parent's `updated_children`; the parent ends the
    /// list; the node itself for a tree root on the tree; null when the node
    /// is not on this CPU's updated tree. Domain lock.
    pub(crate) updated_next: UnsafeCell<*const TreeNode>,
    /// Previous sibling in the parent's `updated_children`; null for the
    /// list's head. Meaningful only while `updated_next` is a sibling or
    /// the parent (the node is in its parent's list), so that a final
    /// release unlinks the node without walking its siblings. Domain lock.
    pub(crate) updated_prev: UnsafeCell<*const TreeNode>,
}

// SAFETY: `lnext` and `node` are atomic; the three cells are only accessed
// with the owning domain's lock held.
unsafe impl Sync for PcpuLinks {}
// SAFETY: as above.
unsafe impl Send for PcpuLinks {}

impl PcpuLinks {
    /// Links of a node on no backlog and no tree: all zero (what
    /// `Arena::alloc_zeroed` gives without writing; loom builds them).
    pub(crate) fn new() -> Self {
        PcpuLinks {
            lnext: AtomicPtr::new(OFF_LIST),
            node: AtomicPtr::new(ptr::null_mut()),
            updated_children: UnsafeCell::new(ptr::null()),
            updated_next: UnsafeCell::new(ptr::null()),
            updated_prev: UnsafeCell::new(ptr::null()),
        }
    }

    /// A node's links in every unit, off list and off every tree, taken
    /// zeroed from the arena and unwritten
    /// ([`Local::alloc_zero_state`]), so a CPU that never updates or
    /// flushes the node never writes its page.
    ///
    /// [`Local::alloc_zero_state`]: crate::percpu::shared_arena::Local::alloc_zero_state
    pub(crate) fn alloc_in(
        arena: &mut crate::percpu::shared_arena::Local<'_>,
    ) -> Result<crate::percpu::arena::PcpuPtr<PcpuLinks>, crate::percpu::arena::ArenaError> {
        // SAFETY: `PcpuLinks::new()` is two null atomic pointers and three
        // cells of null pointers: all-zero bytes; links need no drop.
        unsafe { arena.alloc_zero_state(1, PcpuLinks::new) }
    }

    /// Free links of [`alloc_in`](Self::alloc_in), zeroing them in the
    /// units of `dirty` only.
    ///
    /// # Safety
    /// As [`Arena::free_zeroed`](crate::percpu::arena::Arena::free_zeroed):
    /// `links` came from `alloc_in` on this arena, nothing references them,
    /// and no unit outside `dirty` was written: the node's `touched` CPUs
    /// (every write to a node's links on a CPU, by a claim or by a flush
    /// that links or cuts it there, comes after the mark of that CPU in `touched`
    /// or is to a node already on that CPU's tree).
    pub(crate) unsafe fn free_in(
        arena: &mut crate::percpu::shared_arena::Local<'_>,
        links: crate::percpu::arena::PcpuPtr<PcpuLinks>,
        dirty: impl Iterator<Item = usize>,
    ) {
        // SAFETY: the caller's guarantees.
        unsafe { arena.free_zero_state(links, dirty) }
    }
}

/// Steps 2-4 of the update protocol, after the stat RMW. `head` is only
/// called, and its result dereferenced, when the node has to be pushed (so
/// the common path does not compute it); it gives the backlog's head, its
/// CPU slot and the node `links` belong to.
///
/// # Safety
/// `head()` returns a pointer to a live backlog head, the CPU slot (below
/// the domain's `nr_cpus`) it and `links` belong to, and the live node
/// whose links on that slot `links` are.
#[inline(always)]
pub(crate) unsafe fn mark_updated(
    links: &PcpuLinks,
    head: impl FnOnce() -> (*const BacklogHead, usize, *const TreeNode),
) {
    sync::sc_fence_for_model();
    if links.lnext.load(Ordering::SeqCst) == OFF_LIST {
        let (head, cpu, node) = head();
        // SAFETY: caller's guarantee.
        unsafe { claim_and_push(links, &*head, cpu, node) };
    }
}

/// # Safety
/// `node` is live and `links` are its links on slot `cpu`, the slot of
/// `head`.
#[cold]
#[inline(never)]
unsafe fn claim_and_push(links: &PcpuLinks, head: &BacklogHead, cpu: usize, node: *const TreeNode) {
    // Announce before claiming: whoever sees our claim also sees this.
    // SeqCst like the claim (an RMW: a full barrier on x86-64 either way).
    head.pushing.fetch_add(1, Ordering::SeqCst);
    if links
        .lnext
        .compare_exchange(OFF_LIST, END, Ordering::SeqCst, Ordering::Relaxed)
        .is_err()
    {
        // Another updater won the claim and pushes the node; its own
        // announcement covers it.
        head.pushing.fetch_sub(1, Ordering::Release);
        return;
    }
    // Before the push: a final release that does not see this CPU's bit
    // finds the node on no backlog of this CPU (`TreeNode::touched`).
    // SAFETY: caller's guarantee.
    unsafe { (*node).touched.mark(cpu) };
    // For the drain; published by the push below.
    links.node.store(node.cast_mut(), Ordering::Relaxed);
    let me = links as *const PcpuLinks as *mut PcpuLinks;
    let mut old = head.head.load(Ordering::Relaxed);
    loop {
        // Release: an updater that reads this link and leaves must
        // happen-after our announcement (module docs). The first node of
        // an empty list ends it.
        let link = if old.is_null() { END } else { old };
        links.lnext.store(link, Ordering::Release);
        match head
            .head
            .compare_exchange_weak(old, me, Ordering::Release, Ordering::Relaxed)
        {
            Ok(_) => break,
            Err(now) => old = now,
        }
    }
    // Pairs with the flusher's Acquire load of `pushing`: the push above
    // happens before any flush that reads the count back at 0.
    head.pushing.fetch_sub(1, Ordering::Release);
}

/// Take every node off `head`, mark each [`IN_TREE`], and pass it to `f`
/// (which puts it on the updated tree).
///
/// # Safety
/// The caller holds the lock of the domain owning `head` (single consumer),
/// and every node on the list is live (nodes are drained before they are
/// freed).
pub(crate) unsafe fn drain(head: &BacklogHead, mut f: impl FnMut(&PcpuLinks)) {
    // Wait for every announced push to land (module docs). Acquire pairs
    // with the claimers' Release decrements.
    sync::spin_wait(|| head.pushing.load(Ordering::Acquire) == 0);
    // An empty list (most CPUs' at most flushes, and every CPU but the
    // group's few at a group's final flush) costs a load, not a locked
    // swap. Sound: every push that must be seen happens before the wait
    // above returned (its withdrawal is what the wait read), so this load
    // sees it; a push it misses is concurrent with the flush, and is left
    // for the next one exactly as if the swap had come first.
    if head.head.load(Ordering::Acquire).is_null() {
        return;
    }
    let mut p = head.head.swap(ptr::null_mut(), Ordering::Acquire);
    while p != END {
        // SAFETY: nodes on a backlog are live (caller's guarantee), and `p`
        // was published by a Release push that our Acquire swap synchronizes
        // with.
        let l = unsafe { &*p };
        let next = l.lnext.load(Ordering::Relaxed);
        debug_assert!(
            next != OFF_LIST && next != IN_TREE,
            "a node on a backlog is marked off-list or in a tree"
        );
        debug_assert!(
            !l.node.load(Ordering::Relaxed).is_null(),
            "a node on a backlog was pushed without its node"
        );
        // Relaxed: an updater that loads it only leaves (as for any value
        // but `OFF_LIST`), and relies on nothing written before it; the
        // flushes that store and read it hold the domain lock.
        l.lnext.store(IN_TREE, Ordering::Relaxed);
        f(l);
        p = next;
    }
}

/// A flush is about to fold the node of `l` (it cut it from the updated
/// tree): mark it off-list if it is [`IN_TREE`], so the next update pushes
/// it again. A node that is not `IN_TREE` is left alone: on the tree only
/// as an ancestor of updated nodes (`OFF_LIST`), or pushed again since this
/// flush drained the backlogs (its push is concurrent with this flush and
/// goes to the next one).
///
/// # Safety
/// The caller holds the lock of the domain owning `l`, and puts the heavy
/// fence (`Domain::heavy_fence`) between these stores and its first stat
/// load.
pub(crate) unsafe fn unlist(l: &PcpuLinks) {
    // Only flushes, under the lock, store `IN_TREE` and move a node off
    // it; updaters only move `OFF_LIST` on: the load and the store need no
    // compare-and-swap.
    if l.lnext.load(Ordering::Relaxed) == IN_TREE {
        l.lnext.store(OFF_LIST, Ordering::SeqCst);
    }
}
