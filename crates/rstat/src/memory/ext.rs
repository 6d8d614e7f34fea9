//! The group extension that gives every group its memory state
//! ([`MemExt`]), the state every group's hooks and the handle share
//! ([`Shared`]: the stocks, the owner handles' lock), and the offline
//! protocol that ties a group's state to the stocks and its owner handle
//! (`MemCg::offline`: reparent the handle, drain, reparent the charges).
//!
//! Above the state (`memcg`), the stock and the owner handle (`objcg`);
//! below the `Memory` handle, which keeps the extension and `Shared`.

use std::sync::Arc;

use super::memcg::MemCg;
use super::stock::Stocks;
use crate::group::ext::GroupExt;
use crate::group::Group;
use crate::sync::{self, Mutex, Ordering};

impl MemCg {
    /// The offline hook: see "Removed groups" in the [module
    /// docs](super).
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
        stocks.drain_one(self);
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
            // The parent's lock (a line its other children share) only
            // when there is something to hand over: most groups have no
            // reclaimer of their own.
            if !moved.is_empty() {
                sync::lock(&p.reclaimers).append(moved);
            }
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
        shared.stocks.drain_one(self);
        shared.stocks.clear_over(self);
    }
}

/// The state every group's hooks and the handle share.
pub(crate) struct Shared {
    pub(crate) stocks: Stocks,
    pub(crate) max_retries: u32,
    /// Serialises reparenting of owner handles with dropping their base
    /// references ([`objcg`](super::objcg)).
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
pub(super) struct MemExt {
    pub(super) shared: Arc<Shared>,
    /// The controller this extension belongs to, found from an engine
    /// alone by [`Memory::of`](super::Memory::of) (weak: the controller
    /// holds the engine).
    pub(super) inner: std::sync::OnceLock<std::sync::Weak<super::handle::MemoryInner>>,
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
        unsafe { state.objcg().as_ref() }.bind(group.inner_ptr().as_ptr().cast_const().cast());
    }

    fn offline(&self, state: &Arc<MemCg>, parent: Option<&Arc<MemCg>>) {
        state.offline(&self.shared, parent);
    }

    fn root_offline(&self, state: &Arc<MemCg>) {
        state.root_offline(&self.shared);
    }

    fn release(&self, state: &Arc<MemCg>, _parent: Option<&Arc<MemCg>>) {
        // A group that went offline (every removed group, and the root at
        // its engine's drop) was drained then, and is never stocked again:
        // draining it again would take every CPU's stock lock for nothing
        // (remote cache lines, on a group per request). Only a state that
        // never went offline (a child whose attach failed, never
        // published, so never charged) is drained here, to be safe.
        if state.is_online() {
            self.shared.stocks.drain_one(state);
        }
        self.shared.stocks.clear_over(state);
    }

    fn periodic(&self) {
        // Idle groups' pre-charged units back out of their usage (the
        // stock's "Idle stock").
        self.shared.stocks.return_idle();
    }
}
