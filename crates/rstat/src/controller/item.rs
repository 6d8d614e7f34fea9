//! One item of a controller, found by name once ([`ItemHandle`]): an add
//! to any group, or to the thread's current group without looking it up.

use std::sync::Arc;

use super::handle::ControllerHandle;
use super::stat_handle::StatItem;
use crate::error::{Error, Result};
use crate::group::{Group, GroupInner};
use crate::stat::css::{Css, Item, Slot};

/// One stat item of a controller, found by name once
/// ([`ControllerHandle::item`]), for any group: [`add`](Self::add) to a
/// group you hold, or [`add_current`](Self::add_current) to the calling
/// thread's current group (see [`attach`](crate::attach)) with no lookup
/// by hand.
///
/// Where [`StatItem`] is one (group, item) pair, an `ItemHandle` is one
/// item of every group: resolve it at start-up, keep it in a `static` or
/// the service's state, and charge whichever group the work is for.
///
/// Holds a [`ControllerHandle`] (three reference counts; cheap to clone).
///
/// ```
/// let rs = rstat::Rstat::new();
/// let acme = rs.root().create_child("acme")?;
/// let http = rs.register_counters("http", &["requests", "errors"])?;
/// let requests = http.item("requests")?; // a typo is an error here
/// {
///     let _in = acme.enter();
///     requests.add_current(1); // charges acme
/// }
/// requests.add_current(1); // in no group: charges the root
/// requests.add(&acme, 2)?; // or name the group
/// assert_eq!(http.read_exact(&acme)?.get("requests"), Some(3));
/// assert_eq!(http.read_exact(rs.root())?.get_local("requests"), Some(1));
/// # Ok::<(), rstat::Error>(())
/// ```
///
/// # Levels (gauges)
///
/// An item declared [`StatKind::Gauge`](crate::StatKind::Gauge) holds a
/// level: add +1 when a connection opens and -1 when it closes, and each
/// group's local total is its level, its hierarchical total the sum of its
/// subtree's. There is no `set(level)`. The engine keeps per-CPU *deltas*
/// and folds them up the tree; a set would have to become "add (new -
/// old)" with `old` the group's last set level, read and written under a
/// lock per (group, item) that no update takes. Such a set is exact only
/// while nothing else changes that item of that group: an `add` (or a set
/// through a second handle) racing it is lost or counted twice, and a
/// removed group's last level would stay in its parent's hierarchical
/// total for good (its history folds up, as for any item). Paired adds
/// have none of these problems: each is one per-CPU update, they compose
/// up the hierarchy, and a group whose adds balance leaves nothing behind
/// when it is removed. A value that is only ever *set* from one place (a
/// queue length sampled by a timer) is a reading, not a stat: export it
/// beside rstat's.
#[derive(Clone)]
pub struct ItemHandle {
    ctl: ControllerHandle,
    item: Item,
    /// The root's state of this controller, for threads in none of the
    /// engine's groups. Kept alive by `ctl.root`; the root's state is
    /// installed at registration and never replaced.
    root_css: *const Css,
}

// SAFETY: `root_css` points into the root group that `ctl` keeps
// allocated; the update path is thread-safe.
unsafe impl Send for ItemHandle {}
// SAFETY: as above.
unsafe impl Sync for ItemHandle {}

impl std::fmt::Debug for ItemHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ItemHandle")
            .field("controller", &self.ctl.name())
            .field("item", &self.name())
            .finish()
    }
}

impl ControllerHandle {
    /// The item called `name`, resolved once, for updates of any group
    /// ([`ItemHandle::add`]) or of the thread's current group
    /// ([`ItemHandle::add_current`]). Cost: a linear scan of the item
    /// names and a handle clone (three reference counts).
    ///
    /// Errors: [`Error::UnknownStatName`] (listing the controller's items)
    /// if the controller has no item `name`.
    pub fn item(&self, name: &str) -> Result<ItemHandle> {
        let Some(index) = self.index_of(name) else {
            return Err(Error::UnknownStatName {
                controller: self.name().to_owned(),
                name: name.to_owned(),
                items: self.stat_names().to_vec(),
            });
        };
        let item = self.check_item(index)?;
        let root_css = self.css_of(self.root.inner())?;
        Ok(ItemHandle {
            ctl: self.clone(),
            item,
            root_css,
        })
    }
}

impl ItemHandle {
    /// Add `delta` to this item of `group`, on this thread's CPU. Same
    /// cost, guarantees and errors as
    /// [`ControllerHandle::add`] (the item is already checked): no lock,
    /// no allocation. Updates of a removed group are accepted and reach
    /// its ancestors.
    ///
    /// Errors: [`Error::ForeignGroup`] for a group of another engine;
    /// nothing is changed.
    #[inline]
    pub fn add(&self, group: &Group, delta: i64) -> Result<()> {
        self.ctl.add(group, self.item.get(), delta)
    }

    /// Add `delta` to the group at `g` if it is one of this engine's, else
    /// to the root: the body of [`add_current`](Self::add_current), which
    /// passes the thread's current group (null: none).
    ///
    /// # Safety
    /// `g` is null or points at a group that stays allocated for the call.
    #[inline]
    pub(crate) unsafe fn add_to_ptr(&self, g: *const GroupInner, delta: i64) {
        // SAFETY: per the contract.
        let css = match unsafe { g.as_ref() } {
            Some(g) if Arc::ptr_eq(&g.engine, &self.ctl.engine) => {
                let css = self.ctl.css_for_add(g);
                if css.is_null() {
                    self.css_of_removed(g)
                } else {
                    css
                }
            }
            _ => self.root_css,
        };
        // SAFETY: `css` belongs to the group at `g` (or an ancestor it
        // holds a reference on), allocated for the call, or to the root,
        // which `self.ctl` keeps allocated.
        let css = unsafe { &*css };
        let nr_cpus = self.ctl.nr_cpus;
        css.add(self.ctl.path, || Slot::this_cpu(nr_cpus), self.item, delta);
    }

    /// The state of a group of this engine removed before this controller
    /// was registered: its nearest ancestor's.
    #[cold]
    #[inline(never)]
    fn css_of_removed(&self, g: &GroupInner) -> *const Css {
        // Cannot fail: the group is of this engine (checked by the caller).
        self.ctl.css_of(g).unwrap_or(self.root_css)
    }

    /// This item of `group`, for the hottest path: a [`StatItem`] resolves
    /// the group's state and the item's slot once. Cost: as
    /// [`ControllerHandle::stat_handle`] and [`StatHandle::item`](crate::StatHandle::item).
    ///
    /// Errors: [`Error::ForeignGroup`] for a group of another engine.
    pub fn stat_item(&self, group: &Group) -> Result<StatItem> {
        self.ctl.stat_handle(group)?.item(self.item.get())
    }

    /// The item's name.
    pub fn name(&self) -> &str {
        // Names do not change after registration; if a controller's do
        // anyway, show nothing rather than panic.
        self.ctl
            .stat_names()
            .get(self.item.get())
            .map_or("", String::as_str)
    }

    /// The item's index in its controller's list (what
    /// [`ControllerHandle::add`] takes).
    pub fn index(&self) -> usize {
        self.item.get()
    }

    /// The controller this item belongs to.
    pub fn controller(&self) -> &ControllerHandle {
        &self.ctl
    }
}
