//! The lock-free side of rstat: per-(domain, CPU) backlog lists.
//!
//! Since kernel v6.17 an update never takes a lock: each (controller, CPU)
//! has a lock-free list of nodes with pending updates, and flushers move
//! them into the updated tree under the controller's lock. This module is
//! that list, in our own design.
//!
//! Every (group, domain, CPU) has a [`PcpuLinks`] in the per-CPU arena. Its
//! `lnext` field is both the list link and the on-list flag: [`OFF_LIST`]
//! means "not on any backlog". An updater:
//!
//! 1. adds to its stat slot (`SeqCst` RMW),
//! 2. loads `lnext` (`SeqCst`); anything but `OFF_LIST` means a flush is
//!    already due to visit this node, so it is done;
//! 3. otherwise *claims* the node with a compare-and-swap `OFF_LIST -> null`;
//!    of racing updaters exactly one wins, and only the winner
//! 4. pushes the node on the (domain, CPU) head with a CAS loop.
//!
//! A flusher, holding the domain lock (so it is the only consumer), takes the
//! whole list with one swap and, for each node, saves its link, stores
//! `OFF_LIST` (`SeqCst`), and hands the node to the tree builder. Stat slots
//! are read only after that, with `SeqCst` loads.
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
//!   completed before a read began can be missed by that read's flush. loom
//!   checks this with SC fences (see `crate::sync`).
//! - An updater that sees the node claimed but not yet pushed (`lnext` null)
//!   leaves too: the claim precedes the flusher's later `OFF_LIST` store in
//!   the modification order of `lnext`, so the same argument puts its update
//!   before the flush that drains this push.
//! - The claim CAS is `SeqCst` (it is one of the accesses to `lnext` the
//!   argument above orders); the `lnext` store before the push CAS is
//!   `Relaxed` because the `Release` CAS publishes it.
//! - `OFF_LIST` can only be stored by the (single) flusher after it has read
//!   the link, so a node is never on two lists, and never twice on one.

use core::ptr;

use crate::engine::tree::TreeNode;
use crate::sync::{self, AtomicPtr, Ordering, UnsafeCell};

/// The value of `lnext` for a node on no backlog. Never dereferenced.
pub(crate) const OFF_LIST: *mut PcpuLinks = ptr::without_provenance_mut(1);

/// One backlog head per (domain, CPU), in the per-CPU arena.
pub(crate) type BacklogHead = AtomicPtr<PcpuLinks>;

/// The per-CPU part of a tree node: backlog link plus updated-tree links.
pub(crate) struct PcpuLinks {
    /// Backlog link; `OFF_LIST` when the node is on no backlog.
    pub(crate) lnext: AtomicPtr<PcpuLinks>,
    /// The node these links belong to. Written at allocation, then only read.
    pub(crate) node: *const TreeNode,
    /// Head of this node's list of updated children on this CPU; the node
    /// itself when the list is empty. Domain lock.
    pub(crate) updated_children: UnsafeCell<*const TreeNode>,
    /// Next sibling in the parent's `updated_children`; the parent ends the
    /// list; the node itself for a tree root on the tree; null when the node
    /// is not on this CPU's updated tree. Domain lock.
    pub(crate) updated_next: UnsafeCell<*const TreeNode>,
}

// SAFETY: `lnext` is atomic; `node` is immutable after construction; the two
// cells are only accessed with the owning domain's lock held.
unsafe impl Sync for PcpuLinks {}
// SAFETY: as above.
unsafe impl Send for PcpuLinks {}

impl PcpuLinks {
    pub(crate) fn new(node: *const TreeNode) -> Self {
        PcpuLinks {
            lnext: AtomicPtr::new(OFF_LIST),
            node,
            updated_children: UnsafeCell::new(node),
            updated_next: UnsafeCell::new(ptr::null()),
        }
    }
}

/// Steps 2-4 of the update protocol, after the stat RMW. `head` is only
/// dereferenced when the node has to be pushed.
///
/// # Safety
/// `head` points to a live backlog head.
#[inline(always)]
pub(crate) unsafe fn mark_updated(links: &PcpuLinks, head: *const BacklogHead) {
    sync::sc_fence_for_model();
    if links.lnext.load(Ordering::SeqCst) == OFF_LIST {
        // SAFETY: caller's guarantee.
        claim_and_push(links, unsafe { &*head });
    }
}

#[cold]
#[inline(never)]
fn claim_and_push(links: &PcpuLinks, head: &BacklogHead) {
    if links
        .lnext
        .compare_exchange(
            OFF_LIST,
            ptr::null_mut(),
            Ordering::SeqCst,
            Ordering::Relaxed,
        )
        .is_err()
    {
        return; // another updater won the claim and pushes the node
    }
    let me = links as *const PcpuLinks as *mut PcpuLinks;
    let mut old = head.load(Ordering::Relaxed);
    loop {
        links.lnext.store(old, Ordering::Relaxed);
        match head.compare_exchange_weak(old, me, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return,
            Err(now) => old = now,
        }
    }
}

/// Take every node off `head`, mark each off-list, and pass it to `f`.
///
/// # Safety
/// The caller holds the lock of the domain owning `head` (single consumer),
/// and every node on the list is live (nodes are drained before they are
/// freed).
pub(crate) unsafe fn drain(head: &BacklogHead, mut f: impl FnMut(&PcpuLinks)) {
    let mut p = head.swap(ptr::null_mut(), Ordering::Acquire);
    while !p.is_null() {
        // SAFETY: nodes on a backlog are live (caller's guarantee), and `p`
        // was published by a Release push that our Acquire swap synchronizes
        // with.
        let l = unsafe { &*p };
        let next = l.lnext.load(Ordering::Relaxed);
        debug_assert!(next != OFF_LIST, "a node on a backlog is marked off-list");
        l.lnext.store(OFF_LIST, Ordering::SeqCst);
        f(l);
        p = next;
    }
    // Pairs with the updaters' fence in `mark_updated` (loom only; see
    // `crate::sync`): the stat loads that follow come after our OFF_LIST stores.
    sync::sc_fence_for_model();
}
