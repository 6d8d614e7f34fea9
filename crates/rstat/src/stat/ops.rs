//! The op table of the mechanism: what a controller is to the flush.
//!
//! A flush calls a controller only through [`Controller`] (the kernel's
//! `cgroup_subsys` flush op), giving it a [`FlushCtx`]: one (group, CPU)'s
//! deltas, the group's [`Totals`] and the parent's pending array. The
//! engine keeps one [`CtlEntry`] per registered controller. A tree node
//! names its group only through [`NodeOwner`], so this layer knows nothing
//! of the hierarchy above it. The user-facing documentation of
//! controllers (overflow, a flush that panics) is
//! [`controller`](crate::controller)'s.

use crate::stat::css::{StatSlot, EXTRA_SLOTS};
use crate::stat::tree::Domain;
use crate::sync::{self, AtomicU32, AtomicU64};

/// Most controllers one engine can hold (counter sets included).
pub const MAX_CONTROLLERS: usize = if cfg!(rstat_loom) { 4 } else { 16 };

/// What the flush needs to know of the group a tree node belongs to, for
/// [`FlushCtx::group_id`] and [`FlushCtx::group_path`]: implemented by
/// the hierarchy's group, so the mechanism does not name it.
pub(crate) trait NodeOwner {
    /// The group's id ([`Group::id`](crate::Group::id)).
    fn id(&self) -> u64;
    /// The group's path ([`Group::path`](crate::Group::path)).
    fn path(&self) -> String;
}

/// What an item's value means to a reader: a count that only grows, or a
/// level. See [`Controller::stat_kinds`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StatKind {
    /// A count of events or amounts that only grows (every delta is
    /// non-negative): requests, bytes read, CPU time. The default.
    #[default]
    Counter,
    /// A level that goes up and down (deltas of either sign): bytes in
    /// use, queue depth, connections open.
    Gauge,
}

/// A controller: a named list of stat items and how its deltas are folded.
///
/// Implement this to get your own per-group, per-CPU, hierarchically
/// aggregated stats with their own updated trees and flush lock (the
/// userspace analog of BPF's `cgroup_hierarchical_stats`). For plain
/// counters [`Rstat::register_counters`](crate::Rstat::register_counters) is
/// enough.
pub trait Controller: Send + Sync + 'static {
    /// The controller's name, unique in its engine (e.g. `"io"`).
    fn name(&self) -> &str;

    /// The stat items: one per-CPU signed counter each. Must be non-empty,
    /// unique, at most [`MAX_STAT_ITEMS`], and not change after
    /// registration.
    fn stat_names(&self) -> &[String];

    /// Each item's unit of significance, in item order: what one unit of
    /// the [`Threshold`](crate::FlushPolicy::Threshold) policy's
    /// pending-update count stands for. A power of two from 1 to
    /// [`MAX_STAT_UNIT`]; the default is 1 for every item (plain counts).
    ///
    /// Declare the granularity the item's changes come in, as the kernel
    /// counts memcg byte stats in pages: a byte counter charged in pages
    /// declares 4096. The update path then folds a change into the shared
    /// pending counters (a walk over every ancestor) once per
    /// [`UPDATE_BATCH`](crate::controller::UPDATE_BATCH) × unit of
    /// change of the item on a CPU, not once per batch of bytes, and a read's
    /// staleness bound for the item is stated in its unit
    /// ([`FlushPolicy::staleness_bound`](crate::FlushPolicy::staleness_bound)).
    /// Read once, at registration; a length other than
    /// [`stat_names`](Self::stat_names)'s, or a unit that is not a power of
    /// two in range, is refused with [`Error::InvalidController`](crate::Error::InvalidController).
    fn stat_units(&self) -> Vec<u64> {
        vec![1; self.stat_names().len()]
    }

    /// Each item's [`StatKind`], in item order: whether it only grows (a
    /// count, [`StatKind::Counter`], the default for every item) or goes up
    /// and down (a level, [`StatKind::Gauge`]). The engine folds both the
    /// same way; readers such as an exporter use it to type the item (a
    /// Prometheus counter must never decrease, so a level exported as one
    /// breaks `rate()`). Read once, at registration; a length other than
    /// [`stat_names`](Self::stat_names)'s is refused with
    /// [`Error::InvalidController`](crate::Error::InvalidController).
    fn stat_kinds(&self) -> Vec<StatKind> {
        vec![StatKind::Counter; self.stat_names().len()]
    }

    /// Fold one (group, CPU)'s deltas. Called under this controller's flush
    /// lock, children before parents; must not block. It should not panic
    /// either; if it does, the engine undoes this call's effect on the
    /// totals, counts the panic and offers the same deltas again at the next
    /// flush (see the module's `# A flush that panics`). The default is the
    /// kernel's sum fold, [`FlushCtx::fold`].
    fn flush(&self, ctx: &mut FlushCtx<'_>) {
        ctx.fold();
    }
}

/// What a [`Controller::flush`] call sees: which group and CPU, that (group,
/// CPU)'s per-item deltas since the last flush, this group's totals, and the
/// parent's pending array.
pub struct FlushCtx<'a> {
    pub(super) owner: &'a dyn NodeOwner,
    pub(super) cpu: usize,
    pub(super) deltas: &'a [i64],
    pub(super) totals: &'a mut Totals,
    /// `None` at the root.
    pub(super) parent: Option<ParentSide<'a>>,
}

/// What a flush may touch of the parent's totals.
pub(super) struct ParentSide<'a> {
    pub(super) pending: &'a mut [i64],
    pub(super) overflows: &'a mut u64,
}

/// What [`FlushCtx::save`] kept beside the values, for
/// [`FlushCtx::restore`]: the overflow counts.
pub(super) struct Saved {
    overflows: u64,
    parent_overflows: u64,
}

/// `a + b`, clamped to `i64`'s range; a clamp adds one to `clamps`.
#[inline(always)]
fn add_clamped(a: i64, b: i64, clamps: &mut u64) -> i64 {
    match a.checked_add(b) {
        Some(v) => v,
        None => {
            *clamps += 1;
            clamp(a, b)
        }
    }
}

#[cold]
#[inline(never)]
fn clamp(a: i64, b: i64) -> i64 {
    a.saturating_add(b)
}

impl FlushCtx<'_> {
    /// The id of the group being flushed: [`Group::id`](crate::Group::id),
    /// unique for the engine's lifetime, so a controller can key per-group
    /// state by it. Cost: one load.
    pub fn group_id(&self) -> u64 {
        self.owner.id()
    }

    /// The path of the group being flushed, as
    /// [`Group::path`](crate::Group::path) gives it (`"/a/b"`, `"/"` for
    /// the root). Computed on each call: walks the ancestors and allocates, so
    /// prefer [`group_id`](Self::group_id) in a flush that runs often.
    pub fn group_path(&self) -> String {
        self.owner.path()
    }

    /// The CPU whose counters these deltas come from.
    pub fn cpu(&self) -> usize {
        self.cpu
    }

    /// Per-item change of this group's own counters on this CPU since the
    /// last flush.
    pub fn deltas(&self) -> &[i64] {
        self.deltas
    }

    /// Whether this group has no parent (the root).
    pub fn is_root(&self) -> bool {
        self.parent.is_none()
    }

    /// This group's totals, to fold into by hand.
    pub fn totals_mut(&mut self) -> &mut Totals {
        self.totals
    }

    /// The parent's pending array (what the parent will add to its
    /// hierarchical totals when it is flushed); `None` at the root.
    pub fn parent_pending_mut(&mut self) -> Option<&mut [i64]> {
        self.parent.as_mut().map(|p| &mut *p.pending)
    }

    /// Record that a total of this group was clamped (or is otherwise
    /// inexact): one more in its [`GroupStats::overflows`]. For controllers
    /// that fold by hand; [`fold`](Self::fold) counts its own clamps. Cost:
    /// one add.
    ///
    /// [`GroupStats::overflows`]: crate::GroupStats::overflows
    pub fn note_overflow(&mut self) {
        self.totals.overflows = self.totals.overflows.saturating_add(1);
    }

    /// As [`note_overflow`](Self::note_overflow), for a clamp of the
    /// parent's pending array (which makes the parent's totals inexact).
    /// Does nothing at the root.
    pub fn note_parent_overflow(&mut self) {
        if let Some(p) = self.parent.as_mut() {
            *p.overflows = p.overflows.saturating_add(1);
        }
    }

    /// Copy what a flush may change (this group's totals, the parent's
    /// pending array and both overflow counts) to `saved`.
    /// `saved` is exactly as long as the totals' `3n` values and the
    /// parent's pending array together.
    pub(super) fn save(&self, saved: &mut [i64]) -> Saved {
        let t = self.totals.values();
        let pp: &[i64] = self.parent.as_ref().map_or(&[], |p| &*p.pending);
        saved[..t.len()].copy_from_slice(t);
        saved[t.len()..t.len() + pp.len()].copy_from_slice(pp);
        Saved {
            overflows: self.totals.overflows,
            parent_overflows: self.parent.as_ref().map_or(0, |p| *p.overflows),
        }
    }

    /// Put back what [`save`](Self::save) copied. Cold: runs after a panic.
    #[cold]
    pub(super) fn restore(&mut self, saved: &[i64], s: &Saved) {
        let t = self.totals.values_mut();
        let (mine, pp) = saved.split_at(t.len());
        t.copy_from_slice(mine);
        self.totals.overflows = s.overflows;
        if let Some(p) = self.parent.as_mut() {
            // The flush only had a slice of the parent's array: its length
            // cannot have changed.
            p.pending.copy_from_slice(&pp[..p.pending.len()]);
            *p.overflows = s.parent_overflows;
        }
    }

    /// The standard fold: local += delta; the delta plus what children left
    /// pending goes into hierarchical and up to the parent's pending. Every
    /// addition saturates at `i64::MIN`/`i64::MAX` and each clamp is counted
    /// (see the module's `# Overflow`): in this group's count, or in the
    /// parent's for its pending array. Cost: four checked adds per item (three
    /// at the root); a clamp takes a cold path.
    pub fn fold(&mut self) {
        let (local, hier, pending) = self.totals.split_mut();
        // Bounded by the deltas and the parent's array too (all are the
        // controller's item count long), so the indexing below needs no
        // bounds checks.
        let mut n = self.deltas.len().min(local.len());
        if let Some(p) = self.parent.as_ref() {
            n = n.min(p.pending.len());
        }
        let deltas = &self.deltas[..n];
        let (local, hier, pending) = (&mut local[..n], &mut hier[..n], &mut pending[..n]);
        let mut clamps = 0u64;
        match self.parent.as_mut() {
            None => {
                for i in 0..n {
                    let d = deltas[i];
                    local[i] = add_clamped(local[i], d, &mut clamps);
                    let up = add_clamped(d, core::mem::take(&mut pending[i]), &mut clamps);
                    hier[i] = add_clamped(hier[i], up, &mut clamps);
                }
            }
            Some(p) => {
                let pp = &mut p.pending[..n];
                let mut parent_clamps = 0u64;
                for i in 0..n {
                    let d = deltas[i];
                    local[i] = add_clamped(local[i], d, &mut clamps);
                    let up = add_clamped(d, core::mem::take(&mut pending[i]), &mut clamps);
                    hier[i] = add_clamped(hier[i], up, &mut clamps);
                    pp[i] = add_clamped(pp[i], up, &mut parent_clamps);
                }
                if parent_clamps != 0 {
                    *p.overflows = p.overflows.saturating_add(parent_clamps);
                }
            }
        }
        if clamps != 0 {
            self.totals.overflows = self.totals.overflows.saturating_add(clamps);
        }
    }
}

/// Per-group totals of one controller (protected by its flush lock): for
/// each of its `n` items a local total, a hierarchical total and a pending
/// value, `3n` values in the css's own allocation, and the clamp count.
///
/// A custom [`Controller::flush`] reaches the three arrays through
/// [`local_mut`](Self::local_mut), [`hierarchical_mut`](Self::hierarchical_mut),
/// [`pending_mut`](Self::pending_mut), or all three at once with
/// [`split_mut`](Self::split_mut). Each is exactly [`len`](Self::len) (the
/// controller's item count) long, for the group's whole life: a flush
/// changes values, never the shape (there is no public constructor, nor
/// `Clone` or `Default`, so a flush has no other `Totals` to put in this
/// one's place).
pub struct Totals {
    /// `local` in `[..n]`, `hierarchical` in `[n..2n]`, `pending` in
    /// `[2n..3n]`: in the tail of the css's allocation
    /// ([`Css::boxed`](crate::stat::css::Css::boxed)), so a group's
    /// creation makes one allocation per controller for the css and both
    /// its arrays. Owned by these totals alone, as a `Box<[i64]>` would
    /// be, for as long as they live.
    values: core::ptr::NonNull<[i64]>,
    /// Additions into these totals (or into `pending`) that were clamped at
    /// `i64::MIN`/`i64::MAX`; see the module's `# Overflow`. Never reset.
    pub overflows: u64,
}

// SAFETY: `values` is owned exclusively by the totals (see the field), so
// they move and share as a `Box<[i64]>` and a `u64` would.
unsafe impl Send for Totals {}
// SAFETY: as above.
unsafe impl Sync for Totals {}

impl core::fmt::Debug for Totals {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Totals")
            .field("local", &self.local())
            .field("hierarchical", &self.hierarchical())
            .field("pending", &self.pending())
            .field("overflows", &self.overflows)
            .finish()
    }
}

impl PartialEq for Totals {
    fn eq(&self, other: &Self) -> bool {
        self.values() == other.values() && self.overflows == other.overflows
    }
}

impl Eq for Totals {}

impl Totals {
    /// Zeroed totals of `n` items in the `3n` values at `values`.
    ///
    /// # Safety
    /// `values` is valid for writes of `3n` `i64`s, aligned, and the
    /// memory is the returned totals' alone for as long as they live.
    pub(crate) unsafe fn zeroed_at(values: *mut i64, n: usize) -> Self {
        // SAFETY: the caller's guarantee.
        unsafe { values.write_bytes(0, 3 * n) };
        Totals {
            // SAFETY: non-null (the caller's guarantee), and written above.
            values: unsafe {
                core::ptr::NonNull::new_unchecked(core::ptr::slice_from_raw_parts_mut(
                    values,
                    3 * n,
                ))
            },
            overflows: 0,
        }
    }

    /// Where the values are (for prefetches).
    #[cfg_attr(rstat_loom, allow(dead_code))]
    pub(crate) fn values_ptr(&self) -> *const u8 {
        self.values.as_ptr().cast()
    }

    /// The number of items: the length of each of the three arrays.
    #[inline]
    pub fn len(&self) -> usize {
        self.values.len() / 3
    }

    /// Whether the controller has no items (never, for a registered one).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.values.len() == 0
    }

    /// The group's own updates.
    #[inline]
    pub fn local(&self) -> &[i64] {
        &self.values()[..self.len()]
    }

    /// The group's and all its descendants' (including removed ones).
    #[inline]
    pub fn hierarchical(&self) -> &[i64] {
        &self.values()[self.len()..2 * self.len()]
    }

    /// Deltas handed up by flushed children, not yet in
    /// [`hierarchical`](Self::hierarchical).
    #[inline]
    pub fn pending(&self) -> &[i64] {
        &self.values()[2 * self.len()..]
    }

    /// [`local`](Self::local), to fold into.
    #[inline]
    pub fn local_mut(&mut self) -> &mut [i64] {
        let n = self.len();
        &mut self.values_mut()[..n]
    }

    /// [`hierarchical`](Self::hierarchical), to fold into.
    #[inline]
    pub fn hierarchical_mut(&mut self) -> &mut [i64] {
        let n = self.len();
        &mut self.values_mut()[n..2 * n]
    }

    /// [`pending`](Self::pending), to take from.
    #[inline]
    pub fn pending_mut(&mut self) -> &mut [i64] {
        let n = self.len();
        &mut self.values_mut()[2 * n..]
    }

    /// `(local, hierarchical, pending)`, all three to write at once (as a
    /// fold does). Cost: two slice splits.
    #[inline]
    pub fn split_mut(&mut self) -> (&mut [i64], &mut [i64], &mut [i64]) {
        let n = self.len();
        let (local, rest) = self.values_mut().split_at_mut(n);
        let (hierarchical, pending) = rest.split_at_mut(n);
        (local, hierarchical, pending)
    }

    /// [`pending_mut`](Self::pending_mut) and the overflow count: what a
    /// child's flush may touch of its parent's totals.
    pub(super) fn pending_and_overflows_mut(&mut self) -> (&mut [i64], &mut u64) {
        let n = self.len();
        // SAFETY: as `values_mut`; the values' memory is apart from the
        // `overflows` field borrowed beside it.
        let values = unsafe { self.values.as_mut() };
        (&mut values[2 * n..], &mut self.overflows)
    }

    /// All `3n` values (local, hierarchical, pending), for the accessors
    /// above and the panic containment's save and restore.
    #[inline(always)]
    pub(super) fn values_mut(&mut self) -> &mut [i64] {
        // SAFETY: owned by these totals, live as long as they are (see
        // `values`), and `&mut self` is the only access.
        unsafe { self.values.as_mut() }
    }

    /// As [`values_mut`](Self::values_mut), to read.
    #[inline(always)]
    pub(super) fn values(&self) -> &[i64] {
        // SAFETY: owned by these totals, live as long as they are.
        unsafe { self.values.as_ref() }
    }
}

/// A copy of one group's totals of one controller, as a read returns it:
/// the local and hierarchical totals side by side (local first), and the
/// clamped-addition count. Not [`Totals`]: a read has no use for the
/// pending array. A controller of up to [`INLINE_VALUES`]` / 2` items
/// (every built-in counter set a service declares per metric, the common
/// case) keeps its copy inline, so a read that does not flush allocates
/// nothing; larger ones take one allocation.
#[derive(Clone, Debug)]
pub(crate) struct TotalsCopy {
    /// `local` in `[..local_len]`, `hierarchical` after it.
    values: Values,
    local_len: usize,
    /// [`Totals::overflows`].
    pub(crate) overflows: u64,
}

/// How many values (local and hierarchical together) a [`TotalsCopy`]
/// holds without an allocation.
pub(crate) const INLINE_VALUES: usize = 4;

/// A [`TotalsCopy`]'s values: inline up to [`INLINE_VALUES`], else boxed.
#[derive(Clone, Debug)]
enum Values {
    Inline { buf: [i64; INLINE_VALUES], len: u8 },
    Heap(Box<[i64]>),
}

impl Values {
    /// The values `iter` yields, which are exactly `len`.
    #[inline]
    fn collect(len: usize, iter: impl Iterator<Item = i64>) -> Self {
        if len <= INLINE_VALUES {
            let mut buf = [0; INLINE_VALUES];
            let mut n = 0;
            for (slot, v) in buf.iter_mut().zip(iter) {
                *slot = v;
                n += 1;
            }
            debug_assert_eq!(n, len);
            Values::Inline { buf, len: n as u8 }
        } else {
            let v: Box<[i64]> = iter.collect();
            debug_assert_eq!(v.len(), len);
            Values::Heap(v)
        }
    }

    #[inline]
    fn as_slice(&self) -> &[i64] {
        match self {
            Values::Inline { buf, len } => &buf[..usize::from(*len)],
            Values::Heap(v) => v,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [i64] {
        match self {
            Values::Inline { buf, len } => &mut buf[..usize::from(*len)],
            Values::Heap(v) => v,
        }
    }
}

impl PartialEq for TotalsCopy {
    fn eq(&self, other: &Self) -> bool {
        self.local() == other.local()
            && self.hierarchical() == other.hierarchical()
            && self.overflows == other.overflows
    }
}

impl Eq for TotalsCopy {}

impl TotalsCopy {
    /// A copy of `local`, `hierarchical` (which may differ in length) and
    /// `overflows`.
    pub(crate) fn new(local: &[i64], hierarchical: &[i64], overflows: u64) -> Self {
        TotalsCopy {
            values: Values::collect(
                local.len() + hierarchical.len(),
                local.iter().chain(hierarchical).copied(),
            ),
            local_len: local.len(),
            overflows,
        }
    }

    /// A copy of the `2 × n` values `values` yields, local first,
    /// hierarchical after.
    #[inline]
    pub(crate) fn from_halves(n: usize, values: impl Iterator<Item = i64>, overflows: u64) -> Self {
        TotalsCopy {
            values: Values::collect(2 * n, values),
            local_len: n,
            overflows,
        }
    }

    /// The group's own totals.
    pub(crate) fn local(&self) -> &[i64] {
        &self.values.as_slice()[..self.local_len]
    }

    /// The group's and its descendants' totals.
    pub(crate) fn hierarchical(&self) -> &[i64] {
        &self.values.as_slice()[self.local_len..]
    }

    /// `(local, hierarchical)`, to rewrite in place.
    pub(crate) fn halves_mut(&mut self) -> (&mut [i64], &mut [i64]) {
        self.values.as_mut_slice().split_at_mut(self.local_len)
    }
}

/// A registered controller.
///
/// Aligned to a cache line, so that in its `Arc` the reference counts sit
/// on a line of their own: every [`GroupStats`](crate::GroupStats) a read
/// returns takes and drops a reference, and that must not take the line
/// that updates read (`nr_stats`, the unit shifts) from their CPUs.
#[repr(align(64))]
pub(crate) struct CtlEntry {
    pub(crate) id: usize,
    /// Index of its domain in the engine (and in each group's `nodes`).
    pub(crate) domain_idx: usize,
    pub(crate) name: Box<str>,
    pub(crate) nr_stats: usize,
    /// Per item: the `Threshold` counting's boundary shift,
    /// `UPDATE_BATCH_SHIFT + log2(unit)` (see `Css::count_update`). Each
    /// css keeps a pointer to it.
    pub(crate) unit_shifts: Box<[u8]>,
    /// [`UPDATE_BATCH`](crate::stat::css::UPDATE_BATCH) × nr_cpus: a css's `updates` beyond this makes a `Threshold`
    /// read flush.
    pub(crate) flush_threshold: u64,
    pub(crate) imp: Box<dyn Controller>,
    /// The domain its state joins (its own, or the unified one).
    pub(crate) domain: *const Domain,
    /// The flush policy (`FlushPolicy` as u32).
    pub(crate) policy: AtomicU32,
    /// Whether `imp.flush` is user code, run with its panics contained
    /// (see the module's `# A flush that panics`). False only for the
    /// built-in counter sets, whose flush is the standard fold: it cannot
    /// panic, so it is called directly, with no copy.
    pub(crate) contain_panics: bool,
    /// How many calls of `imp.flush` panicked.
    pub(crate) flush_panics: AtomicU64,
}

/// A registered controller as a css holds it: without a count. An
/// engine's topology keeps every entry registered (an `Arc` each, never
/// removed) for the engine's life, which outlasts every css of it (a
/// group releases its css before its hold on the engine goes), so the css
/// needs no count of its own; taking one would make every group's
/// creation and release write the entry's count line, which the groups
/// made on other CPUs write too.
#[derive(Clone, Copy)]
pub(crate) struct CtlRef(core::ptr::NonNull<CtlEntry>);

// SAFETY: a shared reference to a `Sync` entry.
unsafe impl Send for CtlRef {}
// SAFETY: as above.
unsafe impl Sync for CtlRef {}

impl CtlRef {
    /// A reference to `ctl`, which the caller's engine keeps registered
    /// (in its topology) for as long as the result is used.
    pub(crate) fn new(ctl: &std::sync::Arc<CtlEntry>) -> CtlRef {
        // The `Arc`'s own pointer (not a reference to the entry), so that
        // `to_arc` may reach the counts beside the entry.
        let p = std::sync::Arc::as_ptr(ctl).cast_mut();
        // SAFETY: an `Arc`'s pointer is never null.
        CtlRef(unsafe { core::ptr::NonNull::new_unchecked(p) })
    }

    /// A counted reference to the entry, for a value that may outlive the
    /// css (a read's [`GroupStats`](crate::GroupStats)).
    pub(crate) fn to_arc(self) -> std::sync::Arc<CtlEntry> {
        let p = self.0.as_ptr().cast_const();
        // SAFETY: `p` is the pointer of an `Arc` the engine's topology
        // holds (`new`), still live (this css's engine is): one more
        // strong count on it, then an `Arc` that owns that count.
        unsafe {
            std::sync::Arc::increment_strong_count(p);
            std::sync::Arc::from_raw(p)
        }
    }
}

impl core::ops::Deref for CtlRef {
    type Target = CtlEntry;
    #[inline(always)]
    fn deref(&self) -> &CtlEntry {
        // SAFETY: live while the css (or other holder) is (`new`).
        unsafe { self.0.as_ref() }
    }
}

// SAFETY: `domain` points into the engine, which outlives every entry's use.
unsafe impl Send for CtlEntry {}
// SAFETY: as above; the other fields are immutable.
unsafe impl Sync for CtlEntry {}

impl CtlEntry {
    /// The controller's flush policy now (set at registration, changed by
    /// `ControllerHandle::set_flush_policy`).
    pub(crate) fn flush_policy(&self) -> crate::stat::policy::FlushPolicy {
        crate::stat::policy::FlushPolicy::from_u8(self.policy.load(sync::Ordering::Relaxed) as u8)
    }
}

/// The largest unit an item may declare ([`Controller::stat_units`]): 2^32.
pub const MAX_STAT_UNIT: u64 = 1 << 32;

/// The most stat items one controller (a counter set included) can have:
/// 4096. More is refused at registration with
/// [`Error::InvalidController`](crate::Error::InvalidController), which
/// says to split them over several controllers. A group's per-CPU state of
/// that many items, with the three pending-update counters that follow
/// them, fits one unit of the per-CPU arena (checked at compile time), so
/// a controller of the maximum registers like any other (memory
/// permitting).
pub const MAX_STAT_ITEMS: usize = 4096;

/// The most items this build registers: [`MAX_STAT_ITEMS`], or fewer in
/// the test builds whose arena units are smaller (Miri) or whose slots are
/// larger (loom), where they are as many as fit a unit.
pub(crate) const FITTING_STAT_ITEMS: usize = {
    let fit = crate::percpu::arena::UNIT_SIZE / core::mem::size_of::<StatSlot>() - EXTRA_SLOTS;
    if fit < MAX_STAT_ITEMS {
        fit
    } else {
        MAX_STAT_ITEMS
    }
};
// The arena unit is a multiple of the granule, so a size fits it exactly
// when its rounding up to the granule does.
const _: () =
    assert!(crate::percpu::arena::UNIT_SIZE.is_multiple_of(crate::percpu::arena::GRANULE));
#[cfg(not(any(miri, rstat_loom)))]
const _: () = assert!(FITTING_STAT_ITEMS == MAX_STAT_ITEMS);
