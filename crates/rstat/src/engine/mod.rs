//! The facade: [`Rstat`], the engine a program builds ([`Builder`]),
//! with its root group, the registration of controllers
//! ([`Rstat::register`], [`Rstat::register_counters`]) and extensions
//! ([`Rstat::register_ext`]), the built-in `cpu` controller and the
//! periodic flusher. The mechanism underneath (updates, the flush, the
//! policies) is described in the crate's overview and in [`policy`].
//!
//! [`policy`]: crate::policy

use std::sync::Arc;

use crate::controller::{ControllerHandle, CounterSetController};
use crate::error::{Error, Result};
use crate::group::ext::{ErasedExt, Ext, GroupExt, MAX_EXTS};
use crate::group::{validate_name, EngineInner, Group, MAX_NAME_LEN};
use crate::percpu::arena::ArenaStats;
use crate::percpu::cpu::{self, CpuIdSource};
use crate::stat::css::{UPDATE_BATCH, UPDATE_BATCH_SHIFT};
use crate::stat::ops::{Controller, CtlEntry, FITTING_STAT_ITEMS, MAX_CONTROLLERS, MAX_STAT_UNIT};
use crate::stat::policy::check_period;
use crate::stat::tree::Domain;
pub use crate::stat::update::UpdatePath;
use crate::sync::{AtomicU32, AtomicU64};

mod builder;
#[cfg(not(rstat_loom))]
mod periodic;

pub use builder::Builder;

/// The root group's [id](Group::id) (the kernel's root cgroup id too).
pub const ROOT_GROUP_ID: u64 = 1;

/// The most per-CPU slots an engine takes ([`Builder::nr_cpus`]): the
/// largest CPU count Linux builds for (`CONFIG_NR_CPUS` with `MAXSMP`).
/// Each slot costs every group its per-CPU state and the arena a unit of
/// address space per chunk, so a count past any machine is refused
/// rather than reserved.
pub const MAX_NR_CPUS: usize = 8192;

/// Names of the built-in `cpu` controller's items (microseconds).
///
/// Each is declared in unit 1 µs ([`Controller::stat_units`]), although a
/// typical charge (a tick, a time slice) is hundreds to thousands of µs
/// and so walks the ancestors' pending-update counters on most updates.
/// That is cheap here: CPU time is charged at scheduling rate (hundreds to
/// a few thousand charges per second per CPU), not on a hot path. And the
/// unit is what a `Threshold` read may miss per (group, CPU): [`UPDATE_BATCH`] µs per
/// slot keeps `cpu.stat` good for rates sampled over milliseconds, where a
/// coarser unit would not (at 1024 µs, a read could miss 65 ms of CPU time
/// per (group, CPU), 6.5% of a 1 s sample per CPU per group).
pub const CPU_STAT_NAMES: [&str; 3] = ["usage_usec", "user_usec", "system_usec"];

/// The `cpu` controller's id in an engine that has it (registered first).
pub(crate) const CPU_CTL_ID: usize = 0;

/// An rstat engine: a tree of groups and the controllers counting in them.
///
/// ```
/// let rs = rstat::Rstat::new();
/// let tenant = rs.root().create_child("tenant-a").unwrap();
/// let req = tenant.create_child("req-1").unwrap();
/// let io = rs.register_counters("io", &["rbytes", "wbytes"]).unwrap();
/// io.add(&req, 0, 4096).unwrap();
/// io.add(&tenant, 1, 512).unwrap();
/// let s = io.read(&tenant).unwrap();
/// assert_eq!(s.get("rbytes"), Some(4096)); // hierarchical: includes req-1
/// assert_eq!(s.get_local("rbytes"), Some(0));
/// assert_eq!(s.get("wbytes"), Some(512));
/// ```
pub struct Rstat {
    inner: Arc<EngineInner>,
    root: Group,
    cpu: Option<ControllerHandle>,
    #[cfg(not(rstat_loom))]
    periodic: std::sync::Mutex<Option<periodic::Periodic>>,
}

/// The periodic flusher's default period, the kernel's for its memory
/// stats: how long updates may wait in per-CPU counters before a root
/// flush folds them into every total, whatever the flush policy. Set per
/// engine ([`Builder::periodic_flush`], [`Rstat::set_periodic_flush`]).
///
/// Not the period of `attach`'s CPU-time charger,
/// [`DEFAULT_CHARGE_PERIOD`](crate::attach::DEFAULT_CHARGE_PERIOD), which
/// bounds how long a thread's CPU time goes uncharged; [`attach`'s "Two
/// periods"](crate::attach#two-periods) sets the two side by side.
pub const DEFAULT_FLUSH_PERIOD: std::time::Duration = std::time::Duration::from_secs(2);

/// The [`Threshold`](crate::FlushPolicy::Threshold) policy's default read
/// pace ([`Builder::read_pace`]): a read past its unit threshold may copy
/// totals from a flush that started up to this long ago, instead of
/// flushing itself. Why this value: [`policy`](crate::policy)'s "The
/// pace".
pub const DEFAULT_READ_PACE: std::time::Duration = std::time::Duration::from_millis(100);

impl Default for Rstat {
    fn default() -> Self {
        Self::new()
    }
}

impl Rstat {
    /// An engine with default settings: separate trees, one slot per
    /// possible CPU, the `cpu` controller registered.
    pub fn new() -> Self {
        match Builder::default().build() {
            Ok(rs) => rs,
            Err(e) => panic!("building a default engine cannot fail but did: {e}"),
        }
    }

    /// A builder for non-default settings.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The root group.
    pub fn root(&self) -> &Group {
        &self.root
    }

    pub(crate) fn engine(&self) -> &Arc<EngineInner> {
        &self.inner
    }

    /// The engine's identity (for the allocator's bindings).
    pub(crate) fn engine_ptr(&self) -> *const EngineInner {
        Arc::as_ptr(&self.inner)
    }

    /// Release now the removed groups whose last reference the accounting
    /// allocator dropped inside `dealloc` (where a release could deadlock,
    /// see [`crate::alloc`]); otherwise they are released at the next
    /// `create_child`, `remove` or engine drop. Cost: one atomic swap when
    /// there are none; the topology and arena locks per group released.
    pub fn release_deferred(&self) {
        crate::group::release_deferred(&self.inner);
    }

    /// Number of per-CPU slots.
    pub fn nr_cpus(&self) -> usize {
        self.inner.nr_cpus
    }

    /// How this engine's stat updates reach their per-CPU slot:
    /// [`UpdatePath::Rseq`] (unlocked, restartable) or
    /// [`UpdatePath::Locked`] (atomic add).
    pub fn update_path(&self) -> UpdatePath {
        self.inner.update_path
    }

    /// Whether all controllers share one tree and lock.
    pub fn is_unified(&self) -> bool {
        self.inner.unified
    }

    /// Where CPU ids come from in this process.
    pub fn cpu_id_source(&self) -> CpuIdSource {
        cpu::source()
    }

    /// The live group at `path`: `"a/b/c"`, or `"/a/b/c"` (a leading `/`
    /// is the root, so `""` and `"/"` are the root). See
    /// [`Group::lookup`] for the cost and the errors, which name the
    /// offending or missing component.
    pub fn lookup(&self, path: &str) -> Result<Group> {
        self.root.lookup(path)
    }

    /// Register a controller. Allowed at any time: every live group gets its
    /// state (removed groups charge their nearest ancestor's). Cost: topology
    /// lock, one arena allocation per live group.
    pub fn register<C: Controller>(&self, imp: C) -> Result<ControllerHandle> {
        let name = imp.name().to_owned();
        validate_name(&name).map_err(|e| Error::InvalidController {
            name: name.clone(),
            reason: e.to_string(),
        })?;
        let items = imp.stat_names();
        let bad = |reason: String| {
            Err(Error::InvalidController {
                name: name.clone(),
                reason,
            })
        };
        if items.is_empty() {
            return bad("it declares no stat items; give it at least one".into());
        }
        for (i, it) in items.iter().enumerate() {
            if it.is_empty()
                || it.len() > MAX_NAME_LEN
                || it.chars().any(|c| c.is_whitespace() || c.is_control())
            {
                let it = crate::error::shown(it);
                return bad(format!("stat item {it:?} must be 1-{MAX_NAME_LEN} bytes without whitespace or control characters"));
            }
            if items[..i].contains(it) {
                return bad(format!("stat item {it:?} is declared twice"));
            }
        }
        let units = imp.stat_units();
        if units.len() != items.len() {
            return bad(format!(
                "it declares {} stat units for {} stat items; give one unit per item (1 for plain counts)",
                units.len(),
                items.len()
            ));
        }
        for (it, &u) in items.iter().zip(&units) {
            if !u.is_power_of_two() || u > MAX_STAT_UNIT {
                return bad(format!(
                    "stat item {it:?} declares unit {u}; a unit must be a power of two from 1 to {MAX_STAT_UNIT} (e.g. 4096 for bytes counted in pages)"
                ));
            }
        }
        let kinds = imp.stat_kinds().len();
        if kinds != items.len() {
            return bad(format!(
                "it declares {kinds} stat kinds for {} stat items; give one kind per item (StatKind::Counter for counts)",
                items.len()
            ));
        }
        let unit_shifts = units
            .iter()
            .map(|u| (UPDATE_BATCH_SHIFT + u.trailing_zeros()) as u8)
            .collect();
        if items.len() > FITTING_STAT_ITEMS {
            return bad(format!(
                "it declares {} stat items, more than the {FITTING_STAT_ITEMS} a controller can have; split them over several controllers",
                items.len()
            ));
        }
        let nr_stats = items.len();
        let mut topo = self.inner.topo.write();
        if topo.controllers.iter().any(|c| *c.name == *name) {
            return Err(Error::ControllerExists { name });
        }
        let id = topo.controllers.len();
        if id >= MAX_CONTROLLERS {
            return Err(Error::TooManyControllers {
                max: MAX_CONTROLLERS,
            });
        }
        let domain_idx = if self.inner.unified {
            0
        } else {
            let d = self.inner.new_domain()?;
            topo.domains.push(d);
            topo.domains.len() - 1
        };
        let d = &topo.domains[domain_idx];
        // Before any group gets a css of it (see `Domain::ctls`).
        d.add_ctl(id);
        let domain: *const Domain = &**d;
        let entry = Arc::new(CtlEntry {
            id,
            domain_idx,
            name: name.into(),
            nr_stats,
            unit_shifts,
            flush_threshold: UPDATE_BATCH.saturating_mul(self.inner.nr_cpus as u64),
            imp: Box::new(imp),
            domain,
            policy: AtomicU32::new(u32::from(self.inner.default_policy.to_u8())),
            // The built-in counter set's flush is the standard fold, which
            // cannot panic; anything else is user code.
            contain_panics: core::any::TypeId::of::<C>()
                != core::any::TypeId::of::<CounterSetController>(),
            flush_panics: AtomicU64::new(0),
        });
        // Top-down, so every parent is attached before its children.
        let mut queue = std::collections::VecDeque::from([self.root.clone()]);
        while let Some(g) = queue.pop_front() {
            self.inner.attach(&topo, g.inner(), Some(&entry))?;
            queue.extend(g.children());
        }
        topo.controllers.push(Arc::clone(&entry));
        Ok(ControllerHandle::new(
            Arc::clone(&self.inner),
            entry,
            self.root.clone(),
        ))
    }

    /// Register a group extension (per-group state with lifecycle hooks;
    /// see [`GroupExt`]). Every live group gets its state, parents first.
    /// Cost: topology lock, one `create` call per live group.
    pub fn register_ext<E: GroupExt>(&self, ext: E) -> Result<Ext<E>> {
        let name = ext.name().to_owned();
        validate_name(&name).map_err(|e| Error::InvalidExtension {
            name: name.clone(),
            reason: e.to_string(),
        })?;
        let topo = self.inner.topo.write();
        if self.inner.exts.iter().any(|(_, e)| e.ext_name() == name) {
            return Err(Error::ExtensionExists { name });
        }
        let id = self.inner.exts.len();
        if id >= MAX_EXTS {
            return Err(Error::TooManyExtensions { max: MAX_EXTS });
        }
        let imp = Arc::new(ext);
        let erased: Arc<dyn ErasedExt> = imp.clone();
        let mut queue = std::collections::VecDeque::from([self.root.clone()]);
        while let Some(g) = queue.pop_front() {
            self.inner.attach_ext(g.inner(), id, &*erased);
            queue.extend(g.children());
        }
        self.inner.exts.push(id, erased);
        drop(topo);
        Ok(Ext::new(Arc::clone(&self.inner), id, imp))
    }

    /// Register a counter set: a controller of named counters with its own
    /// updated trees and flush lock, every item in unit 1. See
    /// [`ControllerHandle`].
    pub fn register_counters(&self, name: &str, items: &[&str]) -> Result<ControllerHandle> {
        self.register(CounterSetController::new(name, items))
    }

    /// Register a counter set whose items declare their units
    /// ([`Controller::stat_units`]): `("bytes", 4096)` for a byte counter
    /// charged in pages, `("requests", 1)` for a plain count. Updates of
    /// an item walk the ancestors' (per-CPU) pending counters once per
    /// [`UPDATE_BATCH`] × unit of change
    /// on a CPU, and its `Threshold` staleness bound is in
    /// that unit.
    ///
    /// ```
    /// let rs = rstat::Rstat::new();
    /// let io = rs.register_counters_with_units("io", &[("bytes", 4096), ("requests", 1)])?;
    /// assert_eq!(io.stat_units(), [4096, 1]);
    /// let bad = rs.register_counters_with_units("odd", &[("bytes", 1000)]);
    /// assert!(matches!(bad, Err(rstat::Error::InvalidController { .. })));
    /// # Ok::<(), rstat::Error>(())
    /// ```
    ///
    /// Errors: as [`register`](Self::register); a unit that is not a power
    /// of two from 1 to [`MAX_STAT_UNIT`] is [`Error::InvalidController`].
    pub fn register_counters_with_units(
        &self,
        name: &str,
        items: &[(&str, u64)],
    ) -> Result<ControllerHandle> {
        self.register(CounterSetController::with_units(name, items))
    }

    /// Every registered controller, in registration order: the built-in
    /// `cpu` (if enabled), `memory`'s stat items (if a
    /// [`Memory`](crate::memory::Memory) is registered) and user ones.
    /// Cost: the topology lock, three reference counts per controller.
    pub fn controllers(&self) -> Vec<ControllerHandle> {
        self.inner
            .topo
            .read()
            .controllers
            .iter()
            .map(|c| {
                ControllerHandle::new(Arc::clone(&self.inner), Arc::clone(c), self.root.clone())
            })
            .collect()
    }

    /// Be told of every group removed from now on: each successful
    /// [`Group::remove`] (including those made when the engine is dropped)
    /// appends a handle to the removed group to the returned queue, for a
    /// reader (an exporter) to report the group's final values once and
    /// drop it. Only groups at most `max_depth` below the root are queued
    /// (`usize::MAX` for all). See
    /// [`RemovalWatch`](crate::group::watch::RemovalWatch) for the cost and
    /// the bound (`capacity` groups held at most; beyond it removals are
    /// counted as lost, not queued).
    pub fn watch_removals(
        &self,
        capacity: usize,
        max_depth: usize,
    ) -> crate::group::watch::RemovalWatch {
        crate::group::watch::RemovalWatch::new(&self.inner, capacity, max_depth)
    }

    /// The built-in `cpu` controller (items [`CPU_STAT_NAMES`]).
    pub fn cpu(&self) -> Option<&ControllerHandle> {
        self.cpu.as_ref()
    }

    /// Charge CPU time to `group`: `usage_usec += user + system`,
    /// `user_usec += user`, `system_usec += system`. Same cost as three
    /// counter updates sharing one on-list check.
    ///
    /// Errors: [`Error::CpuTimeOutOfRange`], changing nothing, if `user +
    /// system` does not fit an `i64` (~292,000 years of microseconds): such
    /// a value is almost always a negative duration cast to `u64`, and
    /// clamping it would hide the bug and corrupt the totals.
    pub fn account_cputime(&self, group: &Group, user_usec: u64, system_usec: u64) -> Result<()> {
        let out_of_range = || Error::CpuTimeOutOfRange {
            user_usec,
            system_usec,
        };
        let (Ok(user), Ok(system)) = (i64::try_from(user_usec), i64::try_from(system_usec)) else {
            return Err(out_of_range());
        };
        let usage = user.checked_add(system).ok_or_else(out_of_range)?;
        let Some(cpu) = self.cpu.as_ref() else {
            return Err(Error::InvalidController {
                name: "cpu".into(),
                reason: "this engine was built without it".into(),
            });
        };
        let h = cpu.stat_handle(group)?;
        let applied = h.add_many(&[(0, usage), (1, user), (2, system)]);
        debug_assert_eq!(
            applied,
            CPU_STAT_NAMES.len(),
            "the cpu controller has three items"
        );
        Ok(())
    }

    /// `cpu` stats of `group` (hierarchical and local), as fresh as the
    /// `cpu` controller's flush policy makes them; a flush, when there is
    /// one, touches the `cpu` controller's trees only. Under `Threshold`
    /// (the default) that is [`ControllerHandle::read`]'s bound: within
    /// the unit threshold, or including every charge that completed a read
    /// pace ([`Rstat::read_pace`]) before the call. For an exact read use
    /// `rs.cpu().read_exact(group)`.
    pub fn cpu_stat(&self, group: &Group) -> Result<crate::controller::GroupStats> {
        match self.cpu.as_ref() {
            Some(c) => c.read(group),
            None => Err(Error::InvalidController {
                name: "cpu".into(),
                reason: "this engine was built without it".into(),
            }),
        }
    }

    /// Start, restart with a new period, or stop (`None`) the periodic root
    /// flusher. Periods must be 1 ms to 24 h. Stopping joins the thread.
    pub fn set_periodic_flush(&self, period: Option<std::time::Duration>) -> Result<()> {
        if let Some(p) = period {
            check_period(p)?;
        }
        #[cfg(not(rstat_loom))]
        {
            let mut slot = self.periodic.lock().unwrap_or_else(|p| p.into_inner());
            drop(slot.take());
            if let Some(p) = period {
                let t = periodic::Periodic::start(Arc::clone(&self.inner), self.root.clone(), p)
                    .map_err(|e| Error::Thread {
                        reason: e.to_string(),
                    })?;
                *slot = Some(t);
            }
        }
        Ok(())
    }

    /// The [`Threshold`](crate::FlushPolicy::Threshold) policy's read pace
    /// ([`Builder::read_pace`]): the time part of its staleness bound (a
    /// read includes every update completed this long before it began, or
    /// is within [`FlushPolicy::staleness_bound`](crate::FlushPolicy::staleness_bound));
    /// `None` if reads past the threshold always flush.
    pub fn read_pace(&self) -> Option<std::time::Duration> {
        self.inner.pace.pace
    }

    /// The periodic flusher's period, if it runs.
    pub fn periodic_flush(&self) -> Option<std::time::Duration> {
        #[cfg(not(rstat_loom))]
        return self
            .periodic
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|p| p.period);
        #[cfg(rstat_loom)]
        None
    }

    /// Removed groups still held by a handle ("zombies", as cgroupfs calls
    /// lazily freed cgroups): they are readable and still count towards
    /// their ancestors, and are freed when their last handle drops.
    pub fn zombie_count(&self) -> usize {
        self.inner.zombies.count()
    }

    /// Arena counters (for tests, reports and the memory-cost check): the
    /// groups' per-CPU state and their reference counts' slots, which sit
    /// in an arena of their own, together.
    pub fn arena_stats(&self) -> ArenaStats {
        let a = self.inner.arena.stats();
        let r = self.inner.ref_arena.stats();
        ArenaStats {
            nr_units: a.nr_units,
            live_allocations: a.live_allocations + r.live_allocations,
            bytes_in_use_per_unit: a.bytes_in_use_per_unit + r.bytes_in_use_per_unit,
            chunks: a.chunks + r.chunks,
            chunk_bytes: a.chunk_bytes + r.chunk_bytes,
            resident_bytes: a.resident_bytes.zip(r.resident_bytes).map(|(a, r)| a + r),
        }
    }
}

impl Drop for Rstat {
    fn drop(&mut self) {
        #[cfg(not(rstat_loom))]
        drop(self.periodic.get_mut().map(Option::take));
        self.root.detach_all();
    }
}
