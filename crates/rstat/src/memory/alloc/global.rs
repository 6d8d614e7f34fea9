//! The `GlobalAlloc` impl of [`Accounted`]: each block gets its owner
//! word (`layout`), is charged after the inner allocator returned it and
//! uncharged before it goes back (`charge`), and `realloc` charges or
//! uncharges only the difference.

use std::alloc::{GlobalAlloc, Layout};
use std::ptr::NonNull;

use super::accounted::Accounted;
use super::layout::{block_of, inner_layout, object_of, owner_word};
// std's, as the allocator's atomics are (see `accounted`).
use std::sync::atomic::Ordering;

// SAFETY: every block handed out comes from `inner` with a layout at least
// as large and as aligned as the caller's (`inner_layout`), the object at
// `object_of` the inner block; `dealloc` and `realloc` recompute the same
// inner layout and block (`block_of`) from the caller's layout, as
// `GlobalAlloc` requires callers to pass the layout the block was
// allocated with. The owner word lies outside the caller's bytes, inside
// the inner block. Nothing here unwinds (no panic
// on any path: the charge path's errors are values).
unsafe impl<A: GlobalAlloc> GlobalAlloc for Accounted<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract; `alloc_with` is given `inner.alloc`.
        unsafe { self.alloc_with(layout, |l| self.inner.alloc(l)) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe { self.alloc_with(layout, |l| self.inner.alloc_zeroed(l)) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some((il, overhead)) = inner_layout(layout) else {
            // Cannot happen: the same layout fitted when allocated.
            return;
        };

        // SAFETY: `ptr` came from `alloc_with` for `layout`.
        let block = unsafe { block_of(ptr, layout) };
        // SAFETY: `block` is the object's inner block, for `layout`.
        let owner = unsafe { *owner_word(block, layout) };
        match NonNull::new(owner) {
            Some(o) => {
                if !self.uncharge_fast(o, layout.size(), overhead) {
                    self.uncharge(o, layout.size(), overhead);
                }
            }
            None => self.count_pass_free(il.size()),
        }
        // SAFETY: allocated by `inner` with `il` (module invariant).
        unsafe { self.inner.dealloc(block, il) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Some((il, old_ovh)) = inner_layout(layout) else {
            return core::ptr::null_mut();
        };
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return core::ptr::null_mut();
        };
        let Some((new_il, new_ovh)) = inner_layout(new_layout) else {
            return core::ptr::null_mut();
        };

        // SAFETY: `ptr` came from us for `layout`.
        let block = unsafe { block_of(ptr, layout) };
        // SAFETY: `block` is the object's inner block, for `layout`.
        let owner = unsafe { *owner_word(block, layout) };
        let old = (layout.size(), old_ovh);
        let new = (new_size, new_ovh);
        let Some(o) = NonNull::new(owner) else {
            // SAFETY: `ptr` was allocated by `inner` with `il`; the new
            // size is non-zero and fits (checked by `inner_layout`).
            let p = unsafe { self.inner.realloc(block, il, new_il.size()) };
            if p.is_null() {
                return p;
            }
            // SAFETY: `p` is a block of `new_il`, for `new_layout`.
            unsafe { *owner_word(p, new_layout) = core::ptr::null_mut() };
            // Relaxed: counts (see `pass_through`).
            self.pass_bytes_out
                .fetch_add(il.size() as u64, Ordering::Relaxed);
            self.pass_bytes_in
                .fetch_add(new_il.size() as u64, Ordering::Relaxed);
            // SAFETY: as above.
            return unsafe { object_of(p, new_layout) };
        };
        let grow = new.0 + new.1 > old.0 + old.1;
        if grow && !self.resize(o, old, new) {
            return core::ptr::null_mut(); // refused; the old block is intact
        }
        // SAFETY: as above.
        let p = unsafe { self.inner.realloc(block, il, new_il.size()) };
        if p.is_null() {
            if grow {
                // Give back what was charged for the growth.
                self.resize(o, new, old);
            }
            return p;
        }
        // SAFETY: `p` is a block of `new_il`, for `new_layout`; the owner
        // word is inside (a header was moved with the bytes already). The
        // owner's reference moves with it.
        unsafe { *owner_word(p, new_layout) = owner };
        if !grow {
            self.resize(o, old, new);
        }
        // SAFETY: as above.
        unsafe { object_of(p, new_layout) }
    }
}

impl<A: GlobalAlloc> Accounted<A> {
    /// `alloc` and `alloc_zeroed`: allocate with `f`, then charge. A block
    /// the inner allocator refuses is no object: nothing is charged or
    /// counted (not even in `memory.peak`). A charge refused (an enforced
    /// limit) frees the block at once and returns null.
    ///
    /// # Safety
    /// `layout` has a non-zero size (`GlobalAlloc::alloc`'s contract).
    #[inline(always)]
    unsafe fn alloc_with(&self, layout: Layout, f: impl FnOnce(Layout) -> *mut u8) -> *mut u8 {
        let Some((il, overhead)) = inner_layout(layout) else {
            return core::ptr::null_mut();
        };
        let p = f(il);
        if p.is_null() {
            return p;
        }
        let owner = match self.charge_new(layout.size(), overhead) {
            Ok(o) => o,
            Err(()) => {
                // SAFETY: `p` was just allocated by `inner` with `il`, and
                // nobody else has it.
                unsafe { self.inner.dealloc(p, il) };
                return core::ptr::null_mut();
            }
        };
        if owner.is_none() {
            self.count_pass_alloc(il.size());
        }
        // SAFETY: `p` is a block of `il`, which holds the object and its
        // owner word (aligned to 8).
        unsafe { *owner_word(p, layout) = owner.map_or(core::ptr::null_mut(), NonNull::as_ptr) };
        // SAFETY: as above.
        unsafe { object_of(p, layout) }
    }
}
