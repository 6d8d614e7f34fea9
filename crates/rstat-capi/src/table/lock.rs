//! The process-wide table behind its sharded reader-writer lock (the
//! "big reader" lock of the module docs' Synchronization section), and the
//! race window tests use to free an engine while a call does slow work.
//! The top of the table: it wraps [`slots`](super::slots)'s `Table`.

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::entry::Entry;
use super::slots::Table;
use crate::error::{CError, CResult};

/// Reader shards of the table lock.
pub(crate) const SHARDS: usize = if cfg!(miri) { 2 } else { 16 };

/// One reader shard on its own cache line.
type Shard = rstat::percpu::CachePadded<RwLock<()>>;

/// The process-wide table behind its sharded lock (the table's module
/// docs).
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
    shards: [const { Shard::new(RwLock::new(())) }; SHARDS],
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
            .map(|s| s.write().unwrap_or_else(PoisonError::into_inner))
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
/// call there through `IN_RACE_WINDOW` (a test-only hook, so not a doc
/// link) to hit the window every time; otherwise it compiles to nothing.
#[inline(always)]
pub(crate) fn race_window() {
    #[cfg(test)]
    if let Some(f) = IN_RACE_WINDOW.with(|h| h.borrow_mut().take()) {
        f();
    }
}
