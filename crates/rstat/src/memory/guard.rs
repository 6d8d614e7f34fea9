//! The [`Charge`] guard (module docs, "The `Charge` guard") and its owning
//! form [`OwnedCharge`]: [`Memory::try_charge`] and its variants return
//! one, and dropping it uncharges through the raw path (`charge`, below
//! this file).

use std::borrow::Cow;

use super::charge::{Charged, OnOom};
use super::error::MemoryError;
use super::handle::Memory;
use crate::group::Group;

/// A charge held by the caller; dropping it uncharges it (through this
/// CPU's stock).
///
/// It borrows the controller and the group it was charged through, so
/// making and dropping one writes no reference count: the guard path costs
/// what [`Memory::charge_raw`] + [`Memory::uncharge_raw`] cost, and touches
/// no cache line that other CPUs' charges write (see "The `Charge` guard" in
/// the [module docs](super#the-charge-guard)). The borrow is also what keeps
/// the group valid: the caller's handle outlives the guard. A charge that
/// landed on the nearest live ancestor of a removed group holds a handle
/// to that ancestor (one per-CPU reference, taken on that cold path only).
///
/// To keep a charge where a borrow cannot go (a `'static` cache, a
/// reclaimer's state, another thread without a scope), turn it into an
/// [`OwnedCharge`] with [`into_owned`](Self::into_owned).
#[must_use = "dropping a Charge uncharges it at once"]
pub struct Charge<'a> {
    mem: &'a Memory,
    group: Cow<'a, Group>,
    amount: u64,
    flags: Charged,
}

impl std::fmt::Debug for Charge<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Charge")
            .field("group", &self.group.path())
            .field("amount", &self.amount)
            .field("flags", &self.flags)
            .finish()
    }
}

impl Charge<'_> {
    /// Units charged.
    #[inline]
    pub fn amount(&self) -> u64 {
        self.amount
    }

    /// The group charged: the one asked for, or if it had been removed its
    /// nearest live ancestor.
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// See [`Charged::over_high`].
    pub fn over_high(&self) -> bool {
        self.flags.over_high
    }

    /// See [`Charged::forced`].
    pub fn forced(&self) -> bool {
        self.flags.forced
    }

    /// Uncharge now, reporting errors (dropping does the same silently).
    #[inline]
    pub fn uncharge(mut self) -> Result<(), MemoryError> {
        let n = core::mem::take(&mut self.amount);
        uncharge_guard(self.mem, &self.group, n)
    }

    /// Give up the guard without uncharging: the caller must later call
    /// [`Memory::uncharge_raw`] with the returned group and amount. Takes a
    /// reference on the group (per-CPU; see [`Group`]'s `clone`).
    pub fn into_raw(mut self) -> (Group, u64) {
        (Group::clone(&self.group), core::mem::take(&mut self.amount))
    }

    /// The same charge, owning a handle to the controller and the group:
    /// `'static`, movable anywhere. Cost: one reference count on the
    /// controller (shared by every thread: written here and when the owned
    /// guard drops) and one per-CPU reference on the group. Make it once per
    /// long-lived charge, not on a hot path.
    pub fn into_owned(mut self) -> OwnedCharge {
        OwnedCharge {
            mem: self.mem.clone(),
            group: Group::clone(&self.group),
            amount: core::mem::take(&mut self.amount),
            flags: self.flags,
        }
    }
}

impl Drop for Charge<'_> {
    // `inline(always)` here and on the entry points (guarded and raw): the
    // stock path is a few tens of instructions, so whether it is inlined
    // into the caller's loop weighs on its cost as much as the path itself;
    // left to the heuristics, that choice can differ between the guarded
    // and the raw path and from build to build, so neither path's cost
    // would be stable against the other's (`rstat bench charge` compares
    // them; BENCHMARKS.md keeps the results).
    #[inline(always)]
    fn drop(&mut self) {
        let _ = uncharge_guard(self.mem, &self.group, self.amount);
    }
}

impl From<Charge<'_>> for OwnedCharge {
    fn from(c: Charge<'_>) -> OwnedCharge {
        c.into_owned()
    }
}

/// A [`Charge`] that owns its handles, so it is `'static`: for caches,
/// reclaimers' state and anything else that outlives a borrow of the
/// controller. Made by [`Charge::into_owned`]; dropping it uncharges.
///
/// It holds a [`Memory`] (one reference count, a cache line every thread
/// shares) and a [`Group`] (a per-CPU reference): making and dropping one
/// writes the controller's count, so keep [`Charge`] on hot paths.
#[must_use = "dropping an OwnedCharge uncharges it at once"]
pub struct OwnedCharge {
    mem: Memory,
    group: Group,
    amount: u64,
    flags: Charged,
}

impl std::fmt::Debug for OwnedCharge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedCharge")
            .field("group", &self.group.path())
            .field("amount", &self.amount)
            .field("flags", &self.flags)
            .finish()
    }
}

impl OwnedCharge {
    /// Units charged.
    #[inline]
    pub fn amount(&self) -> u64 {
        self.amount
    }

    /// The group charged (see [`Charge::group`]).
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// See [`Charged::over_high`].
    pub fn over_high(&self) -> bool {
        self.flags.over_high
    }

    /// See [`Charged::forced`].
    pub fn forced(&self) -> bool {
        self.flags.forced
    }

    /// Uncharge now, reporting errors (dropping does the same silently).
    #[inline]
    pub fn uncharge(mut self) -> Result<(), MemoryError> {
        let n = core::mem::take(&mut self.amount);
        uncharge_guard(&self.mem, &self.group, n)
    }

    /// Give up the guard without uncharging: the caller must later call
    /// [`Memory::uncharge_raw`] with the returned group and amount.
    pub fn into_raw(mut self) -> (Group, u64) {
        (self.group.clone(), core::mem::take(&mut self.amount))
    }
}

impl Drop for OwnedCharge {
    fn drop(&mut self) {
        let _ = uncharge_guard(&self.mem, &self.group, self.amount);
    }
}

/// A guard's uncharge: through this CPU's stock, as
/// [`Memory::uncharge_raw`], without the check against what the group
/// holds (the guard charged these units). Nothing for a guard already
/// given up.
#[inline(always)]
fn uncharge_guard(mem: &Memory, group: &Group, n: u64) -> Result<(), MemoryError> {
    if n == 0 {
        return Ok(());
    }
    mem.uncharge_on(group, n, mem.this_cpu(), false)
}

impl Memory {
    /// Charge `amount` units to `group` (or, if it was removed, to its
    /// nearest live ancestor) and return a guard that uncharges on drop.
    /// Over `memory.max` it drains, reclaims, retries and finally fails with
    /// [`MemoryError::OverLimit`] (module docs).
    ///
    /// Cost, served from this CPU's stock (at most `batch` units, the stock
    /// holding enough): a few loads, one uncontended compare-and-swap, one
    /// per-CPU stat add; the guard borrows `self` and `group` and takes no
    /// reference count. Otherwise one atomic add per ancestor on their
    /// `usage` lines. Over the limit: every CPU's stock lock and the
    /// reclaimers' work. Dropping the guard costs an
    /// [`uncharge_raw`](Self::uncharge_raw).
    #[inline(always)]
    pub fn try_charge<'a>(
        &'a self,
        group: &'a Group,
        amount: u64,
    ) -> Result<Charge<'a>, MemoryError> {
        self.try_charge_with(group, amount, OnOom::Fail)
    }

    /// [`try_charge`](Self::try_charge) with a choice of what to do at OOM.
    #[inline(always)]
    pub fn try_charge_with<'a>(
        &'a self,
        group: &'a Group,
        amount: u64,
        on_oom: OnOom,
    ) -> Result<Charge<'a>, MemoryError> {
        self.try_charge_at(group, amount, on_oom, self.this_cpu())
    }

    /// The guarded charge through stock slot `cpu` (`< nr_cpus`): the
    /// stock hit inline, as the raw charge's. (`rstat::testing` lets tests
    /// and models pick the slot.)
    #[inline(always)]
    pub(crate) fn try_charge_at<'a>(
        &'a self,
        group: &'a Group,
        amount: u64,
        on_oom: OnOom,
        cpu: usize,
    ) -> Result<Charge<'a>, MemoryError> {
        if self.consume_stock(group, amount, cpu) {
            return Ok(Charge {
                mem: self,
                group: Cow::Borrowed(group),
                amount,
                flags: Charged::default(),
            });
        }
        self.try_charge_slow(group, amount, on_oom, cpu)
    }

    #[inline(never)]
    fn try_charge_slow<'a>(
        &'a self,
        group: &'a Group,
        amount: u64,
        on_oom: OnOom,
        cpu: usize,
    ) -> Result<Charge<'a>, MemoryError> {
        let (t, flags) = self.charge_target(group, amount, on_oom, cpu)?;
        Ok(Charge {
            mem: self,
            group: t.group,
            amount,
            flags,
        })
    }
}
