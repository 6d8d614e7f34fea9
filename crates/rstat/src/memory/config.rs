//! The controller's settings ([`MemoryConfig`] and its bounds) and the
//! `memory.stat` items it counts: their names, indices and declared units.
//! The lowest layer of `memory/`: it names nothing else of it.

/// The kernel's `MEMCG_CHARGE_BATCH`: the default [`MemoryConfig::batch`],
/// the units a stock refill charges to the page counters at once.
///
/// Not the engine's [`UPDATE_BATCH`], though both are 64 (the kernel uses
/// this one constant for both jobs): `UPDATE_BATCH` is fixed, counts a
/// stat item's change in the item's declared unit, and sets how often a
/// CPU's stat updates reach the pending-update counters that decide when
/// a read flushes; this is a per-controller setting in charge units that
/// sizes the stocks, which decide how often a charge writes the shared
/// page counters. [`stat_unit`] ties the two: the items counted in charge
/// units are declared in units of `batch / UPDATE_BATCH`, so a CPU's
/// stat updates reach the pending-update counters about as often as its
/// stock refills, whatever the batch.
///
/// [`UPDATE_BATCH`]: crate::controller::UPDATE_BATCH
pub const MEMCG_CHARGE_BATCH: u64 = 64;

/// The kernel's `MAX_RECLAIM_RETRIES`: the default
/// [`MemoryConfig::max_reclaim_retries`].
pub const MAX_RECLAIM_RETRIES: u32 = 16;

/// The most reclaim rounds one charge over `memory.max` (or one
/// `memory.max` / `memory.high` write) makes, counting those that freed
/// something, when [`MemoryConfig::max_reclaim_retries`] is smaller: the
/// bound on "retry while reclaim makes progress".
pub const MAX_RECLAIM_ROUNDS: u32 = 256;

/// The largest [`MemoryConfig::batch`] (2³²).
pub const MAX_BATCH: u64 = 1 << 32;

/// The declared unit ([`Controller::stat_units`](crate::Controller::stat_units))
/// of the `memory.stat` items counted in charge units (`charged`,
/// `uncharged`, `reclaimed`, `forced`) for a [`MemoryConfig::batch`]:
/// `batch /` [`UPDATE_BATCH`](crate::controller::UPDATE_BATCH) (64)
/// rounded down to a power of two, at least 1.
///
/// Why: the batch is the caller's statement of its charge granularity (64
/// of it, as the default [`MEMCG_CHARGE_BATCH`] is 64 pages): a caller
/// charging bytes sets 64 pages of bytes (256 KiB) and gets 4096, the
/// kernel's own normalization of byte stats to pages; one charging pages
/// keeps the default 64 and gets 1. A CPU then walks the ancestors'
/// pending-update counters once per batch of change of an item, as often
/// as its stock refills from the page counter, whatever the charge size;
/// and a `Threshold` read of `memory.stat` may miss less than one batch of
/// each item per (group, CPU), besides the 64 × nr_cpus units the
/// threshold allows: the scale at which `memory.current` is already
/// inexact (stocks hold up to a batch per (group, CPU) charged but unused).
pub fn stat_unit(batch: u64) -> u64 {
    match batch / crate::controller::UPDATE_BATCH {
        0 => 1,
        q => 1 << q.ilog2(),
    }
}

/// Names of the `memory.stat` items, in index order: units `charged` and
/// `uncharged` by callers, units `reclaimed` by reclaimers, units `forced`
/// past `memory.max`, and `failcnt`, charges refused; then the accounting
/// allocator's ([`crate::alloc`]): `heap`, bytes of live heap objects
/// (as the program asked for them), `heap_overhead`, the bytes the
/// allocator added to them (its per-object owner word and padding; `heap +
/// heap_overhead` is what the objects charge), `heap_allocs` and
/// `heap_frees`, objects allocated and freed (a `realloc` is neither),
/// and `heap_reparented`, bytes of objects of removed groups uncharged
/// (freed, or shrunk by `realloc`) from the group (their nearest live
/// ancestor) that took them over, counted there when it happens. Heap
/// bytes are counted on the group the object's owner handle names: its
/// own group while that lives; after its removal (whose stats fold into
/// the parent's hierarchical totals) the nearest live ancestor. So a
/// subtree's hierarchical `heap + heap_overhead` is exactly its live heap,
/// while a group's local figure is its own objects' bytes less those of
/// removed descendants' objects freed since their removal. `heap` and
/// `heap_overhead` are levels, declared [`StatKind::Gauge`]; the others
/// only grow, [`StatKind::Counter`].
///
/// [`StatKind::Gauge`]: crate::StatKind::Gauge
/// [`StatKind::Counter`]: crate::StatKind::Counter
pub const MEMORY_STAT_NAMES: [&str; 10] = [
    "charged",
    "uncharged",
    "reclaimed",
    "forced",
    "failcnt",
    "heap",
    "heap_overhead",
    "heap_allocs",
    "heap_frees",
    "heap_reparented",
];

pub(super) const STAT_CHARGED: usize = 0;
pub(super) const STAT_UNCHARGED: usize = 1;
pub(super) const STAT_RECLAIMED: usize = 2;
pub(super) const STAT_FORCED: usize = 3;
pub(super) const STAT_FAILCNT: usize = 4;
pub(super) const STAT_HEAP: usize = 5;
pub(super) const STAT_HEAP_OVERHEAD: usize = 6;
pub(super) const STAT_HEAP_ALLOCS: usize = 7;
pub(super) const STAT_HEAP_FREES: usize = 8;
pub(super) const STAT_HEAP_REPARENTED: usize = 9;

/// Settings of a memory controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryConfig {
    /// Units charged to a page counter at once when a stock runs dry, and
    /// the most one CPU's stock holds for one group. Up to `batch ×
    /// nr_cpus` units per group may be charged but held by nobody. 0
    /// disables the stock: every charge goes to the page counter. At most
    /// [`MAX_BATCH`]. Default [`MEMCG_CHARGE_BATCH`].
    ///
    /// It also sets the declared unit of the `memory.stat` items counted in
    /// charge units ([`stat_unit`]: `batch / 64`, rounded down to a power
    /// of two, at least 1; `failcnt` counts refusals, in unit 1).
    pub batch: u64,
    /// Reclaim rounds that free nothing a charge over `memory.max` (or a
    /// `memory.max` / `memory.high` write) makes before giving up. Rounds
    /// that free something do not count: it keeps reclaiming while reclaim
    /// makes progress, up to [`MAX_RECLAIM_ROUNDS`] rounds in all (or this
    /// many, if larger). At most 1000. Default [`MAX_RECLAIM_RETRIES`].
    pub max_reclaim_retries: u32,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            batch: MEMCG_CHARGE_BATCH,
            max_reclaim_retries: MAX_RECLAIM_RETRIES,
        }
    }
}

impl MemoryConfig {
    /// For a controller charged in **pages** (or any unit about a page in
    /// size): the default, a batch of [`MEMCG_CHARGE_BATCH`] units, as the
    /// kernel's.
    pub fn pages() -> Self {
        Self::default()
    }

    /// For a controller charged in **bytes** (buffers, heap objects): a
    /// batch of the kernel's 64 pages counted in bytes
    /// ([`BYTES_BATCH`], 256 KiB). With the default batch of 64 units,
    /// a charge of more than 64 bytes would miss the per-CPU stock and go
    /// to the shared page counters every time. The accounting allocator's
    /// [`heap_config`](crate::alloc::heap_config) is this.
    pub fn bytes() -> Self {
        MemoryConfig {
            batch: BYTES_BATCH,
            ..Self::default()
        }
    }
}

/// [`MemoryConfig::bytes`]'s batch: [`MEMCG_CHARGE_BATCH`] pages of
/// 4 KiB, in bytes.
pub const BYTES_BATCH: u64 = MEMCG_CHARGE_BATCH * 4096;

/// The allocator's `memory.stat` deltas of one group kept in a stock slot:
/// `heap`, `heap_overhead`, `heap_allocs`, `heap_frees` (the items at
/// `STAT_HEAP..` in [`MEMORY_STAT_NAMES`]).
pub(crate) type HeapStats = [i64; 4];
