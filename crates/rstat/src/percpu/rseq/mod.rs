//! Restartable per-CPU critical sections: the userspace stand-in for the
//! kernel's "preemption disabled".
//!
//! The kernel updates a per-CPU counter with one unlocked `add` because
//! nothing can run on that CPU between reading the counter's address and
//! writing it. Userspace gets the same guarantee from *restartable
//! sequences* (rseq): a thread announces a critical section to the kernel
//! (a start address, a length, an abort address, stored in its rseq area),
//! and if the thread is preempted, migrated or signalled while its
//! instruction pointer is inside, the kernel resumes it at the abort address
//! instead. A section whose last instruction is its only store (the
//! *commit*) therefore either takes effect entirely on the CPU whose id it
//! read, or not at all, and is retried. No lock prefix is needed, so the
//! add costs what an ordinary add costs, and nothing after it waits for a
//! store buffer to drain.
//!
//! The other half is how a remote CPU can stop the sections: a thread
//! switching a per-CPU structure to another mode (a [`PercpuRef`] kill)
//! first stores the new mode, then calls [`membarrier`]:
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ)` interrupts every CPU
//! currently running a thread of this process, aborting any critical section
//! in progress, with a full memory barrier there, and returns after all of
//! them did. Every section that committed before is then visible to the
//! caller; every section that had not is restarted and reads the new mode.
//! That is the grace period of the kernel's percpu_ref, for the price of one
//! system call, which costs more the more CPUs it has to interrupt (those
//! running threads of this process) and which recent kernels serialise
//! machine-wide: cheap next to a grace period, but not something to make
//! at a high rate (hence `percpu_ref`'s `LOCKED_SLOTS`).
//!
//! Requirements, checked once per process by [`available`]: x86-64 Linux,
//! glibc's rseq area registered (see [`cpu`](super::cpu)), and the
//! `membarrier` rseq commands (Linux 5.10). `RSTAT_PERCPU_REF=locked` turns
//! the fast path off, for comparison; callers then use locked per-CPU
//! read-modify-writes instead.
//!
//! This file holds detection, the `membarrier` call and the safe-contract
//! wrappers every caller goes through; the sections' instructions are in
//! `linux_x86_64` (elsewhere a stub that is never available stands in), and
//! `tests` runs them on this machine.
//!
//! [`PercpuRef`]: crate::percpu_ref::PercpuRef

use std::sync::atomic::{AtomicU8, Ordering};

const UNKNOWN: u8 = 0;
const YES: u8 = 1;
const NO: u8 = 2;
static AVAILABLE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Whether restartable per-CPU sections work in this process; if so, the
/// offset of this thread's `cpu_id` from the thread pointer (the same for
/// every thread). Detected on first call (which also registers the process
/// for `membarrier`'s rseq command) and fixed from then on.
pub(crate) fn available() -> Option<isize> {
    match AVAILABLE.load(Ordering::Relaxed) {
        YES => super::cpu::rseq_cpu_id_offset(),
        NO => None,
        _ => detect(),
    }
}

#[cold]
fn detect() -> Option<isize> {
    let off = if std::env::var("RSTAT_PERCPU_REF").as_deref() == Ok("locked") {
        None
    } else {
        imp::supported()
    };
    // Relaxed: idempotent; every thread computes the same answer (a second
    // registration of membarrier is harmless).
    AVAILABLE.store(if off.is_some() { YES } else { NO }, Ordering::Relaxed);
    off
}

/// Abort every restartable section running on another CPU of this process,
/// with a full memory barrier on each of those CPUs, and return once all of
/// them have (see the module documentation). Only meaningful once
/// [`available`] returned `Some`.
///
/// # Errors
/// The system call's error number: a seccomp filter installed after
/// detection, `ENOMEM` (the kernel allocates a CPU mask per call on some
/// configurations), or a process restored without its registration.
pub(crate) fn membarrier() -> Result<(), i32> {
    imp::membarrier()
}

/// A full memory barrier on every CPU running a thread of this process,
/// returning once all of them have run it, without aborting the
/// restartable sections running there: `MEMBARRIER_CMD_PRIVATE_EXPEDITED`
/// where the kernel offers it (registered at detection), else the rseq
/// command of [`membarrier`], which is such a barrier too. What a
/// store-buffering pair needs from the heavy side (the stat flush's
/// asymmetric fence), and on some kernels far cheaper than the rseq
/// command while other threads of the process run sections: that one
/// also makes each interrupted thread re-enter its section through the
/// kernel. Only meaningful once [`available`] returned `Some`.
///
/// # Errors
/// As [`membarrier`].
#[cfg_attr(any(rstat_loom, miri), allow(dead_code))]
pub(crate) fn barrier() -> Result<(), i32> {
    imp::barrier()
}

/// log2 of the distance between two CPUs' slots for [`add_on_this_cpu`]:
/// one [`CACHE_LINE`](super::CACHE_LINE), the stride of an array of
/// [`CachePadded`](super::CachePadded) slots (128 bytes on x86-64, two
/// 64-byte lines, so no two CPUs' slots share a line or an adjacent-line
/// prefetch pair). A constant, so the section shifts by an immediate.
pub(crate) const SLOT_SHIFT: u32 = super::CACHE_LINE.trailing_zeros();

/// Where [`add_on_this_cpu`] finds a slot's gate: this many bytes after
/// its count, on the same line.
pub(crate) const GATE_OFFSET: usize = 8;

/// Add `delta` (wrapping) to the `u64` at `base + (cpu << SLOT_SHIFT)`,
/// where `cpu` is the id of the CPU this thread runs on, in one restartable
/// section that first checks `cpu < nr` and that the slot's *gate* (the
/// `u64` [`GATE_OFFSET`] bytes after it) is not 0. Returns whether the add
/// was done; `false` (nothing written) when `cpu >= nr`, the gate is 0 or
/// this thread has no rseq area. The gates are the switch: storing 0 to
/// every one and then calling [`membarrier`] stops every section.
///
/// Cost: one store (arming the section), one load of the CPU id, one
/// compare with `nr` (a register), one load of the gate, one unlocked add
/// on the gate's line; no lock prefix, no fence.
///
/// # Safety
/// `cpu_id_off` comes from [`available`]; for every `cpu < nr`,
/// `base + (cpu << SLOT_SHIFT)` is an aligned, live `u64` (an `AtomicU64`)
/// followed by its gate, written only by such sections, or by others while
/// no section can pass the check (0 was stored to every gate and
/// [`membarrier`] returned since).
#[inline(always)]
#[cfg_attr(any(rstat_loom, miri), allow(dead_code))] // the model simulates it
pub(crate) unsafe fn add_on_this_cpu(
    cpu_id_off: isize,
    base: *const u8,
    nr: usize,
    delta: u64,
) -> bool {
    // SAFETY: forwarded.
    unsafe { imp::add_on_this_cpu(cpu_id_off, base, nr, delta) }
}

/// Add `delta` (wrapping) to the `i64` at `base + cpu * UNIT_STRIDE`,
/// where `cpu` is the id of the CPU this thread runs on, in one restartable
/// section that first checks `cpu < limit`; return `(cpu * UNIT_STRIDE, new
/// value, old ^ new)` (the bits the add changed: what a caller testing for
/// a boundary crossing wants, in one register; `old` is `new - delta`).
/// This is the kernel's `this_cpu_add` for stat slots
/// in the per-CPU arena (whose units are [`UNIT_STRIDE`] bytes apart);
/// the unit offset it returns addresses the caller's other per-CPU data of
/// the same CPU without computing it again. Unlike [`add_on_this_cpu`]'s, the
/// limit is fixed for the slots' life (a css's `section_limit`), so it
/// comes by value, in a register.
///
/// A thread the check refuses (it has no rseq area, so its CPU id reads
/// as `u32::MAX`) adds with one locked RMW to slot `limit` instead, which
/// no section writes, and gets `limit * UNIT_STRIDE` back: every call adds,
/// and the caller takes no branch to tell the two apart.
///
/// Cost: one store (arming the section), one load of the CPU id, one
/// compare, two shifts and an add, one load and one store of the slot;
/// no lock prefix, no fence. The store can sit in this CPU's store buffer
/// after the section: callers that need it ordered before a later load
/// pair a compiler fence here with [`membarrier`] on the reading side (see
/// `engine::backlog`).
///
/// # Safety
/// `cpu_id_off` comes from [`available`]; for every `cpu < limit`,
/// `base + cpu * UNIT_STRIDE` is an aligned, live `i64` (an `AtomicI64`)
/// that no other CPU writes while sections can pass the check; so is
/// `base + limit * UNIT_STRIDE`, written only by atomic RMWs.
///
/// [`UNIT_STRIDE`]: crate::percpu::arena::UNIT_STRIDE
#[inline(always)]
#[cfg_attr(any(rstat_loom, miri), allow(dead_code))]
pub(crate) unsafe fn add_fetch_on_this_cpu(
    cpu_id_off: isize,
    base: *const u8,
    limit: u32,
    delta: i64,
) -> (usize, i64, i64) {
    // SAFETY: forwarded.
    unsafe { imp::add_fetch_on_this_cpu(cpu_id_off, base, limit, delta) }
}

/// A bare per-CPU counter on [`add_fetch_on_this_cpu`] and nothing else:
/// one slot per possible CPU id and one past them (for threads without an
/// rseq area), in a per-CPU [`Arena`] of its own as the engine's slots
/// are, and no boundary test, on-list flag or handle around the section.
/// It is the floor under every rstat update on the rseq path; the lab's
/// update benchmark runs it beside them, so a report can tell the
/// section's own cost (above all the chain through one slot: each add
/// loads what the last one stored) from the instructions an update adds.
/// Not part of the API.
///
/// [`Arena`]: crate::percpu::arena::Arena
#[doc(hidden)]
pub struct BareSectionCounter {
    /// Owns `slots`' memory (`AtomicI64` needs no drop, so the arena's
    /// drop, which returns its chunks, is the whole cleanup).
    _arena: crate::percpu::arena::Arena,
    slots: crate::percpu::arena::PcpuPtr<core::sync::atomic::AtomicI64>,
    limit: u32,
    off: isize,
}

// SAFETY: the arena is only touched at construction and drop (`&mut`);
// the slots are written only by sections (each on its own CPU's slot) and
// locked RMWs, and read with atomic loads.
unsafe impl Send for BareSectionCounter {}
// SAFETY: as above.
unsafe impl Sync for BareSectionCounter {}

impl BareSectionCounter {
    /// A counter at 0, or `None` where restartable sections are not
    /// available (see [`available`]) or the slots cannot be allocated.
    pub fn new() -> Option<Self> {
        Self::with_limit(u32::try_from(super::cpu::possible_cpus()).ok()?)
    }

    /// A counter whose sections run on CPUs below `limit` (the others add
    /// to slot `limit` with a locked add): `new` takes every possible CPU;
    /// the tests take fewer, to reach the locked slot.
    fn with_limit(limit: u32) -> Option<Self> {
        let off = available()?;
        let mut arena = crate::percpu::arena::Arena::new(limit as usize + 1);
        let slots = arena
            .alloc(1, |_, _| core::sync::atomic::AtomicI64::new(0))
            .ok()?;
        Some(BareSectionCounter {
            _arena: arena,
            slots,
            limit,
            off,
        })
    }

    /// Add `delta` on this CPU's slot; return the slot's new value.
    #[inline(always)]
    pub fn add(&self, delta: i64) -> i64 {
        // SAFETY: `off` came from `available`; the arena has `limit + 1`
        // units, so slots `0..=limit` are live, aligned `i64`s
        // `UNIT_STRIDE` bytes apart; slots below `limit` are written only by
        // sections (this type offers no other writer), slot `limit` only by
        // the stub's locked add.
        unsafe { add_fetch_on_this_cpu(self.off, self.slots.raw(0).cast(), self.limit, delta).1 }
    }

    /// The sum of every slot. Exact once the adding threads are joined (a
    /// section's store is plain and may still sit in its CPU's store
    /// buffer, so a sum taken while adds run may miss recent ones).
    pub fn sum(&self) -> i64 {
        (0..=self.limit as usize)
            // SAFETY: the arena has `limit + 1` units and lives with
            // `self`; the atomic load does not race the sections' plain
            // stores in Rust's sense (they are inside `asm!`), and after
            // they returned it sees them.
            .map(|c| unsafe { self.slots.elem(c, 0) }.load(Ordering::Relaxed))
            .fold(0i64, i64::wrapping_add)
    }
}

#[cfg(all(
    target_os = "linux",
    target_arch = "x86_64",
    not(miri),
    not(rstat_loom)
))]
mod linux_x86_64;
#[cfg(all(
    target_os = "linux",
    target_arch = "x86_64",
    not(miri),
    not(rstat_loom)
))]
use linux_x86_64 as imp;

#[cfg(not(all(
    target_os = "linux",
    target_arch = "x86_64",
    not(miri),
    not(rstat_loom)
)))]
mod imp {
    pub(super) fn supported() -> Option<isize> {
        None
    }

    pub(super) fn membarrier() -> Result<(), i32> {
        Ok(())
    }

    #[cfg_attr(any(rstat_loom, miri), allow(dead_code))]
    pub(super) fn barrier() -> Result<(), i32> {
        Ok(())
    }

    /// Never called: `supported` is `None` here.
    #[inline(always)]
    #[cfg_attr(any(rstat_loom, miri), allow(dead_code))]
    pub(super) unsafe fn add_fetch_on_this_cpu(
        _cpu_id_off: isize,
        _base: *const u8,
        _limit: u32,
        _delta: i64,
    ) -> (usize, i64, i64) {
        unreachable!("restartable sections are never available here")
    }

    /// Never called: `supported` is `None` here.
    #[inline(always)]
    #[cfg_attr(any(rstat_loom, miri), allow(dead_code))]
    pub(super) unsafe fn add_on_this_cpu(
        _cpu_id_off: isize,
        _base: *const u8,
        _nr: usize,
        _delta: u64,
    ) -> bool {
        false
    }
}

#[cfg(all(test, not(rstat_loom)))]
mod tests;
