//! The object layout: the trailer after each object that records its
//! owner handle, the overhead it costs and the inner layout that makes
//! room for it; and the controller settings and drift bound that follow
//! from charging bytes ([`heap_config`], [`drift_bound`]).

use std::alloc::Layout;

use crate::memory::config::{MemoryConfig, BYTES_BATCH};
use crate::memory::handle::Memory;
use crate::memory::objcg::ObjCg;

/// Bytes of the trailer after each object.
pub const TRAILER: usize = 8;

/// The [`MemoryConfig`] to register a controller fed by the allocator
/// with: bytes as the unit, a batch of 256 KiB (the kernel's 64 pages).
/// With the default batch of 64 units, most allocations would miss the
/// stock.
pub fn heap_config() -> MemoryConfig {
    MemoryConfig::bytes()
}

/// The batch of [`heap_config`]: the kernel's batch of
/// [`MEMCG_CHARGE_BATCH`](crate::memory::MEMCG_CHARGE_BATCH) pages, in bytes of 4 KiB pages (256 KiB).
pub const HEAP_BATCH: u64 = BYTES_BATCH;

/// The bytes the allocator adds to an object of `size` bytes (any
/// alignment): its trailer and the padding before it, 8 to 15.
#[inline(always)]
pub const fn overhead(size: usize) -> usize {
    size.next_multiple_of(TRAILER) - size + TRAILER
}

/// The documented drift bound: how far, at a quiescent point, a group's
/// `memory.current` may exceed its live heap bytes (the units in the
/// stocks): one batch per CPU.
pub fn drift_bound(mem: &Memory) -> u64 {
    mem.config().batch.saturating_mul(mem.inner.nr_cpus as u64)
}

/// The inner layout for `layout` and the overhead; `None` if it does not
/// fit `isize`.
#[inline(always)]
pub(super) fn inner_layout(layout: Layout) -> Option<(Layout, usize)> {
    let body = layout.size().checked_next_multiple_of(TRAILER)?;
    let total = body.checked_add(TRAILER)?;
    let l = Layout::from_size_align(total, layout.align().max(TRAILER)).ok()?;
    Some((l, total - layout.size()))
}

/// The trailer of the object at `ptr` of `size` bytes.
///
/// # Safety
/// `ptr` came from [`Accounted`](super::Accounted) for a layout of `size`
/// bytes.
#[inline(always)]
pub(super) unsafe fn trailer(ptr: *mut u8, size: usize) -> *mut *mut ObjCg {
    // SAFETY: the inner block has `round_up(size, 8) + 8` bytes, aligned to
    // at least 8; the trailer is its last 8, aligned.
    unsafe { ptr.add(size.next_multiple_of(TRAILER)).cast() }
}
