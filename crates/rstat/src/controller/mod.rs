//! Controllers: what is counted per group, and how it is folded.
//!
//! A controller declares a list of stat items. The engine gives every
//! (group, controller) pair one signed 64-bit counter per item per CPU in the
//! per-CPU arena (the kernel's memcg stats, base cputime stats and BPF
//! `cgroup_hierarchical_stats` are all arrays of counters), plus
//! local/hierarchical totals and a pending array for deltas handed up by
//! children. On flush the engine computes each counter's per-CPU delta since
//! the last flush (the "prev" scheme) and calls [`Controller::flush`] once per
//! changed (group, CPU), children before parents. The default fold is the
//! kernel's: local += delta; hierarchical += delta + pending; parent's pending
//! += delta + pending.
//!
//! Built in: [`cpu`](crate::Rstat::cpu_stat) base stats and user counter sets
//! ([`Rstat::register_counters`](crate::Rstat::register_counters)). Each
//! controller has its own updated trees and flush lock unless the engine is
//! built in unified mode.
//!
//! Each item declares a unit of significance ([`Controller::stat_units`]:
//! 4096 for bytes charged in pages, 1 by default): the `Threshold` policy
//! counts changes in it, so the update path walks the ancestors' pending
//! counters once per 64 units of change of an item on a CPU, however large
//! the deltas and deep the group (see [`engine::policy`](crate::engine::policy)).
//!
//! # Overflow
//!
//! Totals are `i64` and never wrap. The standard fold ([`FlushCtx::fold`])
//! adds with saturation: a sum past `i64::MAX` (or below `i64::MIN`) is
//! clamped to the bound, and the clamp is counted in the group's
//! [`overflows`](crate::GroupStats::overflows) (a clamp of the parent's
//! pending array is counted in the parent's). A clamped total is no longer
//! exact, and stays inexact: later updates move it from the bound, not from
//! the true value. So a non-zero count means "this group's totals for this
//! controller cannot be trusted", and it is never reset. A controller
//! folding by hand reports its own clamps with
//! [`FlushCtx::note_overflow`] / [`FlushCtx::note_parent_overflow`].
//!
//! The per-CPU slots are different: they are modular by design. An update
//! is one atomic add that wraps at `i64::MAX`, and the fold takes each slot's
//! delta as `cur - prev` modulo 2^64, which is exact whenever the true net
//! change of one item on one CPU between two folds of the group lies within
//! `i64` (±9.2 · 10^18). Long-lived slots that wrap (charges on one CPU,
//! uncharges on another) therefore lose nothing. The one case nothing
//! detects: one CPU changing one item by more than that between two folds
//! (e.g. two adds of `i64::MAX` with no flush in between); the fold then sees
//! the change modulo 2^64. Keep single deltas well below 2^62, or flush
//! between huge ones. [`Rstat::account_cputime`](crate::Rstat::account_cputime)
//! refuses values that do not fit `i64` instead of clamping them.
//!
//! # A flush that panics
//!
//! A user [`Controller::flush`] runs under the controller's flush lock, in
//! the middle of a flush someone else asked for. If it panics, the engine
//! contains the panic ([`catch_unwind`](std::panic::catch_unwind)) and
//! undoes that one (group, CPU) fold so nothing is lost or counted twice:
//!
//! 1. before the call, the group's totals and the parent's pending array
//!    are copied to the flush's scratch space (no allocation once warm);
//! 2. on a panic they are copied back, so the totals are as before the
//!    call, whatever the controller had written;
//! 3. the group's `prev` values for that CPU are moved back by the deltas,
//!    so the next flush computes the same deltas again (plus any newer
//!    updates), and the group is put back on that CPU's backlog so the next
//!    flush visits it;
//! 4. the panic is counted
//!    ([`ControllerHandle::flush_panics`](crate::ControllerHandle::flush_panics))
//!    and the flush goes on with the next group. The lock is released
//!    normally: nothing is poisoned.
//!
//! The read that ran the flush returns totals without that (group, CPU)'s
//! deltas (it is as if they had not been flushed yet); a later read has
//! them, exactly once, as soon as the controller's flush stops panicking.
//! (An undone fold subtracts nothing from the `Threshold` policy's
//! pending-update counts, so a `Threshold` read that finds the group due
//! for a flush still flushes, and retries.) The one exception is a group's
//! final flush at its release, which has no later flush: there the deltas
//! are folded with the standard sum fold ([`FlushCtx::fold`]) instead of
//! being retried, so they still reach the ancestors. State the controller
//! keeps outside the [`FlushCtx`] is its own to keep consistent: the same
//! deltas will be offered again.
//!
//! The cost, paid by user controllers only (the built-in counter sets run
//! the standard fold, which cannot panic, without any of this): copying
//! 4 × items + 2 numbers per (group, CPU) fold. The panic message still goes
//! to the panic hook (stderr by default), and a build with `panic = "abort"`
//! aborts as usual.

use std::sync::Arc;

use crate::engine::backlog::{self, BacklogHead, PcpuLinks};
use crate::engine::tree::{Domain, TreeNode};
use crate::group::GroupInner;
use crate::percpu::arena::PcpuPtr;
use crate::sync::{AtomicI64, AtomicU32, AtomicU64, Ordering, UnsafeCell};

pub mod counters;

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
    /// pending counters (a walk over every ancestor) once per 64 × unit of
    /// change of the item on a CPU, not once per 64 bytes, and a read's
    /// staleness bound for the item is stated in its unit
    /// ([`FlushPolicy::staleness_bound`](crate::FlushPolicy::staleness_bound)).
    /// Read once, at registration; a length other than
    /// [`stat_names`](Self::stat_names)'s, or a unit that is not a power of
    /// two in range, is refused with [`Error::InvalidController`](crate::Error::InvalidController).
    fn stat_units(&self) -> Vec<u64> {
        vec![1; self.stat_names().len()]
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
    group: &'a GroupInner,
    cpu: usize,
    deltas: &'a [i64],
    totals: &'a mut Totals,
    /// `None` at the root.
    parent: Option<ParentSide<'a>>,
}

/// What a flush may touch of the parent's totals.
struct ParentSide<'a> {
    pending: &'a mut [i64],
    overflows: &'a mut u64,
}

/// Where [`FlushCtx::save`] put things, for [`FlushCtx::restore`]: the
/// array lengths (a controller may replace its totals' arrays), and the
/// overflow counts.
struct Saved {
    lens: [usize; 4],
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
        self.group.id
    }

    /// The path of the group being flushed, as
    /// [`Group::path`](crate::Group::path) gives it (`"a/b"`, `""` for the
    /// root). Computed on each call: walks the ancestors and allocates, so
    /// prefer [`group_id`](Self::group_id) in a flush that runs often.
    pub fn group_path(&self) -> String {
        self.group.path()
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
    /// `saved` is exactly as long as all four arrays together.
    fn save(&self, saved: &mut [i64]) -> Saved {
        let t = &*self.totals;
        let pp: &[i64] = self.parent.as_ref().map_or(&[], |p| &*p.pending);
        let mut at = 0;
        for src in [&*t.local, &*t.hierarchical, &*t.pending, pp] {
            saved[at..at + src.len()].copy_from_slice(src);
            at += src.len();
        }
        Saved {
            lens: [
                t.local.len(),
                t.hierarchical.len(),
                t.pending.len(),
                pp.len(),
            ],
            overflows: t.overflows,
            parent_overflows: self.parent.as_ref().map_or(0, |p| *p.overflows),
        }
    }

    /// Put back what [`save`](Self::save) copied. Cold: runs after a panic.
    #[cold]
    fn restore(&mut self, saved: &[i64], s: &Saved) {
        fn put(dst: &mut Box<[i64]>, src: &[i64]) {
            if dst.len() == src.len() {
                dst.copy_from_slice(src);
            } else {
                *dst = src.into();
            }
        }
        let [a, b, c, d] = s.lens;
        let (local, rest) = saved.split_at(a);
        let (hier, rest) = rest.split_at(b);
        let (pending, pp) = rest.split_at(c);
        let t = &mut *self.totals;
        put(&mut t.local, local);
        put(&mut t.hierarchical, hier);
        put(&mut t.pending, pending);
        t.overflows = s.overflows;
        if let Some(p) = self.parent.as_mut() {
            // The flush only had a slice of the parent's array: its length
            // cannot have changed.
            debug_assert_eq!(p.pending.len(), d);
            p.pending.copy_from_slice(&pp[..d]);
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
        let t = &mut *self.totals;
        // Bounded by every array, so a controller that resized its totals
        // by hand gets a partial fold, not a panic (and the indexing below
        // needs no bounds checks).
        let mut n = self
            .deltas
            .len()
            .min(t.local.len())
            .min(t.hierarchical.len())
            .min(t.pending.len());
        if let Some(p) = self.parent.as_ref() {
            n = n.min(p.pending.len());
        }
        let deltas = &self.deltas[..n];
        let (local, hier) = (&mut t.local[..n], &mut t.hierarchical[..n]);
        let pending = &mut t.pending[..n];
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
            t.overflows = t.overflows.saturating_add(clamps);
        }
    }
}

/// Per-group totals of one controller (protected by its flush lock).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// The group's own updates.
    pub local: Box<[i64]>,
    /// The group's and all its descendants' (including removed ones).
    pub hierarchical: Box<[i64]>,
    /// Deltas handed up by flushed children, not yet in `hierarchical`.
    pub pending: Box<[i64]>,
    /// Additions into these totals (or into `pending`) that were clamped at
    /// `i64::MIN`/`i64::MAX`; see the module's `# Overflow`. Never reset.
    pub overflows: u64,
}

impl Totals {
    fn zeroed(n: usize) -> Self {
        Totals {
            local: vec![0; n].into(),
            hierarchical: vec![0; n].into(),
            pending: vec![0; n].into(),
            overflows: 0,
        }
    }
}

/// A registered controller.
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
    /// 64 × nr_cpus: a css's `updates` beyond this makes a `Threshold`
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

// SAFETY: `domain` points into the engine, which outlives every entry's use.
unsafe impl Send for CtlEntry {}
// SAFETY: as above; the other fields are immutable.
unsafe impl Sync for CtlEntry {}

/// A copy of an engine's update path (`Css::section_limit`,
/// `Css::rseq_off`: the same in every css of the engine), for handles to
/// keep on their own line.
#[derive(Clone, Copy)]
pub(crate) struct PathCopy {
    pub(crate) section_limit: u32,
    #[cfg_attr(any(rstat_loom, miri), allow(dead_code))]
    pub(crate) rseq_off: i32,
}

/// One item's update path, resolved from its css once and kept by a
/// [`StatItem`](crate::StatItem): CPU 0's addresses of the item's slot and
/// of the node's links (CPU `c`'s are `c << UNIT_SHIFT` further), the
/// update path's copies and the item's unit shift. An update then loads
/// these words from the handle and, on the common path, nothing from the
/// css: the css is reached only to fold a crossing or to queue the node.
/// (A restartable section's `asm!` may write any memory as far as the
/// compiler knows, so every word an update needs is reloaded on each call:
/// the fewer, the cheaper, above all when a busy sibling hyperthread
/// shares the core.)
#[derive(Clone, Copy)]
pub(crate) struct ItemPath {
    css: *const Css,
    #[cfg_attr(any(rstat_loom, miri), allow(dead_code))]
    slot: *const u8,
    #[cfg_attr(any(rstat_loom, miri), allow(dead_code))]
    links: *const u8,
    #[cfg_attr(any(rstat_loom, miri), allow(dead_code))]
    path: PathCopy,
    item: usize,
    #[cfg_attr(any(rstat_loom, miri), allow(dead_code))]
    shift: u8,
}

impl ItemPath {
    /// The item's index.
    pub(crate) fn item(&self) -> usize {
        self.item
    }

    /// [`Css::update_here`] through the resolved addresses: on the rseq
    /// path one restartable section on the item's slot of this CPU, the
    /// boundary test in registers, and one load of this CPU's on-list flag.
    ///
    /// # Safety
    /// The css is live (its group is held) and `nr_cpus` is its engine's.
    #[inline(always)]
    pub(crate) unsafe fn update(&self, nr_cpus: usize, delta: i64) {
        #[cfg(not(any(rstat_loom, miri)))]
        if self.path.section_limit != 0 {
            // SAFETY: caller's guarantees; `slot` and `links` are the css's
            // addresses for `item` on CPU 0, `shift` the item's.
            return unsafe { section_update(self.path, self.slot, self.links, self, delta) };
        }
        // SAFETY: caller's guarantees; `item < nr_stats` (resolved).
        unsafe { (*self.css).update_here(nr_cpus, self.item, delta) }
    }
}

/// What the rare steps of a section update need (the css, to fold a
/// crossing or to queue the node, and the item's unit shift), reached only
/// when one is taken: the common path then loads nothing but the slot,
/// links and path words. A [`StatItem`](crate::StatItem)'s resolved path
/// gives them from the handle; [`Css::update_here`] from the css and the
/// item index.
#[cfg(not(any(rstat_loom, miri)))]
trait Rare: Copy {
    /// The css updated.
    fn css(self) -> *const Css;
    /// The updated item's unit shift.
    ///
    /// # Safety
    /// The css is live.
    unsafe fn shift(self) -> u8;
}

#[cfg(not(any(rstat_loom, miri)))]
impl Rare for &ItemPath {
    fn css(self) -> *const Css {
        self.css
    }
    unsafe fn shift(self) -> u8 {
        self.shift
    }
}

#[cfg(not(any(rstat_loom, miri)))]
impl Rare for (&Css, usize) {
    fn css(self) -> *const Css {
        self.0
    }
    unsafe fn shift(self) -> u8 {
        // SAFETY: the pair is a css and one of its items.
        unsafe { self.0.item_shift(self.1) }
    }
}

/// The rseq update itself, for [`Css::update_here`] and
/// [`ItemPath::update`]: one restartable section on this CPU's copy of
/// `slot` (CPU 0's address of the item's slot), then, if it crossed a
/// batch boundary, the crossing count, and the on-list check on this CPU's
/// copy of `links` (CPU 0's links of the css's node). A thread the section
/// refuses (no CPU id) has taken a locked add on the first slot past the
/// section limit, which no section writes, and goes on as on that CPU.
///
/// # Safety
/// The css is live; `path` is its engine's, with `section_limit != 0`;
/// `slot`, `links` and `rare` are the css's for the item.
#[cfg(not(any(rstat_loom, miri)))]
#[inline(always)]
unsafe fn section_update(
    path: PathCopy,
    slot: *const u8,
    links: *const u8,
    rare: impl Rare,
    delta: i64,
) {
    // SAFETY: slots `0..section_limit` of the css are written only by
    // sections, slot `section_limit` (which exists: the engine keeps one
    // slot past the limit) only by locked RMWs, and all are live while
    // the css is.
    let (at, new, changed) = unsafe {
        crate::percpu::rseq::add_fetch_on_this_cpu(
            path.rseq_off as isize,
            slot,
            path.section_limit,
            delta,
        )
    };
    // The light half of the asymmetric fence: the store above may still
    // be in this CPU's store buffer; the flusher's membarrier stands in
    // for the barrier we do not execute.
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
    // As `count_update`: the shift only past the cheap test, the css only
    // for a crossing of the item's own boundary.
    if changed >> UPDATE_BATCH_SHIFT != 0 {
        let old = new.wrapping_sub(delta);
        // SAFETY: the css is live.
        let v = units_to_fold(old, new, unsafe { rare.shift() });
        if v != 0 {
            // SAFETY: caller's guarantees; `at` is a unit offset below
            // `nr_cpus`.
            unsafe { section_fold(rare, at, v) };
        }
    }
    // SAFETY: `at` is the unit offset of a slot below `nr_cpus`: the links
    // of the css's node there, which outlive the css; the css is reached
    // only to queue the node.
    unsafe {
        let links = &*links.add(at).cast::<PcpuLinks>();
        backlog::mark_updated(links, || {
            (*rare.css())
                .backlog
                .raw(at >> crate::percpu::arena::UNIT_SHIFT)
        });
    }
}

/// The fold of [`section_update`]'s crossings, out of line: the css is
/// loaded here, not on the common path.
///
/// # Safety
/// As [`section_update`]; `at` is the unit offset the section returned,
/// `v` what [`units_to_fold`] gave (not 0).
#[cfg(not(any(rstat_loom, miri)))]
#[cold]
#[inline(never)]
unsafe fn section_fold(rare: impl Rare, at: usize, v: u64) {
    let cpu = at >> crate::percpu::arena::UNIT_SHIFT;
    // SAFETY: caller's guarantees; `cpu < nr_cpus`.
    unsafe { (*rare.css()).fold_updates(cpu, v) };
}

/// The pending units an update from `old` to `new` adds: 64 per boundary
/// of the item's unit (`1 << shift`) it crossed, 0 if none (see
/// `Css::count_update`).
///
/// Slots are modular: the update moved the slot by `new - old` in wrapping
/// arithmetic (its delta, an `i64`), and the boundaries are counted on the
/// unwrapped line from `old` to `old + delta`, which may leave the `i64`
/// range (an add that carries the slot across `i64::MAX` crosses as many
/// boundaries as its delta spans, not the ~2^58 between the two ends). At
/// most 2^58 boundaries, so the product saturates rather than wraps; the
/// fold caps it further (`Css::fold_updates`).
#[inline(always)]
fn units_to_fold(old: i64, new: i64, shift: u8) -> u64 {
    let shift = u32::from(shift);
    let from = i128::from(old);
    let to = from + i128::from(new.wrapping_sub(old));
    let crossed = (to >> shift) - (from >> shift);
    u64::try_from(crossed.unsigned_abs())
        .unwrap_or(u64::MAX)
        .saturating_mul(UPDATE_BATCH)
}

/// One per-CPU stat counter and the value it had at the last flush.
///
/// A css has `nr_stats + 3` of them per CPU; of the last three only `cur`
/// is used (see [`COUNTED`], [`UPDATES`], [`CONSUMED`] and
/// `Css::count_update`).
#[repr(C)] // `cur` first: restartable sections address it as the slot
pub(crate) struct StatSlot {
    pub(crate) cur: AtomicI64,
    /// Domain lock.
    pub(crate) prev: UnsafeCell<i64>,
}

// SAFETY: `prev` is only touched by the domain lock holder.
unsafe impl Sync for StatSlot {}
// SAFETY: as above.
unsafe impl Send for StatSlot {}

impl Default for StatSlot {
    fn default() -> Self {
        StatSlot {
            cur: AtomicI64::new(0),
            prev: UnsafeCell::new(0),
        }
    }
}

/// The state of one controller in one group ("css" in the kernel).
///
/// Laid out by use (`repr(C)`, on its own cache lines): the first line
/// holds only what every update reads and nobody writes after
/// construction; what flushes write sits two lines further, so a flush
/// does not take the line every update reads (the pending-update counters
/// that crossings write are per CPU, in the arena: see [`UPDATES`]).
#[repr(C, align(64))]
pub(crate) struct Css {
    // Line 0: read by every update, written by nobody.
    pub(crate) stats: PcpuPtr<StatSlot>,
    /// Copies of the node's links and the domain's backlog heads, so the
    /// hot path reaches both without dereferencing the node.
    pub(crate) links: PcpuPtr<PcpuLinks>,
    pub(crate) backlog: PcpuPtr<BacklogHead>,
    /// The first [`INLINE_SHIFTS`] items' shifts from `ctl.unit_shifts`,
    /// one byte each (item `i` in bits `8i..8i + 8`), so the update path
    /// reaches them with one load from this line; later items' are read
    /// through `ctl`.
    pub(crate) unit_shifts: u64,
    /// Copies of the engine's update path (see `EngineInner`): updates use
    /// restartable sections on slots `0..section_limit` when it is not 0.
    /// (Narrow, so the two take one word.)
    pub(crate) section_limit: u32,
    #[cfg_attr(any(rstat_loom, miri), allow(dead_code))]
    pub(crate) rseq_off: i32,
    // Line 1: read-only after construction (the locked path reads `node`),
    // then the totals, whose boxes a flush does not replace.
    /// This group's node in the controller's domain.
    pub(crate) node: *const TreeNode,
    pub(crate) ctl: Arc<CtlEntry>,
    /// The parent group's css of the same controller; null at the root.
    pub(crate) parent: *const Css,
    /// The last folded totals, for reads that do not take the lock:
    /// `local` in `[..n]`, `hierarchical` in `[n..]`. Written under the
    /// domain lock (hierarchical first, then local with `Release`); read
    /// local (`Acquire`) first, then hierarchical, so a lock-free reader
    /// never sees `local > hierarchical` where counts only grow.
    pub(crate) published: Box<[AtomicI64]>,
    /// Domain lock.
    pub(crate) totals: UnsafeCell<Totals>,
    // Line 2: written by flushes.
    /// The last folded `Totals::overflows`, published with `published`
    /// (stored before `local`, loaded after it).
    pub(crate) published_overflows: AtomicU64,
}

// SAFETY: pointers are immutable after construction and kept alive by the
// hierarchy; `totals` is behind the domain lock; stats are atomics.
unsafe impl Send for Css {}
// SAFETY: as above.
unsafe impl Sync for Css {}

impl Css {
    pub(crate) fn new(
        ctl: Arc<CtlEntry>,
        parent: *const Css,
        stats: PcpuPtr<StatSlot>,
        node: &TreeNode,
    ) -> Self {
        let n = ctl.nr_stats;
        // SAFETY: a node's domain outlives it.
        let domain = unsafe { &*node.domain };
        let backlog = domain.backlog;
        let unit_shifts = ctl
            .unit_shifts
            .iter()
            .take(INLINE_SHIFTS)
            .enumerate()
            .fold(0u64, |acc, (i, &s)| acc | u64::from(s) << (8 * i));
        Css {
            ctl,
            parent,
            stats,
            node,
            links: node.links,
            backlog,
            totals: UnsafeCell::new(Totals::zeroed(n)),
            published: (0..2 * n).map(|_| AtomicI64::new(0)).collect(),
            published_overflows: AtomicU64::new(0),
            unit_shifts,
            // The engine checked both fit (`choose_update_path`).
            section_limit: domain.section_limit as u32,
            rseq_off: domain.rseq_off as i32,
        }
    }

    /// The hot path: add `delta` to item `item` on this CPU's slot, and make
    /// sure a flush will visit this group.
    ///
    /// On the [`Rseq`](crate::UpdatePath::Rseq) path, one restartable
    /// section on the slot of the CPU the thread runs on (an unlocked load,
    /// add and store; `cpu` is not used), a compiler fence, and one load of
    /// that CPU's on-list flag. Otherwise (locked path, or a thread without
    /// a CPU id) one uncontended locked RMW on slot `cpu` and the same load.
    ///
    /// # Safety
    /// The css is live, `cpu < nr_cpus`, `item < nr_stats`.
    #[inline(always)]
    pub(crate) unsafe fn update(&self, cpu: usize, item: usize, delta: i64) {
        if self.section_limit != 0 {
            // SAFETY: caller's guarantees.
            return unsafe { self.update_in_section(self.path_copy(), cpu, item, delta) };
        }
        // SAFETY: caller's guarantees.
        unsafe { self.update_locked(cpu, item, delta) }
    }

    /// [`update`](Self::update) on this thread's CPU: the CPU id is read
    /// only on the locked path (a section reads its own; the simulated one
    /// under loom and Miri is given it). `nr_cpus` is the engine's, which
    /// every caller's handle already holds (no trip through the node).
    ///
    /// # Safety
    /// The css is live, `item < nr_stats`, `nr_cpus` is its engine's.
    #[inline(always)]
    pub(crate) unsafe fn update_here(&self, nr_cpus: usize, item: usize, delta: i64) {
        // SAFETY: caller's guarantees; the css's own copies.
        unsafe { self.update_here_via(self.path_copy(), nr_cpus, item, delta) }
    }

    /// This css's copy of its engine's update path.
    #[inline(always)]
    pub(crate) fn path_copy(&self) -> PathCopy {
        PathCopy {
            section_limit: self.section_limit,
            rseq_off: self.rseq_off,
        }
    }

    /// [`update_here`](Self::update_here) with the engine's update path
    /// given by the caller (a handle's copy, equal to this css's: every
    /// css of an engine has the same), so the path test and the section's
    /// limit and offset come from the caller's line rather than the css's.
    ///
    /// # Safety
    /// As [`update_here`](Self::update_here); `path` is the engine's.
    #[inline(always)]
    pub(crate) unsafe fn update_here_via(
        &self,
        path: PathCopy,
        nr_cpus: usize,
        item: usize,
        delta: i64,
    ) {
        let this_cpu = || crate::percpu::cpu::fold(crate::percpu::cpu::current(), nr_cpus);
        if path.section_limit != 0 {
            let cpu = if cfg!(any(rstat_loom, miri)) {
                this_cpu()
            } else {
                0
            };
            // SAFETY: caller's guarantees; `cpu` folded where it is used.
            return unsafe { self.update_in_section(path, cpu, item, delta) };
        }
        // SAFETY: caller's guarantees; `cpu` folded.
        unsafe { self.update_locked(this_cpu(), item, delta) }
    }

    /// A restartable section on this CPU's slot (see `percpu::rseq`).
    ///
    /// # Safety
    /// As [`update`](Self::update); `path` is the engine's, with
    /// `section_limit != 0`.
    #[cfg(not(any(rstat_loom, miri)))]
    #[inline(always)]
    unsafe fn update_in_section(&self, path: PathCopy, _cpu: usize, item: usize, delta: i64) {
        // SAFETY: `item < nr_stats`: the slot lies inside the allocation
        // in every unit; `cur` is its first field (repr(C)).
        let slot = unsafe { self.stats.raw(0).add(item) }.cast::<u8>();
        // SAFETY: caller's guarantees; the item's shift is looked up only
        // if an update crosses a batch boundary.
        unsafe { section_update(path, slot, self.links.raw(0).cast(), (self, item), delta) }
    }

    /// Under loom and Miri, a section is simulated: the slot's lock stands
    /// for "nothing else runs a section on this CPU", a plain load and a
    /// plain store for the unlocked add (as `percpu_ref` simulates its
    /// own). The fence pair is modelled by `SeqCst` fences (`crate::sync`).
    ///
    /// # Safety
    /// As [`update`](Self::update).
    #[cfg(any(rstat_loom, miri))]
    #[inline(always)]
    unsafe fn update_in_section(&self, _path: PathCopy, cpu: usize, item: usize, delta: i64) {
        // SAFETY: a css's node and domain outlive it; caller bounds `cpu`
        // and `item`.
        let (domain, slot) = unsafe { (&*(*self.node).domain, self.stats.elem(cpu, item)) };
        let on_cpu = crate::sync::lock(&domain.sim[cpu]);
        let old = slot.cur.load(Ordering::Relaxed);
        // Release: an x86 store.
        slot.cur.store(old.wrapping_add(delta), Ordering::Release);
        drop(on_cpu);
        // The light half of the asymmetric fence, modelled (with the heavy
        // half, `Domain::heavy_fence`) as a `SeqCst` fence: Miri's weak
        // memory emulation, like a real store buffer, lets the on-list load
        // below pass the plain store above without it.
        crate::sync::fence(Ordering::SeqCst);
        // SAFETY: as above.
        unsafe { self.after_add(cpu, item, old, delta) };
    }

    /// Add on slot `cpu` as if this thread ran there (`add_on_cpu`, for
    /// tests and simulations): the locked add, or under loom and Miri a
    /// simulated section on that slot. On the rseq path this races with
    /// sections of threads really running on CPU `cpu`: a section's add is
    /// not atomic against another CPU's RMW.
    ///
    /// # Safety
    /// As [`update`](Self::update).
    pub(crate) unsafe fn update_on(&self, cpu: usize, item: usize, delta: i64) {
        #[cfg(any(rstat_loom, miri))]
        // SAFETY: caller's guarantees.
        unsafe {
            self.update(cpu, item, delta)
        }
        #[cfg(not(any(rstat_loom, miri)))]
        // SAFETY: caller's guarantees.
        unsafe {
            self.update_locked(cpu, item, delta)
        }
    }

    /// The locked add on slot `cpu`.
    ///
    /// # Safety
    /// As [`update`](Self::update); on the rseq path, `cpu` is at or above
    /// the section limit (or the caller accepts racing sections there, as
    /// `add_on_cpu` documents).
    #[inline(always)]
    pub(crate) unsafe fn update_locked(&self, cpu: usize, item: usize, delta: i64) {
        // SAFETY: caller's guarantees; a css's node links and its domain's
        // backlog outlive the css.
        unsafe {
            let slot = self.stats.elem(cpu, item);
            let old = slot.cur.fetch_add(delta, Ordering::SeqCst);
            self.after_add(cpu, item, old, delta);
        }
    }

    /// After the add: count crossings, then the on-list check (in this
    /// order: see `fold_updates`).
    ///
    /// # Safety
    /// As [`update`](Self::update); `old` is the value of item `item`'s
    /// slot before the add of `delta` on `cpu`.
    #[inline(always)]
    unsafe fn after_add(&self, cpu: usize, item: usize, old: i64, delta: i64) {
        // SAFETY: caller's guarantees; links and backlog outlive the css.
        unsafe {
            self.count_update(cpu, item, old, delta);
            backlog::mark_updated(self.links.elem(cpu, 0), || self.backlog.raw(cpu));
        }
    }

    /// Resolve item `item`'s update path once, for a handle to keep (see
    /// [`ItemPath`]).
    ///
    /// # Safety
    /// `item < nr_stats`.
    pub(crate) unsafe fn item_path(&self, item: usize) -> ItemPath {
        ItemPath {
            css: self,
            // SAFETY: `item < nr_stats`: in bounds of every unit.
            slot: unsafe { self.stats.raw(0).add(item) }.cast(),
            links: self.links.raw(0).cast(),
            path: self.path_copy(),
            item,
            // SAFETY: `item < nr_stats`.
            shift: unsafe { self.item_shift(item) },
        }
    }

    /// Item `item`'s shift (`ctl.unit_shifts`): one load from the css's
    /// first line for the first [`INLINE_SHIFTS`] items, through `ctl`
    /// for later ones.
    ///
    /// # Safety
    /// `item < nr_stats`.
    #[inline(always)]
    unsafe fn item_shift(&self, item: usize) -> u8 {
        if item < INLINE_SHIFTS {
            (self.unit_shifts >> (8 * item)) as u8
        } else {
            // SAFETY: `item < nr_stats`, the table's length.
            unsafe { *self.ctl.unit_shifts.get_unchecked(item) }
        }
    }

    /// The `Threshold` policy's pending-update counting (kernel v6.8's
    /// per-CPU `stats_updates`, in our own design): the per-CPU counter is
    /// the stat slot itself. Each time an update moves item `item`'s slot
    /// across a multiple of [`UPDATE_BATCH`] × its declared unit
    /// ([`Controller::stat_units`]), 64 units per boundary crossed are
    /// added to this CPU's [`UPDATES`] counter of the group and of every
    /// ancestor (lines no other CPU's updates write): the
    /// count measures significance in the item's unit, not raw magnitude,
    /// as the kernel counts memcg byte stats in pages. One update folds at
    /// most once, whatever its delta, so a CPU walks the ancestors at most
    /// once per 64 × unit of change of an item on it (plus once), at any
    /// depth: a byte counter declared in pages and charged a page at a time
    /// walks once per 64 updates, not on each.
    ///
    /// Cost: the boundary test uses the value the stat RMW (or section)
    /// already returned. An update that crosses no multiple of 64 (of any
    /// unit: every boundary is one) makes no memory access at all; one that
    /// does loads the item's shift (one load, from the css line the update
    /// already reads, for the first eight items; three, through the
    /// controller, for later ones), and only a crossing of the item's own
    /// boundary takes the cold walk.
    /// Unlike a separate racy counter, nothing is lost when a thread
    /// migrates mid-update. What it gave up: a unit is coarse by design; a
    /// read may miss up to 64 × unit − 1 of an item per (group, CPU) slot.
    ///
    /// Why it bounds staleness: since a slot was last folded (`prev`), its
    /// value moved by less than 64 × unit × (boundaries crossed + 1), and
    /// the crossings are in the pending counters (the policy module states
    /// the bound, per item in its unit, and its proof).
    ///
    /// # Safety
    /// As [`update`](Self::update); `old` is what the stat RMW on `cpu`
    /// returned for item `item`.
    #[inline(always)]
    pub(crate) unsafe fn count_update(&self, cpu: usize, item: usize, old: i64, delta: i64) {
        let new = old.wrapping_add(delta);
        // Every item's boundary is a multiple of 64: crossing none of
        // those crosses none of the item's (`old >> 6 == new >> 6`).
        if (old ^ new) >> UPDATE_BATCH_SHIFT == 0 {
            return;
        }
        // SAFETY: caller's guarantees.
        unsafe { self.count_crossing(cpu, old, new, self.item_shift(item)) }
    }

    /// [`count_update`](Self::count_update) past the cheap test, with
    /// the item's shift in hand: fold the crossings of the item's own
    /// boundaries, if any.
    ///
    /// # Safety
    /// As [`count_update`](Self::count_update); `shift` is the item's.
    #[inline(always)]
    unsafe fn count_crossing(&self, cpu: usize, old: i64, new: i64, shift: u8) {
        let v = units_to_fold(old, new, shift);
        if v != 0 {
            // SAFETY: caller's guarantees.
            unsafe { self.fold_updates(cpu, v) };
        }
    }

    /// Fold `v` units into this group's and every ancestor's shared
    /// counter, then record them in this (css, CPU)'s `counted` slot, which
    /// the flusher reads *before* the stat slots: units it reads there are
    /// units whose stat change its slot reads include (the `Release` here
    /// and its `Acquire`), so it can subtract exactly those. Every ancestor
    /// is counted, even one already due for a flush (kernel v6.8 skips
    /// those; then a flush could not know what to subtract).
    ///
    /// The caller marks the node updated *after* this: the `counted` add
    /// and the flusher's `OFF_LIST` store then form a store-buffering pair
    /// with the on-list check and the flusher's `counted` load (all
    /// `SeqCst`), so either this flush consumes the units or the node goes
    /// back on a backlog and the next flush does. No unit outlives the
    /// flushes that include its change.
    ///
    /// # Safety
    /// As [`update`](Self::update).
    #[cold]
    #[inline(never)]
    unsafe fn fold_updates(&self, cpu: usize, v: u64) {
        let n = self.ctl.nr_stats;
        // One fold is capped at `MAX_FOLD`, far above any threshold: a fold
        // past the threshold makes every read of this group and its
        // ancestors flush until a flush consumes it, so counting more adds
        // nothing but the risk of wrapping the per-CPU counters (an item
        // swinging by ±2^61 would wrap them in four updates). A counter
        // past 2^63 reads as "must flush" (`pending_units`).
        let v = v.min(MAX_FOLD);
        let mut css: *const Css = self;
        // SAFETY: a css keeps its ancestors' alive (through the groups).
        while let Some(c) = unsafe { css.as_ref() } {
            // This CPU's counter of `c`: a line other CPUs' updates never
            // write (an RMW, not a store: threads sharing the slot, and
            // a thread that moved since its stat RMW, may add at once).
            // SAFETY: caller's guarantees; ancestors have the same items.
            unsafe { c.stats.elem(cpu, n + UPDATES) }
                .cur
                .fetch_add(v as i64, Ordering::Relaxed);
            css = c.parent;
        }
        // SAFETY: caller's guarantees.
        let counted = unsafe { self.stats.elem(cpu, n + COUNTED) };
        counted.cur.fetch_add(v as i64, Ordering::SeqCst);
    }

    /// This group's pending-update units: the sum of its per-CPU
    /// [`UPDATES`] counters, each loaded `Acquire` (a count that a flush
    /// lowered comes with the totals that flush published). nr_cpus loads;
    /// stops early once the sum exceeds `stop_above`.
    pub(crate) fn pending_units(&self, stop_above: u64) -> u64 {
        let n = self.ctl.nr_stats;
        // SAFETY: a controller's domain lives as long as its engine, which
        // a live css's group holds.
        let nr_cpus = unsafe { &*self.ctl.domain }.nr_cpus;
        let mut sum = 0u64;
        for cpu in 0..nr_cpus {
            // SAFETY: `cpu < nr_cpus`; the css is live (caller's `&self`).
            let v = unsafe { self.stats.elem(cpu, n + UPDATES) }
                .cur
                .load(Ordering::Acquire);
            // Never below zero: units are subtracted from the counter of
            // the CPU that counted them, after their add (see `fold_node`).
            // A negative value can only be a counter that grew past 2^63
            // (`fold_updates`): far more than any threshold, so it asks for
            // a flush rather than count as nothing.
            let Ok(v) = u64::try_from(v) else {
                return u64::MAX;
            };
            sum = sum.saturating_add(v);
            if sum > stop_above {
                break;
            }
        }
        sum
    }

    /// Whether the `Threshold` policy wants a flush before reading: more
    /// than 64 × nr_cpus units pending (see
    /// [`pending_units`](Self::pending_units)).
    pub(crate) fn needs_flush(&self) -> bool {
        self.pending_units(self.ctl.flush_threshold) > self.ctl.flush_threshold
    }

    /// Copy the published totals, without the lock.
    pub(crate) fn totals_published(&self) -> Totals {
        let n = self.ctl.nr_stats;
        let local: Box<[i64]> = self.published[..n]
            .iter()
            .map(|a| a.load(Ordering::Acquire))
            .collect();
        let hierarchical: Box<[i64]> = self.published[n..]
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect();
        Totals {
            local,
            hierarchical,
            pending: vec![0; n].into(),
            overflows: self.published_overflows.load(Ordering::Relaxed),
        }
    }

    /// Steps 2-4 of the update protocol (see `engine::backlog`).
    ///
    /// # Safety
    /// As [`update`](Self::update).
    #[inline(always)]
    pub(crate) unsafe fn mark(&self, cpu: usize) {
        // SAFETY: a css's node links and its domain's backlog outlive the
        // css.
        unsafe { backlog::mark_updated(self.links.elem(cpu, 0), || self.backlog.raw(cpu)) };
    }

    /// At the group's final release, after its last flush: hand any
    /// pending-update units still counted on this css to the parent's
    /// `CONSUMED` counters of the same CPU.
    ///
    /// That last flush consumed every counted unit of this group (a unit
    /// is consumed by the flush that folds its change, or its node is back
    /// on a backlog that flush drained; see `fold_updates`), so nothing
    /// should be left. Should that ever be wrong, the units still belong
    /// to the parent, whose pending now holds every change of this group.
    pub(crate) fn release_units(&self) {
        let n = self.ctl.nr_stats;
        // SAFETY: a controller's domain lives as long as its engine.
        let nr_cpus = unsafe { &*self.ctl.domain }.nr_cpus;
        for cpu in 0..nr_cpus {
            // SAFETY: the css is live (`&self`); `cpu` is in range.
            let left = unsafe { self.stats.elem(cpu, n + UPDATES) }
                .cur
                .swap(0, Ordering::Acquire);
            debug_assert_eq!(left, 0, "pending-update units left at release");
            // SAFETY: a parent outlives its children's release.
            if let (Some(p), true) = (unsafe { self.parent.as_ref() }, left != 0) {
                // SAFETY: as above; a parent has the same items.
                unsafe { p.stats.elem(cpu, n + CONSUMED) }
                    .cur
                    .fetch_add(left, Ordering::Release);
            }
        }
    }

    /// Copy the totals (caller holds the domain lock).
    ///
    /// # Safety
    /// The domain lock is held.
    pub(crate) unsafe fn totals_locked(&self) -> Totals {
        // SAFETY: lock held.
        self.totals.with(|t| unsafe { (*t).clone() })
    }
}

/// Units of |delta| (each in its item's declared unit, see
/// [`Controller::stat_units`]) a CPU accumulates on an item before folding
/// them into the pending-update counters (the kernel's
/// `MEMCG_CHARGE_BATCH`).
pub const UPDATE_BATCH: u64 = 1 << UPDATE_BATCH_SHIFT;
pub(crate) const UPDATE_BATCH_SHIFT: u32 = 6;

/// The most units one update folds (`Css::fold_updates`): above the
/// threshold of any engine of fewer than 2^26 CPU slots, so a capped fold
/// still makes the next read flush. A per-CPU pending counter then grows
/// by at most 2^32 per update: it can reach 2^63 (from where it reads as
/// "must flush") only after 2^31 updates of 2^26 or more boundaries each
/// with no flush of the group or an ancestor in between, and wrap back to
/// a value that reads as "no flush needed" only after 2^32 of them (the
/// periodic flusher, on by default, flushes long before).
pub(crate) const MAX_FOLD: u64 = 1 << 32;

/// Per (css, CPU), after the `nr_stats` stat slots: the units this
/// group's own crossings on the CPU folded up and no flush has consumed
/// (read by the flusher *before* the stat slots).
pub(crate) const COUNTED: usize = 0;
/// Per (css, CPU): the `Threshold` policy's pending-update counter, kernel
/// v6.8's `stats_updates` made per-CPU: units (64 per batch boundary
/// crossed, in each item's declared unit) counted on this CPU by this
/// group or a descendant and not yet in this group's hierarchical totals.
/// A flush of (group, CPU) subtracts exactly the units it folded, never
/// resets, so a unit counted while it runs stays counted. Per-CPU so that
/// a crossing writes no line another CPU's updates write (a shared
/// counter per ancestor made two threads on one group contend on the
/// group's and the root's counter every 64 units); a `Threshold` read sums
/// nr_cpus of them.
pub(crate) const UPDATES: usize = 1;
/// Per (css, CPU): units that flushes of this group's children on the CPU
/// consumed (their changes now in this group's `pending`), to subtract
/// from this group's [`UPDATES`] of the same CPU when its fold takes that
/// pending in. Changed by flushers (under the domain lock) and by a
/// child's release.
pub(crate) const CONSUMED: usize = 2;
/// Per-(css, CPU) slots after the stat slots.
pub(crate) const EXTRA_SLOTS: usize = 3;

/// Items whose shift a css keeps inline (`Css::unit_shifts`).
pub(crate) const INLINE_SHIFTS: usize = 8;

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

/// Fold every css of `node`'s group that belongs to `domain`, for `cpu`.
///
/// # Safety
/// The domain lock is held; `node` is a live node of `domain`; `cpu <
/// nr_cpus`.
pub(crate) unsafe fn fold_node(
    domain: &Domain,
    node: &TreeNode,
    cpu: usize,
    deltas: &mut Vec<i64>,
) {
    // SAFETY: a node's group is live while the node is.
    let group = unsafe { &*node.owner };
    for slot in group.css.iter() {
        let css = slot.load(Ordering::Acquire);
        if css.is_null() {
            continue;
        }
        // SAFETY: installed css are live as long as their group.
        let css = unsafe { &*css };
        if !core::ptr::eq(css.ctl.domain, domain) {
            continue;
        }
        deltas.clear();
        // SAFETY: live css, `cpu` in range.
        let (slots, extra) = unsafe { css.stats.slot(cpu) }.split_at(css.ctl.nr_stats);
        let counted = &extra[COUNTED].cur;
        // Before the stat loads: the units read here are units whose change
        // those loads include (see `Css::fold_updates`).
        let units = counted.load(Ordering::SeqCst);
        // Lock held for `prev`.
        for s in slots {
            let cur = s.cur.load(Ordering::SeqCst);
            // SAFETY: `prev` is only touched under the domain lock, held.
            let prev = s
                .prev
                .with_mut(|p| unsafe { core::mem::replace(&mut *p, cur) });
            deltas.push(cur.wrapping_sub(prev));
        }
        // SAFETY: lock held; `css` is live and of this domain; `node` is
        // its group's node.
        let retry = unsafe { flush_contained(css, node, group, cpu, deltas) };
        // Publish for lock-free readers (before the count drops below).
        css.totals.with(|t| {
            // SAFETY: lock held.
            let t = unsafe { &*t };
            let n = t.local.len();
            for (a, v) in css.published[n..].iter().zip(t.hierarchical.iter()) {
                a.store(*v, Ordering::Relaxed);
            }
            css.published_overflows
                .store(t.overflows, Ordering::Relaxed);
            for (a, v) in css.published[..n].iter().zip(t.local.iter()) {
                a.store(*v, Ordering::Release);
            }
        });
        if retry {
            // The controller's flush panicked and the fold was undone: the
            // changes behind `units` and `consumed` are not in the totals
            // (they will be at the next flush), so nothing is subtracted
            // and a `Threshold` read keeps asking for that flush.
            continue;
        }
        // Subtract exactly the units now in this group's hierarchical
        // totals: its own crossings read above, and its children's that
        // this fold took from `pending`. Hand them to the parent, which
        // subtracts them when it folds its pending in. A unit counted after
        // our `counted` load stays counted (at worst a later read flushes
        // early); none is subtracted before its change is in the totals.
        //
        // Per CPU: the units read above were counted on `cpu`, and so were
        // the children's in this (group, CPU)'s `CONSUMED` (a child's fold
        // of `cpu` put them there). Those children's deltas are in our
        // totals now: the first fold of this group in any flush takes all
        // of `pending`, and this group stays on `cpu`'s tree from the
        // child's fold until this one (a cut leaves the cut subtree's
        // parent on the tree), so this fold comes after the hand-up.
        counted.fetch_sub(units, Ordering::Relaxed);
        let total = units.wrapping_add(extra[CONSUMED].cur.swap(0, Ordering::Acquire));
        if total != 0 {
            // Release: pairs with `pending_units`' Acquire (totals above).
            extra[UPDATES].cur.fetch_sub(total, Ordering::Release);
            // SAFETY: a child's css keeps its parent's alive; same items.
            if let Some(p) = unsafe { css.parent.as_ref() } {
                // SAFETY: the parent is live (above), `cpu` in range.
                unsafe { p.stats.elem(cpu, p.ctl.nr_stats + CONSUMED) }
                    .cur
                    .fetch_add(total, Ordering::Release);
            }
        }
    }
}

/// Call the controller's flush for one (group, CPU) whose deltas are in
/// `scratch` (all of it): directly for the built-in counter sets, with the
/// panic containment of the module's `# A flush that panics` for user
/// controllers. Returns whether the fold was undone, to be retried by the
/// next flush.
///
/// # Safety
/// The domain lock is held; `css` is live, of the locked domain, and
/// `node` is its group's node there; `cpu < nr_cpus`.
#[inline(always)]
unsafe fn flush_contained(
    css: &Css,
    node: &TreeNode,
    group: &GroupInner,
    cpu: usize,
    scratch: &mut Vec<i64>,
) -> bool {
    if css.ctl.contain_panics {
        // SAFETY: caller's guarantees.
        unsafe { flush_user(css, node, group, cpu, scratch) }
    } else {
        // SAFETY: caller's guarantees.
        unsafe { with_flush_ctx(css, group, cpu, scratch, |ctx| css.ctl.imp.flush(ctx)) };
        false
    }
}

/// Run `f` on the [`FlushCtx`] of `css` for `cpu` with `deltas`.
///
/// # Safety
/// The domain lock is held; `css` is live and of the locked domain.
#[inline(always)]
unsafe fn with_flush_ctx<R>(
    css: &Css,
    group: &GroupInner,
    cpu: usize,
    deltas: &[i64],
    f: impl FnOnce(&mut FlushCtx<'_>) -> R,
) -> R {
    css.totals.with_mut(|t| {
        // SAFETY: lock held; the parent css (another cell) is live because
        // a child keeps its parent group alive.
        let totals = unsafe { &mut *t };
        // SAFETY: as above: a child's css keeps its parent's alive.
        match unsafe { css.parent.as_ref() } {
            None => f(&mut FlushCtx {
                group,
                cpu,
                deltas,
                totals,
                parent: None,
            }),
            Some(p) => p.totals.with_mut(|pt| {
                // SAFETY: lock held; distinct cell from `t`.
                let pt = unsafe { &mut *pt };
                f(&mut FlushCtx {
                    group,
                    cpu,
                    deltas,
                    totals,
                    parent: Some(ParentSide {
                        pending: &mut pt.pending,
                        overflows: &mut pt.overflows,
                    }),
                })
            }),
        }
    })
}

/// A user controller's flush, with its panics contained. `scratch` is the
/// flush's reusable buffer: the saved totals go after the deltas during the
/// call (allocating only while the buffer still grows), and it is cut back
/// to the deltas before returning.
///
/// # Safety
/// As [`flush_contained`].
#[inline(never)]
unsafe fn flush_user(
    css: &Css,
    node: &TreeNode,
    group: &GroupInner,
    cpu: usize,
    scratch: &mut Vec<i64>,
) -> bool {
    let ctl = &*css.ctl;
    let n = scratch.len();
    let need = css.totals.with(|t| {
        // SAFETY: lock held.
        let t = unsafe { &*t };
        t.local.len() + t.hierarchical.len() + t.pending.len()
    });
    // SAFETY: a child's css keeps its parent's alive.
    let need = need
        + unsafe { css.parent.as_ref() }.map_or(0, |p| {
            // SAFETY: lock held.
            p.totals.with(|t| unsafe { (&*t).pending.len() })
        });
    scratch.resize(n + need, 0);
    let (deltas, saved) = scratch.split_at_mut(n);
    // Returns whether the call panicked and must be retried by a later
    // flush, and the panic's payload, dropped last (see below).
    let call = |ctx: &mut FlushCtx<'_>| {
        let s = ctx.save(saved);
        let call = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ctl.imp.flush(ctx);
        }));
        let Err(payload) = call else {
            return (false, None);
        };
        ctl.flush_panics.fetch_add(1, Ordering::Relaxed);
        ctx.restore(saved, &s);
        // SAFETY: lock held.
        if node.releasing.with(|r| unsafe { *r }) {
            // No later flush will visit this group: fold the deltas the
            // standard way, so they still reach the ancestors.
            ctx.fold();
            return (false, Some(payload));
        }
        (true, Some(payload))
    };
    // SAFETY: caller's guarantees.
    let (retry, payload) = unsafe { with_flush_ctx(css, group, cpu, deltas, call) };
    scratch.truncate(n);
    if retry {
        // Move `prev` back by the deltas, so the next flush sees them again
        // (a modular subtraction undoes the fold's modular one exactly).
        // SAFETY: live css, `cpu` in range, lock held for `prev`.
        let slots = unsafe { css.stats.slot(cpu) };
        for (s, &d) in slots.iter().zip(scratch.iter()) {
            // SAFETY: `prev` is only touched under the domain lock, held.
            s.prev.with_mut(|p| unsafe { *p = (*p).wrapping_sub(d) });
        }
        // And make sure the next flush visits this (group, CPU): the cut
        // took it off this CPU's updated tree. A push onto the backlog is
        // lock-free, so it is allowed under the lock; the next flush drains
        // it. (Not at a final release: see `releasing` above.)
        // SAFETY: live css, `cpu` in range.
        unsafe { css.mark(cpu) };
    }
    // A payload's destructor is user code too, and may panic: drop it once
    // the state is whole again, and contain that as well (leaking the
    // second payload rather than unwinding through the flush, which would
    // leave the rest of this CPU's cut tree unfolded).
    if let Some(p) = payload {
        if let Err(again) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(p))) {
            core::mem::forget(again);
        }
    }
    retry
}
#[cfg(test)]
mod tests {
    use super::Css;
    use core::mem::{align_of, offset_of, size_of};

    /// What every update reads is on the css's first line; what any CPU's
    /// crossing writes is on another (see `Css`).
    #[test]
    fn css_keeps_the_updates_line_apart_from_the_counters_folds_write() {
        assert_eq!(align_of::<Css>(), 64);
        assert_eq!(size_of::<Css>(), 192, "three lines");
        for (field, at) in [
            ("stats", offset_of!(Css, stats)),
            ("links", offset_of!(Css, links)),
            ("backlog", offset_of!(Css, backlog)),
            ("unit_shifts", offset_of!(Css, unit_shifts)),
            ("section_limit", offset_of!(Css, section_limit)),
            ("rseq_off", offset_of!(Css, rseq_off)),
        ] {
            assert!(at < 64, "{field} at {at}: off the updates' line");
        }
        let at = offset_of!(Css, published_overflows);
        assert!(
            at >= 128,
            "published_overflows at {at}: near the updates' line"
        );
    }
}
