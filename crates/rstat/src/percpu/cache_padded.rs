//! A value on cache lines of its own: [`CachePadded`], and the line size
//! it pads to, [`CACHE_LINE`].
//!
//! The other answer to "where does per-CPU state live" than the
//! [`arena`](super::arena)'s: the arena packs every group's per-CPU state
//! densely into one unit per CPU (no padding per group, and no two CPUs'
//! units share a line); `CachePadded` gives one value its own lines, for
//! the few places that need it whatever surrounds them: an array with a
//! slot per CPU (`percpu_ref`'s owned slots, the memory controller's
//! stocks) and a word many CPUs write beside words they only read (a page
//! counter's `usage`, a ref's shared count). The restartable sections of
//! [`rseq`](super::rseq) step through such an array by a constant stride,
//! one `CACHE_LINE`.

use core::fmt;
use core::ops::Deref;

/// The unit of false sharing we pad to, in bytes.
///
/// 128 on x86-64: Intel's spatial prefetcher fetches 64-byte lines in
/// aligned 128-byte pairs, so a line written by one CPU also disturbs its
/// pair partner in other CPUs' caches (crossbeam's `CachePadded` makes the
/// same choice). 128 is also the line size of Apple's and several server
/// aarch64 cores and of powerpc64. 64 elsewhere.
pub const CACHE_LINE: usize = if cfg!(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "powerpc64"
)) {
    128
} else {
    64
};

/// `T` aligned and padded to [`CACHE_LINE`] bytes, so nothing else shares
/// its line(s).
///
/// `repr(C)`: the value sits at offset 0, so a pointer to an element of a
/// `[CachePadded<T>]` is a pointer to its `T`, and elements are a multiple
/// of `CACHE_LINE` apart (exactly `CACHE_LINE` when `T` fits in one line).
// Our own rather than crossbeam-utils' `CachePadded`: the library depends
// on std and libc only, and the restartable sections rely on a layout
// (value at offset 0, stride one `CACHE_LINE`) that crossbeam's
// `repr(Rust)` wrapper does not promise.
#[cfg_attr(
    any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "powerpc64"
    ),
    repr(C, align(128))
)]
#[cfg_attr(
    not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "powerpc64"
    )),
    repr(C, align(64))
)]
#[derive(Default)]
pub struct CachePadded<T>(T);

const _: () = assert!(core::mem::align_of::<CachePadded<u8>>() == CACHE_LINE);

impl<T> CachePadded<T> {
    /// Pad `value`.
    pub const fn new(value: T) -> Self {
        CachePadded(value)
    }
}

impl<T> Deref for CachePadded<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: fmt::Debug> fmt::Debug for CachePadded<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A heap allocation of a value that must start a cache line (a
/// [`CachePadded`] field, a `repr(align(64))` struct), made with the
/// allocator's ordinary alignment and aligned by hand.
///
/// Why: a `Box` of such a type asks the allocator for a 64- or 128-byte
/// alignment, which glibc's malloc serves through `posix_memalign`, a path
/// several times slower than a plain `malloc` (it splits and frees the
/// chunk's ends), and the engine makes a few such objects per group it
/// creates. A `LineBox` asks for `size + align` bytes at the allocator's
/// plain alignment instead, puts the value at the first aligned address
/// two header words past the start, and keeps the allocation's start and
/// size in those words. The cost is up to `align` bytes of slack per
/// object. A value may take arrays of its own into the same allocation
/// ([`new_with_tail`](Self::new_with_tail)).
pub struct LineBox<T> {
    ptr: core::ptr::NonNull<T>,
    _owns: core::marker::PhantomData<T>,
}

// SAFETY: a `LineBox<T>` owns its `T` as a `Box<T>` does.
unsafe impl<T: Send> Send for LineBox<T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for LineBox<T> {}

impl<T> LineBox<T> {
    /// The plain alignment asked of the allocator (what `malloc` gives).
    const BASE_ALIGN: usize = 16;

    /// The value's alignment, at least [`BASE_ALIGN`](Self::BASE_ALIGN):
    /// room for the two header words before it.
    const ALIGN: usize = if core::mem::align_of::<T>() > Self::BASE_ALIGN {
        core::mem::align_of::<T>()
    } else {
        Self::BASE_ALIGN
    };

    /// The allocation behind a value with a tail of `tail` bytes:
    /// `size_of::<T>() + align + tail` bytes, so an aligned address at
    /// least two header words past the start always fits the value and
    /// its tail. `None` if that overflows.
    fn layout(tail: usize) -> Option<core::alloc::Layout> {
        let size = core::mem::size_of::<T>()
            .checked_add(Self::ALIGN)?
            .checked_add(tail)?;
        core::alloc::Layout::from_size_align(size, Self::BASE_ALIGN).ok()
    }

    /// Move `value` to the heap.
    pub fn new(value: T) -> Self {
        Self::new_with_tail(0, |_| value)
    }

    /// A value followed, in the same allocation, by `tail` bytes of its
    /// own (uninitialised: `make` writes what it reads of them): `make`
    /// gets the tail's address and returns the value,
    /// which may keep pointers into the tail; the tail lives exactly as
    /// long as the value. The tail starts where the value ends, so it is
    /// aligned for anything whose alignment divides `T`'s size (every
    /// integer and atomic, for a `T` of 64-byte alignment). One allocation
    /// where a value and its arrays would otherwise take one each.
    ///
    /// Panics (as `Box` does) if the size overflows; aborts through
    /// `handle_alloc_error` if the allocator fails. A `make` that panics
    /// leaks the allocation (nothing was written to free).
    pub fn new_with_tail(tail: usize, make: impl FnOnce(*mut u8) -> T) -> Self {
        let Some(layout) = Self::layout(tail) else {
            panic!("LineBox: a value and tail too large to allocate ({tail} tail bytes)");
        };
        // SAFETY: the layout's size is at least `ALIGN` > 0.
        let base = unsafe { std::alloc::alloc(layout) };
        if base.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // Opaque to the optimiser: `make` may zero its tail, and an
        // allocation then zeroed may be turned into `alloc_zeroed`, a
        // slower path of glibc's malloc (`crate::sync::boxed`).
        let base = core::hint::black_box(base);
        // The first aligned address at least two words past `base`: within
        // `ALIGN` bytes of it (`base` is `BASE_ALIGN`-aligned and `ALIGN` is
        // a multiple of `BASE_ALIGN` = two words), so the value and its
        // tail end inside the allocation.
        let word = core::mem::size_of::<usize>();
        let off = (base as usize + 2 * word).next_multiple_of(Self::ALIGN) - base as usize;
        debug_assert!(off >= 2 * word && off <= Self::ALIGN);
        // SAFETY: `off + size_of::<T>() + tail <= layout.size()` (above).
        let at = unsafe { base.add(off) };
        // SAFETY: the two words before `at` lie in the allocation, past
        // `base`, word-aligned (`at` is a multiple of `ALIGN` >= 16): the
        // allocation's start and size, for the drop.
        unsafe {
            at.sub(word).cast::<*mut u8>().write(base);
            at.sub(2 * word).cast::<usize>().write(layout.size());
        }
        let ptr = at.cast::<T>();
        // SAFETY: the tail is the `tail` bytes right after the value, in
        // the allocation.
        let value = make(unsafe { at.add(core::mem::size_of::<T>()) });
        // SAFETY: `ptr` is aligned for `T` and has room for it.
        unsafe { ptr.write(value) };
        LineBox {
            // SAFETY: inside a non-null allocation.
            ptr: unsafe { core::ptr::NonNull::new_unchecked(ptr) },
            _owns: core::marker::PhantomData,
        }
    }

    /// Give up ownership: the value stays where it is until
    /// [`from_raw`](Self::from_raw) takes it back.
    pub fn into_raw(b: Self) -> *mut T {
        let p = b.ptr.as_ptr();
        core::mem::forget(b);
        p
    }

    /// Take back a value [`into_raw`](Self::into_raw) gave up.
    ///
    /// # Safety
    /// `p` came from `LineBox::<T>::into_raw` and is taken back once.
    pub unsafe fn from_raw(p: *mut T) -> Self {
        LineBox {
            // SAFETY: the caller's guarantee (non-null: it came from a box).
            ptr: unsafe { core::ptr::NonNull::new_unchecked(p) },
            _owns: core::marker::PhantomData,
        }
    }
}

impl<T> Deref for LineBox<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: owned and initialised until drop.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T> Drop for LineBox<T> {
    fn drop(&mut self) {
        let at = self.ptr.as_ptr().cast::<u8>();
        let word = core::mem::size_of::<usize>();
        // SAFETY: `new_with_tail` wrote the allocation's start one word
        // before the value and its size one more word before, and the
        // value is ours to drop, once (before its tail is freed with it).
        unsafe {
            let base = at.sub(word).cast::<*mut u8>().read();
            let size = at.sub(2 * word).cast::<usize>().read();
            core::ptr::drop_in_place(self.ptr.as_ptr());
            std::alloc::dealloc(
                base,
                core::alloc::Layout::from_size_align_unchecked(size, Self::BASE_ALIGN),
            );
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for LineBox<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}
