//! The [`Memory`] handle: what it points at ([`MemoryInner`]), the
//! lookups every operation starts with (a group's state; the group an
//! operation acts on, [`Target`]) and the per-CPU stat counting they share.
//!
//! Registration is in `register`, reads in `read`; the charge path
//! (`charge`), limits (`limits`), reclaim (`reclaim`) and the accounting
//! allocator's side (`heap`) add their operations to `Memory` in their own
//! files, above this one.

use std::borrow::Cow;
use std::sync::Arc;

use super::config::{MemoryConfig, MEMORY_STAT_NAMES};
use super::error::MemoryError;
use super::ext::{MemExt, Shared};
use super::memcg::MemCg;
use crate::controller::ControllerHandle;
use crate::group::ext::Ext;
use crate::group::Group;
use crate::stat::css::{Item, Slot};
use crate::sync::Ordering;

/// A memory controller's shared state (what a [`Memory`] handle points at).
pub(crate) struct MemoryInner {
    pub(super) ext: Ext<MemExt>,
    pub(super) stats: ControllerHandle,
    pub(super) shared: Arc<Shared>,
    pub(super) nr_cpus: usize,
    pub(super) cfg: MemoryConfig,
    /// The root group's state.
    pub(super) root: Arc<MemCg>,
}

/// A memory controller registered on an engine. Cheap to clone (one
/// reference count, on a line every clone shares: clone it per thread or
/// per owner, not per charge; [`Charge`](super::Charge) borrows it). See
/// the [module docs](super).
#[derive(Clone)]
pub struct Memory {
    pub(super) inner: Arc<MemoryInner>,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory")
            .field("config", &self.inner.cfg)
            .field("nr_cpus", &self.inner.nr_cpus)
            .finish()
    }
}

/// The group an operation acts on: the group itself, or if it was removed
/// its nearest live ancestor; and that group's state.
pub(crate) struct Target<'g> {
    pub(crate) group: Cow<'g, Group>,
    pub(crate) memcg: Cow<'g, Arc<MemCg>>,
}

impl Memory {
    /// The engine this controller belongs to (an identity to compare).
    pub(crate) fn engine_ptr(&self) -> *const crate::group::EngineInner {
        Arc::as_ptr(&self.inner.ext.engine)
    }

    /// The settings.
    pub fn config(&self) -> &MemoryConfig {
        &self.inner.cfg
    }

    /// `group`'s own memory state (a group removed before registration
    /// uses its nearest ancestor's). A few loads.
    #[inline]
    pub(super) fn memcg<'g>(&self, group: &'g Group) -> Result<&'g Arc<MemCg>, MemoryError> {
        Ok(self.inner.ext.get(group)?)
    }

    /// The group that operations on `group` act on. The common case (a live
    /// group) is a few loads and no reference count.
    #[inline]
    pub(crate) fn target<'g>(&self, group: &'g Group) -> Result<Target<'g>, MemoryError> {
        let m = self.memcg(group)?;
        // The root is its own target even offline (its engine dropped:
        // `MemCg::root_offline`): it was not removed, and what is uncharged
        // from it is its own, not reparented.
        if m.is_online() || m.parent.is_none() {
            return Ok(Target {
                group: Cow::Borrowed(group),
                memcg: Cow::Borrowed(m),
            });
        }
        self.target_of_removed(group)
    }

    #[cold]
    fn target_of_removed(&self, group: &Group) -> Result<Target<'static>, MemoryError> {
        let mut g = group.clone();
        loop {
            let m = Arc::clone(self.memcg(&g)?);
            let parent = if m.is_online() { None } else { g.parent() };
            match parent {
                Some(p) => g = p,
                None => {
                    return Ok(Target {
                        group: Cow::Owned(g),
                        memcg: Cow::Owned(m),
                    })
                }
            }
        }
    }

    /// `group`'s state, refusing removed groups (for limit writes).
    pub(super) fn live_memcg<'g>(&self, group: &'g Group) -> Result<&'g Arc<MemCg>, MemoryError> {
        let m = self.memcg(group)?;
        if !m.is_online() || !group.is_online() {
            return Err(MemoryError::Removed { path: group.path() });
        }
        Ok(m)
    }

    /// Add to a stat item of `group` on this CPU (per-CPU, no lock).
    #[inline]
    pub(super) fn count(&self, group: &Group, item: usize, delta: u64) {
        let delta = i64::try_from(delta).unwrap_or(i64::MAX);
        // Cannot fail: our own item index, a group of our engine (checked
        // by the ext lookup before any call).
        let _ = self.inner.stats.add(group, item, delta);
    }

    /// [`count`](Self::count) on the hot path: `cpu` already folded, and
    /// no second lookup of the engine or the CPU id.
    ///
    /// `group` must belong to this controller's engine (callers looked its
    /// state up through the extension first, which checks that).
    #[inline(always)]
    pub(super) fn count_on(&self, group: &Group, item: usize, delta: u64, cpu: usize) {
        self.count_signed(group, item, i64::try_from(delta).unwrap_or(i64::MAX), cpu);
    }

    /// [`count_on`](Self::count_on) of a signed delta.
    #[inline(always)]
    pub(super) fn count_signed(&self, group: &Group, item: usize, delta: i64, cpu: usize) {
        debug_assert!(item < MEMORY_STAT_NAMES.len() && cpu < self.inner.nr_cpus);
        let css = group.inner().css[self.inner.stats.ctl.id].load(Ordering::Acquire);
        if css.is_null() {
            // Removed before the controller was registered: the ancestor's.
            let _ = self.inner.stats.add(group, item, delta);
            return;
        }
        // SAFETY: a non-null css of `group` lives as long as the group,
        // which `group` keeps alive.
        let css = unsafe { &*css };
        // `cpu` was folded below the engine's CPU count (the stock has as
        // many slots), and `item` is one of MEMORY_STAT_NAMES: neither
        // check below fails.
        let at = Slot::fold(cpu, self.inner.nr_cpus);
        if let Some(item) = Item::new(item, MEMORY_STAT_NAMES.len()) {
            css.add(css.path(), || at, item, delta);
        }
    }

    /// This CPU's stock index.
    #[inline(always)]
    pub(super) fn this_cpu(&self) -> usize {
        crate::percpu::cpu::current_in(self.inner.nr_cpus)
    }

    /// `cpu` folded into the stock indices (CPU ids past them share them),
    /// for a caller that picks the slot (`rstat::testing`).
    #[inline(always)]
    pub(crate) fn fold_cpu(&self, cpu: usize) -> usize {
        crate::percpu::cpu::fold(cpu, self.inner.nr_cpus)
    }
}
