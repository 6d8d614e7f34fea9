//! What a handle stands for: the entries the table stores (an engine, a
//! group reference, a counter set), each knowing its engine, so the
//! [`slots`](super::slots) can refuse handles of a freed engine and calls
//! can refuse handles of two engines mixed.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use ::rstat::memory::Memory;
use ::rstat::{ControllerHandle, Group, Rstat};

use super::handle::Kind;
use crate::error::{CError, CResult, RSTAT_EXDEV};

/// One `rstat` instance as C sees it.
pub(crate) struct Engine {
    pub(crate) rs: Rstat,
    /// The memory controller, unless created with `RSTAT_OPT_NO_MEMORY`.
    pub(crate) memory: Option<Memory>,
    /// Cleared by `rstat_free` (in [`Table::remove_engine`]); read and
    /// written only under the table's write lock, which orders it, so
    /// relaxed accesses suffice. No entry of an engine that is not live is
    /// ever inserted ([`Table::insert`]).
    ///
    /// [`Table::remove_engine`]: super::Table::remove_engine
    /// [`Table::insert`]: super::Table::insert
    pub(super) live: AtomicBool,
    /// The exporter `rstat_serve` started, if any: stopped when the engine
    /// is dropped (the last handle of a freed `rstat`).
    pub(crate) serving: crate::serve::Serving,
}

impl Engine {
    pub(crate) fn new(rs: Rstat, memory: Option<Memory>) -> Engine {
        Engine {
            rs,
            memory,
            live: AtomicBool::new(true),
            serving: Default::default(),
        }
    }
}

/// A group handle: one reference on the group, shared by `refs` C owners.
pub(crate) struct GroupEntry {
    pub(crate) engine: Arc<Engine>,
    pub(crate) group: Group,
    /// `rstat_group_get` adds one, `rstat_group_put` takes one; the handle
    /// is released at 0. Changed only under the write lock.
    pub(crate) refs: u64,
}

/// A counter-set handle (lives as long as its engine).
pub(crate) struct CountersEntry {
    pub(crate) engine: Arc<Engine>,
    pub(crate) ctl: ControllerHandle,
}

pub(crate) enum Entry {
    Engine {
        engine: Arc<Engine>,
        /// The handle of the built-in `cpu` counter set, if any.
        cpu: usize,
    },
    Group(GroupEntry),
    Counters(Arc<CountersEntry>),
}

impl Entry {
    pub(super) fn kind(&self) -> Kind {
        match self {
            Entry::Engine { .. } => Kind::Engine,
            Entry::Group(_) => Kind::Group,
            Entry::Counters(_) => Kind::Counters,
        }
    }

    pub(crate) fn engine(&self) -> &Arc<Engine> {
        match self {
            Entry::Engine { engine, .. } => engine,
            Entry::Group(g) => &g.engine,
            Entry::Counters(c) => &c.engine,
        }
    }
}

/// Refuse handles of two engines in one call.
pub(crate) fn same_engine(a: &Arc<Engine>, b: &Arc<Engine>) -> CResult {
    if Arc::ptr_eq(a, b) {
        Ok(())
    } else {
        Err(CError::new(
            RSTAT_EXDEV,
            "the handles belong to different rstat instances; use handles made from the same rstat",
        ))
    }
}
