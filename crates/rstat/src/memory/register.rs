//! Registration: [`Memory::register`] attaches a controller to an engine
//! (its `memory.stat` items, its group extension, the engine's weak
//! reference to it) and [`Memory::of`] finds it again from the engine.
//! The engine's reference (`EngineInner::memory`) is set and read here,
//! and only here.

use std::sync::Arc;

use super::config::{
    stat_unit, MemoryConfig, MAX_BATCH, MEMORY_STAT_NAMES, STAT_FAILCNT, STAT_HEAP,
    STAT_HEAP_ALLOCS, STAT_HEAP_FREES, STAT_HEAP_OVERHEAD,
};
use super::error::MemoryError;
use super::ext::{MemExt, Shared};
use super::handle::{Memory, MemoryInner};
use super::stock::Stocks;
use crate::controller::{CounterSetController, StatKind};
use crate::engine::Rstat;

impl Memory {
    /// Register a memory controller with the default [`MemoryConfig`]:
    /// every group, present and future, gets its memory state. Cost: the
    /// topology lock, one allocation per live group; a per-CPU stock of
    /// two cache lines per CPU.
    pub fn register(rs: &Rstat) -> Result<Memory, MemoryError> {
        Self::register_with(rs, MemoryConfig::default())
    }

    /// Register with explicit settings. Fails if a memory controller is
    /// already registered on `rs` or a setting is out of range.
    pub fn register_with(rs: &Rstat, cfg: MemoryConfig) -> Result<Memory, MemoryError> {
        if cfg.batch > MAX_BATCH {
            return Err(MemoryError::InvalidConfig {
                reason: format!(
                    "batch {} is above MAX_BATCH ({MAX_BATCH}); use a smaller batch",
                    cfg.batch
                ),
            });
        }
        if cfg.max_reclaim_retries > 1000 {
            return Err(MemoryError::InvalidConfig {
                reason: format!(
                    "max_reclaim_retries {} is above 1000; a few tens is plenty",
                    cfg.max_reclaim_retries
                ),
            });
        }
        let unit = stat_unit(cfg.batch);
        let items: Vec<(&str, u64)> = MEMORY_STAT_NAMES
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let counts = matches!(i, STAT_FAILCNT | STAT_HEAP_ALLOCS | STAT_HEAP_FREES);
                (n, if counts { 1 } else { unit })
            })
            .collect();
        // The heap's bytes live and overhead are levels; the rest count.
        let kinds: Vec<StatKind> = (0..items.len())
            .map(|i| match i {
                STAT_HEAP | STAT_HEAP_OVERHEAD => StatKind::Gauge,
                _ => StatKind::Counter,
            })
            .collect();
        let stats =
            rs.register(CounterSetController::with_units("memory", &items).with_kinds(&kinds))?;
        let shared = Arc::new(Shared::new(
            Stocks::new(rs.nr_cpus(), cfg.batch, stats.ctl.id),
            cfg.max_reclaim_retries,
            rs.engine_ptr().addr(),
        ));
        let ext = rs.register_ext(MemExt {
            shared: Arc::clone(&shared),
            inner: std::sync::OnceLock::new(),
        })?;
        let root = Arc::clone(ext.get(rs.root())?);
        let inner = Arc::new(MemoryInner {
            root,
            ext,
            stats,
            shared,
            nr_cpus: rs.nr_cpus(),
            cfg,
        });
        // The extension was registered just above: its cell is empty.
        let _ = inner.ext.ext().inner.set(Arc::downgrade(&inner));
        Ok(Memory { inner })
    }

    /// The memory controller registered on `rs`, while some handle to it
    /// is alive (its extension keeps only a weak reference). This is how
    /// [`report`](crate::report) finds `memory.*` files from an engine or
    /// a group alone. Cost: the upgrade of a weak reference.
    pub fn of(rs: &Rstat) -> Option<Memory> {
        Self::of_engine(rs.engine())
    }

    pub(crate) fn of_engine(engine: &crate::group::EngineInner) -> Option<Memory> {
        let inner = engine.find_ext::<MemExt>()?.inner.get()?.upgrade()?;
        Some(Memory { inner })
    }
}
