//! The `Snapshot` types and how a subtree is read into one.

use super::{mem_err, Reporter};
use crate::controller::counters::ControllerHandle;
use crate::error::Result;
use crate::group::Group;
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
/// Freshness and cost: see [`report`](crate::report).
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

struct Reading {
    ctls: Vec<ControllerHandle>,
    mem: Option<Memory>,
    out: Snapshot,
}

impl Reading {
    fn new(rep: &Reporter) -> Self {
        let ctls = rep.controllers();
        let controllers = ctls
            .iter()
            .map(|c| ControllerInfo {
                name: c.name().to_owned(),
                items: c.stat_names().to_vec(),
            })
            .collect();
        Reading {
            ctls,
            mem: rep.memory(),
            out: Snapshot {
                controllers,
                groups: Vec::new(),
            },
        }
    }

    fn push(&mut self, g: &Group, path: String) -> Result<()> {
        let mut stats = Vec::with_capacity(self.ctls.len());
        for c in &self.ctls {
            let s = c.read(g)?;
            stats.push(StatValues {
                local: s.local().to_vec(),
                hierarchical: s.hierarchical().to_vec(),
                overflows: s.overflows(),
            });
        }
        let memory = match &self.mem {
            Some(m) => Some(memory_of(m, g).map_err(mem_err)?),
            None => None,
        };
        self.out.groups.push(GroupSnapshot {
            path,
            id: g.id(),
            depth: g.depth(),
            online: g.is_online(),
            stats,
            memory,
        });
        Ok(())
    }
}

fn absolute(g: &Group) -> String {
    format!("/{}", g.path())
}

impl Reporter {
    /// `top` and every live group below it, parents first, siblings by
    /// name. Exact as of the start for every group: each controller is
    /// flushed once at `top` first. Cost: one subtree flush per
    /// controller, then per group a reference, a lock-free copy per
    /// controller and a few loads for memory; allocates the snapshot.
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
    /// history is in their ancestors' hierarchical values.
    pub fn snapshot_depth(&self, top: &Group, max_depth: usize) -> Result<Snapshot> {
        self.check_engine(top)?;
        let mut r = Reading::new(self);
        for c in &r.ctls {
            c.flush(top)?;
        }
        // Depth-first, children pushed in reverse so they pop by name;
        // paths built from the parent's, not by walking up.
        let mut stack = vec![(top.clone(), absolute(top))];
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
            r.push(&g, path)?;
        }
        Ok(r.out)
    }

    /// The whole tree: [`snapshot`](Self::snapshot) of the root.
    pub fn snapshot_all(&self) -> Result<Snapshot> {
        self.snapshot(&self.root)
    }

    /// The given groups, in the order given (live or removed; each read
    /// exactly). For an exporter reporting the groups a
    /// [`RemovalWatch`](crate::group::watch::RemovalWatch) collected.
    pub fn snapshot_groups(&self, groups: &[Group]) -> Result<Snapshot> {
        let mut r = Reading::new(self);
        for g in groups {
            self.check_engine(g)?;
            for c in &r.ctls {
                c.flush(g)?;
            }
            r.push(g, absolute(g))?;
        }
        Ok(r.out)
    }
}
