//! The `Snapshot` types and how a subtree is read into one.

use std::collections::HashSet;

use super::{mem_err, Reporter};
use crate::controller::ControllerHandle;
use crate::error::Result;
use crate::group::{CpuMax, CpuMaxStat, Group, PressureKind, PressureTotals};
use crate::memory::{Limit, Memory, MemoryError, MemoryEvents};
use crate::page_counter::PAGE_COUNTER_MAX;

/// A controller and its items, in index order.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ControllerInfo {
    /// The controller's name (`cpu`, `memory`, or a user controller's).
    pub name: String,
    /// Its stat items.
    pub items: Vec<String>,
}

/// One controller's totals for one group.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct StatValues {
    /// The group's own updates, per item.
    pub local: Vec<i64>,
    /// The group's and its descendants' (removed ones included), per item.
    pub hierarchical: Vec<i64>,
    /// Clamped additions ([`GroupStats::overflows`](crate::GroupStats::overflows)):
    /// when non-zero, these totals are not exact.
    pub overflows: u64,
}

/// One group's memory state.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct MemorySnapshot {
    /// `memory.current`.
    pub current: u64,
    /// `memory.peak`.
    pub peak: u64,
    /// `memory.max`; `None` when unlimited.
    pub max: Option<u64>,
    /// `memory.high`; `None` when unlimited.
    pub high: Option<u64>,
    /// `memory.low`; `None` when unlimited.
    pub low: Option<u64>,
    /// `memory.min`; `None` when unlimited.
    pub min: Option<u64>,
    /// `memory.events` (hierarchical).
    pub events: MemoryEvents,
    /// `memory.events.local`.
    pub events_local: MemoryEvents,
}

/// One group in a [`Snapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct GroupSnapshot {
    /// Absolute path: `/` for the root, `/a/b` below it.
    pub path: String,
    /// [`Group::id`].
    pub id: u64,
    /// Depth below the root (root = 0).
    pub depth: usize,
    /// False for a removed group.
    pub online: bool,
    /// Per controller of [`Snapshot::controllers`], same order.
    pub stats: Vec<StatValues>,
    /// The memory state, when a memory controller is registered and alive.
    pub memory: Option<MemorySnapshot>,
    /// The group's `cpu.max` throttling counts, when it has a quota
    /// ([`Group::set_cpu_max`]).
    #[cfg_attr(feature = "serde", serde(default))]
    pub cpu_max: Option<CpuMaxStat>,
    /// The group's `cpu.max`, when it has a quota.
    #[cfg_attr(feature = "serde", serde(default))]
    pub cpu_max_limit: Option<CpuMax>,
    /// Killed ([`Group::kill`]).
    #[cfg_attr(feature = "serde", serde(default))]
    pub killed: bool,
    /// `cpu.pressure` totals, once the group (or a descendant) stalled.
    #[cfg_attr(feature = "serde", serde(default))]
    pub cpu_pressure: Option<PressureTotals>,
    /// `memory.pressure` totals, once the group (or a descendant) stalled.
    #[cfg_attr(feature = "serde", serde(default))]
    pub memory_pressure: Option<PressureTotals>,
}

/// A snapshot: every group of a subtree with its path, local and
/// hierarchical values of every controller, and its memory state.
///
/// The layout is columnar so that a tree of 100,000 groups does not carry
/// 100,000 copies of every item name: [`Snapshot::controllers`] names the
/// controllers and their items once, and each group's
/// [`stats`](GroupSnapshot::stats)`[i]` holds controller `i`'s values in
/// item order. With the `serde` feature every type is `Serialize` and
/// `Deserialize`; as JSON (e.g. with `serde_json`):
///
/// ```json
/// {"controllers": [{"name": "cpu", "items": ["usage_usec", "user_usec", "system_usec"]}],
///  "groups": [{"path": "/", "id": 1, "depth": 0, "online": true,
///              "stats": [{"local": [0, 0, 0], "hierarchical": [500, 300, 200], "overflows": 0}],
///              "memory": null}]}
/// ```
///
/// Limits are `null` when unlimited (the files' `max`).
///
/// Freshness and cost: see [`report`](crate::report); which values add up
/// across groups (the stat items do, the memory state need not): see
/// [Consistency across groups](crate::report#consistency-across-groups).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Snapshot {
    /// The controllers, in registration order.
    pub controllers: Vec<ControllerInfo>,
    /// The groups: a subtree in pre-order (a parent before its children,
    /// siblings by name), or the list asked for.
    pub groups: Vec<GroupSnapshot>,
}

impl Snapshot {
    /// The index of the controller called `name` in
    /// [`controllers`](Self::controllers).
    pub fn controller_index(&self, name: &str) -> Option<usize> {
        self.controllers.iter().position(|c| c.name == name)
    }

    /// `(local, hierarchical)` of item `item` of controller `controller`
    /// in the group at absolute path `path`. A linear search: for tests
    /// and small trees.
    pub fn get(&self, path: &str, controller: &str, item: &str) -> Option<(i64, i64)> {
        let c = self.controller_index(controller)?;
        let i = self.controllers[c].items.iter().position(|n| n == item)?;
        let g = self.groups.iter().find(|g| g.path == path)?;
        let s = g.stats.get(c)?;
        Some((*s.local.get(i)?, *s.hierarchical.get(i)?))
    }
}

fn limit(v: u64) -> Option<u64> {
    (v < PAGE_COUNTER_MAX).then_some(v)
}

fn memory_of(mem: &Memory, g: &Group) -> std::result::Result<MemorySnapshot, MemoryError> {
    Ok(MemorySnapshot {
        current: mem.current(g)?,
        peak: mem.peak(g)?,
        max: limit(mem.limit(g, Limit::Max)?),
        high: limit(mem.limit(g, Limit::High)?),
        low: limit(mem.limit(g, Limit::Low)?),
        min: limit(mem.limit(g, Limit::Min)?),
        events: mem.events(g)?,
        events_local: mem.events_local(g)?,
    })
}

/// A snapshot being read: the controllers and memory controller as of its
/// start, and the groups in output order with their paths.
struct Reading {
    ctls: Vec<ControllerHandle>,
    mem: Option<Memory>,
    groups: Vec<Group>,
    paths: Vec<String>,
}

impl Reading {
    fn new(rep: &Reporter) -> Self {
        Reading {
            ctls: rep.controllers(),
            mem: rep.memory(),
            groups: Vec::new(),
            paths: Vec::new(),
        }
    }

    /// Read every group: per controller, flush the subtrees of `flush` and
    /// copy every group's totals under one hold of its flush lock
    /// ([`ControllerHandle::read_consistent`]), after the heap deltas the
    /// memory controller's stocks keep were added to its stat items; then
    /// the memory state,
    /// children before parents (the reverse of the pre-order), so counts
    /// raised bottom-up (`memory.events`) are read at a child before its
    /// parent.
    fn finish(self, flush: &[&Group]) -> Result<Snapshot> {
        // The allocator's heap deltas still kept in stock slots go into
        // the memory controller's stat items first, so the `heap*` items
        // are exact as of the start like the rest.
        if let Some(m) = &self.mem {
            for g in flush {
                m.flush_heap_stats(g).map_err(mem_err)?;
            }
        }
        let per_ctl = self
            .ctls
            .iter()
            .map(|c| c.read_consistent(flush, &self.groups))
            .collect::<Result<Vec<_>>>()?;
        let mut memory: Vec<Option<MemorySnapshot>> = vec![None; self.groups.len()];
        if let Some(m) = &self.mem {
            for (slot, g) in memory.iter_mut().zip(&self.groups).rev() {
                *slot = Some(memory_of(m, g).map_err(mem_err)?);
            }
        }
        let controllers = self
            .ctls
            .iter()
            .map(|c| ControllerInfo {
                name: c.name().to_owned(),
                items: c.stat_names().to_vec(),
            })
            .collect();
        let groups = self
            .groups
            .iter()
            .zip(self.paths)
            .zip(memory)
            .enumerate()
            .map(|(i, ((g, path), memory))| GroupSnapshot {
                path,
                id: g.id(),
                depth: g.depth(),
                online: g.is_online(),
                stats: per_ctl
                    .iter()
                    .map(|stats| StatValues {
                        local: stats.local(i).to_vec(),
                        hierarchical: stats.hierarchical(i).to_vec(),
                        overflows: stats.overflows(i),
                    })
                    .collect(),
                memory,
                cpu_max: g.cpu_max().quota_us.map(|_| g.cpu_max_stat()),
                cpu_max_limit: Some(g.cpu_max()).filter(|m| m.quota_us.is_some()),
                killed: g.is_killed(),
                cpu_pressure: g
                    .has_pressure()
                    .then(|| g.pressure_totals(PressureKind::Cpu)),
                memory_pressure: g
                    .has_pressure()
                    .then(|| g.pressure_totals(PressureKind::Memory)),
            })
            .collect();
        Ok(Snapshot {
            controllers,
            groups,
        })
    }
}

impl Reporter {
    /// `top` and every live group below it, parents first, siblings by
    /// name. Exact as of the start for every group, and consistent across
    /// groups for the controllers' stat items (see the [module
    /// docs](crate::report#consistency-across-groups)): each controller is
    /// flushed once at `top` and every group's totals are copied under the
    /// same hold of its flush lock.
    ///
    /// Cost: first a walk of the subtree (each group's child lock, one
    /// reference per group); then per controller its flush lock, held for
    /// one subtree flush and a copy of every group's totals (other readers
    /// of that controller wait meanwhile; updates do not); then a few
    /// lock-free loads per group for memory. Allocates the snapshot.
    ///
    /// Errors: [`Error::ForeignGroup`](crate::Error::ForeignGroup) for a
    /// group of another engine.
    pub fn snapshot(&self, top: &Group) -> Result<Snapshot> {
        self.snapshot_depth(top, usize::MAX)
    }

    /// [`snapshot`](Self::snapshot) of the groups under `top` that are at
    /// most `max_depth` below the root (the root is depth 0): a tree's
    /// long-lived levels (tenants, services) without its per-request
    /// leaves. Groups below `max_depth` are not visited at all; their
    /// history is in their ancestors' hierarchical values, so at the
    /// deepest level shown a group's hierarchical values exceed its local
    /// ones with no children listed.
    pub fn snapshot_depth(&self, top: &Group, max_depth: usize) -> Result<Snapshot> {
        self.check_engine(top)?;
        let mut r = Reading::new(self);
        // Depth-first, children pushed in reverse so they pop by name;
        // paths built from the parent's, not by walking up. Walked before
        // any flush lock is taken: the walk takes each group's child lock,
        // and the references it takes are dropped after the locks.
        let mut stack = vec![(top.clone(), top.path())];
        while let Some((g, path)) = stack.pop() {
            if g.depth() < max_depth {
                for k in g.children().into_iter().rev() {
                    let p = if path == "/" {
                        format!("/{}", k.name())
                    } else {
                        format!("{path}/{}", k.name())
                    };
                    stack.push((k, p));
                }
            }
            r.groups.push(g);
            r.paths.push(path);
        }
        r.finish(&[top])
    }

    /// The whole tree: [`snapshot`](Self::snapshot) of the root.
    pub fn snapshot_all(&self) -> Result<Snapshot> {
        self.snapshot(&self.root)
    }

    /// The given groups, in the order given (live or removed; each read
    /// exactly). For an exporter reporting the groups a
    /// [`RemovalWatch`](crate::group::watch::RemovalWatch) collected.
    ///
    /// Consistent as [`snapshot`](Self::snapshot) is among the groups
    /// given: per controller, under one hold of its flush lock, the
    /// subtree of every group given that has no ancestor among them is
    /// flushed, then every group's totals are copied. Cost: those
    /// flushes and copies with the lock held, plus an ancestor walk per
    /// group.
    pub fn snapshot_groups(&self, groups: &[Group]) -> Result<Snapshot> {
        let mut r = Reading::new(self);
        for g in groups {
            self.check_engine(g)?;
        }
        let ids: HashSet<u64> = groups.iter().map(Group::id).collect();
        // Subtrees of the groups with no ancestor in the list cover every
        // group in it and are disjoint, so flushing one changes no totals
        // in another.
        let tops: Vec<&Group> = groups
            .iter()
            .filter(|g| {
                let mut p = g.inner().parent.as_ref();
                while let Some(a) = p {
                    if ids.contains(&a.id()) {
                        return false;
                    }
                    p = a.inner().parent.as_ref();
                }
                true
            })
            .collect();
        r.groups = groups.to_vec();
        r.paths = groups.iter().map(Group::path).collect();
        r.finish(&tops)
    }
}
