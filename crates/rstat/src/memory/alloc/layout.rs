//! The object layout: the owner word each object carries (a header
//! before it, or for alignments above 8 a trailer after it), the overhead
//! it costs and the inner layout that makes room for it; and the
//! controller settings and drift bound that follow from charging bytes
//! ([`heap_config`], [`drift_bound`]).

use std::alloc::Layout;

use crate::memory::config::{MemoryConfig, BYTES_BATCH};
use crate::memory::handle::Memory;
use crate::memory::objcg::ObjCg;

/// Bytes of the owner word each object carries.
pub const OWNER_WORD: usize = 8;

/// The owner word's former name, from when it always followed the object.
#[deprecated(note = "the owner word is a header for alignments up to 8: use `OWNER_WORD`")]
pub const TRAILER: usize = OWNER_WORD;

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
/// alignment): its owner word and the padding that rounds the object up
/// to 8 bytes, 8 to 15 in all.
#[inline(always)]
pub const fn overhead(size: usize) -> usize {
    size.next_multiple_of(OWNER_WORD) - size + OWNER_WORD
}

/// The documented drift bound: how far, at a quiescent point, a group's
/// `memory.current` may exceed its live heap bytes (the units in the
/// stocks): one batch per CPU.
pub fn drift_bound(mem: &Memory) -> u64 {
    mem.config().batch.saturating_mul(mem.inner.nr_cpus as u64)
}

/// The inner layout for `layout` and the overhead; `None` if it does not
/// fit `isize`. The same size, `round_up(size, 8) + 8`, whichever end the
/// owner word takes, so [`overhead`] holds for every alignment.
#[inline(always)]
pub(super) fn inner_layout(layout: Layout) -> Option<(Layout, usize)> {
    let body = layout.size().checked_next_multiple_of(OWNER_WORD)?;
    let total = body.checked_add(OWNER_WORD)?;
    let l = Layout::from_size_align(total, layout.align().max(OWNER_WORD)).ok()?;
    Some((l, total - layout.size()))
}

/// Whether objects of `layout` carry their owner word as a header (the 8
/// bytes before the object, at the inner block's start) rather than a
/// trailer (the 8 bytes after the object rounded up to 8, at the block's
/// end). A header shares the line of the object's first bytes, which the
/// program and the inner allocator's free (its free-list link) touch
/// anyway, so a free of an object that went cold in another thread's cache
/// misses once, not twice; a trailer sits one object's length away, on a
/// line of its own. Alignments above 8 keep the trailer: a header would
/// have to be a whole alignment long to keep the object aligned.
#[inline(always)]
pub(super) const fn has_header(layout: Layout) -> bool {
    layout.align() <= OWNER_WORD
}

/// Where the object and its owner word start in the inner block of an
/// object of `layout`, in bytes: `(8, 0)` with a header, `(0, round_up(size,
/// 8))` with a trailer. Everything below derives from these two offsets.
#[inline(always)]
const fn offsets(layout: Layout) -> (usize, usize) {
    if has_header(layout) {
        (OWNER_WORD, 0)
    } else {
        (0, layout.size().next_multiple_of(OWNER_WORD))
    }
}

/// The object of the inner block `block` allocated for `layout`.
///
/// # Safety
/// `block` is a block of `inner_layout(layout)`.
#[inline(always)]
pub(super) unsafe fn object_of(block: *mut u8, layout: Layout) -> *mut u8 {
    // SAFETY: the block has `round_up(size, 8) + 8` bytes, so the object's
    // offset (0 or 8) is inside it.
    unsafe { block.add(offsets(layout).0) }
}

/// The inner block of the object at `ptr` of `layout`.
///
/// # Safety
/// `ptr` came from [`Accounted`](super::Accounted) for `layout`.
#[inline(always)]
pub(super) unsafe fn block_of(ptr: *mut u8, layout: Layout) -> *mut u8 {
    // SAFETY: `ptr` is the object's offset into its block (`object_of`).
    unsafe { ptr.sub(offsets(layout).0) }
}

/// The owner word of the object of `layout` in the inner block `block`.
///
/// # Safety
/// `block` is a block of `inner_layout(layout)`.
#[inline(always)]
pub(super) unsafe fn owner_word(block: *mut u8, layout: Layout) -> *mut *mut ObjCg {
    // SAFETY: the block has `round_up(size, 8) + 8` bytes, aligned to at
    // least 8: a header is its first 8, a trailer its last 8, aligned.
    unsafe { block.add(offsets(layout).1).cast() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where each piece lands, for every alignment up to a page and sizes
    /// around the 8-byte rounding: the object aligned and inside the
    /// block, the owner word aligned, inside the block and clear of the
    /// object, and for alignments up to 8 right before it; and the block
    /// found again from the object. On real blocks, so Miri checks every
    /// offset stays inside its allocation.
    #[test]
    fn the_owner_word_and_the_object_fit_the_inner_block() {
        for align in (0..13).map(|k| 1usize << k) {
            for size in [1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 4095, 4096, 4097] {
                let layout = Layout::from_size_align(size, align).unwrap();
                let (il, ovh) = inner_layout(layout).unwrap();
                assert_eq!(il.size(), size + ovh);
                assert_eq!(ovh, overhead(size));
                // SAFETY: `il` has a non-zero size.
                let block = unsafe { std::alloc::alloc(il) };
                assert!(!block.is_null(), "{il:?}: out of memory");
                let base = block as usize;
                // SAFETY: `block` is a block of `il`; the functions only
                // offset within it.
                let (obj, owner) = unsafe { (object_of(block, layout), owner_word(block, layout)) };
                // SAFETY: as above.
                let back = unsafe { block_of(obj, layout) };
                // SAFETY: allocated above with `il`.
                unsafe { std::alloc::dealloc(block, il) };
                let (obj, owner) = (obj as usize, owner as usize);
                assert_eq!(obj % align, 0, "{layout:?}: object aligned");
                assert_eq!(owner % 8, 0, "{layout:?}: owner word aligned");
                assert!(obj + size <= base + il.size(), "{layout:?}: object inside");
                assert!(owner + 8 <= base + il.size(), "{layout:?}: owner inside");
                assert!(
                    owner + 8 <= obj || owner >= obj + size,
                    "{layout:?}: owner clear of the object"
                );
                assert_eq!(back as usize, base, "{layout:?}: the block back");
                if align <= 8 {
                    assert_eq!(
                        owner + 8,
                        obj,
                        "{layout:?}: a header right before the object"
                    );
                }
            }
        }
    }
}
