//! The hierarchy: named groups, lookup by path, removal, lifetime.
//!
//! A group is created under a live parent with a name unique among its
//! siblings. Removal takes it offline at once (lookups fail, it cannot gain
//! children) and flushes its stats into its parent; its memory lives on
//! until the last handle to it is dropped (a "zombie" can still be read and
//! updated through a handle). At that final release the group is drained from
//! every backlog, flushed once more into its parent and its per-CPU state is
//! returned to the arena: **a removed subtree loses no history**.
//!
//! Locking: one engine-wide topology mutex serialises create / remove /
//! register (the kernel's `cgroup_mutex`); each group's children map has its
//! own mutex for lookups and iteration. Order: topology, then a parent's
//! children, then a child's children, then domain locks, then the arena.

mod bandwidth;
pub mod ext;
mod kill;
mod name;
mod pressure;
mod release;
pub(crate) mod state;
#[cfg(all(test, rstat_loom))]
mod tests_loom;
#[cfg(all(test, not(rstat_loom)))]
mod tests_pressure;
#[cfg(all(test, target_os = "linux", not(rstat_loom), not(miri)))]
mod tests_units;
pub mod watch;

use std::collections::BTreeMap;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::percpu::arena::PcpuPtr;
use crate::percpu_ref::{InitFlags, PercpuRef, PercpuRefSlot};
use crate::stat::css::CssTable;
use crate::stat::ops::{NodeOwner, MAX_CONTROLLERS};
use crate::stat::tree::{lock_domain, TreeNode};
use crate::sync::{self, AtomicBool, AtomicPtr, Mutex, Ordering};
pub use bandwidth::{
    CpuMax, CpuMaxStat, DEFAULT_CPU_PERIOD_US, MAX_CPU_PERIOD_US, MIN_CPU_PERIOD_US,
};
use ext::MAX_EXTS;
pub(crate) use kill::KillWake;
pub use kill::Killed;
use name::{name_problem, shown, shown_path};
pub use name::{validate_name, MAX_NAME_LEN};
pub use pressure::{PressureKind, PressureTotals};
use release::release;
pub(crate) use release::release_deferred;
pub(crate) use state::EngineInner;

pub(crate) struct GroupInner {
    /// The engine. The root holds a count on it (dropped at its release);
    /// every other group reaches it through its parent, which it holds up
    /// to the root, so it takes no count: a group made and released on one
    /// CPU then writes no line of the engine's that groups on other CPUs
    /// write too (the count's).
    pub(crate) engine: core::mem::ManuallyDrop<Arc<EngineInner>>,
    /// A reference on the parent, dropped at this group's release.
    pub(crate) parent: Option<Group>,
    /// Shared with the parent's children map, whose key is this same
    /// allocation: a group's creation allocates its name once.
    pub(crate) name: Arc<str>,
    /// Unique among the engine's groups for the engine's lifetime.
    pub(crate) id: u64,
    pub(crate) depth: usize,
    pub(crate) online: AtomicBool,
    /// Live children, without references of their own: a child is in its
    /// parent's map exactly while it is online, i.e. while its base
    /// reference is held, so the pointers stay valid under this lock.
    /// Keyed by each child's own `name`.
    pub(crate) children: Mutex<BTreeMap<Arc<str>, GroupPtr>>,
    /// Per controller id, its state in this group; null until attached.
    /// In the group itself, so `ControllerHandle::add` reaches a css with
    /// one load from the group. Flushes reach them through their tree
    /// nodes' `owner`, which outlives the nodes. Freed by `release`, after
    /// its last flush cut the nodes from every tree.
    pub(crate) css: CssTable,
    /// The group's tree nodes and extension states, in their own
    /// allocation. Owned; freed by `release`.
    tables: NonNull<GroupTables>,
    /// The group's lifetime (a [`PercpuRef`]): every `Group` handle, every child
    /// and the hierarchy (the base reference, dropped by `remove`) hold one.
    refcnt: PercpuRef,
    /// `refcnt`'s per-CPU slots, in the engine's arena.
    ref_slots: PcpuPtr<PercpuRefSlot>,
    /// The next group on the engine's deferred-release stack
    /// ([`Group::drop_deferred`]); written once, by the pusher.
    deferred_next: AtomicPtr<GroupInner>,
    /// Killed ([`Group::kill`], module `kill`): set once, never cleared.
    pub(crate) killed: AtomicBool,
    /// Hooks to run when killed ([`Group::on_kill`]), made at the first.
    pub(crate) kill_hooks: std::sync::OnceLock<Box<Mutex<kill::KillWatch>>>,
    /// `cpu.max` (module `bandwidth`), made at the first setting.
    pub(crate) bandwidth: std::sync::OnceLock<Box<bandwidth::Bandwidth>>,
    /// This group or an ancestor has (or had) a `cpu.max` quota: its
    /// scoped polls are timed (module `bandwidth`).
    pub(crate) cpu_limited: AtomicBool,
    /// Stalls by limits (module `pressure`), made at the first.
    pub(crate) pressure: pressure::PressureCell,
}

/// A group pointer that holds no reference (see `GroupInner::children`).
#[derive(Clone, Copy)]
pub(crate) struct GroupPtr(NonNull<GroupInner>);

// SAFETY: a plain address; dereferenced only under the rules above.
unsafe impl Send for GroupPtr {}
// SAFETY: as above.
unsafe impl Sync for GroupPtr {}

/// A group's tree nodes and extension states.
pub(crate) struct GroupTables {
    /// Per domain index; null until attached. Freed on final release.
    pub(crate) nodes: [AtomicPtr<TreeNode>; MAX_CONTROLLERS],
    /// Per extension id: a boxed `GroupExt::State`; null until attached.
    /// Released and freed on final release.
    pub(crate) ext: [AtomicPtr<()>; MAX_EXTS],
}

impl GroupTables {
    /// The group's final flush, in every domain it has a node in (its
    /// deltas move into its parent's pending), at its release: it has no
    /// children and no references, so a controller flush that panics must
    /// not leave it for a later one. Takes each domain's lock in turn.
    fn flush_nodes(&self) {
        for slot in self.nodes.iter() {
            let node = slot.load(Ordering::Acquire);
            if node.is_null() {
                continue;
            }
            // SAFETY: installed nodes live until the group's release frees
            // them (after this); a node's domain outlives the engine's groups.
            let (node, domain) = unsafe { (&*node, &*(*node).domain) };
            // Never on a backlog or tree: nothing to fold or unlink, no
            // lock to take (`TreeNode::touched`; every update and every
            // flush that linked it happened before this release).
            if node.touched.bits() == 0 {
                continue;
            }
            let mut scratch = lock_domain(domain);
            // SAFETY: lock held.
            node.releasing.with_mut(|r| unsafe { *r = true });
            // Without the heavy fence: every update to the group happened
            // before this (each updater held a reference, dropped before the
            // count reached zero), and the flush folds only this group.
            // SAFETY: lock held; `node` is live and in `domain`.
            unsafe { domain.flush_locked_fenced(&mut scratch, node, false) };
        }
    }
}

impl NodeOwner for GroupInner {
    fn id(&self) -> u64 {
        self.id
    }
    fn path(&self) -> String {
        GroupInner::path(self)
    }
}

impl GroupInner {
    /// The controller and node tables.
    #[inline(always)]
    pub(crate) fn tables(&self) -> &GroupTables {
        // SAFETY: allocated with the group, freed only by its release.
        unsafe { self.tables.as_ref() }
    }

    /// The group's absolute path: `/a/b`, and `/` for the root. The one
    /// form every path a user sees takes ([`Group::path`], errors,
    /// snapshots, a flush's [`FlushCtx::group_path`](crate::FlushCtx::group_path)).
    pub(crate) fn path(&self) -> String {
        let mut parts = Vec::new();
        let mut g = self;
        while let Some(p) = g.parent.as_ref() {
            parts.push(&*g.name);
            g = p.inner();
        }
        if parts.is_empty() {
            return "/".to_owned();
        }
        let mut path = String::with_capacity(parts.iter().map(|n| n.len() + 1).sum());
        for name in parts.iter().rev() {
            path.push('/');
            path.push_str(name);
        }
        path
    }
}

/// A handle to a group. Cheap to clone (a per-CPU reference count, no
/// shared write); keeps the group's memory alive, but not online: see
/// [`remove`](Group::remove).
pub struct Group {
    ptr: NonNull<GroupInner>,
}

// SAFETY: a handle owns one reference on a group whose shared state is
// thread-safe (atomics and locks).
unsafe impl Send for Group {}
// SAFETY: as above.
unsafe impl Sync for Group {}

impl Clone for Group {
    /// Take another reference. Cost: one uncontended atomic add on this
    /// CPU's slot (percpu_ref), no lock, no allocation.
    fn clone(&self) -> Self {
        if let Err(e) = self.inner().refcnt.get() {
            // We hold a reference, so the count cannot be zero or full.
            panic!("group reference count is broken: {e}");
        }
        Group { ptr: self.ptr }
    }
}

impl Drop for Group {
    /// Drop the reference; the last one releases the group (and then its
    /// reference on its parent, iteratively, so deep chains of zombies do
    /// not recurse).
    fn drop(&mut self) {
        let mut ptr = self.ptr;
        loop {
            // SAFETY: we own one reference on `ptr`.
            let last = match unsafe { ptr.as_ref() }.refcnt.put_and_test() {
                Ok(last) => last,
                Err(e) => {
                    debug_assert!(false, "group reference count is broken: {e}");
                    return;
                }
            };
            if !last {
                return;
            }
            // SAFETY: the count reached zero on this thread.
            match unsafe { release(ptr) } {
                Some(parent) => {
                    ptr = parent.ptr;
                    core::mem::forget(parent); // its reference is dropped next turn
                }
                None => return,
            }
        }
    }
}

impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group")
            .field("path", &self.inner().path())
            .field("online", &self.is_online())
            .finish()
    }
}

impl PartialEq for Group {
    fn eq(&self, other: &Self) -> bool {
        self.ptr == other.ptr
    }
}
impl Eq for Group {}

impl Group {
    /// Allocate a group with its base reference and return a handle (a
    /// second reference). Caller holds the topology lock (or builds the
    /// root).
    pub(crate) fn new_group(
        engine: &Arc<EngineInner>,
        parent: Option<Group>,
        name: &str,
    ) -> Result<Group> {
        let depth = parent.as_ref().map_or(0, |p| p.depth() + 1);
        let ref_slots = engine
            .ref_arena
            .local()
            .alloc::<PercpuRefSlot>(1, |_, _| PercpuRefSlot::new())?;
        // SAFETY: one slot per unit of an arena with `nr_cpus` units; freed
        // by the final release only once the count reached zero (no get or
        // put reads them after that, and the ref's drop does not: it does
        // not own arena slots), and used by nothing else.
        let refcnt = unsafe {
            PercpuRef::with_arena_slots(ref_slots, engine.nr_cpus, InitFlags::LOCKED_SLOTS, || {})
        };
        let inner = Box::new(GroupInner {
            engine: match &parent {
                None => core::mem::ManuallyDrop::new(Arc::clone(engine)),
                Some(_) => {
                    // SAFETY: `engine` is live, and a child's hold on its
                    // parent (`parent`, dropped only after the child's
                    // release is done with the engine) keeps the root, and
                    // with it the root's count, alive: this `Arc` shares
                    // that count and is never dropped (`ManuallyDrop`).
                    let shared = unsafe { Arc::from_raw(Arc::as_ptr(engine)) };
                    core::mem::ManuallyDrop::new(shared)
                }
            },
            parent,
            name: name.into(),
            // Relaxed: only uniqueness matters, which the RMW gives; the id
            // is published with the group itself.
            id: engine.next_group_id.fetch_add(1, Ordering::Relaxed),
            depth,
            online: AtomicBool::new(true),
            children: Mutex::new(BTreeMap::new()),
            css: core::array::from_fn(|_| AtomicPtr::new(core::ptr::null_mut())),
            tables: NonNull::from(Box::leak(sync::boxed(GroupTables {
                nodes: core::array::from_fn(|_| AtomicPtr::new(core::ptr::null_mut())),
                ext: core::array::from_fn(|_| AtomicPtr::new(core::ptr::null_mut())),
            }))),
            refcnt,
            ref_slots,
            deferred_next: AtomicPtr::new(core::ptr::null_mut()),
            killed: AtomicBool::new(false),
            kill_hooks: std::sync::OnceLock::new(),
            bandwidth: std::sync::OnceLock::new(),
            cpu_limited: AtomicBool::new(false),
            pressure: Default::default(),
        });
        // The count starts at 1: the hierarchy's base reference, dropped
        // by `remove`. The handle returned takes a second one.
        if let Err(e) = inner.refcnt.get() {
            panic!("a new reference count refused its first get: {e}");
        }
        Ok(Group {
            ptr: NonNull::from(Box::leak(inner)),
        })
    }

    /// Drop the base reference of a group that never went online (creation
    /// failed), so the handle's drop releases it.
    fn abandon(&self) {
        self.inner().online.store(false, Ordering::Release);
        self.inner().engine.zombies.add();
        let _ = self.inner().refcnt.kill();
    }

    /// A handle on the group at `p` that must not be dropped (it holds no
    /// reference of its own): for code that knows someone else holds one.
    ///
    /// # Safety
    /// A reference on the group is held for as long as the result is used.
    #[inline(always)]
    pub(crate) unsafe fn borrow_ptr(p: NonNull<GroupInner>) -> core::mem::ManuallyDrop<Group> {
        core::mem::ManuallyDrop::new(Group { ptr: p })
    }

    /// Drop this handle where a final release must not run now (inside a
    /// global allocator's `dealloc`, whose caller may hold the engine's
    /// locks): if it was the last reference, the group goes on the
    /// engine's deferred-release stack, released at the next
    /// `create_child`, `remove`, engine drop or
    /// [`Rstat::release_deferred`](crate::Rstat::release_deferred). Cost: a
    /// per-CPU put (atomic once the group was removed); one compare-and-swap
    /// loop on the engine's stack for the last one. No lock, no allocation.
    pub(crate) fn drop_deferred(self) {
        let ptr = self.ptr;
        core::mem::forget(self);
        // SAFETY: we owned one reference on `ptr`.
        let inner = unsafe { ptr.as_ref() };
        match inner.refcnt.put_and_test() {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                debug_assert!(false, "group reference count is broken: {e}");
                return;
            }
        }
        let stack = &inner.engine.deferred;
        let mut head = stack.load(Ordering::Relaxed);
        loop {
            inner.deferred_next.store(head, Ordering::Relaxed);
            // Release: publishes `deferred_next` and this thread's earlier
            // writes to the group to the Acquire swap in `release_deferred`.
            match stack.compare_exchange_weak(
                head,
                ptr.as_ptr(),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    #[inline(always)]
    pub(crate) fn inner(&self) -> &GroupInner {
        // SAFETY: a handle holds a reference, so the group is allocated.
        unsafe { self.ptr.as_ref() }
    }

    pub(crate) fn as_ptr(&self) -> GroupPtr {
        GroupPtr(self.ptr)
    }

    /// The group's address, for code that tracks it without a reference
    /// (the thread's current group in `attach`).
    #[inline(always)]
    pub(crate) fn inner_ptr(&self) -> NonNull<GroupInner> {
        self.ptr
    }

    /// A new handle (one more reference) on the group at `ptr`.
    ///
    /// # Safety
    /// Someone holds a reference on the group for the whole call (so its
    /// count is not zero and its memory is live).
    pub(crate) unsafe fn clone_from_ptr(ptr: NonNull<GroupInner>) -> Group {
        let held = core::mem::ManuallyDrop::new(Group { ptr });
        Group::clone(&held)
    }

    /// A handle for a child found in a children map (whose lock the caller
    /// holds): its base reference is held, so `tryget_live` succeeds unless
    /// it is being removed right now.
    fn from_map(p: GroupPtr) -> Option<Group> {
        // SAFETY: map entries are valid while the map's lock is held.
        unsafe { p.0.as_ref() }
            .refcnt
            .tryget_live()
            .then_some(Group { ptr: p.0 })
    }

    /// The group's name ("" for the root).
    pub fn name(&self) -> &str {
        &self.inner().name
    }

    /// The absolute path: `"/a/b"`, and `"/"` for the root. Every group
    /// path rstat shows takes this one form: errors, report snapshots,
    /// rstat-prometheus's `path` label,
    /// [`FlushCtx::group_path`](crate::FlushCtx::group_path).
    /// [`lookup`](Self::lookup) (from any group of the engine) and
    /// [`Rstat::lookup`](crate::Rstat::lookup) find a live group by it. A
    /// removed group keeps the path it had. Cost: walks the ancestors and
    /// allocates.
    pub fn path(&self) -> String {
        self.inner().path()
    }

    /// The group's id: unique among this engine's groups for the engine's
    /// whole lifetime (never reused, even after the group is freed),
    /// increasing in creation order; the root's is
    /// [`ROOT_GROUP_ID`](crate::engine::ROOT_GROUP_ID). The same number
    /// [`FlushCtx::group_id`](crate::FlushCtx::group_id) gives a controller,
    /// so per-group state a controller keeps can be keyed by it (as BPF
    /// rstat programs key their maps by cgroup id). Cost: one load.
    pub fn id(&self) -> u64 {
        self.inner().id
    }

    /// Depth below the root (root = 0).
    pub fn depth(&self) -> usize {
        self.inner().depth
    }

    /// Whether the group is online (not removed).
    pub fn is_online(&self) -> bool {
        self.inner().online.load(Ordering::Acquire)
    }

    /// The parent group; `None` for the root.
    pub fn parent(&self) -> Option<Group> {
        self.inner().parent.clone()
    }

    /// Create a child called `name`. Cost: the topology lock's shared side
    /// (this CPU slot's lock: creations and removals run side by side,
    /// without sharing a line; only registering a controller or extension
    /// excludes them), this group's children lock,
    /// one per-CPU arena allocation per controller, per domain and for the
    /// reference count, a few heap allocations.
    pub fn create_child(&self, name: &str) -> Result<Group> {
        validate_name(name)?;
        let engine = &self.inner().engine;
        release_deferred(engine);
        let topo = engine.topo.read();
        // Online is checked under the children lock, which `remove` holds
        // while it takes this group offline: no child joins a removed
        // group.
        let mut children = sync::lock(&self.inner().children);
        if !self.is_online() {
            return Err(Error::Removed {
                path: self.inner().path(),
            });
        }
        if children.contains_key(name) {
            return Err(Error::NameExists {
                parent: self.inner().path(),
                name: name.to_owned(),
            });
        }
        let child = Group::new_group(engine, Some(self.clone()), name)?;
        if let Err(e) = engine.attach(&topo, child.inner(), None) {
            // Releasing `child` frees what was attached (taking the arena
            // and domain locks): let go of ours first.
            drop(children);
            drop(topo);
            child.abandon();
            drop(child);
            return Err(e);
        }
        // Under the children lock, which a kill of this group takes after
        // marking it (module `kill`): a child of a killed group is killed.
        if self.inner().is_killed() {
            child.inner().killed.store(true, Ordering::Release);
        }
        // Likewise for `cpu.max`'s mark (module `bandwidth`).
        if self.cpu_limited() {
            child.inner().cpu_limited.store(true, Ordering::Release);
        }
        children.insert(Arc::clone(&child.inner().name), child.as_ptr());
        Ok(child)
    }

    /// The live child called `name`. Cost: one map lookup under this group's
    /// children lock, one reference taken.
    pub fn child(&self, name: &str) -> Option<Group> {
        let children = sync::lock(&self.inner().children);
        children.get(name).copied().and_then(Group::from_map)
    }

    /// The live descendant at `path`: relative to `self` (`"a/b/c"`; `""`
    /// is `self`), or, with a leading `/`, absolute: resolved from the root
    /// of this group's engine (`"/"` is the root), the form
    /// [`path`](Self::path) gives. Names are separated by exactly one `/`;
    /// there is no `.` or `..`.
    ///
    /// Cost: one child-map lookup per component, under each group's
    /// children lock, and one reference taken per step (an absolute path
    /// also walks up to the root first).
    ///
    /// Errors: [`Error::InvalidPath`] names the first component that is not
    /// a valid group name (e.g. the empty one in `"a//b"`);
    /// [`Error::NotFound`] names the deepest live group reached and the
    /// child it lacks; [`Error::Removed`] if the starting group is offline.
    pub fn lookup(&self, path: &str) -> Result<Group> {
        let (mut g, rest) = match path.strip_prefix('/') {
            Some(rest) => {
                let mut root = self.clone();
                while let Some(p) = root.parent() {
                    root = p;
                }
                (root, rest)
            }
            None => (self.clone(), path),
        };
        // Check the whole path before walking, so a malformed path is
        // reported as such whatever exists.
        if !rest.is_empty() {
            for part in rest.split('/') {
                if let Some(reason) = name_problem(part) {
                    return Err(Error::InvalidPath {
                        path: shown_path(path),
                        component: shown(part),
                        reason: if part.is_empty() {
                            "it is empty (a doubled or trailing '/')"
                        } else {
                            reason
                        },
                    });
                }
            }
        }
        if !g.is_online() {
            return Err(Error::Removed {
                path: g.inner().path(),
            });
        }
        if rest.is_empty() {
            return Ok(g);
        }
        for part in rest.split('/') {
            g = match g.child(part) {
                Some(c) => c,
                None => {
                    return Err(Error::NotFound {
                        path: shown_path(path),
                        parent: g.inner().path(),
                        component: part.to_owned(),
                    })
                }
            };
        }
        Ok(g)
    }

    /// The live children, sorted by name. Cost: one reference taken per
    /// child under this group's children lock.
    pub fn children(&self) -> Vec<Group> {
        let children = sync::lock(&self.inner().children);
        children
            .values()
            .copied()
            .filter_map(Group::from_map)
            .collect()
    }

    /// Take the group offline: it disappears from lookups and iteration,
    /// and its base reference is dropped (`percpu_ref` kill). It is an
    /// error if it still has live children. Its counts stay part of its
    /// parent's: until its last handle is dropped it is a zombie, still in
    /// its parent's subtree, so every read of an ancestor (exact or within
    /// its policy's bound) includes its updates, late ones too (reads of
    /// the zombie itself return its totals; see
    /// [`ControllerHandle::add`](crate::ControllerHandle::add)); then its
    /// final release folds what is left into the parent and frees it.
    /// Cost: the topology lock's shared side (this CPU slot's), this
    /// group's and its parent's children locks (one after the other) and a switch of its
    /// reference count to atomic mode; no flush and no system call (a
    /// group nobody else holds is released here, which flushes only the
    /// group itself).
    pub fn remove(&self) -> Result<()> {
        let Some(parent) = self.inner().parent.as_ref() else {
            return Err(Error::RootNotRemovable);
        };
        release_deferred(&self.inner().engine);
        let topo = self.inner().engine.topo.read();
        {
            // Under this group's children lock, which `create_child` holds
            // while it checks that this group is online and links a child:
            // a group is taken offline only with no child, and gets none
            // after (so a removed group's map is empty, and it is told
            // `Removed` below). The swap makes one of two racing removals
            // the remover.
            let children = sync::lock(&self.inner().children);
            if !children.is_empty() {
                return Err(Error::HasChildren {
                    path: self.inner().path(),
                    children: children.len(),
                });
            }
            if !self.inner().online.swap(false, Ordering::AcqRel) {
                return Err(Error::Removed {
                    path: self.inner().path(),
                });
            }
        }
        // Not nested in ours: no path holds a parent's children lock while
        // it takes a child's. Until this, lookups still find the offline
        // group by name (and skip nothing: it is a zombie, reads go on).
        sync::lock(&parent.inner().children).remove(&*self.inner().name);
        self.inner().engine.zombies.add();
        drop(topo);
        // No flush here: the zombie's node stays in its parent's updated
        // tree, so every flush of an ancestor still folds it, and its final
        // release folds what is left (without the heavy fence: every
        // update happened before that release). Removal thus makes no
        // system call on either update path.
        self.inner().offline_exts();
        self.inner().engine.notify_removed(self);
        // Drop the hierarchy's base reference; `self` still holds one.
        if let Err(e) = self.inner().refcnt.kill() {
            debug_assert!(false, "a group was killed twice: {e}");
        }
        Ok(())
    }

    /// Take the whole tree under (and including) this root offline: used
    /// when the engine handle is dropped. Children go first; each has its
    /// base reference dropped, so groups nobody holds are folded into
    /// their parents and freed now, and held ones become zombies.
    pub(crate) fn detach_all(&self) {
        release_deferred(&self.inner().engine);
        let mut stack = vec![self.clone()];
        let mut order = Vec::new();
        while let Some(g) = stack.pop() {
            stack.extend(g.children());
            order.push(g);
        }
        // Children first, through `remove` itself, so a concurrent `remove`
        // of the same group through another handle is serialised by the
        // group's children lock (one of the two gets `Removed`).
        for g in order.iter().rev() {
            if g.inner().parent.is_some() {
                let _ = g.remove();
            }
        }
        let topo = self.inner().engine.topo.write();
        let was_online = {
            // As in `remove`: under the children lock `create_child` checks
            // online with.
            let _children = sync::lock(&self.inner().children);
            self.inner().online.swap(false, Ordering::AcqRel)
        };
        if was_online {
            if let Err(e) = self.inner().refcnt.kill() {
                debug_assert!(false, "the root was killed twice: {e}");
            }
        }
        drop(topo);
        if was_online {
            // Tell the extensions (`GroupExt::root_offline`): e.g. the
            // memory controller stops stocking the root's charges, so the
            // accounting allocator passes through from here on.
            self.inner().offline_exts();
        }
        drop(order); // our handles; groups nobody else holds are freed here
    }
}
