//! The per-CPU arena: where every (group, controller) keeps its per-CPU state.
//!
//! Modelled on the kernel's percpu allocator. Memory comes in *chunks*; a
//! chunk is `nr_units` *units* of [`UNIT_SIZE`] usable bytes, [`UNIT_STRIDE`]
//! bytes apart, one unit per possible CPU. An allocation is a single offset
//! inside a chunk that is valid in every unit: the copy for CPU `c` lives at
//! `chunk + c * UNIT_STRIDE + offset`. So
//!
//! - all groups' state for CPU `c` sits densely in unit `c`: a CPU updating
//!   many groups touches few cache lines, and the lines it touches are never
//!   written by another CPU's updates (units are more than [`UNIT_SIZE`]
//!   apart, so no false sharing between CPUs);
//! - the copies of one allocation do not compete for one cache set: the
//!   stride is a power of two *plus one cache line* ([`UNIT_COLOR`]). With a
//!   power-of-two stride every CPU's copy of an offset maps to the same set
//!   of the L1 and L2 caches (their set index comes from address bits
//!   below the stride), so a loop over the CPUs (creating or removing a
//!   group, flushing it, freezing its reference count) evicts its own
//!   lines once the CPUs outnumber the ways; the extra line gives each CPU
//!   another set. The restartable sections pay two shifts and an add
//!   where one shift would do (one cycle more of latency);
//! - no allocation is padded to a cache line: the per-group cost is exactly
//!   `size_rounded_to_16 * nr_units` bytes of chunk space;
//! - finding a CPU's copy is one multiply-add, no table lookup.
//!
//! Freed offsets go on a free list per rounded size and are reused first.
//! Chunks are returned to the system when the arena is dropped. On Unix a
//! chunk is a private anonymous mapping of its own (`chunk_alloc`): its
//! pages become resident only when written, and a group writes its
//! per-CPU state only on the CPUs it is used on, so the memory a group
//! holds grows with those CPUs, not with `nr_units`.
//!
//! The arena itself is single-threaded (`&mut self`); the engine keeps it
//! behind a mutex, taken only when groups are created or freed, with a
//! cache of freed offsets per CPU slot in front of it
//! (`percpu::shared_arena`), so that groups made and released on
//! different CPUs do not share the mutex's line.

use core::alloc::Layout;
use core::marker::PhantomData;
use core::ptr::NonNull;
use std::collections::BTreeMap;
use std::fmt;

/// Bytes per unit per chunk: the largest single per-CPU allocation. Large
/// enough for a group's state of a controller with
/// [`MAX_STAT_ITEMS`](crate::MAX_STAT_ITEMS) items and its extra slots
/// (asserted where that maximum is defined). A chunk is [`UNIT_STRIDE`]
/// times the number of units of address space, whose pages the arena
/// writes only as allocations fill them. Shrunk under Miri so its
/// allocation tracking stays fast.
pub const UNIT_SIZE: usize = 1 << UNIT_SHIFT;
/// log2 of [`UNIT_SIZE`].
pub(crate) const UNIT_SHIFT: u32 = if cfg!(miri) { 12 } else { 17 };

/// The distance between two units' copies of an offset: [`UNIT_SIZE`]
/// plus [`UNIT_COLOR`], so that consecutive CPUs' copies fall in
/// consecutive sets of a cache indexed by address bits below the unit size
/// (see the module docs).
pub const UNIT_STRIDE: usize = UNIT_SIZE + UNIT_COLOR;

/// The colour each unit adds to the stride: one cache line.
pub const UNIT_COLOR: usize = 1 << UNIT_COLOR_SHIFT;

/// log2 of [`UNIT_COLOR`]: restartable sections compute a unit's offset
/// as `(cpu << UNIT_SHIFT) + (cpu << UNIT_COLOR_SHIFT)`.
pub(crate) const UNIT_COLOR_SHIFT: u32 = 6;

/// The offset of unit `cpu`'s copy from unit 0's.
#[inline(always)]
pub const fn unit_offset(cpu: usize) -> usize {
    cpu * UNIT_STRIDE
}

/// The unit whose copy sits at `offset` from unit 0's: the inverse of
/// [`unit_offset`].
#[inline(always)]
pub const fn unit_of(offset: usize) -> usize {
    offset / UNIT_STRIDE
}

/// Allocation granule: every size is rounded up to this, and every offset is
/// aligned to it.
pub const GRANULE: usize = 16;

/// Allocation failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArenaError {
    /// One per-CPU allocation must fit in a unit.
    TooLarge {
        /// The rounded size asked for.
        bytes: usize,
    },
    /// The system allocator refused a new chunk.
    OutOfMemory {
        /// The chunk size asked for.
        bytes: usize,
    },
}

impl fmt::Display for ArenaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArenaError::TooLarge { bytes } => write!(
                f,
                "per-CPU state of {bytes} bytes exceeds the arena unit of {UNIT_SIZE} bytes; use fewer stat items per controller"
            ),
            ArenaError::OutOfMemory { bytes } => {
                write!(f, "out of memory allocating a per-CPU chunk of {bytes} bytes")
            }
        }
    }
}

impl std::error::Error for ArenaError {}

/// A per-CPU array of `len` values of `T`: one copy per unit.
///
/// Plain data (`Copy`); validity is the owner's business: it is valid from
/// [`Arena::alloc`] until it is passed to [`Arena::free`], while the arena
/// lives.
pub struct PcpuPtr<T> {
    base: NonNull<T>, // the copy in unit 0
    len: usize,
    _t: PhantomData<*const T>,
}

impl<T> Clone for PcpuPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for PcpuPtr<T> {}

// SAFETY: a PcpuPtr is an address; sending or sharing it only shares `&T`s
// (via `slot`), which is sound when `T: Sync`.
unsafe impl<T: Sync> Send for PcpuPtr<T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for PcpuPtr<T> {}

impl<T> fmt::Debug for PcpuPtr<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PcpuPtr({:p}, len {})", self.base, self.len)
    }
}

impl<T> PcpuPtr<T> {
    /// The allocation of `len` `T`s whose copy in unit 0 is at `base`
    /// (an offset [`Arena::take_offset`] gave, for
    /// [`Arena::rounded_size::<T>(len)`](Arena::rounded_size) bytes).
    pub(crate) fn from_offset(base: NonNull<u8>, len: usize) -> Self {
        PcpuPtr {
            base: base.cast::<T>(),
            len,
            _t: PhantomData,
        }
    }

    /// The copy in unit 0, as the offset [`Arena::give_offset`] takes back.
    pub(crate) fn offset(&self) -> NonNull<u8> {
        self.base.cast::<u8>()
    }

    /// Number of `T`s per CPU.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the per-CPU array is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The copy of element 0 for `cpu`, as a raw pointer (no dereference).
    #[inline(always)]
    pub fn raw(&self, cpu: usize) -> *const T {
        self.base
            .as_ptr()
            .cast::<u8>()
            .wrapping_add(unit_offset(cpu))
            .cast::<T>()
    }

    /// CPU `cpu`'s copy of the array.
    ///
    /// # Safety
    /// `self` is live (allocated, not freed, arena alive) and `cpu` is less
    /// than the arena's `nr_units`.
    #[inline(always)]
    pub unsafe fn slot<'a>(&self, cpu: usize) -> &'a [T] {
        // SAFETY: the caller guarantees liveness and `cpu < nr_units`; `alloc`
        // initialised `len` values at this address in every unit.
        unsafe { core::slice::from_raw_parts(self.raw(cpu), self.len) }
    }

    /// CPU `cpu`'s copy of element `i`.
    ///
    /// # Safety
    /// As [`slot`](Self::slot), and `i < len`.
    #[inline(always)]
    pub unsafe fn elem<'a>(&self, cpu: usize, i: usize) -> &'a T {
        // SAFETY: the caller's guarantees make this in bounds and initialised.
        unsafe { &*self.raw(cpu).add(i) }
    }
}

/// A chunk: `nr_units` units from `base`, inside the system allocation
/// at `raw` of `layout`.
struct Chunk {
    base: NonNull<u8>,
    raw: NonNull<u8>,
    layout: Layout,
}

/// A chunk's units start on a cache line: the system allocation is this
/// much larger than the units and the base rounded up within it.
const CHUNK_ALIGN: usize = 64;

/// The arena: chunks of `nr_units` units.
pub struct Arena {
    nr_units: usize,
    chunks: Vec<Chunk>,
    /// Next free byte in the last chunk's unit.
    bump: usize,
    /// Rounded size -> freed unit-0 addresses of that size.
    free: BTreeMap<usize, Vec<NonNull<u8>>>,
    /// As `free`, for offsets whose bytes are zero in every unit (freed by
    /// [`free_zeroed`](Arena::free_zeroed)): [`alloc_zeroed`](Arena::alloc_zeroed)
    /// takes them without writing a byte. Chunks come zeroed from the
    /// system, so bumped offsets are zero too.
    free_zero: BTreeMap<usize, Vec<NonNull<u8>>>,
    live_allocations: usize,
    bytes_in_use_per_unit: usize,
}

// SAFETY: the arena owns its chunks; the raw pointers are not shared with
// other threads by the arena itself.
unsafe impl Send for Arena {}

/// Counters describing the arena, for tests and reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaStats {
    /// Units per chunk (= possible CPUs).
    pub nr_units: usize,
    /// Allocations not yet freed.
    pub live_allocations: usize,
    /// Bytes allocated (rounded) in each unit, over all live allocations.
    pub bytes_in_use_per_unit: usize,
    /// Chunks obtained from the system allocator.
    pub chunks: usize,
    /// Bytes obtained from the system allocator for chunks.
    pub chunk_bytes: usize,
    /// Of `chunk_bytes`, the bytes of the pages the system holds in memory
    /// (Linux's `mincore`; `None` elsewhere). A chunk is address space
    /// whose pages become resident when first written, and a group writes
    /// its per-CPU state only on the CPUs that use it, so this grows with
    /// the CPUs groups ran on, where `bytes_in_use_per_unit * nr_units`
    /// counts every possible CPU. Cost: one `mincore` call per chunk.
    pub resident_bytes: Option<usize>,
}

/// Zero `bytes` bytes at `p`: a value of a few words (a reference count's
/// slot, a stat's counters) with word stores inline, which a pass over
/// many units repeats, instead of a `memset` call each.
///
/// # Safety
/// `p` is valid for `bytes` bytes of writes; units are aligned to the
/// arena's granule (at least 8 bytes).
#[inline(always)]
unsafe fn zero_unit(p: *mut u8, bytes: usize) {
    if bytes <= 64 && bytes.is_multiple_of(8) {
        let w = p.cast::<u64>();
        for k in 0..bytes / 8 {
            // SAFETY: inside the caller's `bytes`; `p` is 8-aligned.
            unsafe { w.add(k).write(0) };
        }
    } else {
        // SAFETY: the caller's guarantee.
        unsafe { p.write_bytes(0, bytes) };
    }
}

impl Arena {
    /// An empty arena with `nr_units` units per chunk (at least 1).
    pub fn new(nr_units: usize) -> Self {
        Arena {
            nr_units: nr_units.max(1),
            chunks: Vec::new(),
            bump: UNIT_SIZE,
            free: BTreeMap::new(),
            free_zero: BTreeMap::new(),
            live_allocations: 0,
            bytes_in_use_per_unit: 0,
        }
    }

    /// Units per chunk.
    pub fn nr_units(&self) -> usize {
        self.nr_units
    }

    /// The bytes one allocation of `len` `T`s takes in each unit.
    pub fn rounded_size<T>(len: usize) -> usize {
        let bytes = core::mem::size_of::<T>().saturating_mul(len).max(1);
        bytes.div_ceil(GRANULE).saturating_mul(GRANULE)
    }

    /// Allocate `len` values of `T` in every unit, initialised by
    /// `init(cpu, index)`. Cost: a free-list pop or a bump, plus the
    /// initialisation writes; a new chunk (one system allocation) only when
    /// the current one is full.
    pub fn alloc<T>(
        &mut self,
        len: usize,
        mut init: impl FnMut(usize, usize) -> T,
    ) -> Result<PcpuPtr<T>, ArenaError> {
        check_aligned::<T>();
        let ptr = self.take::<T>(len, false)?;
        // SAFETY: a fresh or freed offset of `len` `T`s in every unit, whose
        // old values `free` dropped.
        unsafe { init_units(ptr, self.nr_units, &mut init) };
        Ok(ptr)
    }

    /// An offset for `len` `T`s, counted in use (see
    /// [`take_offset`](Self::take_offset)).
    fn take<T>(&mut self, len: usize, zeroed: bool) -> Result<PcpuPtr<T>, ArenaError> {
        let base = self.take_offset(Self::rounded_size::<T>(len), zeroed)?;
        Ok(PcpuPtr::from_offset(base, len))
    }

    /// An offset of `size` bytes (a [`rounded_size`](Self::rounded_size)),
    /// counted in use: a freed one of the size (for `zeroed`, one freed
    /// zeroed, else one zeroed here), or a bump. For `zeroed`, its bytes
    /// are zero in every unit.
    pub(crate) fn take_offset(
        &mut self,
        size: usize,
        zeroed: bool,
    ) -> Result<NonNull<u8>, ArenaError> {
        if size > UNIT_SIZE {
            return Err(ArenaError::TooLarge { bytes: size });
        }
        let (first, second) = if zeroed {
            (&mut self.free_zero, &mut self.free)
        } else {
            (&mut self.free, &mut self.free_zero)
        };
        let base = match first.get_mut(&size).and_then(Vec::pop) {
            Some(p) => p,
            None => match second.get_mut(&size).and_then(Vec::pop) {
                Some(p) => {
                    if zeroed {
                        for cpu in 0..self.nr_units {
                            // SAFETY: a freed offset of `size` bytes in
                            // every unit of a live chunk; nothing
                            // references it.
                            unsafe { p.as_ptr().add(unit_offset(cpu)).write_bytes(0, size) };
                        }
                    }
                    p
                }
                None => self.bump_alloc(size)?,
            },
        };
        self.live_allocations += 1;
        self.bytes_in_use_per_unit += size;
        Ok(base)
    }

    /// Allocate `len` values of `T` in every unit, all bytes zero, without
    /// writing them: an offset freed by [`free_zeroed`](Self::free_zeroed)
    /// or a fresh one (chunks come zeroed from the system), else a freed
    /// offset of the size, zeroed here. Cost: a free-list pop or a bump;
    /// no write to the units, so a value of many units costs what a value
    /// of one does.
    ///
    /// # Safety
    /// All-zero bytes are a valid `T`, and `T` needs no drop.
    pub unsafe fn alloc_zeroed<T>(&mut self, len: usize) -> Result<PcpuPtr<T>, ArenaError> {
        check_zeroed::<T>();
        self.take(len, true)
    }

    /// Free an allocation of [`alloc_zeroed`](Self::alloc_zeroed), zeroing
    /// it in the units of `dirty` only, so that the next `alloc_zeroed` of
    /// its size takes it as it is. Cost: the zeroing of those units; a
    /// value written on a few of many units is freed for those few.
    ///
    /// # Safety
    /// As [`free`](Self::free), and every unit not in `dirty` still holds
    /// all-zero bytes (checked in debug builds, but not under Miri, where a
    /// scan of every unit is slow); `T` needs no drop.
    pub unsafe fn free_zeroed<T>(&mut self, ptr: PcpuPtr<T>, dirty: impl Iterator<Item = usize>) {
        // SAFETY: the caller's guarantees.
        unsafe { scrub_units(ptr, dirty, self.nr_units) };
        self.give_offset(ptr.offset(), Self::rounded_size::<T>(ptr.len), true);
    }

    /// Make a freed offset of `size` bytes reusable (on the zeroed list
    /// for `zeroed`, whose bytes must then be zero in every unit), counted
    /// out of use: [`take_offset`](Self::take_offset)'s inverse.
    pub(crate) fn give_offset(&mut self, base: NonNull<u8>, size: usize, zeroed: bool) {
        let list = if zeroed {
            &mut self.free_zero
        } else {
            &mut self.free
        };
        // The free lists are the engine's (see `bump_alloc`).
        crate::sync::untracked(|| list.entry(size).or_default().push(base));
        self.live_allocations -= 1;
        self.bytes_in_use_per_unit -= size;
    }

    fn bump_alloc(&mut self, size: usize) -> Result<NonNull<u8>, ArenaError> {
        if self.bump + size > UNIT_SIZE {
            let bytes = UNIT_STRIDE * self.nr_units + CHUNK_ALIGN;
            let layout = Layout::from_size_align(bytes, GRANULE)
                .map_err(|_| ArenaError::OutOfMemory { bytes })?;
            // The engine's memory, shared by every group and kept for the
            // engine's life: not charged to whichever group's work needed
            // the new chunk (`sync::untracked`).
            let chunks = &mut self.chunks;
            crate::sync::untracked(|| {
                // Zeroed, for `alloc_zeroed`, and fresh: see `chunk_alloc`.
                let raw = chunk_alloc(layout).ok_or(ArenaError::OutOfMemory { bytes })?;
                let skip = (CHUNK_ALIGN - raw.as_ptr().addr() % CHUNK_ALIGN) % CHUNK_ALIGN;
                // SAFETY: `skip < CHUNK_ALIGN`, inside the allocation.
                let base = unsafe { raw.add(skip) };
                chunks.push(Chunk { base, raw, layout });
                Ok::<(), ArenaError>(())
            })?;
            self.bump = 0;
        }
        let chunk = self.chunks.last().expect("a chunk was just ensured");
        // SAFETY: bump + size <= UNIT_SIZE, inside the chunk's unit 0.
        let p = unsafe { chunk.base.add(self.bump) };
        self.bump += size;
        Ok(p)
    }

    /// Drop every copy of the values and make the offset reusable.
    ///
    /// # Safety
    /// `ptr` came from this arena's `alloc` and has not been freed, and no
    /// reference obtained through it is used afterwards.
    pub unsafe fn free<T>(&mut self, ptr: PcpuPtr<T>) {
        // SAFETY: the caller's guarantees.
        unsafe { drop_units(ptr, self.nr_units) };
        self.give_offset(ptr.offset(), Self::rounded_size::<T>(ptr.len), false);
    }

    /// The pages of unit `cpu`, over every chunk, that the system holds
    /// in memory: what tests compare to see which units something wrote (a
    /// chunk is fresh zeroed memory, whose pages become resident when first
    /// touched). Pages a unit shares with its neighbours at its ends are
    /// counted for both.
    #[cfg(all(test, target_os = "linux", not(rstat_loom), not(miri)))]
    pub(crate) fn resident_pages(&self, cpu: usize) -> usize {
        assert!(cpu < self.nr_units);
        let page = page_size();
        self.chunks
            .iter()
            .map(|c| {
                let start = c.base.as_ptr().addr() + unit_offset(cpu);
                resident_bytes_in(start, UNIT_SIZE).expect("mincore failed") / page
            })
            .sum()
    }

    /// Bytes of the chunks' pages the system holds in memory (every unit);
    /// `None` where that cannot be asked (not Linux, or Miri).
    fn resident_bytes(&self) -> Option<usize> {
        self.chunks
            .iter()
            .map(|c| resident_bytes_in(c.raw.as_ptr().addr(), c.layout.size()))
            .sum()
    }

    /// Current counters.
    pub fn stats(&self) -> ArenaStats {
        ArenaStats {
            nr_units: self.nr_units,
            live_allocations: self.live_allocations,
            bytes_in_use_per_unit: self.bytes_in_use_per_unit,
            chunks: self.chunks.len(),
            chunk_bytes: self.chunks.iter().map(|c| c.layout.size()).sum(),
            resident_bytes: self.resident_bytes(),
        }
    }
}

/// Write `init(cpu, i)` into every value of `ptr` in each of the first
/// `nr_units` units (the values of a fresh or freed offset).
///
/// # Safety
/// `ptr` is an offset of `len` `T`s in a live chunk of `nr_units` units,
/// whose values are uninitialised (fresh, or dropped by the last free).
pub(crate) unsafe fn init_units<T>(
    ptr: PcpuPtr<T>,
    nr_units: usize,
    init: &mut impl FnMut(usize, usize) -> T,
) {
    for cpu in 0..nr_units {
        let unit = ptr.raw(cpu) as *mut T;
        if ptr.len == 1 {
            // The common one-value case (a reference count's slot) as one
            // store per unit: the loop below becomes a `memset` call per
            // unit for small zero values.
            // SAFETY: as below, for value 0.
            unsafe { unit.write(init(cpu, 0)) };
            continue;
        }
        for i in 0..ptr.len {
            // SAFETY: `unit` is this allocation's copy in unit `cpu`, inside
            // a live chunk, aligned to GRANULE >= align_of::<T>(), with room
            // for `len` values; the slot is uninitialised (caller).
            unsafe { unit.add(i).write(init(cpu, i)) };
        }
    }
}

/// Drop every value of `ptr` in each of the first `nr_units` units.
///
/// # Safety
/// `ptr` is a live allocation of [`Arena::alloc`] (or of the same offset
/// and initialisation) in a chunk of `nr_units` units, and no reference
/// obtained through it is used afterwards.
pub(crate) unsafe fn drop_units<T>(ptr: PcpuPtr<T>, nr_units: usize) {
    for cpu in 0..nr_units {
        let unit = ptr.raw(cpu) as *mut T;
        // SAFETY: the caller guarantees these `len` values are live and
        // unreferenced.
        unsafe { core::ptr::drop_in_place(core::ptr::slice_from_raw_parts_mut(unit, ptr.len)) };
    }
}

/// Zero `ptr`'s values in the units of `dirty` (those at or above
/// `nr_units` ignored), so that its offset is all zero again (checked in
/// debug builds, but not under Miri: a scan of every unit is slow there).
///
/// # Safety
/// `ptr` is a live allocation of [`Arena::alloc_zeroed`] (or of an
/// offset as zeroed) in a chunk of `nr_units` units, nothing references
/// it, `T` needs no drop, and no unit outside `dirty` was written.
pub(crate) unsafe fn scrub_units<T>(
    ptr: PcpuPtr<T>,
    dirty: impl Iterator<Item = usize>,
    nr_units: usize,
) {
    let bytes = core::mem::size_of::<T>() * ptr.len;
    for cpu in dirty.filter(|&c| c < nr_units) {
        // SAFETY: the caller guarantees the values are live and
        // unreferenced, with no drop; `cpu` is a unit of the arena.
        unsafe { zero_unit(ptr.raw(cpu).cast::<u8>().cast_mut(), bytes) };
    }
    #[cfg(all(debug_assertions, not(miri)))]
    {
        let size = Arena::rounded_size::<T>(ptr.len);
        for cpu in 0..nr_units {
            // A page never touched is zero; reading it would map one (and
            // make the check itself touch every unit).
            if !maybe_touched(ptr.raw(cpu).cast::<u8>(), size) {
                continue;
            }
            // SAFETY: as above: `size` bytes of a live chunk's unit.
            let unit = unsafe { core::slice::from_raw_parts(ptr.raw(cpu).cast::<u8>(), size) };
            assert!(
                unit.iter().all(|&b| b == 0),
                "free_zeroed: unit {cpu} was written but not named dirty"
            );
        }
    }
}

/// The system's page size.
#[cfg(all(target_os = "linux", not(miri)))]
fn page_size() -> usize {
    // SAFETY: sysconf takes no pointer.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page)
        .ok()
        .filter(|&p| p > 0)
        .unwrap_or(4096)
}

/// The page-aligned span `[first, end)` of the pages overlapping `[start,
/// start + len)`.
#[cfg(all(target_os = "linux", not(miri)))]
fn page_span(start: usize, len: usize) -> (usize, usize) {
    let page = page_size();
    (start / page * page, (start + len).div_ceil(page) * page)
}

/// Bytes of the pages overlapping `[start, start + len)` (its
/// [`page_span`]), an address range inside one system allocation, that the
/// system holds in memory. Asks `mincore` a window of pages at a time,
/// with no allocation (the arena's debug checks call it while freeing).
#[cfg(all(target_os = "linux", not(miri)))]
fn resident_bytes_in(start: usize, len: usize) -> Option<usize> {
    const WINDOW: usize = 256;
    let page = page_size();
    let (mut at, end) = page_span(start, len);
    let mut resident = 0;
    let mut vec = [0u8; WINDOW];
    while at < end {
        let pages = ((end - at) / page).min(WINDOW);
        // SAFETY: the pages overlap a live allocation (mincore asks about
        // mappings, and reads nothing in them); `vec` has a byte for each.
        let rc = unsafe {
            libc::mincore(
                core::ptr::without_provenance_mut(at),
                pages * page,
                vec.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return None;
        }
        resident += vec[..pages].iter().filter(|&&b| b & 1 != 0).count() * page;
        at += pages * page;
    }
    Some(resident)
}

#[cfg(not(all(target_os = "linux", not(miri))))]
fn resident_bytes_in(_start: usize, _len: usize) -> Option<usize> {
    None
}

/// Whether a page of the `len` bytes at `p`, inside a chunk, may hold
/// something written: on Linux, whether the system holds all of their
/// pages (`mincore`; a page swapped out reads as untouched, which only
/// skips a debug check); elsewhere, always.
#[cfg(all(debug_assertions, not(miri)))]
fn maybe_touched(p: *const u8, len: usize) -> bool {
    #[cfg(target_os = "linux")]
    {
        let (first, end) = page_span(p.addr(), len);
        resident_bytes_in(p.addr(), len).is_none_or(|r| r == end - first)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (p, len);
        true
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // Live allocations' values are not dropped here: their owners free
        // them before the arena goes (the engine guarantees it); anything
        // still live holds only atomics and plain data.
        for c in self.chunks.drain(..) {
            // SAFETY: allocated in `bump_alloc` by `chunk_alloc` with
            // exactly this layout.
            unsafe { chunk_free(c.raw, c.layout) };
        }
    }
}

/// A chunk's memory: zeroed pages that become resident only when written,
/// so a chunk costs the pages its units use (a unit's pages are written
/// only by the groups used on its CPU). On Unix, a private anonymous
/// mapping of its own: the C library's `calloc` gives that only while the
/// size is above its mmap threshold, which glibc raises to the size of
/// any mapped block freed, after which a chunk would come from the heap,
/// cleared with every page written. Elsewhere (and under Miri) the global
/// allocator's `alloc_zeroed`, at its own alignment (a larger one would
/// have the standard library write every byte to zero it).
fn chunk_alloc(layout: Layout) -> Option<NonNull<u8>> {
    #[cfg(all(unix, not(miri)))]
    {
        // SAFETY: a new private anonymous mapping, no address hint; it
        // touches no existing memory.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                layout.size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        NonNull::new(p.cast::<u8>())
    }
    #[cfg(not(all(unix, not(miri))))]
    // SAFETY: the layout has non-zero size.
    NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })
}

/// Give back a chunk of [`chunk_alloc`].
///
/// # Safety
/// `raw` came from `chunk_alloc(layout)` and nothing uses it any more.
unsafe fn chunk_free(raw: NonNull<u8>, layout: Layout) {
    #[cfg(all(unix, not(miri)))]
    {
        // SAFETY: the caller's guarantee: our own mapping, whole.
        let rc = unsafe { libc::munmap(raw.as_ptr().cast(), layout.size()) };
        debug_assert_eq!(rc, 0, "munmap of an arena chunk failed");
    }
    #[cfg(not(all(unix, not(miri))))]
    // SAFETY: the caller's guarantee.
    unsafe {
        std::alloc::dealloc(raw.as_ptr(), layout)
    };
}

#[cfg(all(test, not(rstat_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// `free_zeroed` zeroes the units named dirty, and `alloc_zeroed`
    /// hands the offset out again as it is: zero in every unit. An offset
    /// freed by plain `free` (here: written everywhere) is zeroed by
    /// `alloc_zeroed` before it is handed out.
    #[test]
    fn zeroed_allocations_come_back_zero() {
        let mut a = Arena::new(8);
        let all_zero = |p: &PcpuPtr<AtomicU64>| {
            (0..8).all(|cpu| {
                // SAFETY: live, cpu < nr_units.
                unsafe { p.slot(cpu) }
                    .iter()
                    .all(|v| v.load(Ordering::Relaxed) == 0)
            })
        };
        // SAFETY: zero is a valid AtomicU64, which needs no drop.
        let p = unsafe { a.alloc_zeroed::<AtomicU64>(5) }.unwrap();
        assert!(all_zero(&p));
        for cpu in [1, 6] {
            // SAFETY: live, in range.
            unsafe { p.elem(cpu, 4) }.store(7, Ordering::Relaxed);
        }
        let base = p.base;
        // SAFETY: from alloc_zeroed; units other than 1 and 6 untouched.
        unsafe { a.free_zeroed(p, [1, 6].into_iter()) };
        // SAFETY: as above.
        let q = unsafe { a.alloc_zeroed::<AtomicU64>(5) }.unwrap();
        assert_eq!(q.base, base, "the freed offset is reused");
        assert!(all_zero(&q), "a reused offset is zero in every unit");
        // SAFETY: from alloc_zeroed, never written.
        unsafe { a.free_zeroed(q, core::iter::empty()) };
        let r = a.alloc::<AtomicU64>(3, |_, _| AtomicU64::new(9)).unwrap();
        let base = r.base.cast::<u8>();
        // SAFETY: from alloc; no reference remains.
        unsafe { a.free(r) };
        // SAFETY: zero is a valid AtomicU64.
        let z = unsafe { a.alloc_zeroed::<AtomicU64>(3) }.unwrap();
        assert_eq!(
            z.base.cast::<u8>(),
            base,
            "the plainly freed offset is reused"
        );
        assert!(all_zero(&z));
        // SAFETY: from alloc_zeroed, never written.
        unsafe { a.free_zeroed(z, core::iter::empty()) };
        assert_eq!(a.stats().live_allocations, 0);
    }

    /// `free_zeroed` zeroes a dirty unit whatever the value's size: word
    /// stores up to a line, byte writes past it or for an odd size; a
    /// one-value `alloc` initialises every unit with its own value.
    #[test]
    fn dirty_units_of_every_size_come_back_zero() {
        fn round<const N: usize>(a: &mut Arena) {
            // SAFETY: zero is a valid [u8; N], which needs no drop.
            let p = unsafe { a.alloc_zeroed::<[u8; N]>(1) }.unwrap();
            for cpu in [0, 2] {
                // SAFETY: live, cpu < nr_units, nobody else uses it.
                unsafe { p.raw(cpu).cast_mut().write([0xa5; N]) };
            }
            let base = p.base.cast::<u8>();
            // SAFETY: from alloc_zeroed; only units 0 and 2 were written.
            unsafe { a.free_zeroed(p, [0, 2].into_iter()) };
            // SAFETY: as above.
            let q = unsafe { a.alloc_zeroed::<[u8; N]>(1) }.unwrap();
            assert_eq!(q.base.cast::<u8>(), base, "{N} bytes: the offset is reused");
            for cpu in 0..3 {
                // SAFETY: live, cpu < nr_units.
                let v = unsafe { q.raw(cpu).read() };
                assert!(v.iter().all(|&b| b == 0), "{N} bytes, unit {cpu}: {v:?}");
            }
            // SAFETY: from alloc_zeroed, never written.
            unsafe { a.free_zeroed(q, core::iter::empty()) };
        }
        let mut a = Arena::new(3);
        round::<8>(&mut a);
        round::<24>(&mut a);
        round::<64>(&mut a);
        round::<72>(&mut a);
        round::<5>(&mut a);
        round::<130>(&mut a);
        let p = a
            .alloc::<AtomicU64>(1, |cpu, i| AtomicU64::new((cpu * 10 + i + 1) as u64))
            .unwrap();
        for cpu in 0..3 {
            assert_eq!(
                // SAFETY: live, cpu < 3.
                unsafe { p.elem(cpu, 0) }.load(Ordering::Relaxed),
                (cpu * 10 + 1) as u64
            );
        }
        // SAFETY: allocated here, not used afterwards.
        unsafe { a.free(p) };
        assert_eq!(a.stats().live_allocations, 0);
    }

    #[test]
    fn one_offset_valid_in_every_unit_and_units_are_disjoint() {
        let mut a = Arena::new(3);
        let p = a
            .alloc::<AtomicU64>(4, |cpu, i| AtomicU64::new((cpu * 10 + i) as u64))
            .unwrap();
        for cpu in 0..3 {
            // SAFETY: live, cpu < 3.
            let s = unsafe { p.slot(cpu) };
            for (i, v) in s.iter().enumerate() {
                assert_eq!(v.load(Ordering::Relaxed), (cpu * 10 + i) as u64);
            }
            s[0].fetch_add(100, Ordering::Relaxed);
        }
        // SAFETY: live.
        assert_eq!(unsafe { p.elem(1, 0) }.load(Ordering::Relaxed), 110);
        assert_eq!(p.raw(1) as usize - p.raw(0) as usize, UNIT_STRIDE);
        // SAFETY: allocated here, not used afterwards.
        unsafe { a.free(p) };
        assert_eq!(a.stats().live_allocations, 0);
    }

    #[test]
    fn the_copies_of_an_offset_fall_in_different_cache_sets() {
        // A cache of 64-byte lines whose set index is taken from the
        // address bits between the line and 4 KiB (an L1 data cache of 64
        // sets) or the unit size (an L2 of as many sets as a unit has
        // lines): with a power-of-two stride all 64 copies would sit in
        // one set; the colour spreads them over 64.
        let mut a = Arena::new(64);
        let p = a.alloc::<u64>(1, |_, _| 0).unwrap();
        for period in [4096, UNIT_SIZE] {
            let sets: std::collections::BTreeSet<usize> = (0..64)
                .map(|cpu| (p.raw(cpu) as usize % period) / 64)
                .collect();
            assert_eq!(sets.len(), 64, "sets of a {period}-byte period");
        }
        // SAFETY: allocated here, not used afterwards.
        unsafe { a.free(p) };
    }

    #[test]
    fn allocations_are_dense_and_freed_offsets_are_reused() {
        let mut a = Arena::new(2);
        let x = a.alloc::<u64>(3, |_, _| 0).unwrap(); // 24 -> 32 bytes
        let y = a.alloc::<u64>(3, |_, _| 0).unwrap();
        assert_eq!(
            y.raw(0) as usize - x.raw(0) as usize,
            32,
            "no padding beyond the 16-byte granule"
        );
        assert_eq!(a.stats().bytes_in_use_per_unit, 64);
        let x_addr = x.raw(0);
        // SAFETY: allocated here, not used afterwards.
        unsafe { a.free(x) };
        let z = a.alloc::<u64>(4, |_, _| 0).unwrap(); // same rounded size
        assert_eq!(
            z.raw(0),
            x_addr,
            "a freed offset of the same size is reused first"
        );
        let w = a.alloc::<u64>(1, |_, _| 0).unwrap(); // a different size bumps
        assert_ne!(w.raw(0), x_addr);
        assert_eq!(a.stats().live_allocations, 3);
        // SAFETY: allocated here, not used afterwards.
        unsafe {
            a.free(y);
            a.free(z);
            a.free(w);
        }
        assert_eq!(a.stats().live_allocations, 0);
        assert_eq!(a.stats().bytes_in_use_per_unit, 0);
    }

    #[test]
    fn chunks_grow_and_oversized_requests_are_refused() {
        let mut a = Arena::new(2);
        let per = UNIT_SIZE / 4;
        let v: Vec<_> = (0..9)
            .map(|_| a.alloc::<u8>(per, |_, _| 7).unwrap())
            .collect();
        assert_eq!(a.stats().chunks, 3);
        assert_eq!(a.stats().chunk_bytes, 3 * (2 * UNIT_STRIDE + CHUNK_ALIGN));
        assert_eq!(
            a.alloc::<u8>(UNIT_SIZE + 1, |_, _| 0).unwrap_err(),
            ArenaError::TooLarge {
                bytes: UNIT_SIZE + GRANULE
            }
        );
        for p in v {
            // SAFETY: live.
            assert!(unsafe { p.slot(1) }.iter().all(|b| *b == 7));
            // SAFETY: allocated here, not used afterwards.
            unsafe { a.free(p) };
        }
    }

    #[test]
    fn values_with_drop_are_dropped_on_free() {
        use std::sync::Arc;
        let token = Arc::new(());
        let mut a = Arena::new(2);
        let p = a.alloc(2, |_, _| Arc::clone(&token)).unwrap();
        assert_eq!(Arc::strong_count(&token), 5);
        // SAFETY: allocated here, not used afterwards.
        unsafe { a.free(p) };
        assert_eq!(Arc::strong_count(&token), 1);
    }
}

/// The types an arena can hold at all: at most [`GRANULE`]-aligned, so an
/// offset of the arena is aligned for them. Panics otherwise (a bug in the
/// caller's type, not in its input).
#[inline(always)]
pub(crate) fn check_aligned<T>() {
    assert!(
        core::mem::align_of::<T>() <= GRANULE,
        "arena values are 16-byte aligned at most"
    );
}

/// The types an arena hands out zeroed and unwritten (`alloc_zeroed`, and
/// the shared arena's zero-state allocations): held at all
/// ([`check_aligned`]) and without drop, so freeing one runs no code on
/// its bytes. Panics otherwise (a bug in the
/// caller's type, not in its input).
#[inline(always)]
pub(crate) fn check_zeroed<T>() {
    check_aligned::<T>();
    assert!(
        !core::mem::needs_drop::<T>(),
        "zeroed arena values need no drop"
    );
}
