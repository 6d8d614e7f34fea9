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
