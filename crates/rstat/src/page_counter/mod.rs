//! Hierarchical page counter: charge, limit and protect usage up a tree,
//! as the kernel's `page_counter` does.
//!
//! A [`PageCounter`] counts generic units ("pages"; the memory controller
//! counts bytes) for one group and, through its parent pointer, for every
//! ancestor: a charge at a leaf is a charge at each level up to the root.
//! Each level has a hard limit `max`, a soft limit `high` (the caller reads
//! it and throttles), and two protections `min` and `low` from which
//! [`PageCounter::calculate_protection`] derives the effective protection a
//! reclaimer honours.
//!
//! The charge path is the kernel's: [`try_charge`](PageCounter::try_charge)
//! adds to each level's `usage` first and checks `max` afterwards, one atomic
//! add per level and no compare-and-swap loop; a level that would exceed
//! its max takes the amount back, and so do the levels below it, and the
//! error names the level that refused. `usage == max` is allowed.
//! [`charge`](PageCounter::charge) ignores limits (a forced charge),
//! [`uncharge`](PageCounter::uncharge) undoes either.
//!
//! Counters never wrap and never read negative: amounts are at most
//! [`PAGE_COUNTER_MAX`] (2⁶² − 1), a forced charge that would push a level
//! past it is refused, and an uncharge of more than was charged clamps at
//! zero in one compare-and-swap, counts an underflow
//! ([`cancel_underflows`](PageCounter::cancel_underflows)) and returns a
//! typed error. An over-uncharge is a bug in the caller's accounting (the
//! kernel warns on it); it is reachable through the public API, so it is
//! reported, never a panic.
//!
//! The hierarchy is a chain of `Arc`s: a counter holds its parent alive, as
//! a group holds its parent group alive. A group engine keeps each group's
//! counter in an `Arc<PageCounter>` and creates a child's counter with
//! `PageCounter::new(Some(parent_counter.clone()))`.
//!
//! ```
//! use std::sync::Arc;
//! use rstat::page_counter::{PageCounter, PageCounterError};
//!
//! let root = Arc::new(PageCounter::new(None));
//! let job: Arc<PageCounter> = Arc::new(PageCounter::new(Some(root.clone())));
//! root.set_max(100)?;
//!
//! job.try_charge(100)?; // usage == max is allowed
//! match job.try_charge(1) {
//!     Err(PageCounterError::OverLimit { level: 1, .. }) => {} // the root refused
//!     other => panic!("unexpected {other:?}"),
//! }
//! assert_eq!((job.usage(), root.usage(), root.failcnt()), (100, 100, 1));
//! job.uncharge(100)?;
//! assert_eq!(root.watermark(), 100);
//! # Ok::<(), PageCounterError>(())
//! ```
//!
//! # Layout
//!
//! `usage` is written by every charge from every CPU; `max`, `high` and the
//! parent pointer are read by every charge. [`Padded`] (the default) keeps
//! them on different cache lines so those reads hit in every CPU's cache;
//! [`Packed`] keeps them together, so that `rstat bench page-counter` can
//! measure what the padding buys. See [`Layout`].
//!
//! # Synchronization
//!
//! No lock on the charge path. Every field is an atomic; the setters of
//! limits and protections serialize on a small per-counter mutex
//! (`limits`) that the charge path never takes, so "the caller must
//! serialize" requirements of the kernel become the library's job.
//!
//! - **`usage` read-modify-writes are `SeqCst`**, for two protocols:
//!   1. *`set_max` vs `try_charge`* (a store-buffering pair). A charge adds
//!      to `usage`, then loads `max` (`SeqCst`); `set_max` swaps `max`
//!      (`SeqCst`), then re-loads `usage` (`SeqCst`). In the single total
//!      order of `SeqCst` operations either the charge's load follows the
//!      swap (the charge sees the new limit) or the re-load follows the add
//!      (the setter sees usage rise, restores the old limit and retries).
//!      No charge can slip in above a limit that was accepted.
//!   2. *Protected usage converges* (see `protection.rs`): the
//!      `min_usage`/`low_usage` loads and swaps, the re-loads of `usage`,
//!      `min` and `low` after a swap, and the stores of `min`/`low` are
//!      `SeqCst`, so when all threads stop, each counter's protected usage
//!      equals `min(usage, min)` (resp. `low`) and each parent's
//!      `children_*_usage` is their sum.
//!
//!   On x86-64 a `SeqCst` RMW is the same `lock xadd` as a relaxed one and a
//!   `SeqCst` load a plain `mov`, so this costs nothing there. Both are
//!   store-buffering pairs, so each side also calls
//!   `sync::sc_fence_for_model` between its write and its read (a fence
//!   under loom only; see `sync`), and `tests_loom` checks them.
//! - **`high`, `failcnt`, `cancel_underflows`, `emin`/`elow`,
//!   `children_*_usage` are `Relaxed`**: each is a value read on its own
//!   (a threshold, a statistic, an accumulator of deltas); nothing is
//!   published through them, and atomicity alone makes every increment or
//!   delta land exactly once.
//! - **Watermarks**: a charge that sets a new peak raises `watermark` before
//!   `local_watermark` (`fetch_max`, so a peak is never lost to a racing
//!   smaller one). The raise of `local_watermark` is `AcqRel`. Its Acquire
//!   half pairs with the `Release` store of `local_watermark` in the
//!   resets, which store `watermark` first: a charge whose raise lands after
//!   a reset sees the reset's `watermark` and re-raises it. Its Release half
//!   pairs with the `Acquire` load in `local_watermark()`: a reader that sees
//!   a local peak then sees a `watermark` at least as high. So
//!   `local_watermark ≤ watermark` for any reader that loads them in that
//!   order, resets included. The other watermark accesses are `Relaxed`:
//!   they only compare and raise the same location.
//! - **What a reader can see.** The amounts of successful non-forced
//!   charges not yet uncharged never sum above a level's `max`: each was
//!   admitted by its own read-modify-write returning at most `max`, and that
//!   value counted everything admitted before it. `usage` itself can exceed
//!   `max` transiently, by the charges in flight that are about to be
//!   rolled back (a racing smaller charge can then fail spuriously; the
//!   kernel accepts the same), at most one per thread charging under the
//!   counter. An uncharge never dips: each level goes from its value to
//!   that minus the amount, or 0, in one compare-and-swap, so `usage` is
//!   never below what stays charged and never negative.
//!
//!   *The exception: an over-uncharge* (more than was charged, a caller's
//!   bug). The counter cannot tell a charge in flight from a committed one,
//!   so an over-uncharge that meets a charge about to be refused can take
//!   that charge's amount instead of clamping (and return `Ok`); the
//!   refused charge's rollback then finds the counter short and clamps
//!   instead. If other charges commit in between, `usage` is left below
//!   what is charged, by at most the over-uncharge's excess (the amount
//!   it took beyond what was charged), and non-forced charges can pass
//!   `max` by as much until the charges it fell on are uncharged; those
//!   uncharges clamp and count the underflow, so every over-uncharge is
//!   counted in [`cancel_underflows`](PageCounter::cancel_underflows) by
//!   then, though not always by the call that made it. An over-uncharge
//!   that meets no refused charge clamps exactly and breaks no bound.
//!
//!   Amounts above 2³² take a compare-and-swap path that never overshoots;
//!   smaller ones overshoot by at most 2³² per thread in flight, which the
//!   headroom between [`PAGE_COUNTER_MAX`] and `i64::MAX` absorbs for up to
//!   2³⁰ threads, so the word never wraps.

mod charge;
mod error;
mod layout;
mod protection;
mod range;

#[cfg(all(test, not(rstat_loom)))]
mod tests;
#[cfg(all(test, rstat_loom))]
mod tests_loom;
#[cfg(all(test, not(rstat_loom)))]
mod tests_prop;
#[cfg(all(test, not(rstat_loom)))]
mod tests_stress;

use std::fmt;
use std::sync::Arc;

use crate::sync::{lock, sc_fence_for_model, AtomicBool, AtomicI64, AtomicU64, Mutex, Ordering};

pub use error::PageCounterError;
pub use layout::{Layout, LineAligned, Packed, Padded, Unpadded};
pub use protection::effective_protection;
pub use range::PAGE_COUNTER_MAX;

use range::clamp;

/// A hierarchical counter with limits and protections. See the module docs.
///
/// Generic over its memory [`Layout`]; use the default, [`Padded`].
#[repr(C)]
pub struct PageCounter<L: Layout = Padded> {
    _align: [L::Align; 0],
    /// Hot: written by every charge and uncharge.
    usage: L::Line<AtomicI64>,
    /// Read by every charge, written when a limit changes.
    read_mostly: L::Line<ReadMostly<L>>,
    /// Read by every charge, written on a new peak, a failure, a protection
    /// change.
    tracking: L::Line<Tracking>,
}

/// The packed layout, for `rstat bench page-counter`'s comparison.
pub type PackedPageCounter = PageCounter<Packed>;

struct ReadMostly<L: Layout> {
    min: AtomicU64,
    low: AtomicU64,
    high: AtomicU64,
    max: AtomicU64,
    parent: Option<Arc<PageCounter<L>>>,
    /// The `memory_recursiveprot` analog; consulted on the hierarchy root only.
    recursive_protection: AtomicBool,
}

struct Tracking {
    emin: AtomicU64,
    elow: AtomicU64,
    /// `min(usage, min)` as last propagated to the parent.
    min_usage: AtomicU64,
    low_usage: AtomicU64,
    /// Sum of the children's `min_usage` (transiently negative while two
    /// deltas of one child land out of order; read clamped).
    children_min_usage: AtomicI64,
    children_low_usage: AtomicI64,
    watermark: AtomicU64,
    local_watermark: AtomicU64,
    failcnt: AtomicU64,
    cancel_underflows: AtomicU64,
    /// Serializes the setters (limits, protections, resets) of this counter.
    limits: Mutex<()>,
}

impl<L: Layout> PageCounter<L> {
    /// A counter with no usage, no limits (`max` and `high` are
    /// [`PAGE_COUNTER_MAX`]) and no protection, under `parent` (`None` for a
    /// hierarchy root). Costs one clone of the parent's `Arc` if any.
    pub fn new(parent: Option<Arc<PageCounter<L>>>) -> Self {
        PageCounter {
            _align: [],
            usage: L::line(AtomicI64::new(0)),
            read_mostly: L::line(ReadMostly {
                min: AtomicU64::new(0),
                low: AtomicU64::new(0),
                high: AtomicU64::new(PAGE_COUNTER_MAX),
                max: AtomicU64::new(PAGE_COUNTER_MAX),
                parent,
                recursive_protection: AtomicBool::new(false),
            }),
            tracking: L::line(Tracking {
                emin: AtomicU64::new(0),
                elow: AtomicU64::new(0),
                min_usage: AtomicU64::new(0),
                low_usage: AtomicU64::new(0),
                children_min_usage: AtomicI64::new(0),
                children_low_usage: AtomicI64::new(0),
                watermark: AtomicU64::new(0),
                local_watermark: AtomicU64::new(0),
                failcnt: AtomicU64::new(0),
                cancel_underflows: AtomicU64::new(0),
                limits: Mutex::new(()),
            }),
        }
    }

    #[inline(always)]
    fn rm(&self) -> &ReadMostly<L> {
        &self.read_mostly
    }

    #[inline(always)]
    fn tr(&self) -> &Tracking {
        &self.tracking
    }

    /// The parent counter, `None` for a hierarchy root. One load from the
    /// read-mostly line.
    #[inline]
    pub fn parent(&self) -> Option<&Arc<PageCounter<L>>> {
        self.rm().parent.as_ref()
    }

    /// The counter `level` steps up (0 is `self`), or `None` above the root:
    /// turns the `level` of an error into the counter it names. O(`level`)
    /// pointer loads, no writes.
    pub fn ancestor(&self, level: usize) -> Option<&PageCounter<L>> {
        let mut c = self;
        for _ in 0..level {
            c = c.parent()?;
        }
        Some(c)
    }

    /// The topmost ancestor (`self` for a root). O(depth) loads.
    pub fn hierarchy_root(&self) -> &PageCounter<L> {
        let mut c = self;
        while let Some(p) = c.parent() {
            c = p;
        }
        c
    }

    /// Current usage, hierarchical (this counter's own charges plus all its
    /// descendants'). One relaxed load of the hot line; may include charges
    /// in flight that are about to be rolled back.
    #[inline]
    pub fn usage(&self) -> u64 {
        clamp(self.usage.load(Ordering::Relaxed))
    }

    /// The hard limit. One relaxed load of the read-mostly line.
    #[inline]
    pub fn max(&self) -> u64 {
        self.rm().max.load(Ordering::Relaxed)
    }

    /// Set the hard limit to `max` (values above [`PAGE_COUNTER_MAX`] mean
    /// unlimited and are stored as it), unless usage is above it: then the
    /// limit is unchanged and the error is [`PageCounterError::Busy`].
    ///
    /// A charge racing with the change either sees the new limit or makes
    /// this retry (module docs), so an accepted limit is never exceeded by a
    /// non-forced charge. Raising the limit always succeeds.
    ///
    /// Cost: takes this counter's setter lock; one swap on the read-mostly
    /// line (every charging CPU re-reads it afterwards) and two loads of
    /// `usage`, repeated while usage keeps rising under it.
    pub fn set_max(&self, max: u64) -> Result<(), PageCounterError> {
        let max = max.min(PAGE_COUNTER_MAX);
        let _g = lock(&self.tr().limits);
        loop {
            // SeqCst, both loads and the swap: the setter's half of the
            // store-buffering pair with `charge_levels` (protocol 1).
            let usage = self.usage.load(Ordering::SeqCst);
            if usage > max as i64 {
                return Err(PageCounterError::Busy {
                    usage: clamp(usage),
                    max,
                });
            }
            let old = self.rm().max.swap(max, Ordering::SeqCst);
            sc_fence_for_model();
            if self.usage.load(Ordering::SeqCst) <= usage || max >= old {
                return Ok(());
            }
            // Usage rose while the new limit went in: a charge may have
            // passed against the old one. Put it back and look again.
            // Relaxed: restoring a higher limit cannot let anything through
            // that the old one did not.
            self.rm().max.store(old, Ordering::Relaxed);
            yield_now();
        }
    }

    /// Set the hard limit to `max` (clamped to [`PAGE_COUNTER_MAX`]) even if
    /// usage is above it — the cgroup v2 `memory.max` write; the caller then
    /// reclaims. Returns the previous limit.
    ///
    /// Cost: takes the setter lock; one swap on the read-mostly line.
    pub fn set_max_forced(&self, max: u64) -> u64 {
        let _g = lock(&self.tr().limits);
        // SeqCst: as in `set_max`, so a racing charge sees either limit.
        self.rm()
            .max
            .swap(max.min(PAGE_COUNTER_MAX), Ordering::SeqCst)
    }

    /// The soft limit: callers compare [`usage`](Self::usage) with it after
    /// charging and throttle or reclaim above it. One relaxed load.
    #[inline]
    pub fn high(&self) -> u64 {
        self.rm().high.load(Ordering::Relaxed)
    }

    /// Set the soft limit (clamped to [`PAGE_COUNTER_MAX`]). Takes the
    /// setter lock; one store on the read-mostly line.
    pub fn set_high(&self, high: u64) {
        let _g = lock(&self.tr().limits);
        self.rm()
            .high
            .store(high.min(PAGE_COUNTER_MAX), Ordering::Relaxed);
    }

    /// How many [`try_charge`](Self::try_charge)es this counter refused
    /// (the kernel's `failcnt`). Exact. One relaxed load.
    pub fn failcnt(&self) -> u64 {
        self.tr().failcnt.load(Ordering::Relaxed)
    }

    /// Reset [`failcnt`](Self::failcnt) to zero. One store.
    pub fn reset_failcnt(&self) {
        self.tr().failcnt.store(0, Ordering::Relaxed);
    }

    /// How many cancels or uncharges took more than this counter held (each
    /// was clamped at zero): a bug in the caller's accounting, counted
    /// where the kernel warns. Exact when no over-uncharge races with a
    /// refused charge; otherwise see the module docs' *What a reader can
    /// see* for when the count lands. One relaxed load.
    pub fn cancel_underflows(&self) -> u64 {
        self.tr().cancel_underflows.load(Ordering::Relaxed)
    }

    /// The highest usage a successful charge left on this counter since it
    /// was created or [`reset_watermark`](Self::reset_watermark) (the
    /// kernel's `memory.peak`). No peak is lost to racing charges; a reset
    /// racing with charges may miss theirs. Always ≥
    /// [`local_watermark`](Self::local_watermark). One relaxed load.
    pub fn watermark(&self) -> u64 {
        self.tr().watermark.load(Ordering::Relaxed)
    }

    /// Like [`watermark`](Self::watermark), since the last
    /// [`reset_local_watermark`](Self::reset_local_watermark) or
    /// [`reset_watermark`](Self::reset_watermark): a peak a user can reset
    /// without disturbing others. Read it before `watermark` to observe
    /// `local_watermark ≤ watermark`. One acquire load (a plain load on
    /// x86-64).
    pub fn local_watermark(&self) -> u64 {
        // Acquire: pairs with the Release half of the raise in
        // `raise_watermarks` and with the resets' Release stores, each of
        // which follows the matching `watermark` write.
        self.tr().local_watermark.load(Ordering::Acquire)
    }

    /// Reset both watermarks to the current usage. Takes the setter lock;
    /// two stores on the tracking line.
    pub fn reset_watermark(&self) {
        let _g = lock(&self.tr().limits);
        let usage = self.usage();
        self.tr().watermark.store(usage, Ordering::Relaxed);
        // Release, after the `watermark` store: pairs with the Acquire raise
        // in `raise_watermarks` (module docs).
        self.tr().local_watermark.store(usage, Ordering::Release);
    }

    /// Reset the local watermark to the current usage (never above
    /// [`watermark`](Self::watermark)). Takes the setter lock; one store.
    pub fn reset_local_watermark(&self) {
        let _g = lock(&self.tr().limits);
        let usage = self
            .usage()
            .min(self.tr().watermark.load(Ordering::Relaxed));
        // Release: as in `reset_watermark`.
        self.tr().local_watermark.store(usage, Ordering::Release);
    }
}

impl<L: Layout> Default for PageCounter<L> {
    /// A root counter: `PageCounter::new(None)`.
    fn default() -> Self {
        PageCounter::new(None)
    }
}

impl<L: Layout> fmt::Debug for PageCounter<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageCounter")
            .field("layout", &L::NAME)
            .field("usage", &self.usage())
            .field("max", &self.max())
            .field("high", &self.high())
            .field("min", &self.min())
            .field("low", &self.low())
            .field("watermark", &self.watermark())
            .field("failcnt", &self.failcnt())
            .field("has_parent", &self.parent().is_some())
            .finish_non_exhaustive()
    }
}

/// Let other threads run before `set_max` retries (the kernel's
/// `cond_resched`).
#[cold]
fn yield_now() {
    #[cfg(rstat_loom)]
    loom::thread::yield_now();
    #[cfg(not(rstat_loom))]
    std::thread::yield_now();
}

// A packed counter starts a 64-byte line (so `usage` and `max` share it);
// `tests` checks the field offsets of both layouts.
const _: () = assert!(core::mem::align_of::<PageCounter<Packed>>() >= 64);
