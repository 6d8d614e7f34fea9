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

pub mod ext;

use std::collections::BTreeMap;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::controller::Css;
use crate::engine::tree::{lock_domain, TreeNode};
use crate::engine::{EngineInner, MAX_CONTROLLERS};
use crate::error::{Error, Result};
use crate::sync::{self, AtomicBool, AtomicPtr, Mutex, Ordering};
use ext::MAX_EXTS;

/// Longest group name, in bytes (as a file name in cgroupfs).
pub const MAX_NAME_LEN: usize = 255;

/// Check a group name: 1..=255 bytes, no `/`, no NUL, not `.` or `..`.
pub fn validate_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "it is empty"
    } else if name.len() > MAX_NAME_LEN {
        "it is longer than 255 bytes"
    } else if name.contains('/') {
        "it contains '/' (use create on the parent group to nest)"
    } else if name.contains('\0') {
        "it contains a NUL byte"
    } else if name == "." || name == ".." {
        "'.' and '..' are reserved"
    } else {
        return Ok(());
    };
    let shown: String = name.chars().take(64).collect();
    Err(Error::InvalidName {
        name: shown,
        reason,
    })
}

pub(crate) struct GroupInner {
    pub(crate) engine: Arc<EngineInner>,
    pub(crate) parent: Option<Arc<GroupInner>>,
    pub(crate) name: Box<str>,
    pub(crate) depth: usize,
    pub(crate) online: AtomicBool,
    pub(crate) children: Mutex<BTreeMap<Box<str>, Arc<GroupInner>>>,
    /// The group's per-controller state, in its own allocation: flushes
    /// reach it through raw pointers (from tree nodes) even while the group
    /// itself is being dropped, so it must not be covered by `&mut self`.
    /// Owned; freed at the end of `drop`.
    tables: NonNull<GroupTables>,
}

/// A group's controller states and tree nodes.
pub(crate) struct GroupTables {
    /// Per controller id; null until attached. Freed on final release.
    pub(crate) css: [AtomicPtr<Css>; MAX_CONTROLLERS],
    /// Per domain index; null until attached. Freed on final release.
    pub(crate) nodes: [AtomicPtr<TreeNode>; MAX_CONTROLLERS],
    /// Per extension id: a boxed `GroupExt::State`; null until attached.
    /// Released and freed on final release.
    pub(crate) ext: [AtomicPtr<()>; MAX_EXTS],
}

// SAFETY: `tables` is owned (like a Box) and holds only atomics.
unsafe impl Send for GroupInner {}
// SAFETY: as above.
unsafe impl Sync for GroupInner {}

impl GroupInner {
    pub(crate) fn new(
        engine: Arc<EngineInner>,
        parent: Option<Arc<GroupInner>>,
        name: &str,
    ) -> Self {
        let depth = parent.as_ref().map_or(0, |p| p.depth + 1);
        GroupInner {
            engine,
            parent,
            name: name.into(),
            depth,
            online: AtomicBool::new(true),
            children: Mutex::new(BTreeMap::new()),
            tables: NonNull::from(Box::leak(Box::new(GroupTables {
                css: core::array::from_fn(|_| AtomicPtr::new(core::ptr::null_mut())),
                nodes: core::array::from_fn(|_| AtomicPtr::new(core::ptr::null_mut())),
                ext: core::array::from_fn(|_| AtomicPtr::new(core::ptr::null_mut())),
            }))),
        }
    }

    /// The controller and node tables.
    #[inline(always)]
    pub(crate) fn tables(&self) -> &GroupTables {
        // SAFETY: allocated in `new`, freed only at the end of `drop`.
        unsafe { self.tables.as_ref() }
    }

    /// The tables, for flush code holding only a raw group pointer.
    pub(crate) fn tables_ptr(&self) -> *const GroupTables {
        self.tables.as_ptr()
    }

    pub(crate) fn path(&self) -> String {
        let mut parts = Vec::new();
        let mut g = self;
        while let Some(p) = g.parent.as_deref() {
            parts.push(&*g.name);
            g = p;
        }
        parts.reverse();
        parts.join("/")
    }
}

impl Drop for GroupInner {
    /// Final release: nothing references this group any more (no handle, no
    /// child, not in its parent's map), so no updater can touch it. Fold
    /// what is left into the parent and return the per-CPU state.
    fn drop(&mut self) {
        // SAFETY: the tables are live until freed at the end of this
        // function; flushes below reach them through the same raw pointer.
        let tables: &GroupTables = unsafe { &*self.tables.as_ptr() };
        self.release_exts(tables);
        for slot in tables.nodes.iter() {
            let node = slot.load(Ordering::Acquire);
            if node.is_null() {
                continue;
            }
            // SAFETY: installed nodes stay valid until freed just below; the
            // domain outlives the engine's groups.
            let (node, domain) = unsafe { (&*node, &*(*node).domain) };
            let mut scratch = lock_domain(domain);
            // SAFETY: lock held; `node` is live. The flush drains every
            // backlog first, so after it no list holds this node, and cuts it
            // from every CPU's tree (it has no children: they would hold it).
            unsafe { domain.flush_locked(&mut scratch, node) };
        }
        let mut arena = sync::lock(&self.engine.arena);
        for slot in tables.css.iter() {
            let css = slot.swap(core::ptr::null_mut(), Ordering::AcqRel);
            if !css.is_null() {
                // SAFETY: created by Box::into_raw at attach; unreachable now.
                let css = unsafe { Box::from_raw(css) };
                // SAFETY: allocated from this arena; no reference remains.
                unsafe { arena.free(css.stats) };
            }
        }
        for slot in tables.nodes.iter() {
            let node = slot.swap(core::ptr::null_mut(), Ordering::AcqRel);
            if !node.is_null() {
                // SAFETY: as above.
                let node = unsafe { Box::from_raw(node) };
                // SAFETY: as above; drained and cut from every tree.
                unsafe { arena.free(node.links) };
            }
        }
        drop(arena);
        // SAFETY: allocated by Box in `new`; nothing references it now.
        drop(unsafe { Box::from_raw(self.tables.as_ptr()) });
    }
}

/// A handle to a group. Cheap to clone; keeps the group's memory alive
/// (but not online: see [`remove`](Group::remove)).
#[derive(Clone)]
pub struct Group(pub(crate) Arc<GroupInner>);

impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group")
            .field("path", &self.path())
            .field("online", &self.is_online())
            .finish()
    }
}

impl PartialEq for Group {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
impl Eq for Group {}

impl Group {
    /// The group's name ("" for the root).
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Path from the root, `/`-separated ("" for the root). Cost: walks the
    /// ancestors and allocates.
    pub fn path(&self) -> String {
        self.0.path()
    }

    /// Depth below the root (root = 0).
    pub fn depth(&self) -> usize {
        self.0.depth
    }

    /// Whether the group is online (not removed).
    pub fn is_online(&self) -> bool {
        self.0.online.load(Ordering::Acquire)
    }

    /// The parent group; `None` for the root.
    pub fn parent(&self) -> Option<Group> {
        self.0.parent.clone().map(Group)
    }

    /// Create a child called `name`. Cost: the topology lock, one per-CPU
    /// arena allocation per controller and per domain, a few heap
    /// allocations.
    pub fn create_child(&self, name: &str) -> Result<Group> {
        validate_name(name)?;
        let engine = &self.0.engine;
        let topo = sync::lock(&engine.topo);
        if !self.is_online() {
            return Err(Error::Removed { path: self.path() });
        }
        let mut children = sync::lock(&self.0.children);
        if children.contains_key(name) {
            return Err(Error::NameExists {
                parent: self.path(),
                name: name.to_owned(),
            });
        }
        let child = Arc::new(GroupInner::new(
            Arc::clone(engine),
            Some(Arc::clone(&self.0)),
            name,
        ));
        if let Err(e) = engine.attach(&topo, &child, None) {
            // Dropping `child` frees what was attached; its release takes
            // the topology lock, so let go of it first.
            drop(children);
            drop(topo);
            drop(child);
            return Err(e);
        }
        children.insert(name.into(), Arc::clone(&child));
        Ok(Group(child))
    }

    /// The live child called `name`. Cost: one map lookup under this group's
    /// children lock.
    pub fn child(&self, name: &str) -> Option<Group> {
        sync::lock(&self.0.children).get(name).cloned().map(Group)
    }

    /// The live descendant at relative `path` (`"a/b/c"`; `""` is `self`).
    pub fn lookup(&self, path: &str) -> Result<Group> {
        let mut g = self.clone();
        if path.is_empty() {
            return if g.is_online() {
                Ok(g)
            } else {
                Err(Error::NotFound {
                    path: path.to_owned(),
                })
            };
        }
        for part in path.split('/') {
            validate_name(part)?;
            g = g.child(part).ok_or_else(|| Error::NotFound {
                path: path.to_owned(),
            })?;
        }
        Ok(g)
    }

    /// The live children, sorted by name. Cost: clones the handles under
    /// this group's children lock.
    pub fn children(&self) -> Vec<Group> {
        sync::lock(&self.0.children)
            .values()
            .cloned()
            .map(Group)
            .collect()
    }

    /// Take the group offline: it disappears from lookups and iteration,
    /// and its stats are flushed into its parent, in every controller. It is
    /// an error if it still has live children. Handles keep working (reads
    /// return its final totals plus any late updates; see
    /// [`ControllerHandle::add`](crate::ControllerHandle::add)). Cost: the
    /// topology lock, then one subtree flush per domain.
    pub fn remove(&self) -> Result<()> {
        let Some(parent) = self.0.parent.as_ref() else {
            return Err(Error::RootNotRemovable);
        };
        let topo = sync::lock(&self.0.engine.topo);
        if !self.is_online() {
            return Err(Error::Removed { path: self.path() });
        }
        let live = sync::lock(&self.0.children).len();
        if live > 0 {
            return Err(Error::HasChildren {
                path: self.path(),
                children: live,
            });
        }
        self.0.online.store(false, Ordering::Release);
        let unlinked = sync::lock(&parent.children).remove(&self.0.name);
        drop(topo);
        for slot in self.0.tables().nodes.iter() {
            let node = slot.load(Ordering::Acquire);
            if node.is_null() {
                continue;
            }
            // SAFETY: nodes live as long as the group, which `self` holds.
            let (node, domain) = unsafe { (&*node, &*(*node).domain) };
            let mut scratch = lock_domain(domain);
            // SAFETY: lock held; node live.
            unsafe { domain.flush_locked(&mut scratch, node) };
        }
        self.0.offline_exts();
        drop(unlinked); // not the last reference: `self` holds one
        Ok(())
    }
}

impl GroupInner {
    /// Run every extension's `offline` hook (after removal).
    fn offline_exts(&self) {
        let exts = sync::lock(&self.engine.topo).exts.clone();
        for (id, e) in exts.iter().enumerate() {
            let s = self.tables().ext[id].load(Ordering::Acquire);
            if s.is_null() {
                continue;
            }
            let parent = self.parent.as_ref().map_or(core::ptr::null_mut(), |p| {
                p.tables().ext[id].load(Ordering::Acquire)
            });
            // SAFETY: states live as long as their groups; the parent is
            // alive (we hold it).
            unsafe { e.offline_erased(s, parent) };
        }
    }

    /// Final release of every extension's state: `release` hook, then drop.
    fn release_exts(&self, tables: &GroupTables) {
        let exts = sync::lock(&self.engine.topo).exts.clone();
        for (id, e) in exts.iter().enumerate() {
            let s = tables.ext[id].swap(core::ptr::null_mut(), Ordering::AcqRel);
            if s.is_null() {
                continue;
            }
            let parent = self.parent.as_ref().map_or(core::ptr::null_mut(), |p| {
                p.tables().ext[id].load(Ordering::Acquire)
            });
            // SAFETY: `s` is this group's state, unreachable by anyone else
            // now (no references remain); the parent is alive (we hold it).
            unsafe {
                e.release_erased(s, parent);
                e.destroy_erased(s);
            }
        }
    }

    /// Detach every descendant from the tree (used when the engine handle is
    /// dropped), breaking parent <-> child reference cycles. Handles held
    /// elsewhere stay readable as zombies.
    pub(crate) fn detach_all(self: &Arc<Self>) {
        let mut stack = vec![Arc::clone(self)];
        let mut order = Vec::new();
        while let Some(g) = stack.pop() {
            g.online.store(false, Ordering::Release);
            stack.extend(sync::lock(&g.children).values().cloned());
            order.push(g);
        }
        // Children before parents, so each drop finds its parent alive.
        for g in order.iter().rev() {
            if g.parent.is_some() {
                g.offline_exts();
            }
            let taken = core::mem::take(&mut *sync::lock(&g.children));
            drop(taken);
        }
    }
}
