//! Mode switches and life-cycle changes of a [`PercpuRef`]: kill, the
//! switches between percpu and atomic mode, resurrect and reinit. All of them
//! run under the ref's lock; see the parent module's "Synchronization" for
//! the protocol they follow with the lock-free fast paths. Stopping the
//! restartable sections is `sections`' part; dropping the initial reference
//! is a put on the shared count (`get_put`).

use super::state::{Ctl, Fold, BIAS, DEAD, FROZEN, VALUE, VALUE_LIMIT};
use super::{FastPath, PercpuRef, PercpuRefError};
use crate::sync::Ordering::{AcqRel, Relaxed, Release};

impl PercpuRef {
    /// Mark the ref dying, fold it to atomic mode and drop the initial
    /// reference (which may run release, on this thread). Equivalent to
    /// `kill_and_confirm(|| {})`.
    ///
    /// Cost: the ref's lock, on the `Rseq` fast path one `membarrier`
    /// system call (it interrupts every CPU running a thread of this
    /// process, so it costs more the more of them are busy), one atomic RMW
    /// per CPU slot and a CAS on the shared count.
    ///
    /// # Errors
    /// As [`kill_and_confirm`](Self::kill_and_confirm).
    pub fn kill(&self) -> Result<(), PercpuRefError> {
        self.kill_and_confirm(|| {})
    }

    /// [`kill`](Self::kill), running `confirm` once every slot is folded
    /// (from then on every `tryget_live` fails) and before the initial
    /// reference is dropped, so `confirm` always runs before release. Runs
    /// synchronously on this thread without the ref's lock held; `confirm`
    /// may use the ref. If `confirm` panics, the initial reference is not
    /// dropped. Cost: as [`kill`](Self::kill), plus `confirm`.
    ///
    /// # Errors
    /// [`AlreadyDead`](PercpuRefError::AlreadyDead) if the ref is already
    /// dying (nothing changes, `confirm` does not run);
    /// [`Underflow`](PercpuRefError::Underflow) if the initial reference was
    /// already put by the caller (the ref is killed, and release has run
    /// exactly once for this cycle); [`Overflow`](PercpuRefError::Overflow)
    /// if the folded count exceeded its limit;
    /// [`Membarrier`](PercpuRefError::Membarrier) if the `Rseq` fast path
    /// could not be stopped (nothing changes, `confirm` does not run).
    pub fn kill_and_confirm(&self, confirm: impl FnOnce()) -> Result<(), PercpuRefError> {
        let fold = {
            let mut ctl = crate::sync::lock(&self.shared.ctl);
            // Relaxed: `DEAD` changes only under `ctl`, which we hold.
            if self.shared.count.load(Relaxed) & DEAD != 0 {
                return Err(PercpuRefError::AlreadyDead);
            }
            // Stop the sections before anything is visible: the only step
            // that can fail comes first, so a failed kill changed nothing (no
            // lookup ever saw `DEAD`). An operation refused from now on goes
            // to `count`, where it meets `DEAD` once it is set below, and one
            // that lands on `count` before that is folded like any other.
            if ctl.percpu {
                self.stop_sections()?;
            }
            // Relaxed: see "Synchronization" (published by the freezes).
            self.shared.count.fetch_or(DEAD, Relaxed);
            match self.apply_mode(&mut ctl) {
                Ok(fold) => fold,
                Err(e) => {
                    // Unreachable in practice: the sections are already
                    // stopped, so the fold cannot fail. Undo all the same.
                    // Relaxed: as above.
                    self.shared.count.fetch_and(!DEAD, Relaxed);
                    return Err(e);
                }
            }
        };
        confirm();
        match fold {
            Fold::Live => self.count_put(1),
            Fold::Zero | Fold::Underflow => {
                (self.shared.release)();
                Err(PercpuRefError::Underflow)
            }
            Fold::Overflow => {
                self.count_put(1)?;
                Err(PercpuRefError::Overflow)
            }
        }
    }

    /// Switch to atomic mode and stay there (across kill/reinit cycles) until
    /// [`switch_to_percpu`](Self::switch_to_percpu); then run `confirm`,
    /// which sees every slot folded. Already atomic: just runs `confirm`.
    /// Synchronous; `confirm` runs on this thread without the ref's lock.
    ///
    /// If the caller dropped the initial reference in percpu mode and no
    /// other is held, the folded count is zero and release runs here, after
    /// `confirm` (as in the kernel).
    ///
    /// Cost: the ref's lock, then in percpu mode one `membarrier` system
    /// call (`Rseq` fast path), one atomic RMW per CPU slot and a CAS on the
    /// shared count; plus `confirm`.
    ///
    /// # Errors
    /// [`Underflow`](PercpuRefError::Underflow) if the slots held more puts
    /// than gets (the count is set to zero and release runs once);
    /// [`Overflow`](PercpuRefError::Overflow) if the folded count exceeded
    /// its limit; [`Membarrier`](PercpuRefError::Membarrier) as for
    /// [`kill_and_confirm`](Self::kill_and_confirm) (nothing changes,
    /// `confirm` does not run).
    pub fn switch_to_atomic(&self, confirm: impl FnOnce()) -> Result<(), PercpuRefError> {
        let fold = {
            let mut ctl = crate::sync::lock(&self.shared.ctl);
            let was = core::mem::replace(&mut ctl.force_atomic, true);
            match self.apply_mode(&mut ctl) {
                Ok(fold) => fold,
                Err(e) => {
                    ctl.force_atomic = was;
                    return Err(e);
                }
            }
        };
        confirm();
        match fold {
            Fold::Live => Ok(()),
            Fold::Zero => {
                (self.shared.release)();
                Ok(())
            }
            Fold::Underflow => {
                (self.shared.release)();
                Err(PercpuRefError::Underflow)
            }
            Fold::Overflow => Err(PercpuRefError::Overflow),
        }
    }

    /// [`switch_to_atomic`](Self::switch_to_atomic) without a callback: when
    /// it returns, the switch is complete. Cost as `switch_to_atomic`.
    ///
    /// # Errors
    /// As [`switch_to_atomic`](Self::switch_to_atomic).
    pub fn switch_to_atomic_sync(&self) -> Result<(), PercpuRefError> {
        self.switch_to_atomic(|| {})
    }

    /// Undo the sticky atomic mode of `switch_to_atomic` or
    /// `InitFlags::ATOMIC`. Returns to percpu mode now if the ref is live
    /// with references; if it is dying or released, at the next
    /// [`resurrect`](Self::resurrect)/[`reinit`](Self::reinit).
    ///
    /// Cost: the ref's lock, plus (when switching) a CAS on the shared count
    /// and one atomic RMW per CPU slot.
    ///
    /// # Errors
    /// [`ReinitNotAllowed`](PercpuRefError::ReinitNotAllowed) if the ref is
    /// in atomic mode and was created without `ALLOW_REINIT` (nothing
    /// changes). Already in percpu mode: `Ok`, whatever the flags.
    pub fn switch_to_percpu(&self) -> Result<(), PercpuRefError> {
        let mut ctl = crate::sync::lock(&self.shared.ctl);
        if !ctl.percpu && !ctl.allow_reinit {
            return Err(PercpuRefError::ReinitNotAllowed);
        }
        ctl.force_atomic = false;
        let fold = self.apply_mode(&mut ctl);
        debug_assert_eq!(fold, Ok(Fold::Live), "going to percpu mode never folds");
        Ok(())
    }

    /// Undo a kill: the ref is live again, with one more reference (a new
    /// initial reference) than it had, and returns to percpu mode unless
    /// atomic mode was forced. If the count had already reached zero, this
    /// starts a new cycle (release ran for the old one). Concurrent gets,
    /// puts and trygets are fine; a put racing this call either releases the
    /// old cycle or does not, never both.
    ///
    /// Cost: the ref's lock, a CAS on the shared count and one atomic RMW
    /// per CPU slot.
    ///
    /// # Errors
    /// [`NotDead`](PercpuRefError::NotDead) if the ref is not dying;
    /// [`ReinitNotAllowed`](PercpuRefError::ReinitNotAllowed) without
    /// `ALLOW_REINIT`; [`Overflow`](PercpuRefError::Overflow). Nothing changes.
    pub fn resurrect(&self) -> Result<(), PercpuRefError> {
        let mut ctl = crate::sync::lock(&self.shared.ctl);
        // Relaxed: `DEAD` changes only under `ctl`, which we hold.
        let mut cur = self.shared.count.load(Relaxed);
        if cur & DEAD == 0 {
            return Err(PercpuRefError::NotDead);
        }
        if !ctl.allow_reinit {
            return Err(PercpuRefError::ReinitNotAllowed);
        }
        loop {
            let v = cur & VALUE;
            if v >= VALUE_LIMIT {
                return Err(PercpuRefError::Overflow);
            }
            // AcqRel / Relaxed: see "Synchronization" (count CAS). Clears
            // `DEAD` and adds the new initial reference in one step, so a
            // racing put sees either the old cycle or the new one.
            match self
                .shared
                .count
                .compare_exchange_weak(cur, v + 1, AcqRel, Relaxed)
            {
                Ok(_) => break,
                Err(actual) => cur = actual,
            }
        }
        let fold = self.apply_mode(&mut ctl);
        debug_assert_eq!(fold, Ok(Fold::Live), "a live ref never folds");
        Ok(())
    }

    /// Start a new cycle on a ref whose count reached zero (or that was
    /// created with `InitFlags::DEAD`): one reference, live, in percpu mode
    /// unless atomic mode was forced.
    ///
    /// Cost: the ref's lock, a CAS on the shared count and one atomic RMW
    /// per CPU slot.
    ///
    /// # Errors
    /// [`NotZero`](PercpuRefError::NotZero) if references are held;
    /// [`ReinitNotAllowed`](PercpuRefError::ReinitNotAllowed) without
    /// `ALLOW_REINIT`. Nothing changes.
    pub fn reinit(&self) -> Result<(), PercpuRefError> {
        let mut ctl = crate::sync::lock(&self.shared.ctl);
        let mut cur = self.shared.count.load(Relaxed);
        if cur & VALUE != 0 {
            return Err(PercpuRefError::NotZero);
        }
        if !ctl.allow_reinit {
            return Err(PercpuRefError::ReinitNotAllowed);
        }
        loop {
            // A zero value only moves under `ctl` (gets refuse zero, puts
            // refuse to go below it), so this loop retries at most on a
            // stale first load or a spurious CAS failure.
            if cur & VALUE != 0 {
                return Err(PercpuRefError::NotZero);
            }
            // AcqRel / Relaxed: see "Synchronization" (count CAS).
            match self
                .shared
                .count
                .compare_exchange_weak(cur, 1, AcqRel, Relaxed)
            {
                Ok(_) => break,
                Err(actual) => cur = actual,
            }
        }
        let fold = self.apply_mode(&mut ctl);
        debug_assert_eq!(fold, Ok(Fold::Live), "a live ref never folds");
        Ok(())
    }

    /// Bring the mode in line with `force_atomic` and `DEAD`. Holds `ctl`.
    /// Only a switch to atomic mode can fail (`Membarrier`), and then
    /// nothing changed.
    fn apply_mode(&self, ctl: &mut Ctl) -> Result<Fold, PercpuRefError> {
        // Relaxed: `DEAD` changes only under `ctl`, which we hold.
        let dead = self.shared.count.load(Relaxed) & DEAD != 0;
        let mut fold = Fold::Live;
        if ctl.force_atomic || dead {
            if ctl.percpu {
                fold = self.fold_to_atomic(ctl)?;
            }
        } else if !ctl.percpu {
            self.unfold_to_percpu(ctl);
        }
        Ok(fold)
    }

    /// Stop the fast paths, freeze every slot and move its count into
    /// `count`. Holds `ctl`, in percpu mode.
    fn fold_to_atomic(&self, ctl: &mut Ctl) -> Result<Fold, PercpuRefError> {
        self.stop_sections()?;
        // Relaxed: a snapshot for `is_percpu`.
        self.shared.percpu_hint.store(false, Relaxed);
        let mut sum: i64 = 0;
        for c in 0..self.slots.nr() {
            // AcqRel: see "Synchronization" (the freeze).
            let v = self.slots.slot(c).fetch_or(FROZEN, AcqRel);
            debug_assert_eq!(v & FROZEN, 0, "percpu mode has no frozen slot");
            // The slot's references, sign-extended from its 63 bits.
            sum = sum.wrapping_add((v as i64) >> 1);
        }
        // Slots wrap modulo 2^63; so does the sum. The true total is inside
        // ±2^62 (VALUE_LIMIT), so sign-extending from 63 bits recovers it.
        let sum = sum.wrapping_shl(1) >> 1;
        ctl.percpu = false;
        let mut cur = self.shared.count.load(Relaxed);
        loop {
            let v = i128::from(cur & VALUE) - i128::from(BIAS) + i128::from(sum);
            let (value, fold) = if v < 0 {
                (0, Fold::Underflow)
            } else if v == 0 {
                (0, Fold::Zero)
            } else if v > i128::from(VALUE_LIMIT) {
                (VALUE_LIMIT, Fold::Overflow)
            } else {
                (v as u64, Fold::Live)
            };
            // AcqRel / Relaxed: see "Synchronization" (count CAS).
            match self.shared.count.compare_exchange_weak(
                cur,
                (cur & DEAD) | value,
                AcqRel,
                Relaxed,
            ) {
                Ok(_) => return Ok(fold),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Put `BIAS` back and reset the slots. Holds `ctl`, in atomic mode, not
    /// dying. Stays atomic if the count is zero: a released ref must not
    /// accept gets again until `reinit`.
    fn unfold_to_percpu(&self, ctl: &mut Ctl) {
        let mut cur = self.shared.count.load(Relaxed);
        loop {
            if cur & VALUE == 0 {
                return;
            }
            // AcqRel / Relaxed: see "Synchronization" (count CAS). Must
            // precede the resets: from the first reset on, a reference may be
            // counted on a slot and later put on `count`.
            match self
                .shared
                .count
                .compare_exchange_weak(cur, cur + BIAS, AcqRel, Relaxed)
            {
                Ok(_) => break,
                Err(actual) => cur = actual,
            }
        }
        for c in 0..self.slots.nr() {
            // Release: see "Synchronization" (the reset).
            self.slots.slot(c).swap(0, Release);
        }
        ctl.percpu = true;
        // Relaxed: a snapshot for `is_percpu`.
        self.shared.percpu_hint.store(true, Relaxed);
        if self.fast != FastPath::Locked {
            // Release: a section that passes its gate (an acquire load)
            // must find the slots reset and `BIAS` in `count`.
            self.slots.set_gates(true, Release);
        }
    }
}
