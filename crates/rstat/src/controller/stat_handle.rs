//! A (group, controller) pair resolved once ([`StatHandle`]) and one of
//! its items checked once ([`StatItem`]): the handles of the hot update
//! paths and of reads that sweep the same groups again and again.

use crate::error::{Error, Result};
use crate::group::Group;
use crate::stat::css::{Css, Item, Slot};
use crate::stat::ops::{CtlEntry, TotalsCopy};
use crate::stat::policy;
use crate::stat::update::{ItemPath, PathCopy};

use super::stats::GroupStats;

/// A (group, controller) pair resolved once, for the hottest update and
/// read paths. Holds a reference on the group.
#[derive(Clone)]
pub struct StatHandle {
    pub(super) group: Group,
    pub(super) css: *const Css,
    /// The controller's item count (registration caps it far below
    /// `u32::MAX`), beside `cpu_root` in one word: a [`StatItem`] is one
    /// cache line.
    pub(super) nr_stats: u32,
    /// The group is the root and the controller the engine's `cpu`
    /// controller: its reads are the process's (`process.rs`).
    pub(super) cpu_root: bool,
    pub(super) nr_cpus: usize,
    /// The engine's update path, so `add` tests it on this handle's line.
    pub(super) path: PathCopy,
}

// SAFETY: the css is owned by `group`, which this handle keeps alive; the
// update path is thread-safe.
unsafe impl Send for StatHandle {}
// SAFETY: as above.
unsafe impl Sync for StatHandle {}

impl StatHandle {
    /// The group's totals for this controller, as fresh as its
    /// [flush policy](crate::stat::policy) makes them: the same totals,
    /// bound and cost as
    /// [`ControllerHandle::read`](crate::ControllerHandle::read) of this
    /// handle's group, without resolving the group's state (one cache line
    /// of the group fewer, the line a reader sweeping many groups finds
    /// cold). Hold one per group read often (as a `prometheus` user holds
    /// a metric's children), and read through it. A handle of a removed
    /// group reads the totals its group had when its last flush ran.
    pub fn read(&self) -> GroupStats {
        let css = self.css();
        // SAFETY: a controller's domain lives as long as its engine, which
        // the group keeps alive.
        let domain = unsafe { &*css.ctl.domain };
        self.stats(css, css.ctl.flush_policy().read(domain, css))
    }

    /// Exact totals of the group for this controller, whatever the policy:
    /// every update that completed before the call is included. As
    /// [`ControllerHandle::read_exact`](crate::ControllerHandle::read_exact)
    /// of this handle's group (the controller's flush lock and a flush of
    /// the group's subtree), without resolving the group's state.
    pub fn read_exact(&self) -> GroupStats {
        let css = self.css();
        // SAFETY: as in `read`.
        let domain = unsafe { &*css.ctl.domain };
        self.stats(css, policy::read_flushed(domain, css))
    }

    fn css(&self) -> &Css {
        // SAFETY: the css lives as long as its group, which `self` holds.
        unsafe { &*self.css }
    }

    fn stats(&self, css: &Css, totals: TotalsCopy) -> GroupStats {
        // The group's line only for the cpu controller's root.
        let cpu_root = self.cpu_root.then(|| &**self.group.inner().engine);
        GroupStats::of_read(css.ctl.to_arc(), totals, cpu_root)
    }

    /// Add `delta` to stat `item` on this thread's CPU. Same cost,
    /// guarantees and result as
    /// [`ControllerHandle::add`](crate::ControllerHandle::add), minus the
    /// lookups: the two checked ways to update return the same `Result`.
    /// A [`StatItem`] ([`item`](Self::item),
    /// [`item_named`](Self::item_named)) checks the index once instead, and
    /// its `add` cannot fail.
    ///
    /// Errors: [`Error::UnknownStat`] for an item out of range; nothing is
    /// changed.
    #[inline(always)]
    pub fn add(&self, item: usize, delta: i64) -> Result<()> {
        let Some(it) = Item::new(item, self.nr_stats as usize) else {
            return Err(self.unknown(item));
        };
        // SAFETY: `self.group` keeps the css alive.
        let css = unsafe { &*self.css };
        let nr_cpus = self.nr_cpus;
        css.add(self.path, || Slot::this_cpu(nr_cpus), it, delta);
        Ok(())
    }

    #[cold]
    fn unknown(&self, index: usize) -> Error {
        Error::UnknownStat {
            controller: self.ctl().name.to_string(),
            index,
            len: self.nr_stats as usize,
        }
    }

    /// Add several `(item, delta)` pairs with one on-list check. Items out
    /// of range are skipped; returns how many were applied.
    #[must_use = "items out of range are skipped; compare the count with the number of pairs"]
    #[inline]
    pub fn add_many(&self, items: &[(usize, i64)]) -> usize {
        // SAFETY: `self.group` keeps the css alive.
        unsafe { &*self.css }.add_many(self.path, self.nr_cpus, items)
    }

    /// Item `index` of this handle's controller, checked once: the returned
    /// [`StatItem`]'s `add` cannot fail. Cost: a range check and one group
    /// reference (the item holds its own copy of this handle).
    ///
    /// Errors: [`Error::UnknownStat`] if the controller has no item `index`.
    pub fn item(&self, index: usize) -> Result<StatItem> {
        let Some(item) = Item::new(index, self.nr_stats as usize) else {
            return Err(self.unknown(index));
        };
        Ok(StatItem {
            // SAFETY: the handle keeps the css alive.
            path: unsafe { &*self.css }.item_path(item),
            handle: self.clone(),
        })
    }

    /// The item called `name`, checked once (see [`item`](Self::item)).
    /// Cost: a linear scan of the item names and one group reference;
    /// resolve once, then update through the [`StatItem`].
    ///
    /// Errors: [`Error::UnknownStatName`] (listing the controller's items)
    /// if there is no such item.
    pub fn item_named(&self, name: &str) -> Result<StatItem> {
        let names = self.ctl().imp.stat_names();
        match names.iter().position(|n| n == name) {
            Some(index) => self.item(index),
            None => Err(Error::UnknownStatName {
                controller: self.ctl().name.to_string(),
                name: name.to_owned(),
                items: names.to_vec(),
            }),
        }
    }

    /// The group this handle charges.
    pub fn group(&self) -> &Group {
        &self.group
    }

    fn ctl(&self) -> &CtlEntry {
        // SAFETY: `self.group` keeps the css alive.
        unsafe { &(*self.css).ctl }
    }
}

/// One stat item of one (group, controller) pair, range-checked when it
/// was made ([`StatHandle::item`], [`StatHandle::item_named`]), so its
/// [`add`](Self::add) cannot fail and returns nothing to check.
///
/// Holds a reference on the group, like [`StatHandle`]; cheap to clone (one
/// per-CPU reference get). Aligned to and sized as one cache line: an
/// update reads its handle from one line, whatever array holds it (a
/// struct holding one is padded to that alignment).
///
/// ```
/// let rs = rstat::Rstat::new();
/// let g = rs.root().create_child("g")?;
/// let io = rs.register_counters("io", &["rbytes", "wbytes"])?;
/// let rbytes = io.stat_handle(&g)?.item_named("rbytes")?; // checked once
/// rbytes.add(4096); // cannot fail
/// assert_eq!(io.read_exact(&g)?.get("rbytes"), Some(4096));
/// assert!(io.stat_handle(&g)?.item_named("rbyte").is_err()); // a typo is an error
/// # Ok::<(), rstat::Error>(())
/// ```
#[derive(Clone)]
#[repr(C, align(64))]
pub struct StatItem {
    /// The item's slot and links, resolved once (see `ItemPath`).
    path: ItemPath,
    handle: StatHandle,
}

// SAFETY: `path` points into the css that `handle` keeps alive; the update
// path is thread-safe.
unsafe impl Send for StatItem {}
// SAFETY: as above.
unsafe impl Sync for StatItem {}

impl std::fmt::Debug for StatItem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatItem")
            .field("controller", &self.handle.ctl().name)
            .field("item", &self.name())
            .field("group", &self.handle.group)
            .finish()
    }
}

impl StatItem {
    /// Add `delta` on this thread's CPU. Cost: as [`StatHandle::add`]
    /// without the range check or the lookups: the item's slot and links
    /// addresses were resolved when this `StatItem` was made, so the
    /// update is one section (or uncontended atomic add) on this CPU's
    /// slot and one load of this CPU's on-list flag, reading nothing else
    /// but this handle; no lock, no allocation.
    #[inline(always)]
    pub fn add(&self, delta: i64) {
        // SAFETY: `self.handle` keeps the css alive, and its engine's
        // `nr_cpus` is the handle's.
        unsafe {
            self.path.add(
                &self.handle.css,
                self.handle.path,
                self.handle.nr_cpus,
                delta,
            )
        };
    }

    /// The item's index in its controller's list.
    pub fn index(&self) -> usize {
        self.path.item()
    }

    /// The item's name.
    pub fn name(&self) -> &str {
        // A controller's names must not change after registration; if one
        // does anyway, show nothing rather than panic.
        self.handle
            .ctl()
            .imp
            .stat_names()
            .get(self.path.item())
            .map_or("", String::as_str)
    }

    /// The (group, controller) handle this item belongs to.
    pub fn handle(&self) -> &StatHandle {
        &self.handle
    }
}
