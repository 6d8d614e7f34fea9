//! Where a page counter's fields sit in memory.
//!
//! A counter's fields fall into three groups by how they are accessed:
//!
//! - **hot**: `usage`, written by an atomic read-modify-write on every
//!   charge and uncharge, from every CPU that charges this counter or any
//!   descendant;
//! - **read-mostly**: `min`, `low`, `high`, `max` and the parent pointer,
//!   read on every charge but written only when a limit changes;
//! - **tracking**: effective protection, protected usage, watermarks and
//!   event counts, read on every charge and written rarely (a new peak, a
//!   failure, a protection change).
//!
//! [`Padded`] (the default, and the kernel's `struct page_counter` layout)
//! gives each group its own cache line(s), so the stream of writes to
//! `usage` never invalidates the line other CPUs read `max` and `parent`
//! from. [`Packed`] lays the groups end to end from the start of one line —
//! `usage` shares its line with `min`/`low`/`high`/`max`/`parent`, no
//! padding at all — and exists so `rstat bench page-counter` can measure
//! the difference with the very same charge code: the algorithm is written
//! once, generic over [`Layout`].

use core::fmt;
use core::ops::Deref;

use crate::percpu::CachePadded;

/// How a page counter's three field groups are placed in memory: [`Padded`]
/// or [`Packed`]. Sealed: the library's code relies on the two layouts it
/// knows.
pub trait Layout: sealed::Sealed + Sized + Send + Sync + 'static {
    /// The container each field group is stored in. (The bounds let
    /// generic code share a `PageCounter<L>` between threads.)
    #[doc(hidden)]
    type Line<T: Send + Sync>: Deref<Target = T> + Send + Sync;
    /// A zero-sized type whose alignment the whole counter takes.
    #[doc(hidden)]
    type Align: Send + Sync;
    /// Wrap one field group.
    #[doc(hidden)]
    fn line<T: Send + Sync>(value: T) -> Self::Line<T>;
    /// A short name for reports: `"padded"` or `"packed"`.
    const NAME: &'static str;
}

/// Each field group on its own cache line(s): the hot `usage` alone, the
/// read-mostly limits and parent on another (the kernel's layout), each
/// group a [`CachePadded`]. Costs 3 ×
/// [`CACHE_LINE`](crate::percpu::CACHE_LINE) bytes per counter.
#[derive(Debug, Clone, Copy, Default)]
pub struct Padded;

/// All fields end to end from the start of one cache line, `usage` next to
/// `max`, `high` and `parent` (no padding). For measurement; prefer
/// [`Padded`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Packed;

impl Layout for Padded {
    type Line<T: Send + Sync> = CachePadded<T>;
    type Align = ();
    #[inline(always)]
    fn line<T: Send + Sync>(value: T) -> CachePadded<T> {
        CachePadded::new(value)
    }
    const NAME: &'static str = "padded";
}

impl Layout for Packed {
    type Line<T: Send + Sync> = Unpadded<T>;
    type Align = LineAligned;
    #[inline(always)]
    fn line<T: Send + Sync>(value: T) -> Unpadded<T> {
        Unpadded(value)
    }
    const NAME: &'static str = "packed";
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Padded {}
    impl Sealed for super::Packed {}
}

/// `T` as is: no padding, no extra alignment. The [`Packed`] layout's
/// container.
#[repr(transparent)]
#[derive(Default)]
pub struct Unpadded<T>(T);

impl<T> Deref for Unpadded<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: fmt::Debug> fmt::Debug for Unpadded<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Zero-sized, aligned to 64 bytes: a [`Packed`] counter starts a 64-byte
/// line, so its `usage` and `max` are guaranteed to share one.
#[repr(align(64))]
#[derive(Debug, Clone, Copy, Default)]
pub struct LineAligned;
