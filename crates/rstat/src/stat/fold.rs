//! The fold: a flush's work on one (group, CPU) of the updated tree.
//!
//! For each css of the node's group in the flushed domain: compute each
//! slot's delta since the last fold (the "prev" scheme), hand them to the
//! controller's [`Controller::flush`](crate::Controller::flush) (with its
//! panics contained for user controllers: see
//! [`controller`](crate::controller)'s `# A flush that panics`), publish
//! the totals for lock-free readers, and subtract exactly the
//! pending-update units now in them (`css.rs`'s `# Synchronization`).
//!
//! A fold chases pointers (node, css table, css, per-CPU line, totals)
//! that a reader sweeping many groups finds cold, and its locked RMWs keep
//! the next fold's loads from starting early, so each miss would be paid
//! in turn. The flush asks for the lines of its first folds beforehand
//! ([`prefetch_css`] before its fence, [`prefetch_slots`] after), so
//! those misses overlap one another and the fence instead.

#[cfg(not(rstat_loom))]
use crate::percpu::{prefetch_read, prefetch_write};
use crate::stat::css::{Css, Slot, CONSUMED, COUNTED, UPDATES};
use crate::stat::ops::{FlushCtx, NodeOwner, ParentSide};
use crate::stat::tree::{Domain, TreeNode};
use crate::sync::Ordering;

/// Fold every css of `node`'s group that belongs to `domain`, for `cpu`.
/// Returns whether a fold was undone (a user controller's flush panicked:
/// its deltas wait for the next flush), so the flush is not whole.
///
/// # Safety
/// The domain lock is held; `node` is a live node of `domain`; `cpu <
/// nr_cpus`.
pub(crate) unsafe fn fold_node(
    domain: &Domain,
    node: &TreeNode,
    cpu: usize,
    deltas: &mut Vec<i64>,
) -> bool {
    // SAFETY: a node's group, which holds its css table, is live while the
    // node is.
    let (table, owner) = unsafe { (&*node.css, &*node.owner) };
    let mut undone = false;
    for (id, slot) in table.iter().enumerate() {
        let css = slot.load(Ordering::Acquire);
        // Another domain's css is skipped by its id, unread.
        if css.is_null() || !domain.has_ctl(id) {
            continue;
        }
        // SAFETY: installed css are live as long as their group.
        let css = unsafe { &*css };
        debug_assert!(core::ptr::eq(css.ctl.domain, domain));
        deltas.clear();
        // SAFETY: live css, `cpu` in range.
        let (slots, extra) = unsafe { css.stats.slot(cpu) }.split_at(css.ctl.nr_stats);
        let counted = &extra[COUNTED].cur;
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
        // SAFETY: lock held; `css` is live and of this domain; `node` is
        // its group's node.
        let retry = unsafe { flush_contained(css, node, owner, cpu, deltas) };
        // Publish for lock-free readers (before the count drops below).
        css.totals.with(|t| {
            // SAFETY: lock held.
            let t = unsafe { &*t };
            let n = css.ctl.nr_stats;
            let (local, rest) = css.published.values().split_at(n);
            let (hierarchical, overflows) = rest.split_at(n);
            for (a, v) in hierarchical.iter().zip(t.hierarchical()) {
                a.store(*v, Ordering::Relaxed);
            }
            if let Some(o) = overflows.first() {
                o.store(t.overflows as i64, Ordering::Relaxed);
            }
            for (a, v) in local.iter().zip(t.local()) {
                a.store(*v, Ordering::Release);
            }
        });
        if retry {
            // The controller's flush panicked and the fold was undone: the
            // changes behind `units` and `consumed` are not in the totals
            // (they will be at the next flush), so nothing is subtracted
            // and a `Threshold` read keeps asking for that flush.
            undone = true;
            continue;
        }
        // Subtract exactly the units now in this group's hierarchical
        // totals: its own crossings read above, and its children's that
        // this fold took from `pending`. Hand them to the parent, which
        // subtracts them when it folds its pending in. A unit counted after
        // our `counted` load stays counted (at worst a later read flushes
        // early); none is subtracted before its change is in the totals.
        //
        // Per CPU: the units read above were counted on `cpu`, and so were
        // the children's in this (group, CPU)'s `CONSUMED` (a child's fold
        // of `cpu` put them there). Those children's deltas are in our
        // totals now: the first fold of this group in any flush takes all
        // of `pending`, and this group stays on `cpu`'s tree from the
        // child's fold until this one (a cut leaves the cut subtree's
        // parent on the tree), so this fold comes after the hand-up.
        counted.fetch_sub(units, Ordering::Relaxed);
        let total = units.wrapping_add(extra[CONSUMED].cur.swap(0, Ordering::Acquire));
        if total != 0 {
            // Release: pairs with `pending_units`' Acquire (totals above).
            extra[UPDATES].cur.fetch_sub(total, Ordering::Release);
            // SAFETY: a child's css keeps its parent's alive; same items.
            if let Some(p) = unsafe { css.parent.as_ref() } {
                // SAFETY: the parent is live (above), `cpu` in range.
                unsafe { p.stats.elem(cpu, p.ctl.nr_stats + CONSUMED) }
                    .cur
                    .fetch_add(total, Ordering::Release);
            }
        }
    }
    undone
}

/// Call the controller's flush for one (group, CPU) whose deltas are in
/// `scratch` (all of it): directly for the built-in counter sets, with the
/// panic containment of the module's `# A flush that panics` for user
/// controllers. Returns whether the fold was undone, to be retried by the
/// next flush.
///
/// # Safety
/// The domain lock is held; `css` is live, of the locked domain, and
/// `node` is its group's node there; `cpu < nr_cpus`.
#[inline(always)]
unsafe fn flush_contained(
    css: &Css,
    node: &TreeNode,
    owner: &dyn NodeOwner,
    cpu: usize,
    scratch: &mut Vec<i64>,
) -> bool {
    if css.ctl.contain_panics {
        // SAFETY: caller's guarantees.
        unsafe { flush_user(css, node, owner, cpu, scratch) }
    } else {
        // SAFETY: caller's guarantees.
        unsafe { with_flush_ctx(css, owner, cpu, scratch, |ctx| css.ctl.imp.flush(ctx)) };
        false
    }
}

/// Run `f` on the [`FlushCtx`] of `css` for `cpu` with `deltas`.
///
/// # Safety
/// The domain lock is held; `css` is live and of the locked domain.
#[inline(always)]
unsafe fn with_flush_ctx<R>(
    css: &Css,
    owner: &dyn NodeOwner,
    cpu: usize,
    deltas: &[i64],
    f: impl FnOnce(&mut FlushCtx<'_>) -> R,
) -> R {
    css.totals.with_mut(|t| {
        // SAFETY: lock held; the parent css (another cell) is live because
        // a child keeps its parent group alive.
        let totals = unsafe { &mut *t };
        // SAFETY: as above: a child's css keeps its parent's alive.
        match unsafe { css.parent.as_ref() } {
            None => f(&mut FlushCtx {
                owner,
                cpu,
                deltas,
                totals,
                parent: None,
            }),
            Some(p) => p.totals.with_mut(|pt| {
                // SAFETY: lock held; distinct cell from `t`.
                let (pending, overflows) = unsafe { &mut *pt }.pending_and_overflows_mut();
                f(&mut FlushCtx {
                    owner,
                    cpu,
                    deltas,
                    totals,
                    parent: Some(ParentSide { pending, overflows }),
                })
            }),
        }
    })
}

/// A user controller's flush, with its panics contained. `scratch` is the
/// flush's reusable buffer: the saved totals go after the deltas during the
/// call (allocating only while the buffer still grows), and it is cut back
/// to the deltas before returning.
///
/// # Safety
/// As [`flush_contained`].
#[inline(never)]
unsafe fn flush_user(
    css: &Css,
    node: &TreeNode,
    owner: &dyn NodeOwner,
    cpu: usize,
    scratch: &mut Vec<i64>,
) -> bool {
    let ctl = &*css.ctl;
    let n = scratch.len();
    // The totals' 3n values and the parent's pending array (the same n
    // items: totals never change shape).
    let need = ctl.nr_stats * if css.parent.is_null() { 3 } else { 4 };
    scratch.resize(n + need, 0);
    let (deltas, saved) = scratch.split_at_mut(n);
    // Returns whether the call panicked and must be retried by a later
    // flush, and the panic's payload, dropped last (see below).
    let call = |ctx: &mut FlushCtx<'_>| {
        let s = ctx.save(saved);
        let call = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ctl.imp.flush(ctx);
        }));
        let Err(payload) = call else {
            return (false, None);
        };
        ctl.flush_panics.fetch_add(1, Ordering::Relaxed);
        ctx.restore(saved, &s);
        // SAFETY: lock held.
        if node.releasing.with(|r| unsafe { *r }) {
            // No later flush will visit this group: fold the deltas the
            // standard way, so they still reach the ancestors.
            ctx.fold();
            return (false, Some(payload));
        }
        (true, Some(payload))
    };
    // SAFETY: caller's guarantees.
    let (retry, payload) = unsafe { with_flush_ctx(css, owner, cpu, deltas, call) };
    scratch.truncate(n);
    if retry {
        // Move `prev` back by the deltas, so the next flush sees them again
        // (a modular subtraction undoes the fold's modular one exactly).
        // SAFETY: live css, `cpu` in range, lock held for `prev`.
        let slots = unsafe { css.stats.slot(cpu) };
        for (s, &d) in slots.iter().zip(scratch.iter()) {
            // SAFETY: `prev` is only touched under the domain lock, held.
            s.prev.with_mut(|p| unsafe { *p = (*p).wrapping_sub(d) });
        }
        // And make sure the next flush visits this (group, CPU): the cut
        // took it off this CPU's updated tree. A push onto the backlog is
        // lock-free, so it is allowed under the lock; the next flush drains
        // it. (Not at a final release: see `releasing` above.)
        // SAFETY: a controller's domain lives as long as its engine.
        let nr_cpus = unsafe { &*css.ctl.domain }.nr_cpus;
        if let Some(at) = Slot::new(cpu, nr_cpus) {
            css.mark(at);
        }
    }
    // A payload's destructor is user code too, and may panic: drop it once
    // the state is whole again, and contain that as well (leaking the
    // second payload rather than unwinding through the flush, which would
    // leave the rest of this CPU's cut tree unfolded).
    if let Some(p) = payload {
        if let Err(again) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(p))) {
            core::mem::forget(again);
        }
    }
    retry
}

/// The css of `node`'s group for each controller of `domain`, for the
/// prefetches, loaded `Acquire` as `fold_node` loads them:
/// [`prefetch_slots`] reads fields of each.
///
/// # Safety
/// As [`fold_node`].
#[cfg(not(rstat_loom))]
unsafe fn css_of_domain<'a>(
    domain: &'a Domain,
    node: &'a TreeNode,
) -> impl Iterator<Item = *const Css> + 'a {
    // SAFETY: as in `fold_node`.
    let table = unsafe { &*node.css };
    let mut ctls = domain.ctls.load(Ordering::Relaxed);
    core::iter::from_fn(move || loop {
        if ctls == 0 {
            return None;
        }
        let id = ctls.trailing_zeros() as usize;
        ctls &= ctls - 1;
        let css = table.get(id)?.load(Ordering::Acquire);
        if !css.is_null() {
            return Some(css.cast_const());
        }
    })
}

/// A flush's first prefetch, before its fence: the css tables of `nodes`,
/// then the lines of each of their css of `domain`. The loads of a pass
/// do not depend on one another, so their misses overlap, where the folds
/// take them one at a time (each fold's locked RMWs keep the next fold's
/// loads from starting early). A hint only: nothing here is relied on.
///
/// # Safety
/// The domain lock is held; `nodes` are live nodes of `domain`.
pub(crate) unsafe fn prefetch_css(domain: &Domain, nodes: &[*const TreeNode]) {
    // Loom would explore the loads for nothing: a hint has no effect to
    // check.
    #[cfg(not(rstat_loom))]
    {
        for &n in nodes {
            // SAFETY: live nodes (caller).
            let table = unsafe { (*n).css }.cast::<u8>();
            for line in 0..CSS_TABLE_LINES {
                prefetch_read(table.wrapping_add(64 * line));
            }
        }
        for &n in nodes {
            // SAFETY: live nodes of `domain` (caller).
            for css in unsafe { css_of_domain(domain, &*n) } {
                for line in 0..CSS_LINES {
                    prefetch_read(css.cast::<u8>().wrapping_add(64 * line));
                }
            }
        }
    }
    #[cfg(rstat_loom)]
    let _ = (domain, nodes);
}

/// A flush's last prefetch, after its fence (the updaters may have taken
/// the lines back since the first): for each css of `nodes` in `domain`,
/// its stat line of `cpu` and its parent's, which the fold's RMWs write,
/// and its totals. A hint only.
///
/// # Safety
/// As [`prefetch_css`], and `cpu < nr_cpus`.
pub(crate) unsafe fn prefetch_slots(domain: &Domain, nodes: &[*const TreeNode], cpu: usize) {
    #[cfg(not(rstat_loom))]
    for &n in nodes {
        // SAFETY: live nodes of `domain` (caller).
        for css in unsafe { css_of_domain(domain, &*n) } {
            // SAFETY: installed css are live as long as their group, and a
            // css keeps its parent's alive; `cpu` is in range (caller);
            // the lock is held for `totals`.
            unsafe {
                let css = &*css;
                prefetch_write(css.stats.raw(cpu).cast());
                if let Some(p) = css.parent.as_ref() {
                    prefetch_write(p.stats.raw(cpu).cast());
                }
                css.totals.with(|t| prefetch_write((*t).values_ptr()));
            }
        }
    }
    #[cfg(rstat_loom)]
    let _ = (domain, nodes, cpu);
}

/// Cache lines of a css table and of a css (`Css` keeps its fields in
/// three lines: see its layout comments).
#[cfg(not(rstat_loom))]
const CSS_TABLE_LINES: usize = core::mem::size_of::<crate::stat::css::CssTable>().div_ceil(64);
#[cfg(not(rstat_loom))]
const CSS_LINES: usize = core::mem::size_of::<Css>().div_ceil(64);
