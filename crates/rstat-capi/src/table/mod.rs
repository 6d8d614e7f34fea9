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

#[cfg(not(target_pointer_width = "64"))]
compile_error!("rstat's C handles are 64-bit values carried in pointers: 64-bit targets only");

mod entry;
mod handle;
mod lock;
mod slots;

pub(crate) use entry::{same_engine, CountersEntry, Engine, Entry, GroupEntry};
pub(crate) use handle::to_ptr;
#[cfg(test)]
pub(crate) use lock::IN_RACE_WINDOW;
pub(crate) use lock::{race_window, TABLE};
pub(crate) use slots::Table;

#[cfg(test)]
mod tests;
