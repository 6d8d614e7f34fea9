//! A group's stat state for one controller (the kernel's "css"): its
//! per-CPU stat slots, the totals a flush folds them into, and the
//! `Threshold` policy's pending-update counting.
//!
//! # Synchronization
//!
//! Every access that is not `Relaxed`, and what it pairs with:
//!
//! - a stat slot's add (`SeqCst` RMW on the locked path; a plain store in
//!   a restartable section, ordered by the asymmetric fence) pairs with
//!   the flusher's `SeqCst` slot loads in `fold_node` and the backlog's
//!   `OFF_LIST` store (`backlog.rs`'s `# Synchronization`);
//! - `COUNTED`'s `SeqCst` add in `fold_updates`, made before the node is
//!   marked updated, pairs with the flusher's `SeqCst` load of it made
//!   before it loads the stat slots: units it reads there belong to changes
//!   its slot loads include;
//! - `UPDATES`' `Release` subtraction in `fold_node`, made after the
//!   totals are published, pairs with `pending_units`' `Acquire` loads: a
//!   count that a flush lowered comes with that flush's totals;
//! - `CONSUMED`'s `Release` add (a child's fold, or `release_units`) pairs
//!   with the parent fold's `Acquire` swap: units handed up come with the
//!   pending deltas they stand for;
//! - `published`: hierarchical and the overflow count stored `Relaxed`,
//!   then local `Release`; readers load local `Acquire`, then the rest, so
//!   a lock-free reader never sees `local > hierarchical` where counts
//!   only grow.
//!
//! Everything else in a css (`prev`, `totals`) is behind its domain's
//! flush lock.

use core::mem::{align_of, size_of};
use core::ptr;

use crate::percpu::arena::PcpuPtr;
use crate::percpu::LineBox;
use crate::stat::backlog::{BacklogHead, PcpuLinks};
use crate::stat::ops::{CtlRef, Totals, TotalsCopy};
use crate::stat::tree::TreeNode;
use crate::sync::{AtomicI64, Ordering, UnsafeCell};

/// The pending units an update from `old` to `new` adds: [`UPDATE_BATCH`]
/// per boundary it crossed, the boundaries being the multiples of
/// `1 << shift` (B × the item's unit: `shift` is the item's
/// `UPDATE_BATCH_SHIFT + log2(unit)`), 0 if none (see `Css::count_update`).
///
/// Slots are modular: the update moved the slot by `new - old` in wrapping
/// arithmetic (its delta, an `i64`), and the boundaries are counted on the
/// unwrapped line from `old` to `old + delta`, which may leave the `i64`
/// range (an add that carries the slot across `i64::MAX` crosses as many
/// boundaries as its delta spans, not the ~2^58 between the two ends). At
/// most 2^58 boundaries, so the product saturates rather than wraps; the
/// fold caps it further (`Css::fold_updates`).
#[inline(always)]
pub(super) fn units_to_fold(old: i64, new: i64, shift: u8) -> u64 {
    let shift = u32::from(shift);
    let from = i128::from(old);
    let to = from + i128::from(new.wrapping_sub(old));
    let crossed = (to >> shift) - (from >> shift);
    u64::try_from(crossed.unsigned_abs())
        .unwrap_or(u64::MAX)
        .saturating_mul(UPDATE_BATCH)
}

/// Whether an update whose old and new slot values differ in the bits
/// `changed` (`old ^ new`) may have crossed a multiple of B
/// ([`UPDATE_BATCH`]): whether they differ at or above bit
/// `UPDATE_BATCH_SHIFT`. Every item's boundary is such a multiple, so an
/// update that crosses none (most small deltas) crosses none of its
/// item's, and the test (a shift by a constant) loads nothing: the
/// cheap pre-test before [`may_cross`], which needs the item's shift.
#[inline(always)]
pub(crate) fn may_cross_a_batch(changed: u64) -> bool {
    changed >> UPDATE_BATCH_SHIFT != 0
}

/// Whether an update whose old and new slot values differ in the bits
/// `changed` (`old ^ new`) may have crossed a boundary of an item whose
/// boundaries are the multiples of `1 << shift` (B × its unit, the shift
/// [`units_to_fold`] takes): whether they differ at or above that bit. Sound for every delta: an `i64` delta moves the
/// slot by less than 2^63, so a move that wraps changes a bit at or above
/// any boundary bit up to 63 (the test's cap; boundaries above 2^63 are
/// multiples of it). A byte counter in pages then takes the cheap path on
/// all but the rare update that crosses a multiple of B pages, not on
/// every update that changes a bit above B bytes.
#[inline(always)]
pub(crate) fn may_cross(changed: u64, shift: u8) -> bool {
    changed >> u32::from(shift).min(63) != 0
}

/// A CPU slot of an engine's per-CPU state: an index below its `nr_cpus`,
/// which every css of the engine has in each of its per-CPU arrays. Built
/// only by a range check ([`new`](Self::new)) or a fold into range
/// ([`fold`](Self::fold), [`this_cpu`](Self::this_cpu)), so the update
/// path indexes with it without a caller's promise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot(usize);

impl Slot {
    /// `cpu`, if it is a slot of an engine of `nr_cpus` slots.
    #[inline(always)]
    pub(crate) fn new(cpu: usize, nr_cpus: usize) -> Option<Slot> {
        (cpu < nr_cpus).then_some(Slot(cpu))
    }

    /// `cpu` folded into an engine of `nr_cpus` (at least 1) slots: CPU
    /// ids beyond the slots share them (see
    /// [`Builder::nr_cpus`](crate::Builder::nr_cpus)).
    #[inline(always)]
    pub(crate) fn fold(cpu: usize, nr_cpus: usize) -> Slot {
        let s = crate::percpu::cpu::fold(cpu, nr_cpus);
        assert!(s < nr_cpus, "a fold lands in range");
        Slot(s)
    }

    /// The slot of the CPU this thread runs on (its id read now).
    #[inline(always)]
    pub(crate) fn this_cpu(nr_cpus: usize) -> Slot {
        Slot::fold(crate::percpu::cpu::current(), nr_cpus)
    }

    /// The index.
    #[inline(always)]
    pub(crate) fn get(self) -> usize {
        self.0
    }
}

/// A stat item of a controller: an index below its `nr_stats`, which
/// every css of the controller has. Built only by a range check
/// ([`new`](Self::new)).
/// Four bytes, so a resolved item fits a handle's line (controllers have
/// at most [`MAX_STAT_ITEMS`](crate::MAX_STAT_ITEMS) items).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Item(u32);

impl Item {
    /// `item`, if it is one of a controller of `nr_stats` items.
    #[inline(always)]
    pub(crate) fn new(item: usize, nr_stats: usize) -> Option<Item> {
        if item < nr_stats {
            u32::try_from(item).ok().map(Item)
        } else {
            None
        }
    }

    /// The index.
    #[inline(always)]
    pub(crate) fn get(self) -> usize {
        self.0 as usize
    }
}

/// A group's css of every controller, by controller id (null where the
/// controller has none for it). Owned by the group; its tree nodes point
/// at it, so a flush finds the css of a node's domain without naming the
/// group.
pub(crate) type CssTable = [crate::sync::AtomicPtr<Css>; crate::stat::ops::MAX_CONTROLLERS];

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

impl StatSlot {
    /// A css's `len` slots in every unit, all at their default (zero):
    /// taken zeroed from the arena, unwritten
    /// ([`Local::alloc_zero_state`]).
    ///
    /// [`Local::alloc_zero_state`]: crate::percpu::shared_arena::Local::alloc_zero_state
    pub(crate) fn alloc_in(
        arena: &mut crate::percpu::shared_arena::Local<'_>,
        len: usize,
    ) -> Result<PcpuPtr<StatSlot>, crate::percpu::arena::ArenaError> {
        // SAFETY: a `StatSlot` is two integers, its default all zero
        // bytes, and it needs no drop.
        unsafe { arena.alloc_zero_state(len, StatSlot::default) }
    }

    /// Free slots of [`alloc_in`](Self::alloc_in), zeroing them in the
    /// units of `dirty` only.
    ///
    /// # Safety
    /// As [`Arena::free_zeroed`](crate::percpu::arena::Arena::free_zeroed):
    /// `slots` came from `alloc_in` on this arena, nothing references them,
    /// and no unit outside `dirty` was written.
    pub(crate) unsafe fn free_in(
        arena: &mut crate::percpu::shared_arena::Local<'_>,
        slots: PcpuPtr<StatSlot>,
        dirty: impl Iterator<Item = usize>,
    ) {
        // SAFETY: the caller's guarantees.
        unsafe { arena.free_zero_state(slots, dirty) }
    }
}

/// The state of one controller in one group ("css" in the kernel).
///
/// Laid out by use (`repr(C)`, on its own cache lines):
/// - line 0 holds only what every update reads and nobody writes after
///   construction;
/// - line 1 is what a lock-free read loads: the controller entry (checked
///   by `css_of`), the node (for the flush stamp) and the published
///   totals, inline for a one-item controller, so such a read of a group
///   touches this one line of its css. Flushes write it; no update reads
///   it;
/// - line 2 is the flushes': the parent and the totals (the domain
///   lock's);
/// - past the css, in the same allocation ([`Css::boxed`]), the totals'
///   values and the published values that do not fit inline.
///
/// So a flush does not take the line every update reads (the
/// pending-update counters that crossings write are per CPU, in the
/// arena: see [`UPDATES`]).
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
    // Line 1: what a lock-free read loads.
    pub(crate) ctl: CtlRef,
    /// This group's node in the controller's domain.
    pub(crate) node: *const TreeNode,
    /// The last folded totals, for reads that do not take the lock (see
    /// [`Published`]). Written under the domain lock (hierarchical and the
    /// overflows first, then local with `Release`); read local (`Acquire`)
    /// first, then the rest, so a lock-free reader never sees
    /// `local > hierarchical` where counts only grow.
    pub(crate) published: Published,
    // Line 2: the flushes'.
    /// The parent group's css of the same controller; null at the root.
    pub(crate) parent: *const Css,
    /// Domain lock.
    pub(crate) totals: UnsafeCell<Totals>,
}

/// How many published values a css keeps inline (what fits on the read's
/// line): local, hierarchical and the overflow count of a one-item
/// controller, the common counter set.
pub(crate) const INLINE_PUBLISHED: usize = 4;
const _: () = assert!(
    INLINE_PUBLISHED >= 3,
    "a one-item controller's values fit inline"
);

/// A css's published totals: `local` in `[..n]`, `hierarchical` in
/// `[n..2n]`, and `Totals::overflows` (as `u64` bits) at `[2n]`, for a
/// controller of `n` items. Inline, on the line a read already loads, when
/// they fit; else in the tail of the css's allocation ([`Css::boxed`]).
pub(crate) struct Published {
    inline: [AtomicI64; INLINE_PUBLISHED],
    /// The values in the css's tail when they do not fit inline: built
    /// there by [`Published::in_tail`] and dropped by this value's drop
    /// (the tail is freed with the css, after it).
    spilled: Option<ptr::NonNull<[AtomicI64]>>,
}

impl Published {
    /// How many values a controller of `n` items publishes, and how many
    /// of them go to the css's tail (0: all inline).
    pub(super) fn spill_len(n: usize) -> usize {
        let len = 2 * n + 1;
        if len > INLINE_PUBLISHED {
            len
        } else {
            0
        }
    }

    /// The published values of a controller of `n` items, in the inline
    /// array or, past it, built in the `spill_len(n)` atomics at `tail`.
    ///
    /// # Safety
    /// If `spill_len(n)` is not 0, `tail` is valid for writes of that many
    /// `AtomicI64`, aligned, and is this value's alone for as long as it
    /// lives.
    pub(super) unsafe fn in_tail(n: usize, tail: *mut AtomicI64) -> Self {
        let len = Self::spill_len(n);
        let spilled = (len > 0).then(|| {
            for i in 0..len {
                // SAFETY: the caller's guarantee; `i < len`.
                unsafe { tail.add(i).write(AtomicI64::new(0)) };
            }
            // SAFETY: non-null (the caller's guarantee); written above.
            unsafe { ptr::NonNull::new_unchecked(ptr::slice_from_raw_parts_mut(tail, len)) }
        });
        Published {
            inline: core::array::from_fn(|_| AtomicI64::new(0)),
            spilled,
        }
    }

    /// The values, as the type's doc lays them out: `2n + 1` of them, or
    /// (inline) [`INLINE_PUBLISHED`], the overflow count first after the
    /// `2n` totals.
    #[inline]
    pub(crate) fn values(&self) -> &[AtomicI64] {
        match &self.spilled {
            // SAFETY: built by `in_tail`, live until this value drops.
            Some(v) => unsafe { v.as_ref() },
            None => &self.inline,
        }
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        if let Some(v) = self.spilled.take() {
            // SAFETY: built by `in_tail` and dropped only here, once (a
            // no-op for the machine's atomics; loom's keep state).
            unsafe { ptr::drop_in_place(v.as_ptr()) };
        }
    }
}

// SAFETY: pointers are immutable after construction and kept alive by the
// hierarchy; `totals` is behind the domain lock; stats are atomics.
unsafe impl Send for Css {}
// SAFETY: as above.
unsafe impl Sync for Css {}

impl Css {
    /// A css in its own allocation, followed there by its arrays (the
    /// totals, and the published values past the inline ones): one
    /// allocation per group and controller, where a `Box` of the css and
    /// one of each array would take three.
    pub(crate) fn boxed(
        ctl: CtlRef,
        parent: *const Css,
        stats: PcpuPtr<StatSlot>,
        node: &TreeNode,
    ) -> LineBox<Css> {
        let n = ctl.nr_stats;
        let spill = Published::spill_len(n);
        // The totals' `3n` values, then the spilled published ones, each
        // array aligned: the tail starts at the css's end (its size is a
        // multiple of its alignment, 64), the second array after `3n`
        // eight-byte values.
        const _: () = assert!(
            size_of::<Css>().is_multiple_of(align_of::<Css>())
                && align_of::<i64>() <= align_of::<Css>()
                && align_of::<AtomicI64>() <= align_of::<i64>()
        );
        let bytes = 3 * n * size_of::<i64>() + spill * size_of::<AtomicI64>();
        LineBox::new_with_tail(bytes, |tail| {
            let values = tail.cast::<i64>();
            // SAFETY: the tail holds `3n` `i64` then `spill` atomics, each
            // aligned (above), and is the css's alone: the totals take the
            // first array, the published values the second.
            let (totals, published) = unsafe {
                (
                    Totals::zeroed_at(values, n),
                    Published::in_tail(n, values.add(3 * n).cast::<AtomicI64>()),
                )
            };
            Css::new(ctl, parent, stats, node, totals, published)
        })
    }

    fn new(
        ctl: CtlRef,
        parent: *const Css,
        stats: PcpuPtr<StatSlot>,
        node: &TreeNode,
        totals: Totals,
        published: Published,
    ) -> Self {
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
            totals: UnsafeCell::new(totals),
            published,
            unit_shifts,
            // The engine checked both fit (`choose_update_path`).
            section_limit: domain.section_limit as u32,
            rseq_off: domain.rseq_off as i32,
        }
    }

    /// Item `item`'s shift (`ctl.unit_shifts`): one load from the css's
    /// first line for the first [`INLINE_SHIFTS`] items, through `ctl`
    /// for later ones.
    #[inline(always)]
    pub(super) fn item_shift(&self, item: Item) -> u8 {
        let i = item.get();
        if i < INLINE_SHIFTS {
            (self.unit_shifts >> (8 * i)) as u8
        } else {
            debug_assert!(i < self.ctl.unit_shifts.len());
            // SAFETY: an `Item` of this css's controller is below its
            // `nr_stats`, the table's length.
            unsafe { *self.ctl.unit_shifts.get_unchecked(i) }
        }
    }

    /// The `Threshold` policy's pending-update counting, whose design and
    /// bound are explained in one place, the [`policy`](crate::policy)
    /// module ("Where the `Threshold` bound comes from"): each time an
    /// update moves `item`'s slot across a multiple of B × its unit (B =
    /// [`UPDATE_BATCH`]), B units per boundary crossed go to this CPU's
    /// [`UPDATES`] counter of the group and of every ancestor
    /// (`fold_updates`).
    ///
    /// Cost: the boundary test uses the value the stat RMW (or section)
    /// already returned. An update that crosses no multiple of B (every
    /// item's boundary is one) makes no memory access at all; one that does
    /// loads the item's shift (one load, from the css line the update
    /// already reads, for the first eight items; three, through the
    /// controller, for later ones) and tests the bits at and above the
    /// item's own boundary ([`may_cross`]): only a change there counts the
    /// crossings, and only a crossing takes the cold walk.
    ///
    /// `old` is what the stat RMW (or section) on slot `at` returned for
    /// `item`.
    #[inline(always)]
    pub(crate) fn count_update(&self, at: Slot, item: Item, old: i64, delta: i64) {
        let new = old.wrapping_add(delta);
        let changed = (old ^ new) as u64;
        if !may_cross_a_batch(changed) {
            return;
        }
        let shift = self.item_shift(item);
        if may_cross(changed, shift) {
            self.count_crossing(at, old, new, shift)
        }
    }

    /// [`count_update`](Self::count_update) past the cheap test, with
    /// the item's shift in hand: fold the crossings of the item's own
    /// boundaries, if any.
    ///
    /// `shift` is the item's.
    #[inline(always)]
    fn count_crossing(&self, at: Slot, old: i64, new: i64, shift: u8) {
        let v = units_to_fold(old, new, shift);
        if v != 0 {
            self.fold_updates(at, v);
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
    #[cold]
    #[inline(never)]
    pub(super) fn fold_updates(&self, at: Slot, v: u64) {
        let (cpu, n) = (at.get(), self.ctl.nr_stats);
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
            // SAFETY: `at` is a slot of the engine, whose css all have
            // `nr_cpus` units; ancestors have the same items.
            unsafe { c.stats.elem(cpu, n + UPDATES) }
                .cur
                .fetch_add(v as i64, Ordering::Relaxed);
            css = c.parent;
        }
        // SAFETY: as above.
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
    /// than [`UPDATE_BATCH`] × nr_cpus units pending (see
    /// [`pending_units`](Self::pending_units)).
    pub(crate) fn needs_flush(&self) -> bool {
        self.pending_units(self.ctl.flush_threshold) > self.ctl.flush_threshold
    }

    /// Copy the published totals, without the lock: every local total
    /// (`Acquire`), then every hierarchical one, then the overflow count
    /// (see the module's `# Synchronization`). No allocation for a
    /// controller of up to two items (see `TotalsCopy`).
    pub(crate) fn totals_published(&self) -> TotalsCopy {
        let n = self.ctl.nr_stats;
        let values = self.published.values();
        let (local, rest) = values.split_at(n);
        let (hierarchical, overflows) = rest.split_at(n);
        // Every local load (`Acquire`) before any hierarchical one: the
        // chain is evaluated in order.
        let local = local.iter().map(|a| a.load(Ordering::Acquire));
        let hierarchical = hierarchical.iter().map(|a| a.load(Ordering::Relaxed));
        let mut copy = TotalsCopy::from_halves(n, local.chain(hierarchical), 0);
        copy.overflows = overflows
            .first()
            .map_or(0, |o| o.load(Ordering::Relaxed) as u64);
        copy
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
    ///
    /// Only the CPUs of `touched`, the group's node's mask
    /// (`TreeNode::touched`): a unit is counted on a CPU only by an update
    /// there of this group or of a descendant, which put the node (or the
    /// descendant, and with it this node at the descendant's final flush)
    /// on that CPU's backlog or tree.
    pub(crate) fn release_units(&self, touched: u64) {
        let n = self.ctl.nr_stats;
        // SAFETY: a controller's domain lives as long as its engine.
        let nr_cpus = unsafe { &*self.ctl.domain }.nr_cpus;
        for cpu in crate::stat::tree::cpus_in(touched, nr_cpus) {
            // SAFETY: the css is live (`&self`); `cpu` is in range.
            let updates = &unsafe { self.stats.elem(cpu, n + UPDATES) }.cur;
            // A load, not a locked swap per CPU: at the final release no
            // one else writes this counter (the group's updaters and its
            // children, whose crossings count here, are gone), so only a
            // count left over needs taking.
            let left = updates.load(Ordering::Acquire);
            if left != 0 {
                updates.store(0, Ordering::Relaxed);
            }
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
    pub(crate) unsafe fn totals_locked(&self) -> TotalsCopy {
        self.totals.with(|t| {
            // SAFETY: lock held.
            let t = unsafe { &*t };
            TotalsCopy::new(t.local(), t.hierarchical(), t.overflows)
        })
    }
}

/// Units of |delta| (each in its item's declared unit, see
/// [`Controller::stat_units`](crate::Controller::stat_units)) a CPU
/// accumulates on an item before folding them into the pending-update
/// counters: fixed, in each item's declared unit (the kernel's stat
/// update batch). Not
/// [`MEMCG_CHARGE_BATCH`](crate::memory::MEMCG_CHARGE_BATCH), the memory
/// stock's refill size in charge units, a per-controller setting that
/// shares the kernel's value.
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
/// v6.8's `stats_updates` made per-CPU: units ([`UPDATE_BATCH`] per batch boundary
/// crossed, in each item's declared unit) counted on this CPU by this
/// group or a descendant and not yet in this group's hierarchical totals.
/// A flush of (group, CPU) subtracts exactly the units it folded, never
/// resets, so a unit counted while it runs stays counted. Per-CPU so that
/// a crossing writes no line another CPU's updates write (a shared
/// counter per ancestor made two threads on one group contend on the
/// group's and the root's counter every [`UPDATE_BATCH`] units); a `Threshold` read sums
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
