//! Reports: each group's stats as cgroupfs-style text files, and a snapshot
//! of a subtree (JSON with the `serde` feature).
//!
//! # Files
//!
//! [`Reporter::read`] (or the shorthand [`read`]) renders one file of one
//! group, in the kernel's cgroup v2 text format where the kernel has the
//! same file and keys:
//!
//! | file | content | source |
//! |---|---|---|
//! | `cpu.stat` | `usage_usec`, `user_usec`, `system_usec` lines (the kernel's keys when the `cpu` controller is not enabled on the cgroup), hierarchical; with a `cpu.max` quota also `nr_periods`, `nr_throttled`, `throttled_usec` (the group's own) | the built-in `cpu` controller; [`Group::cpu_max_stat`] |
//! | `cpu.max` | `QUOTA PERIOD` in µs, `max` for no quota (`"max 100000"`) | [`Group::cpu_max`] |
//! | `cpu.pressure`, `memory.pressure` | the kernel's PSI lines: `some avg10=.. avg60=.. avg300=.. total=µs`, then `full ...`: time the group's work was stalled by `cpu.max`, by `memory.high` and reclaim, hierarchical | [`Group::pressure`] |
//! | `memory.current`, `memory.peak` | one number | [`Memory::current`], [`Memory::peak`] |
//! | `memory.max`, `memory.high`, `memory.low`, `memory.min` | one number, or `max` when unlimited | [`Memory::limit`] |
//! | `memory.events` / `memory.events.local` | `low`, `high`, `max`, `oom`, `oom_kill` lines, hierarchical / local | [`Memory::events`] |
//! | `memory.stat` | the [`MEMORY_STAT_NAMES`] items, hierarchical | the memory controller's stat items |
//! | `<controller>.stat` | one `key value` line per item, hierarchical | every registered controller (user ones too) |
//! | `<controller>.stat.local` | the same, the group's own updates only | |
//!
//! Every line is `key value\n` (a single value is `value\n`), values in
//! decimal, in the controller's item order; there is no trailing blank
//! line. Units are the caller's: `memory.*` in whatever the application
//! charges (bytes unless it chose pages), `cpu.stat` in microseconds.
//! The kernel's `memory.stat` keys (`anon`, `file`, ...) do not exist here;
//! this `memory.stat` has the same format with this controller's keys.
//!
//! `memory.*` files exist while a [`Memory`] controller is registered on
//! the engine and some handle to it is alive: the report finds it from
//! the engine ([`Memory::of`]), so [`Reporter::new`] needs only the
//! [`Rstat`]. A group removed before the memory controller was registered
//! reads its nearest ancestor's memory state, as the controller itself
//! does.
//!
//! # Freshness and cost
//!
//! A file read is **exact**: every update that completed before the call
//! is in it ([`ControllerHandle::read_exact`]: the controller's flush lock,
//! a flush of the group's subtree, cost ∝ groups changed under it).
//! `memory.current/peak/max/...` and `memory.events` are one to five loads
//! each, no lock. Formatting allocates the returned string.
//!
//! A [`Snapshot`] of a subtree flushes each controller once at the
//! subtree's root and copies every group's totals under that same hold of
//! the controller's flush lock, whatever the flush policy. So it is exact
//! as of its start for every group, costs one flush per controller plus
//! O(groups × items) copies (other readers of that controller wait for
//! them; updates never do), and allocates the snapshot. Concurrent
//! updates may or may not appear in it.
//!
//! # Consistency across groups
//!
//! **Consistent: the controllers' stat items** (`cpu.stat`, `memory.stat`,
//! user counter sets: everything under [`GroupSnapshot::stats`]). Each
//! controller's values for all groups come from one flush, read before any
//! other flush of that controller can run, so in a snapshot every group's
//! hierarchical value is its local value plus its children's hierarchical
//! values, plus the history of children it does not list: those removed
//! before it was taken, those created while it was taken, and those below
//! [`Reporter::snapshot_depth`]'s cut. Different controllers are read one
//! after the other, from different flushes: `cpu.stat` and `io.stat` of
//! one snapshot are not of one instant.
//!
//! **Not consistent: the memory state** ([`GroupSnapshot::memory`]:
//! `memory.current`, `memory.peak`, limits and `memory.events`). These
//! are not flushed statistics but counters each charge or event updates
//! directly up the tree, one level after another; each group's are loaded
//! on their own, without a lock, children before parents. A parent's
//! `memory.current` need not equal its children's sum plus its own
//! charges, and its `memory.events` can fall short of its children's sum
//! by the events still being counted up the tree when it was read.
//!
//! # Removed groups
//!
//! A removed group's handle still reads (its totals are final, plus any
//! late update through a handle); its `memory.current` is 0 once removal
//! has moved its charges to its parent. [`Reporter::snapshot_groups`]
//! reads a list of handles, such as the groups a
//! [`RemovalWatch`](crate::group::watch::RemovalWatch) collected.
//!
//! ```
//! use rstat::{memory::Memory, report::Reporter, Rstat};
//!
//! let rs = Rstat::new();
//! let mem = Memory::register(&rs)?;
//! let io = rs.register_counters("io", &["rbytes", "wbytes"])?;
//! let t = rs.root().create_child("tenant")?;
//! io.add(&t, 0, 4096)?;
//! rs.account_cputime(&t, 300, 200)?;
//! mem.write_limit(&t, rstat::memory::Limit::High, "1M")?;
//!
//! let rep = Reporter::new(&rs);
//! assert_eq!(rep.read(&t, "io.stat")?, "rbytes 4096\nwbytes 0\n");
//! assert_eq!(rep.read(&t, "cpu.stat")?, "usage_usec 500\nuser_usec 300\nsystem_usec 200\n");
//! assert_eq!(rep.read(&t, "memory.max")?, "max\n");
//! assert_eq!(rep.read(&t, "memory.high")?, "1048576\n");
//! assert!(rep.read(&t, "memory.bogus").is_err()); // names the files there are
//!
//! let snap = rep.snapshot(rs.root())?;
//! assert_eq!(snap.groups[1].path, "/tenant");
//! assert_eq!(snap.get("/tenant", "io", "rbytes"), Some((4096, 4096)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod snapshot;
#[cfg(all(test, not(rstat_loom)))]
mod tests;

use std::fmt::Write as _;
use std::sync::Arc;

use crate::controller::ControllerHandle;
use crate::engine::Rstat;
use crate::error::{Error, Result};
use crate::group::EngineInner;
use crate::group::Group;
use crate::memory::{Limit, Memory, MemoryError, MemoryEvents};
use crate::page_counter::PAGE_COUNTER_MAX;

pub use snapshot::{ControllerInfo, GroupSnapshot, MemorySnapshot, Snapshot, StatValues};

#[allow(unused_imports)] // for the docs' links
use crate::memory::MEMORY_STAT_NAMES;

/// The `memory.*` files backed by the [`Memory`] controller itself (the
/// stat items are `memory.stat`, a controller file).
pub const MEMORY_FILES: [&str; 8] = [
    "memory.current",
    "memory.peak",
    "memory.max",
    "memory.high",
    "memory.low",
    "memory.min",
    "memory.events",
    "memory.events.local",
];

/// Reads an engine's groups as files and snapshots. Cheap to build and to
/// clone (one group reference); it looks controllers and the memory
/// controller up at each call, so it sees those registered after it was
/// built. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct Reporter {
    root: Group,
}

/// One file of one group: `Reporter::new(rs).read(group, file)`. See
/// [`Reporter::read`].
pub fn read(rs: &Rstat, group: &Group, file: &str) -> Result<String> {
    Reporter::new(rs).read(group, file)
}

impl Reporter {
    /// A reporter for `rs`'s groups.
    pub fn new(rs: &Rstat) -> Self {
        Reporter {
            root: rs.root().clone(),
        }
    }

    /// A reporter for the engine `group` belongs to (for callers, such as
    /// a C binding, that hold a group and not the engine).
    pub fn for_group(group: &Group) -> Self {
        let mut root = group.clone();
        while let Some(p) = root.parent() {
            root = p;
        }
        Reporter { root }
    }

    fn engine(&self) -> &Arc<EngineInner> {
        &self.root.inner().engine
    }

    /// The engine's root group.
    pub fn root(&self) -> &Group {
        &self.root
    }

    /// Every registered controller, in registration order.
    pub fn controllers(&self) -> Vec<ControllerHandle> {
        let engine = self.engine();
        engine
            .topo
            .read()
            .controllers
            .iter()
            .map(|c| ControllerHandle::new(Arc::clone(engine), Arc::clone(c), self.root.clone()))
            .collect()
    }

    /// The memory controller, if one is registered and alive.
    pub fn memory(&self) -> Option<Memory> {
        Memory::of_engine(self.engine())
    }

    /// The file names every group of this engine has now: the
    /// [`MEMORY_FILES`] if a memory controller is alive, then
    /// `<name>.stat` and `<name>.stat.local` per controller.
    pub fn files(&self) -> Vec<String> {
        let mut out = vec![
            "cpu.max".to_owned(),
            "cpu.pressure".to_owned(),
            "memory.pressure".to_owned(),
        ];
        if self.memory().is_some() {
            out.extend(MEMORY_FILES.iter().map(|s| s.to_string()));
        }
        for c in self.controllers() {
            out.push(format!("{}.stat", c.name()));
            out.push(format!("{}.stat.local", c.name()));
        }
        out
    }

    fn check_engine(&self, group: &Group) -> Result<()> {
        if Arc::ptr_eq(&group.inner().engine, self.engine()) {
            Ok(())
        } else {
            Err(Error::ForeignGroup)
        }
    }

    fn unknown(&self, file: &str, reason: impl Into<String>) -> Error {
        Error::UnknownFile {
            file: file.chars().take(256).collect(),
            reason: reason.into(),
            files: self.files(),
        }
    }

    /// The file `file` of `group`, in the format of the [module
    /// docs](self). Exact (see "Freshness and cost").
    ///
    /// Errors: [`Error::UnknownFile`] (listing the files there are) for a
    /// name that is not a file here, including `memory.*` files when no
    /// memory controller is registered or alive; [`Error::ForeignGroup`]
    /// for a group of another engine.
    pub fn read(&self, group: &Group, file: &str) -> Result<String> {
        self.check_engine(group)?;
        if file == "cpu.max" {
            return Ok(format!("{}\n", group.cpu_max()));
        }
        if file == "cpu.pressure" {
            return Ok(group.pressure(crate::group::PressureKind::Cpu));
        }
        if file == "memory.pressure" {
            return Ok(group.pressure(crate::group::PressureKind::Memory));
        }
        if let Some(which) = file.strip_prefix("memory.") {
            if MEMORY_FILES.contains(&file) {
                let Some(mem) = self.memory() else {
                    return Err(self.unknown(
                        file,
                        "no memory controller is registered on this engine (or every handle to it was dropped); register one with Memory::register and keep its handle",
                    ));
                };
                return memory_file(&mem, group, which).map_err(mem_err);
            }
        }
        let (name, local) = if let Some(n) = file.strip_suffix(".stat.local") {
            (n, true)
        } else if let Some(n) = file.strip_suffix(".stat") {
            (n, false)
        } else {
            return Err(self.unknown(
                file,
                "report files are <controller>.stat, <controller>.stat.local and memory.*",
            ));
        };
        let Some(ctl) = self.controllers().into_iter().find(|c| c.name() == name) else {
            return Err(self.unknown(file, format!("no controller named {name:?} is registered")));
        };
        let stats = ctl.read_exact(group)?;
        let values = if local {
            stats.local()
        } else {
            stats.hierarchical()
        };
        let mut out = String::new();
        for (n, v) in stats.names().iter().zip(values) {
            // Writing to a String cannot fail.
            let _ = writeln!(out, "{n} {v}");
        }
        // `cpu.stat` of a group with a `cpu.max` quota: the kernel's
        // bandwidth lines (the group's own throttling, in either file).
        if name == "cpu" && group.cpu_max().quota_us.is_some() {
            let b = group.cpu_max_stat();
            let _ = writeln!(
                out,
                "nr_periods {}\nnr_throttled {}\nthrottled_usec {}",
                b.nr_periods, b.nr_throttled, b.throttled_usec
            );
        }
        Ok(out)
    }

    /// [`read`](Self::read) the group at `path` (`"/a/b"`, `"a/b"`; `"/"`
    /// is the root). Errors: as [`Rstat::lookup`], then as `read`.
    pub fn read_path(&self, path: &str, file: &str) -> Result<String> {
        let g = self.root.lookup(path)?;
        self.read(&g, file)
    }
}

/// A `memory.max`-style value: `max` when unlimited.
pub fn format_limit(v: u64) -> String {
    if v >= PAGE_COUNTER_MAX {
        "max".to_owned()
    } else {
        v.to_string()
    }
}

fn memory_file(
    mem: &Memory,
    group: &Group,
    which: &str,
) -> std::result::Result<String, MemoryError> {
    let line = |v: String| format!("{v}\n");
    let events = |e: MemoryEvents| e.to_string();
    Ok(match which {
        "current" => line(mem.current(group)?.to_string()),
        "peak" => line(mem.peak(group)?.to_string()),
        "max" => line(format_limit(mem.limit(group, Limit::Max)?)),
        "high" => line(format_limit(mem.limit(group, Limit::High)?)),
        "low" => line(format_limit(mem.limit(group, Limit::Low)?)),
        "min" => line(format_limit(mem.limit(group, Limit::Min)?)),
        "events" => events(mem.events(group)?),
        "events.local" => events(mem.events_local(group)?),
        _ => unreachable!("checked against MEMORY_FILES"),
    })
}

/// The memory controller's read calls fail only with engine errors (a
/// foreign group); keep anything else readable.
fn mem_err(e: MemoryError) -> Error {
    match e {
        MemoryError::Engine(e) => e,
        other => Error::InvalidController {
            name: "memory".into(),
            reason: other.to_string(),
        },
    }
}
