//! The counter-set controller (user-named counters) and the controller
//! handle: updates, reads and flushes of one controller in any group.

use std::sync::Arc;

use super::{Controller, StatKind};
use crate::error::{Error, Result};
use crate::group::EngineInner;
use crate::group::{Group, GroupInner};
use crate::stat::css::{Css, Item, Slot};
use crate::stat::ops::{CtlEntry, TotalsCopy};
use crate::stat::policy::{self, FlushPolicy};
use crate::stat::tree::lock_domain;
use crate::stat::update::PathCopy;
use crate::sync::Ordering;

use super::stat_handle::StatHandle;
use super::stats::{GroupStats, TotalsBatch};

/// A controller made only of named counters with the standard fold: what
/// [`Rstat::register_counters`](crate::Rstat::register_counters) registers
/// and what the built-in `cpu` controller is.
pub struct CounterSetController {
    name: String,
    items: Vec<String>,
    units: Vec<u64>,
    kinds: Vec<StatKind>,
}

impl CounterSetController {
    /// A counter set named `name` with the given items, each in unit 1.
    pub fn new(name: &str, items: &[&str]) -> Self {
        CounterSetController {
            name: name.to_owned(),
            items: items.iter().map(|s| (*s).to_owned()).collect(),
            units: vec![1; items.len()],
            kinds: vec![StatKind::Counter; items.len()],
        }
    }

    /// A counter set named `name` with the given `(item, unit)` pairs: see
    /// [`Controller::stat_units`] for what a unit is (e.g. `("bytes",
    /// 4096)` for bytes charged in pages). Units are checked at
    /// registration.
    pub fn with_units(name: &str, items: &[(&str, u64)]) -> Self {
        CounterSetController {
            name: name.to_owned(),
            items: items.iter().map(|(s, _)| (*s).to_owned()).collect(),
            units: items.iter().map(|&(_, u)| u).collect(),
            kinds: vec![StatKind::Counter; items.len()],
        }
    }

    /// Declare each item's [`StatKind`], in item order (every item is a
    /// [`Counter`](StatKind::Counter) unless declared otherwise): an item
    /// that goes up and down is a [`Gauge`](StatKind::Gauge), so an
    /// exporter types it as one. A list whose length is not the items'
    /// is refused at registration ([`Error::InvalidController`]).
    ///
    /// ```
    /// use rstat::{CounterSetController, StatKind};
    /// let rs = rstat::Rstat::new();
    /// let pool = rs.register(
    ///     CounterSetController::new("pool", &["in_use", "served"])
    ///         .with_kinds(&[StatKind::Gauge, StatKind::Counter]),
    /// )?;
    /// assert_eq!(pool.stat_kinds(), [StatKind::Gauge, StatKind::Counter]);
    /// # Ok::<(), rstat::Error>(())
    /// ```
    pub fn with_kinds(mut self, kinds: &[StatKind]) -> Self {
        self.kinds = kinds.to_vec();
        self
    }
}

impl Controller for CounterSetController {
    fn name(&self) -> &str {
        &self.name
    }
    fn stat_names(&self) -> &[String] {
        &self.items
    }
    fn stat_units(&self) -> Vec<u64> {
        self.units.clone()
    }
    fn stat_kinds(&self) -> Vec<StatKind> {
        self.kinds.clone()
    }
}

/// A registered controller: update and read its stats in any group.
///
/// Cheap to clone (three reference counts: the engine, the controller and
/// the engine's root group). A handle keeps the root group allocated (not
/// live: dropping the [`Rstat`](crate::Rstat) still takes it offline), so
/// do not keep one in a group's own extension state
/// ([`GroupExt`](crate::GroupExt)): the root would hold itself.
#[derive(Clone)]
pub struct ControllerHandle {
    pub(crate) engine: Arc<EngineInner>,
    pub(crate) ctl: Arc<CtlEntry>,
    /// Copies of `ctl.id` and `ctl.nr_stats`, so [`add`](Self::add)
    /// checks its arguments without dereferencing `ctl`.
    id: usize,
    nr_stats: usize,
    /// Copies of the engine's slot count and update path, so
    /// [`add`](Self::add) reads nothing from the engine or the css for
    /// them.
    pub(super) nr_cpus: usize,
    pub(super) path: PathCopy,
    /// The engine's root, where an [`ItemHandle::add_current`](crate::ItemHandle::add_current) of a
    /// thread in none of this engine's groups goes (as
    /// [`Rstat::current_group`](crate::Rstat::current_group) says).
    pub(super) root: Group,
}

/// A handle to a counter-set controller.
pub type CounterSet = ControllerHandle;

impl std::fmt::Debug for ControllerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerHandle")
            .field("name", &self.ctl.name)
            .finish()
    }
}

impl ControllerHandle {
    /// A handle on `ctl`, a controller of `engine`, whose root is `root`.
    pub(crate) fn new(engine: Arc<EngineInner>, ctl: Arc<CtlEntry>, root: Group) -> Self {
        debug_assert!(
            Arc::ptr_eq(&root.inner().engine, &engine) && root.inner().parent.is_none(),
            "a controller handle's root is its engine's root"
        );
        let (id, nr_stats) = (ctl.id, ctl.nr_stats);
        assert!(
            id < crate::stat::ops::MAX_CONTROLLERS,
            "controller id {id} past the group's table: registration must refuse it"
        );
        // SAFETY: a controller's domain lives as long as its engine, which
        // `engine` holds.
        let domain = unsafe { &*ctl.domain };
        // Every css of the domain copies the same (`Css::new`).
        let path = PathCopy::of(domain);
        ControllerHandle {
            nr_cpus: engine.nr_cpus,
            engine,
            ctl,
            id,
            nr_stats,
            path,
            root,
        }
    }

    /// The controller's name.
    pub fn name(&self) -> &str {
        &self.ctl.name
    }

    /// The stat item names, in index order.
    pub fn stat_names(&self) -> &[String] {
        self.ctl.imp.stat_names()
    }

    /// Each item's declared unit ([`Controller::stat_units`]), in index
    /// order: what one unit of the `Threshold` counting, and of its
    /// staleness bound, stands for. Allocates.
    pub fn stat_units(&self) -> Vec<u64> {
        self.ctl
            .unit_shifts
            .iter()
            .map(|&s| 1u64 << (u32::from(s) - crate::stat::css::UPDATE_BATCH_SHIFT))
            .collect()
    }

    /// Each item's declared kind ([`Controller::stat_kinds`]), in index
    /// order: counter (only grows) or gauge (goes up and down). Allocates.
    pub fn stat_kinds(&self) -> Vec<StatKind> {
        self.ctl.imp.stat_kinds()
    }

    /// The index of the item called `name`, for [`add`](Self::add). Cost:
    /// a linear scan; resolve once (or resolve a [`StatItem`] by name with
    /// [`StatHandle::item_named`]).
    ///
    /// [`StatItem`]: crate::StatItem
    /// [`StatHandle::item_named`]: crate::StatHandle::item_named
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.stat_names().iter().position(|n| n == name)
    }

    /// Resolve `group`'s state for this controller. A group removed before
    /// this controller was registered has none: its nearest ancestor's is
    /// used (the root always has one).
    pub(super) fn css_of(&self, group: &GroupInner) -> Result<*const Css> {
        // The common case, one line of the group and one of the css: a css
        // whose controller entry is ours is of this engine (another
        // engine's group has other entries).
        let css = group.css[self.ctl.id].load(Ordering::Acquire);
        // SAFETY: an installed css lives as long as its group, which the
        // caller holds.
        if let Some(c) = unsafe { css.as_ref() } {
            if core::ptr::eq(&*c.ctl, &*self.ctl) {
                return Ok(css);
            }
        }
        if !Arc::ptr_eq(&group.engine, &self.engine) {
            return Err(Error::ForeignGroup);
        }
        let mut g = group;
        loop {
            let css = g.css[self.ctl.id].load(Ordering::Acquire);
            if !css.is_null() {
                return Ok(css);
            }
            match g.parent.as_ref() {
                Some(p) => g = p.inner(),
                None => unreachable!("the root has every registered controller's state"),
            }
        }
    }

    pub(super) fn check_item(&self, item: usize) -> Result<Item> {
        Item::new(item, self.ctl.nr_stats).ok_or_else(|| Error::UnknownStat {
            controller: self.ctl.name.to_string(),
            index: item,
            len: self.ctl.nr_stats,
        })
    }

    /// Add `delta` to stat `item` of `group`, on this thread's CPU.
    ///
    /// Cost: no lock, no allocation; the update of
    /// [`StatItem::add`](crate::StatItem::add) (one uncontended add on this CPU's slot and one
    /// load of this CPU's on-list flag; the first update of a group after a
    /// flush also pushes it on a lock-free per-CPU list) plus the lookup of
    /// the group's state: a range check, the group's engine compared with
    /// this one's, and the group's entry for this controller (the group
    /// keeps its states inline: one load), then the state's fields. For
    /// the hottest paths, [`stat_handle`](Self::stat_handle) and
    /// [`StatHandle::item`] resolve the lookup once.
    ///
    /// Updates through a handle to a removed group are accepted: they reach
    /// its ancestors' hierarchical totals at their next flush (as late stats
    /// of a dying cgroup do), and no live group's local totals.
    ///
    /// Errors: [`Error::UnknownStat`] for an item out of range,
    /// [`Error::ForeignGroup`] for a group of another engine; nothing is
    /// changed.
    #[inline(always)]
    pub fn add(&self, group: &Group, item: usize, delta: i64) -> Result<()> {
        let g = group.inner();
        // Each failed check calls the cold path itself, so the common path
        // falls straight through (a shared exit made it a taken branch).
        let Some(it) = Item::new(item, self.nr_stats) else {
            return self.add_slow(g, item, delta);
        };
        if !Arc::ptr_eq(&g.engine, &self.engine) {
            return self.add_slow(g, item, delta);
        }
        let css = self.css_for_add(g);
        if css.is_null() {
            return self.add_slow(g, item, delta);
        }
        // SAFETY: `css` is this controller's state of `group`, kept alive by
        // `group`.
        let css = unsafe { &*css };
        let nr_cpus = self.nr_cpus;
        css.add(self.path, || Slot::this_cpu(nr_cpus), it, delta);
        Ok(())
    }

    /// The common case of [`add`](Self::add)'s lookup, once the item and
    /// the engine are checked: `group`'s own state of this controller, or
    /// null. A group of this engine has this controller's state, if any, at
    /// this controller's id; the engine check is one load from the group,
    /// independent of the table load (checking the css's controller
    /// instead would add a fourth dependent load before the update).
    #[inline(always)]
    pub(super) fn css_for_add(&self, group: &GroupInner) -> *const Css {
        // A non-null css of `group` lives as long as the group, which the
        // caller's handle keeps alive.
        // SAFETY: `id < MAX_CONTROLLERS`, the table's length: registration
        // refuses any other id (checked again in `new`), so the bounds
        // check would be one more compare per update for nothing.
        unsafe { group.css.get_unchecked(self.id) }.load(Ordering::Acquire)
    }

    /// The rest of [`add`](Self::add): an error, or a group removed before
    /// this controller was registered (which charges its nearest
    /// ancestor's state).
    #[cold]
    #[inline(never)]
    fn add_slow(&self, group: &GroupInner, item: usize, delta: i64) -> Result<()> {
        let item = self.check_item(item)?;
        let css = self.css_of(group)?;
        // SAFETY: `css` is kept alive by `group`.
        let css = unsafe { &*css };
        let nr_cpus = self.nr_cpus;
        css.add(self.path, || Slot::this_cpu(nr_cpus), item, delta);
        Ok(())
    }

    /// As [`add`](Self::add) but on an explicit CPU slot (folded into
    /// range), with a locked add. For tests and models that must control
    /// placement: on the [`Rseq`](crate::UpdatePath::Rseq) update path,
    /// do not race it with [`add`](Self::add)s of threads running on that
    /// CPU (a restartable section's add is not atomic against another
    /// CPU's); use [`Builder::update_path`](crate::Builder::update_path)
    /// `(Locked)` for such mixes.
    pub(crate) fn add_on_slot(
        &self,
        group: &Group,
        cpu: usize,
        item: usize,
        delta: i64,
    ) -> Result<()> {
        let item = self.check_item(item)?;
        let css = self.css_of(group.inner())?;
        // SAFETY: as in `add`.
        unsafe { &*css }.add_on(Slot::fold(cpu, self.nr_cpus), item, delta);
        Ok(())
    }

    /// `(flushes, folds)` performed so far on this controller's domain: how
    /// many subtree flushes ran, and how many (group, CPU) folds they did.
    /// Takes the flush lock.
    pub fn flush_counts(&self) -> (u64, u64) {
        // SAFETY: a controller's domain lives as long as its engine.
        let s = lock_domain(unsafe { &*self.ctl.domain });
        (s.flushes, s.folds)
    }

    /// How many times this controller's [`flush`](Controller::flush)
    /// panicked. Each panic was contained: that (group, CPU)'s fold was
    /// undone and left for the next flush (see
    /// [`controller`](crate::controller)'s `# A flush that panics`), so a
    /// non-zero count means reads may have been stale, not wrong, and a
    /// count that keeps growing means some group's totals are not
    /// advancing. Always 0 for counter sets. Cost: one load, no lock.
    pub fn flush_panics(&self) -> u64 {
        self.ctl.flush_panics.load(Ordering::Relaxed)
    }

    /// A pre-resolved (group, controller) handle for the hot path.
    pub fn stat_handle(&self, group: &Group) -> Result<StatHandle> {
        let css = self.css_of(group.inner())?;
        Ok(StatHandle {
            group: group.clone(),
            css,
            // At most `MAX_STAT_ITEMS` (registration checks it).
            nr_stats: self.ctl.nr_stats as u32,
            cpu_root: self.is_cpu_root(group),
            nr_cpus: self.engine.nr_cpus,
            path: self.path,
        })
    }

    /// Flush `group`'s subtree for this controller without reading: the
    /// kernel's `css_rstat_flush`. Same cost and guarantee as
    /// [`read`](Self::read), without the copy.
    pub fn flush(&self, group: &Group) -> Result<()> {
        let css = self.css_of(group.inner())?;
        // SAFETY: kept alive by `group`; a css's domain and node outlive it.
        let (domain, node) = unsafe { (&*self.ctl.domain, &*(*css).node) };
        let mut scratch = lock_domain(domain);
        // SAFETY: lock held; `node` is live and in `domain`.
        unsafe { domain.flush_locked(&mut scratch, node) };
        Ok(())
    }

    /// Local and hierarchical totals of `group`, as fresh as this
    /// controller's [flush policy](crate::stat::policy) makes them. Under
    /// `Threshold` (the default): within the policy's unit bound
    /// ([`FlushPolicy::staleness_bound`]), or including every update that
    /// completed a read pace before the call
    /// ([`Rstat::read_pace`](crate::Rstat::read_pace)); see the policy
    /// module's "The bound".
    ///
    /// Cost by policy: `Always`, and `Threshold` when over its threshold
    /// with no flush of `group`'s subtree or of the root's started within
    /// the read pace, take this controller's flush lock (not any other
    /// controller's, unless the engine is unified) and flush `group`'s
    /// subtree: for each CPU, drain its backlog and fold the groups under
    /// `group` that changed. Otherwise the read takes no lock and copies the
    /// last folded totals. A `Threshold` read with a pace first reads the
    /// clock and the root's flush stamp: while a flush started less than
    /// half the pace ago (what the periodic flusher keeps up under a stream
    /// of updates), that is all it loads before the copy; otherwise it sums
    /// the group's nr_cpus pending counters, and past the threshold asks
    /// the periodic flusher for a root flush (a flag test, and a wake-up
    /// for the first asker). The copy is returned inline for a controller of
    /// up to two items (no allocation), else in one allocation.
    ///
    /// This call first finds `group`'s state for the controller (a line of
    /// the group). A caller that reads the same groups again and again (a
    /// dashboard sweeping its tenants) holds a [`StatHandle`] per group and
    /// reads through [`StatHandle::read`], which starts from the state.
    pub fn read(&self, group: &Group) -> Result<GroupStats> {
        let css = self.css_of(group.inner())?;
        // SAFETY: kept alive by `group`; a controller's domain lives as long
        // as its engine.
        let (css, domain) = unsafe { (&*css, &*self.ctl.domain) };
        let totals = self.flush_policy().read(domain, css);
        Ok(self.stats_of(group, totals))
    }

    /// The [`GroupStats`] of a read of `group`: its totals, the root's of
    /// the cpu controller made the process's.
    fn stats_of(&self, group: &Group, totals: TotalsCopy) -> GroupStats {
        let cpu_root = self.is_cpu_root(group).then_some(&*self.engine);
        GroupStats::of_read(Arc::clone(&self.ctl), totals, cpu_root)
    }

    /// Whether `group` is the root and this the engine's `cpu` controller,
    /// whose root is the process (`process.rs`).
    fn is_cpu_root(&self, group: &Group) -> bool {
        group.inner().parent.is_none() && self.engine.cpu_ctl_id == Some(self.id)
    }

    /// Exact local and hierarchical totals of `group`, whatever the policy:
    /// every update that completed before the call is included.
    ///
    /// Cost: this controller's flush lock and a flush of `group`'s subtree
    /// (see [`read`](Self::read)); the copy as there.
    pub fn read_exact(&self, group: &Group) -> Result<GroupStats> {
        let css = self.css_of(group.inner())?;
        // SAFETY: as in `read`.
        let (css, domain) = unsafe { (&*css, &*self.ctl.domain) };
        let totals = policy::read_flushed(domain, css);
        Ok(self.stats_of(group, totals))
    }

    /// Flush the subtree of each group of `flush`, then copy the totals of
    /// each group of `read`, all under one hold of this controller's flush
    /// lock: the totals come from one state of the controller, which only
    /// flushes change and none can run meanwhile. So for a group and its
    /// children among `read` whose subtrees were flushed here, the group's
    /// hierarchical totals are its local ones plus its children's and its
    /// removed descendants' history: what snapshots
    /// ([`report`](crate::report)) promise. Exact as of the start for the
    /// flushed subtrees, as [`read_exact`](Self::read_exact).
    ///
    /// Errors before locking (a foreign group); the caller's groups keep
    /// every css alive, and none is dropped under the lock (a final release
    /// takes it). Cost: the flushes, then a copy of each group's totals
    /// into one buffer allocated before locking, all with the lock held.
    pub(crate) fn read_consistent(&self, flush: &[&Group], read: &[Group]) -> Result<TotalsBatch> {
        let read_groups = read;
        let flush = flush
            .iter()
            .map(|g| self.css_of(g.inner()))
            .collect::<Result<Vec<_>>>()?;
        let read = read
            .iter()
            .map(|g| self.css_of(g.inner()))
            .collect::<Result<Vec<_>>>()?;
        let n = self.ctl.nr_stats;
        let mut batch = TotalsBatch {
            nr_stats: n,
            values: Vec::with_capacity(read.len() * 2 * n),
            overflows: Vec::with_capacity(read.len()),
        };
        // SAFETY: a controller's domain lives as long as its engine.
        let domain = unsafe { &*self.ctl.domain };
        let mut scratch = lock_domain(domain);
        for css in flush {
            // SAFETY: lock held; the css is kept alive by the caller's
            // group, and its node is live and in `domain`.
            unsafe { domain.flush_locked(&mut scratch, &*(*css).node) };
        }
        for css in read {
            // SAFETY: lock held; the css is kept alive by the caller's group.
            unsafe { &*css }.totals.with(|t| {
                // SAFETY: lock held. Each array has `n` items, so the
                // reserved buffers never grow here.
                let t = unsafe { &*t };
                batch.values.extend_from_slice(t.local());
                batch.values.extend_from_slice(t.hierarchical());
                batch.overflows.push(t.overflows);
            });
        }
        drop(scratch);
        for (i, g) in read_groups.iter().enumerate() {
            if self.is_cpu_root(g) {
                let at = 2 * i * n;
                let (local, hierarchical) = batch.values[at..at + 2 * n].split_at_mut(n);
                super::process::root_is_the_process(
                    local,
                    hierarchical,
                    super::process::attached_cpu_us(&self.engine),
                );
            }
        }
        Ok(batch)
    }

    /// The `Threshold` policy's pending-update count of `group` (the sum of
    /// its per-CPU counters):
    /// units ([`UPDATE_BATCH`](crate::controller::UPDATE_BATCH) per batch boundary crossed, each in its item's declared
    /// unit) folded from per-CPU counters and not yet in its totals.
    pub(crate) fn pending_updates(&self, group: &Group) -> Result<u64> {
        let css = self.css_of(group.inner())?;
        // SAFETY: kept alive by `group`.
        Ok(unsafe { &*css }.pending_units(u64::MAX))
    }

    /// This controller's flush policy.
    pub fn flush_policy(&self) -> FlushPolicy {
        self.ctl.flush_policy()
    }

    /// Change this controller's flush policy; takes effect for reads that
    /// start afterwards.
    pub fn set_flush_policy(&self, policy: FlushPolicy) {
        self.ctl
            .policy
            .store(u32::from(policy.to_u8()), Ordering::Relaxed);
    }
}
