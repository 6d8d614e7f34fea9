//! `min`/`low` protection: protected-usage propagation and effective
//! protection.
//!
//! Each counter declares `min` (hard protection) and `low` (best-effort).
//! Two derived quantities make them hierarchical:
//!
//! - **Protected usage**, maintained on every usage change: a counter's
//!   `min_usage` is `min(usage, min)` — the part of its usage its own `min`
//!   covers — and its parent's `children_min_usage` is the sum of the
//!   children's (the same for `low`). This is how much protection the
//!   children *claim and use*.
//! - **Effective protection** (`emin`, `elow`), computed on demand by a
//!   reclaimer walking a subtree top-down with
//!   [`PageCounter::calculate_protection`]: what a counter is actually
//!   protected by, given its parent's effective protection and its
//!   siblings' claims — see [`effective_protection`] for the rules.
//!
//! # Convergence of protected usage
//!
//! A charge and an uncharge racing on one counter each compute
//! `min(usage, min)` from the usage their own read-modify-write returned,
//! and may install their values in the opposite order. The kernel lets such
//! a stale value stand until the next charge. We repair it: after swapping a
//! new value in, a thread re-loads `usage`, `min` and `low`, and goes round
//! again if any moved. All these accesses and the usage read-modify-writes
//! are `SeqCst`. Then, once threads stop, every counter is exact:
//!
//! - if some swap of `min_usage` follows the last change Z of its inputs
//!   (a usage write or a `min` store) in the `SeqCst` order, the last such
//!   swap's thread re-loads the inputs after it, sees their final values,
//!   and either finds its value right or installs the right one (which
//!   would be a later swap — so its value was right);
//! - otherwise the thread that made Z loads `min_usage` after Z, sees the
//!   final value, and would have swapped had it been wrong.
//!
//! Every swap adds exactly its difference to the parent's sum (a relaxed
//! atomic add: only its atomicity matters), so `children_min_usage` is the
//! sum of the children's `min_usage` whenever no propagation is midway.

use crate::sync::{lock, sc_fence_for_model, AtomicI64, AtomicU64, Ordering};

use super::range::{clamp, PAGE_COUNTER_MAX};
use super::{Layout, PageCounter};

impl<L: Layout> PageCounter<L> {
    /// Bring this counter's protected usage (`min_usage`, `low_usage`) in
    /// line with `usage` (the value this thread's last write to it left) and
    /// pass the differences to the parent's `children_*_usage`.
    ///
    /// Costs, when nothing changes: four `SeqCst` loads (`min`, `low` on the
    /// read-mostly line, `min_usage`, `low_usage` on the tracking line), no
    /// write.
    #[inline]
    pub(super) fn propagate_protected_usage(&self, usage: i64) {
        let Some(parent) = self.parent() else {
            return;
        };
        let rm = self.rm();
        let pt = parent.tr();
        let mut usage = usage;
        // Between this thread's write of an input (usage, or `min`/`low` in
        // the setters) and its loads of `min_usage`/`low_usage`: one side of
        // a store-buffering pair (module docs).
        sc_fence_for_model();
        // SeqCst loads of `min`/`low`: pair with the stores in `set_min`/
        // `set_low` (module docs, convergence).
        let mut min = rm.min.load(Ordering::SeqCst);
        let mut low = rm.low.load(Ordering::SeqCst);
        loop {
            let u = clamp(usage);
            let a = sync_protected(&self.tr().min_usage, u.min(min), &pt.children_min_usage);
            let b = sync_protected(&self.tr().low_usage, u.min(low), &pt.children_low_usage);
            if !(a || b) {
                return;
            }
            // We installed a value: make sure it was not computed from
            // inputs that have since moved (module docs). The other side of
            // the store-buffering pair: swap, then load the inputs.
            sc_fence_for_model();
            let usage2 = self.usage.load(Ordering::SeqCst);
            let min2 = rm.min.load(Ordering::SeqCst);
            let low2 = rm.low.load(Ordering::SeqCst);
            if (usage2, min2, low2) == (usage, min, low) {
                return;
            }
            (usage, min, low) = (usage2, min2, low2);
        }
    }

    /// The declared hard protection. One relaxed load.
    pub fn min(&self) -> u64 {
        self.rm().min.load(Ordering::Relaxed)
    }

    /// The declared best-effort protection. One relaxed load.
    pub fn low(&self) -> u64 {
        self.rm().low.load(Ordering::Relaxed)
    }

    /// Declare hard protection (clamped to [`PAGE_COUNTER_MAX`]) and update
    /// this counter's protected usage and its parent's sum of them.
    ///
    /// Cost: takes this counter's setter lock; a store on the read-mostly
    /// line and up to two swaps and adds on the tracking lines.
    pub fn set_min(&self, min: u64) {
        let _g = lock(&self.tr().limits);
        // SeqCst: convergence (module docs); the propagation below is the
        // repair for this input change. Ancestors' inputs did not change.
        self.rm()
            .min
            .store(min.min(PAGE_COUNTER_MAX), Ordering::SeqCst);
        // A store-buffering pair with a charge (usage write, then `min`
        // load): one of us sees the other's write.
        sc_fence_for_model();
        self.propagate_protected_usage(self.usage.load(Ordering::SeqCst));
    }

    /// Declare best-effort protection; as [`set_min`](Self::set_min).
    pub fn set_low(&self, low: u64) {
        let _g = lock(&self.tr().limits);
        // SeqCst: as in `set_min`.
        self.rm()
            .low
            .store(low.min(PAGE_COUNTER_MAX), Ordering::SeqCst);
        sc_fence_for_model();
        self.propagate_protected_usage(self.usage.load(Ordering::SeqCst));
    }

    /// `min(usage, min)` as last propagated: the part of this counter's
    /// usage its own `min` covers. Exact once concurrent charges stop. One
    /// load.
    pub fn min_usage(&self) -> u64 {
        self.tr().min_usage.load(Ordering::Relaxed)
    }

    /// `min(usage, low)` as last propagated; as [`min_usage`](Self::min_usage).
    pub fn low_usage(&self) -> u64 {
        self.tr().low_usage.load(Ordering::Relaxed)
    }

    /// The sum of the children's [`min_usage`](Self::min_usage): how much
    /// hard protection they claim and use. Exact once concurrent charges
    /// stop. One load.
    pub fn children_min_usage(&self) -> u64 {
        clamp(self.tr().children_min_usage.load(Ordering::Relaxed))
    }

    /// The sum of the children's [`low_usage`](Self::low_usage).
    pub fn children_low_usage(&self) -> u64 {
        clamp(self.tr().children_low_usage.load(Ordering::Relaxed))
    }

    /// Effective hard protection as of the last
    /// [`calculate_protection`](Self::calculate_protection). One load.
    pub fn emin(&self) -> u64 {
        self.tr().emin.load(Ordering::Relaxed)
    }

    /// Effective best-effort protection as of the last
    /// [`calculate_protection`](Self::calculate_protection). One load.
    pub fn elow(&self) -> u64 {
        self.tr().elow.load(Ordering::Relaxed)
    }

    /// Turn recursive protection (the cgroup2 `memory_recursiveprot` mount
    /// option) on or off for the whole hierarchy: protection a parent
    /// affords but its children do not claim is shared among them in
    /// proportion to their unprotected usage (rule 5 of
    /// [`effective_protection`]). Only a root (no parent) holds the flag;
    /// elsewhere this is [`PageCounterError::NotRoot`](super::PageCounterError::NotRoot).
    /// One store.
    pub fn set_recursive_protection(&self, on: bool) -> Result<(), super::PageCounterError> {
        if self.parent().is_some() {
            return Err(super::PageCounterError::NotRoot);
        }
        // Relaxed: a flag read on its own; a reclaim pass that started before
        // the change may use either value.
        self.rm().recursive_protection.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Whether this counter's hierarchy uses recursive protection (the flag
    /// on its root). O(depth) loads.
    pub fn recursive_protection(&self) -> bool {
        self.hierarchy_root()
            .rm()
            .recursive_protection
            .load(Ordering::Relaxed)
    }

    /// Compute this counter's effective protection ([`emin`](Self::emin),
    /// [`elow`](Self::elow)) for a reclaim of the subtree under `root`
    /// (`self` or an ancestor of `self`): the kernel's
    /// `page_counter_calculate_protection`.
    ///
    /// **Not stateless**: it reads the parent's effective values, so call it
    /// top-down, parents before children, from `root`'s children. As in the
    /// kernel:
    /// - on `root` itself it does nothing (a reclaim's target is not
    ///   protected from itself; its values are left stale and must be
    ///   ignored);
    /// - with zero usage it does nothing (there is nothing to protect; the
    ///   old values stay);
    /// - on `root`'s children effective protection is the declared `min`
    ///   and `low`;
    /// - below, [`effective_protection`] applies, with the recursive flag of
    ///   the hierarchy's root.
    ///
    /// If `root` is not an ancestor the computation runs up to the
    /// hierarchy's root; nothing panics but the values mean little.
    ///
    /// Cost: O(depth) loads to find the flag; two stores on this counter's
    /// tracking line; no lock.
    pub fn calculate_protection(&self, root: &PageCounter<L>) {
        if core::ptr::eq(self, root) {
            return;
        }
        let usage = self.usage();
        if usage == 0 {
            return;
        }
        let Some(parent) = self.parent() else {
            return;
        };
        let t = self.tr();
        // Relaxed everywhere: every input is a value read on its own, as in
        // the kernel; a concurrent change gives a value between the old and
        // the new, which reclaim tolerates.
        if core::ptr::eq(&**parent, root) {
            t.emin.store(self.min(), Ordering::Relaxed);
            t.elow.store(self.low(), Ordering::Relaxed);
            return;
        }
        let parent_usage = parent.usage();
        let recursive = self.recursive_protection();
        let emin = effective_protection(
            usage,
            parent_usage,
            self.min(),
            parent.emin(),
            parent.children_min_usage(),
            recursive,
        );
        let elow = effective_protection(
            usage,
            parent_usage,
            self.low(),
            parent.elow(),
            parent.children_low_usage(),
            recursive,
        );
        t.emin.store(emin, Ordering::Relaxed);
        t.elow.store(elow, Ordering::Relaxed);
    }
}

/// Install `protected` in `slot` (a counter's `min_usage` or `low_usage`)
/// and add the difference to `parent_sum`. Returns whether it swapped.
#[inline(always)]
fn sync_protected(slot: &AtomicU64, protected: u64, parent_sum: &AtomicI64) -> bool {
    // SeqCst load and swap: convergence (module docs).
    if slot.load(Ordering::SeqCst) == protected {
        return false;
    }
    let old = slot.swap(protected, Ordering::SeqCst);
    // Both are at most PAGE_COUNTER_MAX, so the difference fits an i64.
    let delta = protected as i64 - old as i64;
    if delta != 0 {
        // Relaxed: an accumulator; only the atomicity of the add matters.
        parent_sum.fetch_add(delta, Ordering::Relaxed);
    }
    true
}

/// The effective protection of one counter: the kernel's
/// `effective_protection`, rule for rule.
///
/// Inputs: the counter's `usage`, its parent's `parent_usage`, its declared
/// `setting` (`min` or `low`), the parent's effective protection
/// `parent_effective`, and `siblings_protected`, the parent's
/// `children_*_usage` (the protection all the children, this one included,
/// claim and use).
///
/// 1. A counter protects at most what it uses of its own setting:
///    `protected = min(usage, setting)`.
/// 2. If the children together claim more than the parent has
///    (`siblings_protected > parent_effective`), the parent's protection is
///    shared in proportion to the claims:
///    `protected × parent_effective / siblings_protected` (rounded down).
///    Claimed but unused protection is not counted, so it is left to the
///    siblings that use theirs.
/// 3. Otherwise the counter keeps `protected` — no more, however much the
///    parent could spare: siblings do not inherit each other's unclaimed
///    protection.
/// 4. With `recursive` on, the parent's protection that no child claims,
///    `parent_effective − siblings_protected`, is shared among the children
///    in proportion to their *unprotected* usage, `usage − protected`, out
///    of the parent's, `parent_usage − siblings_protected` — so a subtree is
///    protected as a whole from its neighbours without every descendant
///    declaring a share. Skipped unless all three differences are positive
///    (the inputs are read at different times and must not divide by zero
///    or go negative).
///
/// Products are computed in 128 bits, so unlike a 64-bit `a × b / c` no
/// input in range overflows; where the kernel's arithmetic does not
/// overflow the results are identical.
pub fn effective_protection(
    usage: u64,
    parent_usage: u64,
    setting: u64,
    parent_effective: u64,
    siblings_protected: u64,
    recursive: bool,
) -> u64 {
    let protected = usage.min(setting);
    if siblings_protected > parent_effective {
        return mul_div(protected, parent_effective, siblings_protected);
    }
    let mut ep = protected;
    if recursive
        && parent_effective > siblings_protected
        && parent_usage > siblings_protected
        && usage > protected
    {
        let unclaimed = mul_div(
            parent_effective - siblings_protected,
            usage - protected,
            parent_usage - siblings_protected,
        );
        ep = ep.saturating_add(unclaimed);
    }
    ep
}

/// `a × b / c` rounded down, in 128 bits (`c > 0`); saturates at `u64::MAX`.
fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    let q = u128::from(a) * u128::from(b) / u128::from(c);
    u64::try_from(q).unwrap_or(u64::MAX)
}
