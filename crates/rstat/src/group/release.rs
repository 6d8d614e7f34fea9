//! A group's end: the extensions' `offline` hooks at removal, and the
//! final release once the last reference is gone (extensions released,
//! per-CPU state drained, flushed into the parent and returned to the
//! arena), immediately or deferred from where releasing is not safe.

use std::ptr::NonNull;

use super::{Group, GroupInner, GroupTables};
use crate::group::EngineInner;
use crate::percpu::LineBox;
use crate::stat::backlog::PcpuLinks;
use crate::stat::css::{Css, StatSlot};
use crate::stat::ops::MAX_CONTROLLERS;
use crate::stat::tree::{cpus_in, TreeNode};
use crate::sync::Ordering;

impl GroupInner {
    /// Final release, part one: nothing references this group any more (no
    /// handle, no child, not in its parent's map), so no updater can touch
    /// it. Release the extensions, fold what is left into the parent and
    /// return the per-CPU state of every controller.
    pub(super) fn release_state(&self) {
        // SAFETY: the tables are live until freed at the end of this
        // function; flushes below reach them through the same raw pointer.
        let tables: &GroupTables = unsafe { &*self.tables.as_ptr() };
        self.release_exts(tables);
        // The flush drains every backlog first, so after it no list holds
        // these nodes, and it cuts them from every CPU's tree (they have no
        // children: those would hold this group).
        tables.flush_nodes();
        // Loads, not locked swaps (one per possible controller and domain,
        // most of them empty): nothing else reaches these slots now.
        let mut css: [Option<LineBox<Css>>; MAX_CONTROLLERS] = Default::default();
        // Per css, the CPUs its node went on (`TreeNode::touched`): the
        // only ones whose slots it wrote. Read here, while the nodes are
        // reached through the css's pointers, before they are boxed below.
        let mut touched = [0u64; MAX_CONTROLLERS];
        for ((slot, c), t) in self.css.iter().zip(css.iter_mut()).zip(touched.iter_mut()) {
            let p = take_ptr(slot);
            if !p.is_null() {
                // SAFETY: created by LineBox::into_raw at attach;
                // unreachable now.
                let b = unsafe { LineBox::from_raw(p) };
                // SAFETY: a css's node is live until this release frees it.
                *t = unsafe { &*b.node }.touched.bits();
                b.release_units(*t);
                *c = Some(b);
            }
        }
        let mut nodes: [Option<Box<TreeNode>>; MAX_CONTROLLERS] = Default::default();
        for (slot, n) in tables.nodes.iter().zip(nodes.iter_mut()) {
            let p = take_ptr(slot);
            if !p.is_null() {
                // SAFETY: as above; drained and cut from every tree.
                *n = Some(unsafe { Box::from_raw(p) });
            }
        }
        // This CPU slot's arena cache only for the arena's own work; the
        // boxes are freed after it (another thread on this slot waits for
        // it).
        {
            let mut arena = self.engine.arena.local();
            let nr_units = arena.nr_units();
            for (c, &t) in css.iter().zip(touched.iter()) {
                let Some(c) = c else { continue };
                // Only the CPUs the css's node went on wrote its slots (see
                // `Css::release_units`); the others are still zero.
                // SAFETY: from `StatSlot::alloc_in` on this arena; no
                // reference remains.
                unsafe { StatSlot::free_in(&mut arena, c.stats, cpus_in(t, nr_units)) };
            }
            for n in nodes.iter().flatten() {
                // Likewise for the node's links: only the CPUs it went on
                // wrote them (`PcpuLinks::free_in`).
                let t = n.touched.bits();
                // SAFETY: from `PcpuLinks::alloc_in` on this arena; as above.
                unsafe { PcpuLinks::free_in(&mut arena, n.links, cpus_in(t, nr_units)) };
            }
        }
        // The reference count's slots, in their own arena. Its count
        // reached zero, so no get or put touches them again, and dropping
        // the count later does not read them (arena slots are not owned by
        // it).
        // SAFETY: from this arena in `Group::new_group`, freed only here.
        unsafe { self.engine.ref_arena.local().free(self.ref_slots) };
        drop(css);
        drop(nodes);
        // SAFETY: allocated by Box with the group; nothing references it now.
        drop(unsafe { Box::from_raw(self.tables.as_ptr()) });
    }

    /// Run every extension's `offline` hook (after removal), or, for the
    /// root (never removed; offline when its engine is dropped), its
    /// `root_offline` hook.
    pub(super) fn offline_exts(&self) {
        for (id, e) in self.engine.exts.iter() {
            let s = self.tables().ext[id].load(Ordering::Acquire);
            if s.is_null() {
                continue;
            }
            match &self.parent {
                Some(p) => {
                    let parent = p.inner().tables().ext[id].load(Ordering::Acquire);
                    // SAFETY: states live as long as their groups; the
                    // parent is alive (we hold it).
                    unsafe { e.offline_erased(s, parent) };
                }
                // SAFETY: as above (the root's state, its group held).
                None => unsafe { e.root_offline_erased(s) },
            }
        }
    }

    /// Final release of every extension's state: `release` hook, then drop.
    pub(super) fn release_exts(&self, tables: &GroupTables) {
        for (id, e) in self.engine.exts.iter() {
            let s = take_ptr(&tables.ext[id]);
            if s.is_null() {
                continue;
            }
            let parent = self.parent.as_ref().map_or(core::ptr::null_mut(), |p| {
                p.inner().tables().ext[id].load(Ordering::Acquire)
            });
            // SAFETY: `s` is this group's state, unreachable by anyone else
            // now (no references remain); the parent is alive (we hold it).
            unsafe {
                e.release_erased(s, parent);
                e.destroy_erased(s);
            }
        }
    }
}

/// Empty a slot of a group in its final release (no one else reaches the
/// group): the pointer it held, null if none. A load, and a store only for
/// a slot that held something.
fn take_ptr<T>(slot: &crate::sync::AtomicPtr<T>) -> *mut T {
    let p = slot.load(Ordering::Acquire);
    if !p.is_null() {
        slot.store(core::ptr::null_mut(), Ordering::Relaxed);
    }
    p
}

/// Release the group at `ptr` and give back its reference on its parent
/// (which the caller then drops, possibly releasing the parent in turn).
///
/// # Safety
/// The group's count reached zero on this thread (`put_and_test` returned
/// true): no other reference to it exists.
pub(super) unsafe fn release(ptr: NonNull<GroupInner>) -> Option<Group> {
    // The engine's own memory (the arena's free lists, the removal
    // watches' queues) may grow here, on whatever thread dropped the last
    // handle, inside whatever group it is in: not that group's to pay.
    crate::sync::untracked(|| {
        // SAFETY: forwarded.
        unsafe { release_untracked(ptr) }
    })
}

/// [`release`]'s body.
///
/// # Safety
/// As [`release`].
unsafe fn release_untracked(ptr: NonNull<GroupInner>) -> Option<Group> {
    // SAFETY: caller's guarantee: we are the only user.
    let inner = unsafe { ptr.as_ref() };
    inner.release_state();
    if inner.parent.is_some() && !inner.online.load(Ordering::Acquire) {
        inner.engine.zombies.sub();
    }
    // SAFETY: allocated by Box in `Group::new_group`; unreferenced.
    let GroupInner {
        parent, mut engine, ..
    } = *unsafe { Box::from_raw(ptr.as_ptr()) };
    if parent.is_none() {
        // SAFETY: the root's count on its engine (`Group::new_group`),
        // dropped once, here, after everything else of the group.
        unsafe { core::mem::ManuallyDrop::drop(&mut engine) };
    }
    parent
}

/// Release the groups whose last reference [`Group::drop_deferred`]
/// dropped. Call where no engine lock is held (it takes the topology and
/// arena locks, as any final release does). Cost: one load when the stack
/// is empty (no write: every creation and removal calls this, and a swap
/// would pull the engine-wide line in exclusive from the other CPUs).
pub(crate) fn release_deferred(engine: &EngineInner) {
    // Relaxed: only a hint; an empty stack seen here is one a push may
    // join at any time anyway, and the swap below orders what it takes.
    if engine.deferred.load(Ordering::Relaxed).is_null() {
        return;
    }
    // Acquire: pairs with the pushers' Release, so each pushed group's
    // `deferred_next` (and everything it did before its last put) is
    // visible. Taking the whole stack at once means no pop races a push
    // (no ABA).
    let mut head = engine
        .deferred
        .swap(core::ptr::null_mut(), Ordering::Acquire);
    while let Some(ptr) = NonNull::new(head) {
        // SAFETY: a pushed group's count reached zero; it is only on this
        // stack, which we now own, so we are its only user.
        head = unsafe { ptr.as_ref() }
            .deferred_next
            .load(Ordering::Relaxed);
        // SAFETY: as above (the count reached zero on the pusher's thread,
        // which handed the group over through the stack).
        drop(unsafe { release(ptr) }); // the parent's reference: may release it too
    }
}
