//! The words a [`PercpuRef`](super::PercpuRef) shares between threads, and
//! their encoding: the bits of a slot and of the shared count, the state
//! changed only under the ref's lock ([`Ctl`]), what a fold found ([`Fold`])
//! and the allocation that holds them ([`Shared`]). The fast paths
//! (`get_put`, `sections`) and the mode switch (`switch`) all work on these
//! words; the parent module's "Synchronization" says who writes each one,
//! and with which ordering.

use crate::percpu::CachePadded;
use crate::sync::{AtomicBool, AtomicU64, Mutex};

/// Slot bit 0: this slot has been folded into `count`; operations that find
/// it set go to `count` instead.
pub(super) const FROZEN: u64 = 1;
/// One reference in a slot (bit 0 is `FROZEN`).
pub(super) const ONE: u64 = 2;
/// `count` bit 63: killed.
pub(super) const DEAD: u64 = 1 << 63;
/// `count` bits 0..=62: the value.
pub(super) const VALUE: u64 = DEAD - 1;
/// Added to `count` in percpu mode so it cannot reach zero before the slots
/// are folded.
pub(super) const BIAS: u64 = 1 << 61;
/// The largest value `count` may take; above it operations report
/// [`PercpuRefError::Overflow`](super::PercpuRefError::Overflow). Leaves `BIAS` of headroom below 2^63.
pub const VALUE_LIMIT: u64 = 1 << 62;
/// The most references one `get_many`/`put_many` call may move.
pub const MAX_MANY: usize = 1 << 40;

/// The release callback's type.
pub type ReleaseFn = Box<dyn Fn() + Send + Sync + 'static>;

/// State changed only under the ref's lock.
///
/// Invariant: `force_atomic` or dying implies `!percpu` (kill and
/// `switch_to_atomic` fold before they unlock).
#[derive(Debug)]
pub(super) struct Ctl {
    /// Slots are live (unfrozen) and `count` carries `BIAS`.
    pub(super) percpu: bool,
    /// `switch_to_atomic` (or `InitFlags::ATOMIC`) asked for atomic mode.
    pub(super) force_atomic: bool,
    /// Percpu mode may be re-entered.
    pub(super) allow_reinit: bool,
}

/// What folding the slots found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fold {
    /// Nothing folded, or the folded count is positive.
    Live,
    /// The folded count is exactly zero: the caller runs release.
    Zero,
    /// The folded count was negative (more puts than gets); it was set to
    /// zero and the caller runs release.
    Underflow,
    /// The folded count exceeded `VALUE_LIMIT` and was clamped to it.
    Overflow,
}

/// The parts of a [`PercpuRef`](super::PercpuRef) that change after construction.
pub(super) struct Shared {
    /// On its own cache line: contended in atomic mode, and on the `Rseq`
    /// path by CPUs without a slot.
    pub(super) count: CachePadded<AtomicU64>,
    /// `Ctl::percpu`, readable without the lock: a snapshot for
    /// `is_percpu`.
    pub(super) percpu_hint: AtomicBool,
    /// `Simulated`: one lock per CPU, held for the length of a section.
    #[cfg(any(rstat_loom, miri))]
    pub(super) sim: Box<[Mutex<()>]>,
    pub(super) ctl: Mutex<Ctl>,
    pub(super) release: ReleaseFn,
}
