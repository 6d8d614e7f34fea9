//! Group extensions: per-group state that a subsystem attaches to every
//! group, with the lifecycle hooks of the kernel's `cgroup_subsys`
//! (`css_alloc` / `css_offline` / `css_released`).
//!
//! The memory controller uses this for each group's page counter, events
//! and charge bookkeeping; stats still go through a [`Controller`] so they
//! are flushed by rstat. An extension's state is created top-down (a child's
//! after its parent's), told when the group goes offline, and released when
//! the group's last reference is gone, before the group's stats are folded
//! into its parent for the last time.
//!
//! [`Controller`]: crate::Controller

use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::group::EngineInner;
use crate::group::{Group, GroupInner};
use crate::sync::Ordering;

/// Most extensions one engine can hold.
pub const MAX_EXTS: usize = if cfg!(rstat_loom) { 2 } else { 8 };

/// A subsystem's per-group state and lifecycle.
///
/// `create` and `online` run while the group is being created, under its
/// parent's children lock and the shared side of the engine's topology
/// lock; `offline` after its removal, `release` during its final release.
/// Hooks of different groups may run at the same time on different
/// threads (creations and removals under different parents do not wait
/// for each other). They must not create or remove groups or register
/// anything, and must not panic.
pub trait GroupExt: Send + Sync + 'static {
    /// What each group carries.
    type State: Send + Sync + 'static;

    /// The extension's name, unique in its engine.
    fn name(&self) -> &str;

    /// Make a group's state; `parent` is the parent's (`None` at the root).
    fn create(&self, parent: Option<&Self::State>) -> Self::State;

    /// The state was just made for `group`, before anyone else can reach
    /// it (the kernel's `css_online`, run before publication here).
    /// `group` is borrowed: do not keep a clone of it in the state, which
    /// the group owns (the group would never be released).
    fn online(&self, _state: &Self::State, _group: &Group) {}

    /// The group was removed (it is offline; handles may still use it).
    fn offline(&self, _state: &Self::State, _parent: Option<&Self::State>) {}

    /// The engine (its [`Rstat`](crate::Rstat)) was dropped: the root is
    /// offline, though handles may still hold it and use its state (the
    /// root is never removed, so [`offline`](Self::offline) never runs for
    /// it). Runs once, after every other group was removed.
    fn root_offline(&self, _state: &Self::State) {}

    /// The group's last reference is gone; after this the state is dropped.
    fn release(&self, _state: &Self::State, _parent: Option<&Self::State>) {}

    /// Housekeeping, called by the engine's periodic flusher thread once
    /// per period, after it flushed the roots (never if the engine has no
    /// periodic flusher: [`Builder::periodic_flush`](crate::Builder::periodic_flush)
    /// `None`). No lock of the engine is held; it should not block for
    /// long, as the next flush waits for it.
    fn periodic(&self) {}
}

/// The type-erased form the engine stores.
/// An engine's registered extensions, in id order. Registration appends
/// under the topology's write lock (so a group created meanwhile gets the
/// new one's state, or is visited by the registration); everything else
/// reads the list with no lock, which is sound because an extension, once
/// in the list, stays there for the engine's life. A group's release and
/// removal walk it this way, so they do not contend on the topology lock.
#[derive(Default)]
pub(crate) struct ExtList {
    slots: [std::sync::OnceLock<Arc<dyn ErasedExt>>; MAX_EXTS],
}

impl ExtList {
    /// The extensions registered so far, with their ids.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, &Arc<dyn ErasedExt>)> {
        self.slots
            .iter()
            .map_while(std::sync::OnceLock::get)
            .enumerate()
    }

    /// How many are registered.
    pub(crate) fn len(&self) -> usize {
        self.iter().count()
    }

    /// Append `e` as extension `id` (`len()`, checked below [`MAX_EXTS`] by
    /// the caller, who holds the topology's write lock).
    pub(crate) fn push(&self, id: usize, e: Arc<dyn ErasedExt>) {
        let set = self.slots.get(id).map(|s| s.set(e).is_ok());
        debug_assert_eq!(set, Some(true), "extension {id} registered twice");
    }
}

pub(crate) trait ErasedExt: Send + Sync {
    fn ext_name(&self) -> &str;
    /// The extension itself, for a layer above to find its own by type
    /// ([`EngineInner::find_ext`]).
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
    /// # Safety
    /// `parent` is null or a live state of this extension.
    unsafe fn create_erased(&self, parent: *const (), group: &Group) -> *mut ();
    /// # Safety
    /// `s` live; `parent` null or live; both of this extension.
    unsafe fn offline_erased(&self, s: *const (), parent: *const ());
    /// # Safety
    /// `s` live, of this extension.
    unsafe fn root_offline_erased(&self, s: *const ());
    /// # Safety
    /// As `offline_erased`.
    unsafe fn release_erased(&self, s: *const (), parent: *const ());
    /// # Safety
    /// `s` came from `create_erased` and is not used afterwards.
    unsafe fn destroy_erased(&self, s: *mut ());
    fn periodic_erased(&self);
}

impl<E: GroupExt> ErasedExt for E {
    fn ext_name(&self) -> &str {
        self.name()
    }
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
    unsafe fn create_erased(&self, parent: *const (), group: &Group) -> *mut () {
        // SAFETY: caller's guarantee.
        let parent = unsafe { parent.cast::<E::State>().as_ref() };
        let s = self.create(parent);
        self.online(&s, group);
        Box::into_raw(Box::new(s)).cast()
    }
    unsafe fn offline_erased(&self, s: *const (), parent: *const ()) {
        // SAFETY: caller's guarantee.
        unsafe { self.offline(&*s.cast::<E::State>(), parent.cast::<E::State>().as_ref()) }
    }
    unsafe fn root_offline_erased(&self, s: *const ()) {
        // SAFETY: caller's guarantee.
        unsafe { self.root_offline(&*s.cast::<E::State>()) }
    }
    unsafe fn release_erased(&self, s: *const (), parent: *const ()) {
        // SAFETY: caller's guarantee.
        unsafe { self.release(&*s.cast::<E::State>(), parent.cast::<E::State>().as_ref()) }
    }
    unsafe fn destroy_erased(&self, s: *mut ()) {
        // SAFETY: caller's guarantee: `s` is a Box<E::State> from create.
        drop(unsafe { Box::from_raw(s.cast::<E::State>()) });
    }
    fn periodic_erased(&self) {
        self.periodic()
    }
}

/// A registered extension: look up any group's state.
pub struct Ext<E: GroupExt> {
    pub(crate) engine: Arc<EngineInner>,
    pub(crate) id: usize,
    pub(crate) imp: Arc<E>,
    _e: PhantomData<fn() -> E>,
}

impl<E: GroupExt> Clone for Ext<E> {
    fn clone(&self) -> Self {
        Ext {
            engine: Arc::clone(&self.engine),
            id: self.id,
            imp: Arc::clone(&self.imp),
            _e: PhantomData,
        }
    }
}

impl<E: GroupExt> Ext<E> {
    pub(crate) fn new(engine: Arc<EngineInner>, id: usize, imp: Arc<E>) -> Self {
        Ext {
            engine,
            id,
            imp,
            _e: PhantomData,
        }
    }

    /// The extension itself.
    pub fn ext(&self) -> &E {
        &self.imp
    }

    /// `group`'s state. A group removed before the extension was registered
    /// has none: its nearest ancestor's is returned. Cost: a few loads.
    pub fn get<'g>(&self, group: &'g Group) -> Result<&'g E::State> {
        if !Arc::ptr_eq(&group.inner().engine, &self.engine) {
            return Err(Error::ForeignGroup);
        }
        let mut g: &'g GroupInner = group.inner();
        loop {
            let s = g.tables().ext[self.id].load(Ordering::Acquire);
            if !s.is_null() {
                // SAFETY: states live as long as their group, which `group`
                // (or a descendant of it) keeps alive for 'g.
                return Ok(unsafe { &*s.cast::<E::State>() });
            }
            match g.parent.as_ref() {
                Some(p) => g = p.inner(),
                None => unreachable!("the root has every registered extension's state"),
            }
        }
    }
}

impl EngineInner {
    /// The registered extension of type `E`, if any: how a layer above
    /// the engine (the memory controller, say) finds its own state from an
    /// engine alone, without the engine naming it. Cost: the topology lock
    /// and a scan of the extensions (at most [`MAX_EXTS`]).
    pub(crate) fn find_ext<E: GroupExt>(&self) -> Option<Arc<E>> {
        self.exts
            .iter()
            .find_map(|(_, e)| Arc::clone(e).into_any().downcast::<E>().ok())
    }
}
