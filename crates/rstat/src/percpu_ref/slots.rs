//! Where a [`PercpuRef`](super::PercpuRef)'s per-CPU counts live.
//!
//! Two placements, one access path (`base + cpu * stride`, no branch):
//!
//! - **owned**: a private array of cache-line-padded slots, one per CPU, so
//!   no two CPUs' slots share a line (the default; `nr_cpus` ×
//!   [`CACHE_LINE`](crate::percpu::CACHE_LINE) bytes).
//!   Each also holds the *gate* that restartable sections read on the same
//!   line as the count they add to (see [`OwnedSlot`]);
//! - **arena**: one [`PercpuRefSlot`] allocated by the caller from the
//!   crate's per-CPU [`Arena`](crate::percpu::arena::Arena), so a group's
//!   slot for CPU *c* sits in unit *c* next to the group's other per-CPU
//!   state (8 bytes rounded to the 16-byte granule, per CPU).

use crate::percpu::arena::{PcpuPtr, UNIT_STRIDE};
use crate::percpu::{cpu, CachePadded};
use crate::sync::AtomicU64;

// Restartable sections address owned slots with this constant stride, and
// find the gate at this offset from the count.
const _: () =
    assert!(core::mem::size_of::<CachePadded<OwnedSlot>>() == 1 << crate::percpu::rseq::SLOT_SHIFT);
const _: () = assert!(core::mem::offset_of!(OwnedSlot, gate) == crate::percpu::rseq::GATE_OFFSET);

/// An owned slot: the count, and beside it on the same line this CPU's
/// copy of the ref's mode for restartable sections: nonzero while sections
/// may add to the slot (percpu mode on the `Rseq` path), 0 otherwise.
/// Written only by the ref's lock holder (all gates at once, see
/// `PercpuRef::stop_sections`); read by the sections of the CPU that owns
/// the slot. A section so touches one line of the ref, the one it writes,
/// rather than a shared mode word and its slot.
#[repr(C)]
#[derive(Debug)]
pub(super) struct OwnedSlot {
    slot: PercpuRefSlot,
    gate: AtomicU64,
}

/// One CPU's share of a [`PercpuRef`](super::PercpuRef)'s count.
///
/// Public only so callers can place the slots in their own per-CPU arena
/// (see [`PercpuRef::with_arena_slots`](super::PercpuRef::with_arena_slots));
/// its contents are private to the ref.
#[derive(Debug)]
pub struct PercpuRefSlot(pub(super) AtomicU64);

impl PercpuRefSlot {
    /// A slot holding no references. Cost: none (a constant).
    pub fn new() -> Self {
        PercpuRefSlot(AtomicU64::new(0))
    }
}

impl Default for PercpuRefSlot {
    fn default() -> Self {
        Self::new()
    }
}

/// The most owned slots a ref allocates (Linux's largest `NR_CPUS` is
/// 8192); CPU ids beyond the slot count share slots (`Locked` path) or use
/// the shared count (`Rseq` path), so a larger request never breaks
/// counting.
pub const MAX_SLOTS: usize = 16_384;

/// `nr` slots at `base + cpu * stride`.
pub(super) struct Slots {
    /// Slot 0. For owned slots, derived from the whole boxed slice so it may
    /// be offset to every element; for arena slots, `PcpuPtr::raw(0)`, which
    /// keeps the provenance of the whole chunk.
    base: *const PercpuRefSlot,
    /// The bytes from one CPU's slot to the next: a padded slot's size, or
    /// the arena's unit stride.
    stride: usize,
    nr: usize,
    /// The boxed slice to free on drop, for owned slots. Kept as a raw
    /// pointer (from `Box::leak`) rather than a `Box`, so moving the ref does
    /// not retag a unique pointer under `base`.
    owned: Option<*mut [CachePadded<OwnedSlot>]>,
}

// SAFETY: `Slots` hands out only `&AtomicU64`s (which are `Sync`) into memory
// that it owns (owned) or that the constructor's caller keeps alive and
// unaliased for its lifetime (arena); nothing in it is tied to a thread.
unsafe impl Send for Slots {}
// SAFETY: as above; every access through `&Slots` is an atomic operation.
unsafe impl Sync for Slots {}

impl Slots {
    /// `nr` (clamped to `1..=MAX_SLOTS`) fresh, padded slots. Cost: one
    /// allocation.
    pub(super) fn owned(nr: usize) -> Self {
        let nr = nr.clamp(1, MAX_SLOTS);
        let boxed: Box<[CachePadded<OwnedSlot>]> = (0..nr)
            .map(|_| {
                CachePadded::new(OwnedSlot {
                    slot: PercpuRefSlot::new(),
                    gate: AtomicU64::new(0),
                })
            })
            .collect();
        let owned: *mut [CachePadded<OwnedSlot>] = Box::leak(boxed);
        Slots {
            // `repr(C)` (`CachePadded`'s and `OwnedSlot`'s): the count is at
            // offset 0 of each element.
            base: owned as *const PercpuRefSlot,
            stride: core::mem::size_of::<CachePadded<OwnedSlot>>(),
            nr,
            owned: Some(owned),
        }
    }

    /// The caller's per-CPU slot, one per unit of its arena.
    ///
    /// # Safety
    /// `slots` is live (allocated, not freed, its arena alive) for as long as
    /// the returned value, has `len() >= 1`, comes from an arena with at
    /// least `nr.max(1)` units, and is used by nothing else meanwhile.
    pub(super) unsafe fn arena(slots: PcpuPtr<PercpuRefSlot>, nr: usize) -> Self {
        Slots {
            base: slots.raw(0),
            stride: UNIT_STRIDE,
            nr: nr.max(1),
            owned: None,
        }
    }

    /// Number of slots (CPUs).
    #[inline(always)]
    pub(super) fn nr(&self) -> usize {
        self.nr
    }

    /// Slot 0's address, for restartable sections (which compute
    /// `base + (cpu << rseq::SLOT_SHIFT)` themselves; owned slots only).
    #[inline(always)]
    #[cfg_attr(any(rstat_loom, miri), allow(dead_code))] // sections are simulated
    pub(super) fn base_bytes(&self) -> *const u8 {
        self.base.cast()
    }

    /// Whether these are owned (padded, `1 << rseq::SLOT_SHIFT` bytes
    /// apart) rather than arena slots.
    pub(super) fn is_owned(&self) -> bool {
        self.owned.is_some()
    }

    /// The slot for `cpu`, folded into range. Cost: a compare and a
    /// multiply-add.
    #[inline(always)]
    pub(super) fn slot(&self, cpu: usize) -> &AtomicU64 {
        let cpu = cpu::fold(cpu, self.nr);
        // SAFETY: `cpu < nr`. Owned: `base` points at element 0 of a live
        // boxed slice of `nr` elements `stride` bytes apart, so the offset
        // stays inside it. Arena: the constructor's caller guarantees a live
        // allocation in at least `nr` units `UNIT_STRIDE` apart. Either way the
        // value there is an initialised `PercpuRefSlot`, and we only take a
        // shared reference to its atomic.
        unsafe {
            &(*self
                .base
                .cast::<u8>()
                .add(cpu * self.stride)
                .cast::<PercpuRefSlot>())
            .0
        }
    }
}

impl Slots {
    /// Owned slot `cpu`'s gate (`cpu < nr`); `None` for arena slots, which
    /// have none (their refs take the `Locked` path).
    #[inline(always)]
    pub(super) fn gate(&self, cpu: usize) -> Option<&AtomicU64> {
        let owned = self.owned?;
        let cpu = cpu::fold(cpu, self.nr);
        // SAFETY: `owned` is the live boxed slice of `nr` elements this
        // `Slots` frees only on drop; `cpu < nr`; the element holds only
        // atomics (and padding), so a shared reference to it may coexist
        // with other threads' atomic accesses.
        let slot: &CachePadded<OwnedSlot> =
            unsafe { &*owned.cast::<CachePadded<OwnedSlot>>().add(cpu) };
        Some(&slot.gate)
    }

    /// Set every gate (owned slots; nothing for arena slots) to `open`,
    /// with `order`. Only the ref's lock holder calls this.
    pub(super) fn set_gates(&self, open: bool, order: crate::sync::Ordering) {
        for c in 0..self.nr {
            if let Some(g) = self.gate(c) {
                g.store(u64::from(open), order);
            }
        }
    }

    /// Whether slot 0's gate is open (all gates are, or none: they change
    /// together under the ref's lock). Relaxed: for the lock holder.
    pub(super) fn gates_open(&self) -> bool {
        self.gate(0)
            .is_some_and(|g| g.load(crate::sync::Ordering::Relaxed) != 0)
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        if let Some(owned) = self.owned.take() {
            // SAFETY: `owned` came from `Box::leak` in `Slots::owned` and is
            // freed only here; `&mut self` means no slot reference is alive.
            drop(unsafe { Box::from_raw(owned) });
        }
    }
}
