//! The charge path: speculative charge up the ancestors with rollback,
//! forced charge, uncharge and cancel with clamping, peaks.
//!
//! Orderings are explained in the parent module's `# Synchronization`.

use crate::sync::{sc_fence_for_model, Ordering};

use super::range::{clamp, PAGE_COUNTER_MAX};
use super::{Layout, PageCounter, PageCounterError};

/// Amounts up to this take the one-`fetch_add` speculative path; larger ones
/// a compare-and-swap loop that never overshoots (module docs).
const SPECULATIVE_MAX: u64 = 1 << 32;

impl<L: Layout> PageCounter<L> {
    /// Charge `amount` to this counter and every ancestor unless a level
    /// would exceed its `max` (`usage == max` is allowed).
    ///
    /// On failure nothing stays charged: the refusing level and those below
    /// it are rolled back, the refusing level's `failcnt` goes up, and the
    /// error is [`PageCounterError::OverLimit`] naming it. Levels below the
    /// refusing one may have recorded the speculative usage as their peak
    /// (the kernel does the same). An amount above [`PAGE_COUNTER_MAX`] is
    /// [`PageCounterError::TooLarge`].
    ///
    /// Cost: per level one atomic add on that level's `usage` line (shared
    /// by everything charging under it) and reads of its read-mostly and
    /// tracking lines (shared, clean); a failure adds one compare-and-swap
    /// per level rolled back. No lock, no allocation.
    #[inline]
    pub fn try_charge(&self, amount: u64) -> Result<(), PageCounterError> {
        if amount > PAGE_COUNTER_MAX {
            return Err(PageCounterError::TooLarge { amount });
        }
        match self.charge_levels(amount, false) {
            Ok(()) => Ok(()),
            Err((level, max)) => Err(PageCounterError::OverLimit { level, amount, max }),
        }
    }

    /// Charge `amount` to this counter and every ancestor regardless of
    /// their limits (a forced charge: usage may end above `max`).
    ///
    /// Fails only if a level's usage would pass [`PAGE_COUNTER_MAX`]
    /// ([`PageCounterError::Overflow`], nothing stays charged) or `amount`
    /// itself is above it ([`PageCounterError::TooLarge`]).
    ///
    /// Cost: one atomic add per level on its `usage` line, no lock.
    #[inline]
    pub fn charge(&self, amount: u64) -> Result<(), PageCounterError> {
        if amount > PAGE_COUNTER_MAX {
            return Err(PageCounterError::TooLarge { amount });
        }
        match self.charge_levels(amount, true) {
            Ok(()) => Ok(()),
            Err((level, _)) => Err(PageCounterError::Overflow { level, amount }),
        }
    }

    /// The charge walk shared by `try_charge` (`forced == false`: limit is
    /// each level's `max`) and `charge` (limit is `PAGE_COUNTER_MAX`).
    /// Invariant on return: either every level holds `amount` more, or none
    /// does and the error is (first level that refused, its limit).
    #[inline(always)]
    fn charge_levels(&self, amount: u64, forced: bool) -> Result<(), (usize, u64)> {
        let mut c = self;
        let mut level = 0;
        loop {
            let added = c.add_usage(amount);
            let limit = if forced {
                PAGE_COUNTER_MAX
            } else {
                // SeqCst: the second half of the store-buffering pair with
                // `set_max` (module docs, protocol 1).
                sc_fence_for_model();
                c.rm().max.load(Ordering::SeqCst)
            };
            let new = match added {
                Some(new) if new <= limit as i64 => new,
                refused => {
                    if refused.is_some() {
                        c.cancel_local(amount);
                    }
                    if !forced {
                        c.tr().failcnt.fetch_add(1, Ordering::Relaxed);
                    }
                    self.unwind(level, amount);
                    return Err((level, limit));
                }
            };
            c.propagate_protected_usage(new);
            c.note_peak(new);
            match c.parent() {
                Some(p) => {
                    c = p;
                    level += 1;
                }
                None => return Ok(()),
            }
        }
    }

    /// Take `amount` back from the `levels` counters starting at `self`
    /// (the ones a failed charge walk had already charged).
    #[cold]
    fn unwind(&self, levels: usize, amount: u64) {
        let mut c = self;
        for _ in 0..levels {
            c.cancel_local(amount);
            match c.parent() {
                Some(p) => c = p,
                None => break,
            }
        }
    }

    /// Add `amount` (≤ `PAGE_COUNTER_MAX`) to `usage`; the new value, or
    /// `None` (nothing added) if a large amount would take it past
    /// `PAGE_COUNTER_MAX`. Small amounts are always added: the headroom
    /// above `PAGE_COUNTER_MAX` absorbs them and the caller takes them back.
    #[inline(always)]
    fn add_usage(&self, amount: u64) -> Option<i64> {
        if amount <= SPECULATIVE_MAX {
            let n = amount as i64;
            // SeqCst: protocols 1 and 2 of the module docs.
            Some(self.usage.fetch_add(n, Ordering::SeqCst).wrapping_add(n))
        } else {
            self.add_usage_large(amount as i64)
        }
    }

    #[cold]
    fn add_usage_large(&self, n: i64) -> Option<i64> {
        let mut cur = self.usage.load(Ordering::Relaxed);
        loop {
            let new = cur
                .checked_add(n)
                .filter(|&v| v <= PAGE_COUNTER_MAX as i64)?;
            // SeqCst on success: as for `fetch_add` in `add_usage`. Relaxed on
            // failure: we only retry with the value read.
            match self
                .usage
                .compare_exchange_weak(cur, new, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => return Some(new),
                Err(now) => cur = now,
            }
        }
    }

    /// Subtract `amount` (≤ `PAGE_COUNTER_MAX`) from `usage`, clamping at
    /// zero. Returns the usage this thread's write left and how much the
    /// counter held if that was less than `amount`.
    ///
    /// One compare-and-swap from the value read to `max(value - amount, 0)`,
    /// so `usage` never passes through a value below that, not even for a
    /// moment. A `fetch_sub` followed by a correction would: a charge
    /// landing between the two would compare a usage below what is charged
    /// with `max` and could be admitted above it. The loop
    /// retries only when another thread changed `usage` between the load
    /// and the swap; each retry is one more attempt on the same line.
    #[inline(always)]
    fn sub_usage(&self, amount: u64) -> (i64, Option<u64>) {
        let n = amount as i64;
        // Relaxed: only the guess for the swap, which checks it.
        let mut cur = self.usage.load(Ordering::Relaxed);
        loop {
            // Never negative (every write here stops at zero); `max` keeps
            // the arithmetic sound if that were ever broken.
            let held = cur.max(0);
            let take = n.min(held);
            let new = held - take;
            // SeqCst on success: protocol 2 of the module docs (an RMW on
            // `usage`, as the `fetch_add` of a charge). Relaxed on failure:
            // we only retry with the value read.
            match self
                .usage
                .compare_exchange_weak(cur, new, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => return (new, (take < n).then_some(held as u64)),
                Err(now) => cur = now,
            }
        }
    }

    /// Local cancel without validation: subtract, count an underflow,
    /// propagate. Returns what the counter held if it underflowed.
    #[inline]
    fn cancel_local(&self, amount: u64) -> Option<u64> {
        let (now, underflow) = self.sub_usage(amount);
        if underflow.is_some() {
            self.tr().cancel_underflows.fetch_add(1, Ordering::Relaxed);
        }
        self.propagate_protected_usage(now);
        underflow
    }

    /// Take `amount` out of this counter only, not its ancestors (the
    /// kernel's `page_counter_cancel`; [`uncharge`](Self::uncharge) is this
    /// at every level).
    ///
    /// Taking more than the counter holds clamps it at zero, counts one
    /// [`cancel_underflows`](Self::cancel_underflows) and returns
    /// [`PageCounterError::Underflow`].
    ///
    /// Meant for undoing level by level. On an inner counter it lets the
    /// counter hold less than its children together, after which their
    /// charges can take it past what it would otherwise have held.
    ///
    /// Cost: one compare-and-swap on the `usage` line, retried while other
    /// threads change it in between.
    pub fn cancel(&self, amount: u64) -> Result<(), PageCounterError> {
        if amount > PAGE_COUNTER_MAX {
            return Err(PageCounterError::TooLarge { amount });
        }
        match self.cancel_local(amount) {
            None => Ok(()),
            Some(charged) => Err(PageCounterError::Underflow {
                level: 0,
                amount,
                charged,
            }),
        }
    }

    /// Take `amount` out of this counter and every ancestor: undoes a
    /// [`charge`](Self::charge) or successful [`try_charge`](Self::try_charge)
    /// of the same amount.
    ///
    /// Every level is uncharged even if one underflows; each underflowing
    /// level is clamped at zero and counts one
    /// [`cancel_underflows`](Self::cancel_underflows), and the first one is
    /// reported as [`PageCounterError::Underflow`].
    ///
    /// Usage never dips below what stays charged, so a racing
    /// [`try_charge`](Self::try_charge) is checked against a usage at least
    /// that high; see the module docs' *What a reader can see* for the one
    /// exception, when this takes more than was charged.
    ///
    /// Cost: per level one compare-and-swap on its `usage` line, retried
    /// while other threads change it in between; no lock.
    #[inline]
    pub fn uncharge(&self, amount: u64) -> Result<(), PageCounterError> {
        if amount > PAGE_COUNTER_MAX {
            return Err(PageCounterError::TooLarge { amount });
        }
        let mut first = None;
        let mut c = self;
        let mut level = 0;
        loop {
            if let Some(charged) = c.cancel_local(amount) {
                first.get_or_insert(PageCounterError::Underflow {
                    level,
                    amount,
                    charged,
                });
            }
            match c.parent() {
                Some(p) => {
                    c = p;
                    level += 1;
                }
                None => break,
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Record `new` (the result of a successful charge at this level) as a
    /// peak. Raises `watermark` before `local_watermark` (module docs).
    #[inline(always)]
    fn note_peak(&self, new: i64) {
        let t = self.tr();
        let new = clamp(new);
        if new <= t.local_watermark.load(Ordering::Relaxed) {
            return;
        }
        self.raise_watermarks(new);
    }

    #[cold]
    fn raise_watermarks(&self, new: u64) {
        let t = self.tr();
        t.watermark.fetch_max(new, Ordering::Relaxed);
        // Acquire: pairs with the Release store of `local_watermark` in the
        // resets, so the re-check below sees a reset's `watermark` store.
        // Release: pairs with the Acquire load in `local_watermark()`, so a
        // reader that sees this peak there sees the raise above too.
        t.local_watermark.fetch_max(new, Ordering::AcqRel);
        if new > t.watermark.load(Ordering::Relaxed) {
            t.watermark.fetch_max(new, Ordering::Relaxed);
        }
    }
}
