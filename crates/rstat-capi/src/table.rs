//! The handle table: what a C handle stands for, and why a bad one can
//! never be dereferenced.
//!
//! A handle is not a pointer. It is a 64-bit value (carried in a pointer
//! type so C keeps `rstat *`, `rstat_group *` and `rstat_counters *`
//! apart) made of three fields:
//!
//! ```text
//!  63            32 31              4 3     0
//! +----------------+-----------------+-------+
//! |   generation   |   slot index    | kind  |
//! +----------------+-----------------+-------+
//! ```
//!
//! The slot index picks an entry of one process-wide table; the entry is
//! used only if it is occupied, its generation equals the handle's and its
//! kind equals both the handle's and the kind the call expects. The kind is
//! never 0, so no handle is NULL, and a NULL handle is simply one that fails
//! the check.
//!
//! The entry says which engine it belongs to, so handles of two `rstat`
//! instances mixed in one call are refused (`RSTAT_EXDEV`), and a handle
//! cast to the wrong pointer type (`RSTAT_EPROTOTYPE`) is told apart from
//! one that is stale or made up (`RSTAT_EBADF`). No value a caller passes
//! is ever dereferenced.
//!
//! # What is guaranteed about bad handles
//!
//! - **Stale handles are always refused.** Releasing an entry bumps its
//!   slot's generation, so every copy of the old handle fails the check
//!   from then on, however often the slot is reused (freed slots are reused
//!   oldest first). A slot issues each of its 2^32 generations at most
//!   once: when the next generation would be the one it started at, the
//!   slot is retired for good instead of being reused, so no stale handle
//!   can ever match again.
//! - **Made-up handles are refused except with probability about 2^-32 per
//!   guess.** Each slot's first generation is drawn from a per-process
//!   random key (read once from the kernel with `getrandom(2)`, mixed with
//!   the slot index), so handles are not small predictable integers: a
//!   guessed value must match a live slot's 32 random generation bits. A
//!   value that does match acts on that live entry, which is memory-safe
//!   but not refused. This protects against bugs (garbage values, integers
//!   cast to handles, pointers from elsewhere), not against code in the
//!   process that sets out to forge handles: that code can read the table
//!   anyway.

//! # Synchronization
//!
//! The table is a "big reader" lock: 16 reader-writer locks (`SHARDS`), each
//! on its own cache line. A call that only looks entries up (`rstat_add`,
//! the charge path) takes the read side of *its thread's* shard, given out
//! round-robin when a thread first calls in, so threads on different
//! shards share no cache line: the lock costs one uncontended atomic
//! read-modify-write each way. A call that changes the table (a handle made
//! or released) takes the write side of every shard, in index order, so it
//! excludes all readers. Entries are used while the read lock is held,
//! which is what keeps them alive; calls that do slow work (a flush, a
//! group creation) clone what they need (a group reference, an `Arc`) and
//! let go of the lock first, so writers never wait behind a flush. Such a
//! call may return to insert a new handle after another thread's
//! `rstat_free` of its engine: `rstat_free` marks the engine freed under
//! the write lock, and an insert under the write lock refuses entries of a
//! freed engine (`RSTAT_EBADF`), so no handle outlives its `rstat`. Entries
//! taken out of the table are dropped after the write lock is released
//! (dropping the last handle of a group flushes it into its parent).
//!
//! Poisoning is ignored: a panic while holding the lock (caught at the
//! boundary) cannot leave the table half-changed, because each change is a
//! single store into a slot after everything that can fail.

use std::cell::{Cell, UnsafeCell};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use ::rstat::memory::Memory;
use ::rstat::{ControllerHandle, Group, Rstat};

use crate::error::{CError, CResult, RSTAT_EBADF, RSTAT_EMFILE, RSTAT_EPROTOTYPE, RSTAT_EXDEV};

#[cfg(not(target_pointer_width = "64"))]
compile_error!("rstat's C handles are 64-bit values carried in pointers: 64-bit targets only");

/// Reader shards of the table lock.
pub(crate) const SHARDS: usize = if cfg!(miri) { 2 } else { 16 };

const KIND_BITS: u32 = 4;
const INDEX_BITS: u32 = 28;
/// Slots the table can hold (2^28).
pub(crate) const MAX_SLOTS: usize = 1 << INDEX_BITS;

/// What a handle stands for. The values are the handle's low four bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Engine = 1,
    Group = 2,
    Counters = 3,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Engine => "an rstat",
            Kind::Group => "a group",
            Kind::Counters => "a counter set",
        }
    }
}

/// One `rstat` instance as C sees it.
pub(crate) struct Engine {
    pub(crate) rs: Rstat,
    /// The memory controller, unless created with `RSTAT_OPT_NO_MEMORY`.
    pub(crate) memory: Option<Memory>,
    /// Cleared by `rstat_free` (in [`Table::remove_engine`]); read and
    /// written only under the table's write lock, which orders it, so
    /// relaxed accesses suffice. No entry of an engine that is not live is
    /// ever inserted ([`Table::insert`]).
    live: AtomicBool,
}

impl Engine {
    pub(crate) fn new(rs: Rstat, memory: Option<Memory>) -> Engine {
        Engine {
            rs,
            memory,
            live: AtomicBool::new(true),
        }
    }
}

/// A group handle: one reference on the group, shared by `refs` C owners.
pub(crate) struct GroupEntry {
    pub(crate) engine: Arc<Engine>,
    pub(crate) group: Group,
    /// `rstat_group_get` adds one, `rstat_group_put` takes one; the handle
    /// is released at 0. Changed only under the write lock.
    pub(crate) refs: u64,
}

/// A counter-set handle (lives as long as its engine).
pub(crate) struct CountersEntry {
    pub(crate) engine: Arc<Engine>,
    pub(crate) ctl: ControllerHandle,
}

pub(crate) enum Entry {
    Engine {
        engine: Arc<Engine>,
        /// The handle of the built-in `cpu` counter set, if any.
        cpu: usize,
    },
    Group(GroupEntry),
    Counters(Arc<CountersEntry>),
}

impl Entry {
    fn kind(&self) -> Kind {
        match self {
            Entry::Engine { .. } => Kind::Engine,
            Entry::Group(_) => Kind::Group,
            Entry::Counters(_) => Kind::Counters,
        }
    }

    pub(crate) fn engine(&self) -> &Arc<Engine> {
        match self {
            Entry::Engine { engine, .. } => engine,
            Entry::Group(g) => &g.engine,
            Entry::Counters(c) => &c.engine,
        }
    }
}

struct Slot {
    generation: u32,
    /// The random generation the slot started at: the slot is retired
    /// when its generation would come back to it.
    start: u32,
    entry: Option<Entry>,
}

/// The slots; only reached through [`HandleTable::read`] and
/// [`HandleTable::write`].
pub(crate) struct Table {
    slots: Vec<Slot>,
    /// Free slot indices, oldest first.
    free: VecDeque<u32>,
    /// The key slots' first generations are drawn from; read from the
    /// kernel when the first slot is made.
    key: Option<u64>,
}

/// A per-process random key: `getrandom(2)`, or if the kernel refuses it
/// (no such call, a seccomp filter), std's own randomly keyed hasher over
/// the clock, the process id and a stack address.
fn random_key() -> u64 {
    let mut buf = [0u8; 8];
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: `buf[filled..]` is valid for `buf.len() - filled` bytes
        // of writes; getrandom writes at most that many.
        let n =
            unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if n > 0 {
            filled += n as usize;
        } else if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            use std::hash::BuildHasher;
            let here = 0u8;
            return std::collections::hash_map::RandomState::new().hash_one((
                std::time::SystemTime::now(),
                std::process::id(),
                std::ptr::addr_of!(here) as usize,
            ));
        }
    }
    u64::from_ne_bytes(buf)
}

/// The first generation of slot `index` under `key`: the high half of the
/// splitmix64 finalizer of key + index × the golden ratio (a bijection of
/// the 64-bit input, so slots' starts are independent-looking and cheap).
fn first_generation(key: u64, index: usize) -> u32 {
    let mut z = key.wrapping_add((index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) >> 32) as u32
}

impl Table {
    /// An empty table; `key` fixes the slots' first generations (tests),
    /// `None` draws a random one when the first slot is made.
    const fn new(key: Option<u64>) -> Table {
        Table {
            slots: Vec::new(),
            free: VecDeque::new(),
            key,
        }
    }
}

fn encode(kind: Kind, index: usize, generation: u32) -> usize {
    (kind as usize) | (index << KIND_BITS) | ((generation as usize) << 32)
}

fn decode(h: usize) -> (usize, usize, u32) {
    (
        h & ((1 << KIND_BITS) - 1),
        (h >> KIND_BITS) & (MAX_SLOTS - 1),
        (h >> 32) as u32,
    )
}

impl Table {
    /// The live entry `h` names, if `h` is a current handle of any kind
    /// (never for 0: no entry has kind 0).
    #[inline(always)]
    fn live(&self, h: usize) -> Option<&Entry> {
        let (kind, index, generation) = decode(h);
        let slot = self.slots.get(index)?;
        let entry = slot.entry.as_ref()?;
        (slot.generation == generation && entry.kind() as usize == kind).then_some(entry)
    }

    /// Look `h` up as a handle of kind `want`; `what` names the argument in
    /// the error message. The hit is inline; errors are built out of line.
    #[inline(always)]
    pub(crate) fn get(&self, h: usize, want: Kind, what: &str) -> CResult<&Entry> {
        match self.live(h) {
            Some(e) if e.kind() == want => Ok(e),
            _ => Err(self.get_error(h, want, what)),
        }
    }

    /// Why `h` is not a live handle of kind `want`.
    #[cold]
    #[inline(never)]
    fn get_error(&self, h: usize, want: Kind, what: &str) -> CError {
        if h == 0 {
            return CError::new(
                RSTAT_EBADF,
                format!("{what} is NULL; pass {} handle", want.name()),
            );
        }
        match self.live(h) {
            Some(e) => CError::new(
                RSTAT_EPROTOTYPE,
                format!(
                    "{what} is {} handle, but this call needs {}; check the argument order and casts",
                    e.kind().name(),
                    want.name()
                ),
            ),
            None => {
                let (_, index, _) = decode(h);
                let known = index < self.slots.len();
                CError::new(
                    RSTAT_EBADF,
                    if known {
                        format!(
                            "{what} ({h:#x}) is stale or made up: it was released (put, or \
                             freed with its rstat) or never issued; use a handle you still \
                             hold a reference on"
                        )
                    } else {
                        format!("{what} ({h:#x}) is not a handle rstat issued")
                    },
                )
            }
        }
    }

    pub(crate) fn engine(&self, h: usize, what: &str) -> CResult<(&Arc<Engine>, usize)> {
        match self.get(h, Kind::Engine, what)? {
            Entry::Engine { engine, cpu } => Ok((engine, *cpu)),
            _ => unreachable!("kind checked"),
        }
    }

    pub(crate) fn group(&self, h: usize, what: &str) -> CResult<&GroupEntry> {
        match self.get(h, Kind::Group, what)? {
            Entry::Group(g) => Ok(g),
            _ => unreachable!("kind checked"),
        }
    }

    pub(crate) fn group_mut(&mut self, h: usize, what: &str) -> CResult<&mut GroupEntry> {
        self.get(h, Kind::Group, what)?;
        let (_, index, _) = decode(h);
        match self.slots[index].entry.as_mut() {
            Some(Entry::Group(g)) => Ok(g),
            _ => unreachable!("checked by get"),
        }
    }

    pub(crate) fn counters(&self, h: usize, what: &str) -> CResult<&Arc<CountersEntry>> {
        match self.get(h, Kind::Counters, what)? {
            Entry::Counters(c) => Ok(c),
            _ => unreachable!("kind checked"),
        }
    }

    /// Store `entry` and return its handle. Refused with `RSTAT_EBADF` if
    /// its engine was freed: a call that looked its handles up, let go of
    /// the lock to do slow work and came back after an `rstat_free` must
    /// not leave a handle that keeps the freed engine alive. The entry is
    /// handed back in the error, so the caller can drop it outside the
    /// lock ([`HandleTable::insert`]).
    pub(crate) fn insert(&mut self, entry: Entry) -> Result<usize, Refused> {
        if !entry.engine().live.load(Ordering::Relaxed) {
            return Err(Refused {
                err: CError::new(
                    RSTAT_EBADF,
                    "the rstat was freed (rstat_free, in another thread) while this call ran; \
                     its handles are stale",
                ),
                entry,
            });
        }
        let kind = entry.kind();
        let index = match self.free.pop_front() {
            Some(i) => i as usize,
            None => {
                if self.slots.len() >= MAX_SLOTS {
                    return Err(Refused {
                        err: CError::new(
                            RSTAT_EMFILE,
                            format!(
                                "{MAX_SLOTS} handles are open; put group handles you no longer need"
                            ),
                        ),
                        entry,
                    });
                }
                let key = *self.key.get_or_insert_with(random_key);
                let start = first_generation(key, self.slots.len());
                self.slots.push(Slot {
                    generation: start,
                    start,
                    entry: None,
                });
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[index];
        slot.entry = Some(entry);
        Ok(encode(kind, index, slot.generation))
    }

    /// Take the entry of the (checked, live) handle `h` out of the table,
    /// making every copy of `h` stale. The caller drops the entry after
    /// releasing the write lock.
    pub(crate) fn remove(&mut self, h: usize) -> Option<Entry> {
        self.live(h)?;
        let (_, index, _) = decode(h);
        let slot = &mut self.slots[index];
        let entry = slot.entry.take();
        // When the next generation would be the one the slot started at,
        // it has issued all 2^32 and is retired: never reused, so no stale
        // handle matches again.
        let next = slot.generation.wrapping_add(1);
        if next != slot.start {
            slot.generation = next;
            self.free.push_back(index as u32);
        }
        entry
    }

    /// Take out every entry belonging to `engine` (its own included), and
    /// mark it freed so no new entry of it gets in.
    pub(crate) fn remove_engine(&mut self, engine: &Arc<Engine>) -> Vec<Entry> {
        engine.live.store(false, Ordering::Relaxed);
        let handles: Vec<usize> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let e = s.entry.as_ref()?;
                Arc::ptr_eq(e.engine(), engine).then(|| encode(e.kind(), i, s.generation))
            })
            .collect();
        handles.into_iter().filter_map(|h| self.remove(h)).collect()
    }

    /// Handles in use (for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.entry.is_some()).count()
    }
}

/// An entry [`Table::insert`] did not store, with the reason.
pub(crate) struct Refused {
    pub(crate) err: CError,
    /// Dropped by whoever holds the `Refused`: outside the table lock, if
    /// it may be the engine's last reference.
    pub(crate) entry: Entry,
}

impl std::fmt::Debug for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refused")
            .field("err", &self.err)
            .finish_non_exhaustive()
    }
}

impl From<Refused> for CError {
    /// The error alone; the entry is dropped here, so convert outside the
    /// table lock unless the engine is referenced elsewhere.
    fn from(r: Refused) -> CError {
        let Refused { err, entry } = r;
        drop(entry);
        err
    }
}

/// Refuse handles of two engines in one call.
pub(crate) fn same_engine(a: &Arc<Engine>, b: &Arc<Engine>) -> CResult {
    if Arc::ptr_eq(a, b) {
        Ok(())
    } else {
        Err(CError::new(
            RSTAT_EXDEV,
            "the handles belong to different rstat instances; use handles made from the same rstat",
        ))
    }
}

#[repr(align(128))]
struct Shard(RwLock<()>);

/// The process-wide table behind its sharded lock (module docs).
pub(crate) struct HandleTable {
    shards: [Shard; SHARDS],
    table: UnsafeCell<Table>,
}

// SAFETY: `table` is reached only through `read` (shared, while one shard's
// read lock is held) and `write` (exclusive, while every shard's write lock
// is held); a writer excludes every reader and every other writer, so the
// cell is never accessed mutably and otherwise at once. Its contents are
// `Send + Sync` (checked below), so sharing them between threads is sound.
unsafe impl Sync for HandleTable {}

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Table>();
};

pub(crate) static TABLE: HandleTable = HandleTable {
    shards: [const { Shard(RwLock::new(())) }; SHARDS],
    table: UnsafeCell::new(Table::new(None)),
};

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static MY_SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// This thread's reader shard, given out round-robin on first use.
fn my_shard() -> usize {
    MY_SHARD
        .try_with(|s| {
            let mut v = s.get();
            if v == usize::MAX {
                v = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS;
                s.set(v);
            }
            v
        })
        // In a thread-local destructor after ours: any shard is correct.
        .unwrap_or(0)
}

impl HandleTable {
    /// Run `f` with shared access to the table.
    #[inline(always)]
    pub(crate) fn read<R>(&self, f: impl FnOnce(&Table) -> R) -> R {
        let _guard: RwLockReadGuard<'_, ()> = self.shards[my_shard()]
            .0
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        // SAFETY: a read lock is held, so no writer (which needs every
        // shard's write lock) runs; others may read too (see `Sync`).
        f(unsafe { &*self.table.get() })
    }

    /// Store `entry` under the write lock ([`Table::insert`]); a refused
    /// entry is dropped after the lock is released (it may hold the last
    /// reference on a freed engine, whose teardown is slow).
    pub(crate) fn insert(&self, entry: Entry) -> CResult<usize> {
        self.write(|t| t.insert(entry)).map_err(CError::from)
    }

    /// Run `f` with exclusive access to the table.
    pub(crate) fn write<R>(&self, f: impl FnOnce(&mut Table) -> R) -> R {
        let _guards: Vec<RwLockWriteGuard<'_, ()>> = self
            .shards
            .iter()
            .map(|s| s.0.write().unwrap_or_else(PoisonError::into_inner))
            .collect();
        // SAFETY: every shard's write lock is held (taken in index order,
        // so two writers cannot deadlock): no reader or other writer runs.
        f(unsafe { &mut *self.table.get() })
    }
}

#[cfg(test)]
thread_local! {
    /// Test hook: run once at this thread's next [`race_window`].
    pub(crate) static IN_RACE_WINDOW: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
}

/// Marks where a call has looked its handles up, let go of the table lock
/// to do slow work, and is about to take the write lock to insert a new
/// handle: another thread's `rstat_free` can run here. Unit tests put a
/// call there through [`IN_RACE_WINDOW`] to hit the window every time;
/// otherwise it compiles to nothing.
#[inline(always)]
pub(crate) fn race_window() {
    #[cfg(test)]
    if let Some(f) = IN_RACE_WINDOW.with(|h| h.borrow_mut().take()) {
        f();
    }
}

/// The handle of a live entry as the C pointer type it travels in.
pub(crate) fn to_ptr<T>(h: usize) -> *mut T {
    // An integer carried in a pointer type, never dereferenced (module
    // docs); `without_provenance` says exactly that.
    std::ptr::without_provenance_mut(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips_and_is_never_null() {
        for (kind, index, gen) in [
            (Kind::Engine, 0, 0),
            (Kind::Group, MAX_SLOTS - 1, u32::MAX),
            (Kind::Counters, 12345, 7),
        ] {
            let h = encode(kind, index, gen);
            assert_ne!(h, 0);
            assert_eq!(decode(h), (kind as usize, index, gen));
        }
    }

    #[test]
    fn a_released_slot_is_reused_with_a_new_generation_and_retired_at_wrap() {
        let engine = Arc::new(Engine::new(
            Rstat::builder().periodic_flush(None).build().unwrap(),
            None,
        ));
        let mut t = Table::new(Some(0x1234_5678_9abc_def0));
        let cpu = 0;
        let a = t
            .insert(Entry::Engine {
                engine: engine.clone(),
                cpu,
            })
            .unwrap();
        assert!(t.remove(a).is_some());
        assert!(t.remove(a).is_none(), "a stale handle removes nothing");
        let b = t
            .insert(Entry::Engine {
                engine: engine.clone(),
                cpu,
            })
            .unwrap();
        assert_ne!(a, b);
        assert_eq!(decode(a).1, decode(b).1, "same slot, reused");
        assert_eq!(t.get(a, Kind::Engine, "x").err().unwrap().code, RSTAT_EBADF);
        assert!(t.get(b, Kind::Engine, "x").is_ok());
        assert_eq!(
            t.get(b, Kind::Group, "x").err().unwrap().code,
            RSTAT_EPROTOTYPE
        );
        // Force the generation to the last one before it comes back to the
        // slot's start: releasing retires the slot.
        let (_, i, _) = decode(b);
        let last = t.slots[i].start.wrapping_sub(1);
        t.slots[i].generation = last;
        let c = encode(Kind::Engine, i, last);
        assert!(t.remove(c).is_some());
        assert!(
            t.free.is_empty(),
            "a slot at the last generation is retired"
        );
        let d = t.insert(Entry::Engine { engine, cpu }).unwrap();
        assert_ne!(decode(d).1, i);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn first_generations_come_from_the_key_and_wrap_is_counted_from_there() {
        // Two keys give different first generations to the same slot, and
        // slot 0 under a key is not generation 0 (the predictable value).
        let (a, b) = (first_generation(1, 0), first_generation(2, 0));
        assert_ne!(a, b);
        assert_ne!(first_generation(1, 0), 0);
        // A slot whose start is 0 still reaches u32::MAX and wraps past
        // it (the old `checked_add` rule would have retired it there).
        let mut t = Table::new(Some(7));
        let engine = Arc::new(Engine::new(
            Rstat::builder().periodic_flush(None).build().unwrap(),
            None,
        ));
        let h = t
            .insert(Entry::Engine {
                engine: engine.clone(),
                cpu: 0,
            })
            .unwrap();
        let (_, i, g) = decode(h);
        assert_eq!(g, first_generation(7, 0));
        t.slots[i].start = 5;
        t.slots[i].generation = u32::MAX;
        assert!(t.remove(encode(Kind::Engine, i, u32::MAX)).is_some());
        assert_eq!(t.slots[i].generation, 0, "wraps through 0");
        assert_eq!(t.free.len(), 1, "not retired before its start");
    }

    #[test]
    fn the_random_key_is_random() {
        // Two draws equal with probability 2^-64; all zeros would mean
        // getrandom wrote nothing.
        let (a, b) = (random_key(), random_key());
        assert_ne!(a, b);
        assert_ne!(a, 0);
    }
}
