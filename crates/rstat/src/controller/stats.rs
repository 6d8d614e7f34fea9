//! What a read returns: one group's totals ([`GroupStats`]), and several
//! groups' copied under one hold of the flush lock (`TotalsBatch`).

use std::sync::Arc;

use crate::group::EngineInner;
use crate::stat::ops::{CtlEntry, TotalsCopy};

/// One group's totals for one controller, as of a read.
#[derive(Clone)]
pub struct GroupStats {
    pub(super) ctl: Arc<CtlEntry>,
    pub(super) totals: TotalsCopy,
}

impl std::fmt::Debug for GroupStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupStats")
            .field("controller", &self.ctl.name)
            .field("local", &self.totals.local())
            .field("hierarchical", &self.totals.hierarchical())
            .field("overflows", &self.totals.overflows)
            .finish()
    }
}

impl GroupStats {
    /// A read's totals of `ctl`'s state of a group; `cpu_root`: the
    /// engine when the group is its root and `ctl` its `cpu` controller,
    /// whose root reads the process (`process.rs`).
    pub(super) fn of_read(
        ctl: Arc<CtlEntry>,
        mut totals: TotalsCopy,
        cpu_root: Option<&EngineInner>,
    ) -> GroupStats {
        if let Some(engine) = cpu_root {
            let (local, hierarchical) = totals.halves_mut();
            super::process::root_is_the_process(
                local,
                hierarchical,
                super::process::attached_cpu_us(engine),
            );
        }
        GroupStats { ctl, totals }
    }

    /// Item names, in index order.
    pub fn names(&self) -> &[String] {
        self.ctl.imp.stat_names()
    }
    /// Totals of the group and all its descendants (removed ones included).
    pub fn hierarchical(&self) -> &[i64] {
        self.totals.hierarchical()
    }
    /// Totals of the group's own updates.
    pub fn local(&self) -> &[i64] {
        self.totals.local()
    }
    /// Hierarchical total of the item called `name`.
    pub fn get(&self, name: &str) -> Option<i64> {
        self.names()
            .iter()
            .position(|n| n == name)
            .and_then(|i| self.totals.hierarchical().get(i).copied())
    }
    /// Local total of the item called `name`.
    pub fn get_local(&self, name: &str) -> Option<i64> {
        self.names()
            .iter()
            .position(|n| n == name)
            .and_then(|i| self.totals.local().get(i).copied())
    }
    /// How many additions into this group's totals (local, hierarchical,
    /// or the pending deltas its children handed up) were clamped at
    /// `i64::MIN`/`i64::MAX` instead of wrapping, as of this read. Totals
    /// saturate rather than wrap (see [`controller`](crate::controller)'s
    /// `# Overflow`); once this is non-zero, some total of this group is
    /// stuck at or was moved from a bound and is not exact. Never reset.
    /// Only this group's clamps: an ancestor's hierarchical totals can stay
    /// exact when a descendant's local ones clamp.
    pub fn overflows(&self) -> u64 {
        self.totals.overflows
    }
    /// Whether any total of this group was ever clamped
    /// ([`overflows`](Self::overflows) `> 0`): if so, its totals are not
    /// exact.
    pub fn overflowed(&self) -> bool {
        self.totals.overflows > 0
    }
}

/// The totals of several groups of one controller, copied under one hold
/// of its flush lock ([`ControllerHandle::read_consistent`](crate::ControllerHandle::read_consistent)), in the order
/// the groups were given.
pub(crate) struct TotalsBatch {
    pub(super) nr_stats: usize,
    /// Per group: its local totals, then its hierarchical ones.
    pub(super) values: Vec<i64>,
    pub(super) overflows: Vec<u64>,
}

impl TotalsBatch {
    /// Group `i`'s local totals. Panics if `i` is out of range.
    pub(crate) fn local(&self, i: usize) -> &[i64] {
        let at = 2 * i * self.nr_stats;
        &self.values[at..at + self.nr_stats]
    }
    /// Group `i`'s hierarchical totals. Panics if `i` is out of range.
    pub(crate) fn hierarchical(&self, i: usize) -> &[i64] {
        let at = (2 * i + 1) * self.nr_stats;
        &self.values[at..at + self.nr_stats]
    }
    /// Group `i`'s clamped additions ([`GroupStats::overflows`]).
    pub(crate) fn overflows(&self, i: usize) -> u64 {
        self.overflows[i]
    }
}
