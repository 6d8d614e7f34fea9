//! Hooks for tests, models and benchmarks: what they need to control that
//! a program must not (the CPU slot an update or a charge lands on, an
//! engine without the `cpu` controller, a bare restartable section to
//! measure the update path against, a clock the test moves). Not part of the API: hidden from the
//! documentation, and free to change. Each hook is an extension trait, so
//! a test says `use rstat::testing::*;` and the types' own pages show only
//! what a program uses.

use crate::controller::ControllerHandle;
use crate::engine::Builder;
use crate::error::Result;
use crate::group::Group;
use crate::memory::{Charge, Charged, Memory, MemoryError, OnOom};
use crate::stat::pace::{as_ns, Clock, ManualTime};

use std::sync::Arc;
use std::time::Duration;

pub use crate::percpu::rseq::BareSectionCounter;

/// Placement hooks of a [`ControllerHandle`].
pub trait ControllerHandleExt {
    /// As [`ControllerHandle::add`], but on an explicit CPU slot (folded
    /// into range), with a locked add (a simulated section under loom and
    /// Miri on the rseq path). On the [`Rseq`](crate::UpdatePath::Rseq)
    /// update path, do not race it with `add`s of threads running on that
    /// CPU (a restartable section's add is not atomic against another
    /// CPU's); build the engine with the locked path for such mixes.
    fn add_on_cpu(&self, group: &Group, cpu: usize, item: usize, delta: i64) -> Result<()>;

    /// The `Threshold` policy's pending-update count of `group`: the units
    /// (one [`UPDATE_BATCH`](crate::controller::UPDATE_BATCH) per batch
    /// boundary crossed, in each item's declared unit) folded from its
    /// per-CPU counters and not yet in its totals. Cost: the lookup of the
    /// group's state, then one load per CPU.
    fn pending_updates(&self, group: &Group) -> Result<u64>;
}

impl ControllerHandleExt for ControllerHandle {
    fn add_on_cpu(&self, group: &Group, cpu: usize, item: usize, delta: i64) -> Result<()> {
        self.add_on_slot(group, cpu, item, delta)
    }

    fn pending_updates(&self, group: &Group) -> Result<u64> {
        ControllerHandle::pending_updates(self, group)
    }
}

/// Engine hooks of a [`Builder`].
pub trait BuilderExt {
    /// Build with (`true`, the default) or without the built-in `cpu`
    /// controller (minimal models: one controller, one item).
    fn cpu_controller(self, on: bool) -> Builder;

    /// Stamp flushes, and judge the age of stamps in paced `Threshold`
    /// reads, by `clock` instead of the monotonic clock (the periodic
    /// flusher still sleeps by the monotonic clock).
    fn manual_clock(self, clock: &ManualClock) -> Builder;
}

impl BuilderExt for Builder {
    fn cpu_controller(self, on: bool) -> Builder {
        self.with_cpu_controller(on)
    }

    fn manual_clock(self, clock: &ManualClock) -> Builder {
        self.with_clock(Clock::Manual(Arc::clone(&clock.0)))
    }
}

/// A clock that moves only when the test moves it, for an engine built
/// with [`BuilderExt::manual_clock`]: it starts at 0, and whatever a
/// thread did before moving it to t happens before any flush that reads t
/// or later. Move it forward only. Cheap to clone (shares the time).
#[derive(Clone)]
pub struct ManualClock(Arc<ManualTime>);

impl ManualClock {
    /// A clock at 0.
    pub fn new() -> Self {
        ManualClock(Arc::new(ManualTime::new(0)))
    }

    /// The time shown.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.0.now())
    }

    /// Show `t`.
    pub fn set(&self, t: Duration) {
        self.0.set(as_ns(t));
    }

    /// Move the clock `d` forward (one thread moves a clock at a time).
    pub fn advance(&self, d: Duration) {
        self.0.set(self.0.now().saturating_add(as_ns(d)));
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

/// Placement hooks of the memory controller: charges and uncharges through
/// an explicit CPU's stock slot (folded into range), as if the calling
/// thread ran there. Each is its placement-free namesake otherwise,
/// with the same costs and errors.
pub trait MemoryExt {
    /// As [`Memory::try_charge_with`], through stock slot `cpu`.
    fn try_charge_on_cpu<'a>(
        &'a self,
        group: &'a Group,
        amount: u64,
        on_oom: OnOom,
        cpu: usize,
    ) -> Result<Charge<'a>, MemoryError>;

    /// As [`Memory::charge_raw`], through stock slot `cpu`.
    fn charge_raw_on_cpu(
        &self,
        group: &Group,
        amount: u64,
        on_oom: OnOom,
        cpu: usize,
    ) -> Result<Charged, MemoryError>;

    /// As [`Memory::uncharge_raw`], through stock slot `cpu`.
    fn uncharge_raw_on_cpu(
        &self,
        group: &Group,
        amount: u64,
        cpu: usize,
    ) -> Result<(), MemoryError>;
}

impl MemoryExt for Memory {
    fn try_charge_on_cpu<'a>(
        &'a self,
        group: &'a Group,
        amount: u64,
        on_oom: OnOom,
        cpu: usize,
    ) -> Result<Charge<'a>, MemoryError> {
        self.try_charge_at(group, amount, on_oom, self.fold_cpu(cpu))
    }

    fn charge_raw_on_cpu(
        &self,
        group: &Group,
        amount: u64,
        on_oom: OnOom,
        cpu: usize,
    ) -> Result<Charged, MemoryError> {
        self.charge_raw_at(group, amount, on_oom, self.fold_cpu(cpu))
    }

    fn uncharge_raw_on_cpu(
        &self,
        group: &Group,
        amount: u64,
        cpu: usize,
    ) -> Result<(), MemoryError> {
        self.uncharge_on(group, amount, self.fold_cpu(cpu), true)
    }
}

/// How many times the calling thread has read its own CPU clock
/// (`CLOCK_THREAD_CPUTIME_ID`) for attribution: what a change of the
/// current group is meant not to pay for each time.
pub fn thread_clock_reads() -> u64 {
    crate::attach::own_clock_reads()
}

/// Where the calling thread's CPU time stands at its last reconciliation
/// (see [`this_thread_cpu_ledger`]).
#[derive(Clone, Copy, Debug)]
pub struct CpuLedger {
    /// The thread's CPU clock (ns) when its record was taken (its first
    /// enter, or its first after it gave the record back).
    pub start_ns: u64,
    /// The thread's CPU clock (ns) at its last reconciliation.
    pub reconciled_ns: u64,
    /// µs apportioned to time in no group since `start_ns`.
    pub unattributed_us: u64,
}

/// The calling thread's [`CpuLedger`], or `None` if it has no record.
pub fn this_thread_cpu_ledger() -> Option<CpuLedger> {
    let (start_ns, reconciled_ns, unattributed_us) = crate::attach::this_thread_ledger()?;
    Some(CpuLedger {
        start_ns,
        reconciled_ns,
        unattributed_us,
    })
}
