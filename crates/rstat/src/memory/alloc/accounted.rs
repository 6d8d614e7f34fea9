//! The allocator type, [`Accounted`], and its binding to a controller:
//! [`install`](Accounted::install) publishes a [`Binding`] (never freed),
//! [`uninstall`](Accounted::uninstall) retires it, and a free finds the
//! binding its object was charged through by the engine
//! (`binding_for`); plus what passes through uncharged ([`PassThrough`])
//! and why an install is refused ([`InstallError`]). The charge paths
//! (`charge`) and the `GlobalAlloc` impl (`global`) build on these.

use crate::engine::Rstat;
use crate::group::EngineInner;
use crate::group::Group;
use crate::memory::handle::Memory;
// std's atomics, not `crate::sync`'s: the allocator must be constructible
// in a `static` (const), and loom's atomics allocate, which a global
// allocator cannot model. Its own protocol (publish-once bindings, a
// push-only retired list) is two single-word CASes; the group and stock
// protocols it calls into are modelled with loom where they live.
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// A controller bound to the allocator. Never freed (see the module docs).
pub(super) struct Binding {
    pub(super) mem: Memory,
    pub(super) root: Group,
    pub(super) engine: *const EngineInner,
    /// The next retired binding.
    next: AtomicPtr<Binding>,
}

/// What went through an [`Accounted`] uncharged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassThrough {
    /// Objects allocated without an owner (unbound, nested in the
    /// allocator, or the engine dropped).
    pub allocs: u64,
    /// Objects without an owner freed.
    pub frees: u64,
    /// Bytes (with overhead) of live objects without an owner.
    pub live_bytes: u64,
}

/// Why [`Accounted::install`] refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstallError {
    /// Already bound to a controller: call [`Accounted::uninstall`] first.
    AlreadyInstalled,
    /// The controller is registered on another engine than the one given.
    ForeignController,
}

impl std::fmt::Display for InstallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InstallError::AlreadyInstalled => f.write_str(
                "the accounting allocator is already bound to a memory controller; \
                 call uninstall() first",
            ),
            InstallError::ForeignController => f.write_str(
                "the memory controller belongs to another Rstat; pass the one it was registered on",
            ),
        }
    }
}

impl std::error::Error for InstallError {}

/// A [`GlobalAlloc`](std::alloc::GlobalAlloc) that charges every object
/// to the current group's memory controller. See the [module
/// docs](super).
pub struct Accounted<A> {
    pub(super) inner: A,
    pub(super) bind: AtomicPtr<Binding>,
    pub(super) retired: AtomicPtr<Binding>,
    pub(super) pass_allocs: AtomicU64,
    pub(super) pass_frees: AtomicU64,
    /// Bytes allocated and freed without owner (two counters, so each only
    /// grows and `live = allocated - freed`).
    pub(super) pass_bytes_in: AtomicU64,
    pub(super) pass_bytes_out: AtomicU64,
}

// SAFETY: the raw pointers are to bindings, which are never freed and whose
// contents are thread-safe (`Memory`, `Group`, an address used as an
// identity); the rest is atomics and the inner allocator, itself `Sync`
// when `A` is.
unsafe impl<A: Sync> Sync for Accounted<A> {}
// SAFETY: as above.
unsafe impl<A: Send> Send for Accounted<A> {}

impl<A> Accounted<A> {
    /// An unbound allocator over `inner` (usable in a `static`).
    pub const fn new(inner: A) -> Self {
        Accounted {
            inner,
            bind: AtomicPtr::new(core::ptr::null_mut()),
            retired: AtomicPtr::new(core::ptr::null_mut()),
            pass_allocs: AtomicU64::new(0),
            pass_frees: AtomicU64::new(0),
            pass_bytes_in: AtomicU64::new(0),
            pass_bytes_out: AtomicU64::new(0),
        }
    }

    /// The inner allocator.
    pub fn inner(&self) -> &A {
        &self.inner
    }

    /// Bind to `mem`, a memory controller of `rs`: allocations from now on
    /// are charged to the current group (in `rs`; else `rs`'s root). Keeps a clone of `mem` (and so its engine)
    /// for as long as objects charged through it may be freed: for the
    /// rest of the process. Cost: one allocation (uncharged).
    pub fn install(&self, rs: &Rstat, mem: &Memory) -> Result<(), InstallError> {
        if mem.engine_ptr() != rs.engine_ptr() {
            return Err(InstallError::ForeignController);
        }
        let root = rs.root().clone();
        let b = Box::into_raw(Box::new(Binding {
            mem: mem.clone(),
            root,
            engine: mem.engine_ptr(),
            next: AtomicPtr::new(core::ptr::null_mut()),
        }));
        // Release: publishes the binding's fields to the Acquire loads.
        match self.bind.compare_exchange(
            core::ptr::null_mut(),
            b,
            Ordering::Release,
            Ordering::Relaxed,
        ) {
            Ok(_) => Ok(()),
            Err(_) => {
                // SAFETY: never published.
                drop(unsafe { Box::from_raw(b) });
                Err(InstallError::AlreadyInstalled)
            }
        }
    }

    /// Unbind: allocations from now on pass through (counted). Objects
    /// charged before are still uncharged exactly when freed. Returns
    /// whether a controller was bound.
    pub fn uninstall(&self) -> bool {
        let b = self.bind.swap(core::ptr::null_mut(), Ordering::AcqRel);
        if b.is_null() {
            return false;
        }
        // SAFETY: bindings are never freed.
        let bref = unsafe { &*b };
        let mut head = self.retired.load(Ordering::Relaxed);
        loop {
            bref.next.store(head, Ordering::Relaxed);
            // Release: publishes `next` to the Acquire walk in `binding_for`.
            match self
                .retired
                .compare_exchange_weak(head, b, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(h) => head = h,
            }
        }
    }

    /// The controller bound now, if any.
    pub fn memory(&self) -> Option<&Memory> {
        // SAFETY: bindings are never freed.
        unsafe { self.bind.load(Ordering::Acquire).as_ref() }.map(|b| &b.mem)
    }

    /// What went through uncharged so far. Three `Relaxed` loads: exact
    /// when no thread allocates.
    pub fn pass_through(&self) -> PassThrough {
        let i = self.pass_bytes_in.load(Ordering::Relaxed);
        let o = self.pass_bytes_out.load(Ordering::Relaxed);
        PassThrough {
            allocs: self.pass_allocs.load(Ordering::Relaxed),
            frees: self.pass_frees.load(Ordering::Relaxed),
            live_bytes: i.wrapping_sub(o),
        }
    }

    /// The binding objects of `engine` were charged through: the current
    /// one, else a retired one.
    #[inline(always)]
    pub(super) fn binding_for(&self, engine: *const EngineInner) -> Option<&Binding> {
        // SAFETY: bindings are never freed.
        let cur = unsafe { self.bind.load(Ordering::Acquire).as_ref() };
        if let Some(b) = cur {
            if b.engine == engine {
                return Some(b);
            }
        }
        self.retired_binding_for(engine)
    }

    #[cold]
    fn retired_binding_for(&self, engine: *const EngineInner) -> Option<&Binding> {
        let mut p = self.retired.load(Ordering::Acquire);
        // SAFETY: bindings are never freed; `next` was published before
        // the push that made it reachable.
        while let Some(b) = unsafe { p.as_ref() } {
            if b.engine == engine {
                return Some(b);
            }
            p = b.next.load(Ordering::Acquire);
        }
        None
    }

    #[cold]
    pub(super) fn count_pass_alloc(&self, bytes: usize) {
        self.pass_allocs.fetch_add(1, Ordering::Relaxed);
        self.pass_bytes_in
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    #[cold]
    pub(super) fn count_pass_free(&self, bytes: usize) {
        self.pass_frees.fetch_add(1, Ordering::Relaxed);
        self.pass_bytes_out
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }
}
