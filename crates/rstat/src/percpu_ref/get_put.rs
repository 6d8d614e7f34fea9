//! Taking and dropping references: `get`, `tryget`, `tryget_live`, `put`,
//! `put_and_test` and their batch (`*_many`) and per-CPU (`*_on`) forms. In
//! percpu mode each is one add on this CPU's slot: a restartable section
//! (`sections`) or a locked add whose old value says whether the slot was
//! frozen; in atomic mode, and whenever the slot refuses, a CAS loop on the
//! shared count. The mode switches (`switch`) use the count's put as well.
//! The protocol and its orderings are the parent module's
//! "Synchronization".

use super::state::{DEAD, FROZEN, MAX_MANY, ONE, VALUE, VALUE_LIMIT};
use super::{Cpu, PercpuRef, PercpuRefError};
use crate::sync::Ordering::{AcqRel, Acquire, Relaxed, Release};

impl PercpuRef {
    // ---------------------------------------------------------------- gets

    /// Take a reference; the caller must already hold one (use
    /// [`tryget`](Self::tryget) otherwise).
    ///
    /// Cost: percpu mode, one add on this CPU's slot (unlocked in a
    /// restartable section on the `Rseq` fast path, an uncontended locked
    /// add on the `Locked` one; no lock, no allocation, no shared line
    /// written); atomic mode, the refused section or the add that finds the
    /// slot frozen, then a CAS loop on the shared count.
    ///
    /// # Errors
    /// [`Released`](PercpuRefError::Released) if the count already reached
    /// zero (the caller held no reference), [`Overflow`](PercpuRefError::Overflow)
    /// at 2^62 references. The count is unchanged.
    #[inline]
    pub fn get(&self) -> Result<(), PercpuRefError> {
        self.get_with(Cpu::Current, 1)
    }

    /// Take `n` references at once; as [`get`](Self::get), same cost.
    ///
    /// # Errors
    /// As [`get`](Self::get), and [`TooMany`](PercpuRefError::TooMany) if
    /// `n > MAX_MANY`.
    #[inline]
    pub fn get_many(&self, n: usize) -> Result<(), PercpuRefError> {
        self.get_with(Cpu::Current, many(n)?)
    }

    /// Take a reference unless the count is zero. Unlike
    /// [`tryget_live`](Self::tryget_live) this succeeds on a dying ref that
    /// still has references. Cost: as [`get`](Self::get).
    #[inline]
    pub fn tryget(&self) -> bool {
        self.get_with(Cpu::Current, 1).is_ok()
    }

    /// Take a reference unless the ref is dying or released: the lookup
    /// primitive. Fails for every call that starts after a kill's
    /// confirmation (see the [module docs](super#confirmation-without-rcu)).
    /// Cost: as [`get`](Self::get); on a dying ref, the refused section or
    /// slot add, and one load of the shared count.
    #[inline]
    pub fn tryget_live(&self) -> bool {
        self.tryget_live_with(Cpu::Current)
    }

    /// [`get`](Self::get) counted on `cpu`'s slot (folded into range), for
    /// loom models and tests that pick the CPU. On the `Rseq` fast path,
    /// which can only add on the CPU it runs on, this counts on the shared
    /// count instead (exact in either mode).
    #[cfg(test)]
    #[inline]
    pub(crate) fn get_on(&self, cpu: usize) -> Result<(), PercpuRefError> {
        self.get_with(Cpu::Given(cpu), 1)
    }

    /// [`get_many`](Self::get_many) on `cpu`'s slot.
    #[cfg(test)]
    #[cfg_attr(rstat_loom, allow(dead_code))]
    #[inline]
    pub(crate) fn get_many_on(&self, cpu: usize, n: usize) -> Result<(), PercpuRefError> {
        self.get_with(Cpu::Given(cpu), many(n)?)
    }

    /// [`tryget`](Self::tryget) on `cpu`'s slot.
    #[cfg(test)]
    #[inline]
    pub(crate) fn tryget_on(&self, cpu: usize) -> bool {
        self.get_with(Cpu::Given(cpu), 1).is_ok()
    }

    /// [`tryget_live`](Self::tryget_live) on `cpu`'s slot.
    #[cfg(test)]
    #[inline]
    pub(crate) fn tryget_live_on(&self, cpu: usize) -> bool {
        self.tryget_live_with(Cpu::Given(cpu))
    }

    #[inline(always)]
    fn get_with(&self, cpu: Cpu, n: u64) -> Result<(), PercpuRefError> {
        if n == 0 {
            return Ok(());
        }
        if self.uses_sections() {
            return if self.section_add(cpu, n * ONE) {
                Ok(())
            } else {
                self.count_get(n, false)
            };
        }
        // Acquire: see "Synchronization" (pairs with freeze and reset).
        let old = self
            .slots
            .slot(self.cpu_id(cpu))
            .fetch_add(n * ONE, Acquire);
        if old & FROZEN == 0 {
            return Ok(());
        }
        self.count_get(n, false)
    }

    #[inline(always)]
    fn tryget_live_with(&self, cpu: Cpu) -> bool {
        if self.uses_sections() {
            return self.section_add(cpu, ONE) || self.count_get(1, true).is_ok();
        }
        // Acquire: as in `get_with`.
        let old = self.slots.slot(self.cpu_id(cpu)).fetch_add(ONE, Acquire);
        if old & FROZEN == 0 {
            return true;
        }
        self.count_get(1, true).is_ok()
    }

    /// Add `n` to `count` unless it is zero (or, for `live`, dying).
    #[cold]
    #[inline(never)]
    fn count_get(&self, n: u64, live: bool) -> Result<(), PercpuRefError> {
        let mut cur = self.shared.count.load(Relaxed);
        loop {
            if live && cur & DEAD != 0 {
                return Err(PercpuRefError::AlreadyDead);
            }
            let v = cur & VALUE;
            if v == 0 {
                return Err(PercpuRefError::Released);
            }
            if v + n > VALUE_LIMIT {
                return Err(PercpuRefError::Overflow);
            }
            // AcqRel / Relaxed: see "Synchronization" (count CAS).
            match self
                .shared
                .count
                .compare_exchange_weak(cur, cur + n, AcqRel, Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Drop a reference. In percpu mode this never releases; in atomic mode
    /// the put that takes the count to zero runs the release callback, on
    /// this thread, before returning.
    ///
    /// Cost: as [`get`](Self::get), plus the callback for the last put.
    ///
    /// # Errors
    /// [`Underflow`](PercpuRefError::Underflow) in atomic mode if the count
    /// is already zero (refused, count unchanged). In percpu mode an excess
    /// put cannot be seen here; the next fold reports it.
    #[inline]
    pub fn put(&self) -> Result<(), PercpuRefError> {
        self.put_with(Cpu::Current, 1)
    }

    /// Drop `n` references at once; as [`put`](Self::put), same cost.
    ///
    /// # Errors
    /// As [`put`](Self::put) (in atomic mode, refused if the count is below
    /// `n`), and [`TooMany`](PercpuRefError::TooMany) if `n > MAX_MANY`.
    #[inline]
    pub fn put_many(&self, n: usize) -> Result<(), PercpuRefError> {
        self.put_with(Cpu::Current, many(n)?)
    }

    /// [`put`](Self::put) on `cpu`'s slot (folded into range; the shared
    /// count on the `Rseq` path).
    #[cfg(test)]
    #[inline]
    pub(crate) fn put_on(&self, cpu: usize) -> Result<(), PercpuRefError> {
        self.put_with(Cpu::Given(cpu), 1)
    }

    /// [`put_many`](Self::put_many) on `cpu`'s slot.
    #[cfg(test)]
    #[cfg_attr(rstat_loom, allow(dead_code))]
    #[inline]
    pub(crate) fn put_many_on(&self, cpu: usize, n: usize) -> Result<(), PercpuRefError> {
        self.put_with(Cpu::Given(cpu), many(n)?)
    }

    #[inline(always)]
    fn put_with(&self, cpu: Cpu, n: u64) -> Result<(), PercpuRefError> {
        if self.put_test_with(cpu, n)? {
            (self.shared.release)();
        }
        Ok(())
    }

    /// Drop `n` references; `Ok(true)` if that brought the count to zero
    /// (the caller then runs or owns the release).
    #[inline(always)]
    fn put_test_with(&self, cpu: Cpu, n: u64) -> Result<bool, PercpuRefError> {
        if n == 0 {
            return Ok(false);
        }
        if self.uses_sections() {
            return if self.section_add(cpu, (n * ONE).wrapping_neg()) {
                Ok(false)
            } else {
                self.count_put_test(n)
            };
        }
        // Release: see "Synchronization" (pairs with the freeze).
        let old = self
            .slots
            .slot(self.cpu_id(cpu))
            .fetch_sub(n * ONE, Release);
        if old & FROZEN == 0 {
            return Ok(false);
        }
        self.count_put_test(n)
    }

    /// Drop one reference and report whether it was the last of this cycle
    /// (`Ok(true)`: the count reached zero on this call). The release
    /// callback is **not** run: the caller owns the release. This is the
    /// `refcount_dec_and_test` shape, for objects that hold their own ref and
    /// free themselves: after `Ok(false)` the caller must not touch the
    /// object again (another thread may free it); after `Ok(true)` it is the
    /// only one left. Cost: as [`put`](Self::put).
    ///
    /// # Errors
    /// As [`put`](Self::put).
    #[inline]
    pub fn put_and_test(&self) -> Result<bool, PercpuRefError> {
        self.put_test_with(Cpu::Current, 1)
    }

    /// Subtract `n` from `count`, refusing to go below zero; run release at
    /// zero.
    #[cold]
    #[inline(never)]
    pub(super) fn count_put(&self, n: u64) -> Result<(), PercpuRefError> {
        if self.count_put_test(n)? {
            (self.shared.release)();
        }
        Ok(())
    }

    /// Subtract `n` from `count`, refusing to go below zero; `Ok(true)` when
    /// this reached zero.
    #[cold]
    #[inline(never)]
    fn count_put_test(&self, n: u64) -> Result<bool, PercpuRefError> {
        let mut cur = self.shared.count.load(Relaxed);
        loop {
            let v = cur & VALUE;
            if v < n {
                return Err(PercpuRefError::Underflow);
            }
            // AcqRel / Relaxed: see "Synchronization" (count CAS). Acquire
            // matters for the CAS that reaches zero: whoever releases sees
            // every other holder's writes.
            match self
                .shared
                .count
                .compare_exchange_weak(cur, cur - n, AcqRel, Relaxed)
            {
                Ok(_) => return Ok(v == n),
                Err(actual) => cur = actual,
            }
        }
    }
}

#[inline(always)]
fn many(n: usize) -> Result<u64, PercpuRefError> {
    if n > MAX_MANY {
        Err(PercpuRefError::TooMany { n })
    } else {
        Ok(n as u64)
    }
}
