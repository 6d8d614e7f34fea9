//! The slots and the generation check: looking a handle up (with the
//! error that says why it is refused), storing an entry and releasing it.
//! Built on [`handle`](super::handle)'s bits and [`entry`](super::entry)'s
//! entries; reached only through the [`lock`](super::lock) above it.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::entry::{CountersEntry, Engine, Entry, GroupEntry};
use super::handle::{decode, encode, first_generation, random_key, Kind, MAX_SLOTS};
use crate::error::{CError, CResult, RSTAT_EBADF, RSTAT_EMFILE, RSTAT_EPROTOTYPE};

/// One slot of the table (fields reached by the table's tests).
pub(super) struct Slot {
    pub(super) generation: u32,
    /// The random generation the slot started at: the slot is retired
    /// when its generation would come back to it.
    pub(super) start: u32,
    entry: Option<Entry>,
}

/// The slots; only reached through [`HandleTable::read`] and
/// [`HandleTable::write`].
///
/// [`HandleTable::read`]: super::lock::HandleTable::read
/// [`HandleTable::write`]: super::lock::HandleTable::write
pub(crate) struct Table {
    pub(super) slots: Vec<Slot>,
    /// Free slot indices, oldest first.
    pub(super) free: VecDeque<u32>,
    /// The key slots' first generations are drawn from; read from the
    /// kernel when the first slot is made.
    key: Option<u64>,
}

impl Table {
    /// An empty table; `key` fixes the slots' first generations (tests),
    /// `None` draws a random one when the first slot is made.
    pub(super) const fn new(key: Option<u64>) -> Table {
        Table {
            slots: Vec::new(),
            free: VecDeque::new(),
            key,
        }
    }

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
    ///
    /// [`HandleTable::insert`]: super::lock::HandleTable::insert
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
