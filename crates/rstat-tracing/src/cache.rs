//! The value -> group cache of [`children_of`](crate::GroupLayer::children_of)
//! and [`by_path`](crate::GroupLayer::by_path) layers: each thread keeps
//! the groups of the last values it resolved, so a span of a known value
//! costs no child lookup (the parent's children lock, shared by every
//! thread, and a string search) and no lock shared with other threads.
//!
//! # What a hit may hand out
//!
//! For both rules the answer for a value is a function of the live
//! groups: a live group's name never changes, names are unique among live
//! siblings, and a live group's ancestors are live (a group with live
//! children cannot be removed). So a cached group that is still online is
//! exactly what the rule would answer now, and a hit checks only that
//! ([`Group::is_online`], one load). An entry whose group went offline is
//! dropped and the value resolved anew by the rule, which finds (or, for
//! `children_of`, creates) the group that now has the name. Only groups
//! are cached, never "no group": a value that matched nothing is resolved
//! (and counted) at each span, and matches a group made later.
//!
//! # Bounds
//!
//! - Each thread keeps at most [`CACHED_VALUES`] entries per layer, in
//!   sets of [`WAYS`] picked by the value's hash, the least recently used
//!   of a full set replaced; values longer than [`MAX_CACHED_VALUE_BYTES`]
//!   are not cached. So any number of distinct values costs bounded
//!   memory, and values past the bound are resolved by the rule.
//! - An entry holds a reference on its group: a removed group stays
//!   allocated (a zombie, `Rstat::zombie_count`) while an entry holds it.
//!   Entries of removed groups are dropped when met, and every
//!   [`CACHE_SWEEP_PERIOD`] lookups a thread sweeps them out of every
//!   thread's table (an idle thread's too). Dropping the layer (its last
//!   clone) empties every table.
//!
//! # Synchronization
//!
//! Each thread's table is behind a mutex that only its thread takes on
//! the span path (uncontended: two atomic operations on a line no other
//! thread writes), and that a sweeping thread or the layer's drop takes
//! now and then. The layer keeps weak references to the tables to reach
//! them; each thread keeps, in a thread-local, a strong one to its own
//! table and a weak one to the layer's cache it belongs to (so a table is
//! freed with its thread, and a thread finds its table by the cache's
//! address, which a weak reference keeps from being reused). References
//! on groups are dropped with no lock of the cache held.

use std::cell::RefCell;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use rstat::Group;

/// How many field values each thread remembers the group of, per layer
/// (see the crate docs' "Cost").
pub const CACHED_VALUES: usize = 64;

/// Every this many of its lookups (span creations and records of the
/// field), a thread drops the entries of removed groups from every
/// thread's cache, so that a removed group is not kept allocated by the
/// cache of a thread that no longer sees its value.
pub const CACHE_SWEEP_PERIOD: usize = 1024;

/// Entries per set.
const WAYS: usize = 4;
const SETS: usize = CACHED_VALUES / WAYS;
const _: () = assert!(SETS.is_power_of_two() && SETS * WAYS == CACHED_VALUES);

/// Longer values are not cached.
const MAX_CACHED_VALUE_BYTES: usize = 256;

/// A layer's cache (shared by its clones).
#[derive(Default)]
pub(crate) struct Cache {
    /// Every thread's table, to sweep and to empty.
    tables: Mutex<Vec<Weak<Table>>>,
}

/// One thread's entries for one layer.
#[derive(Default)]
struct Table {
    slots: Mutex<Slots>,
}

#[derive(Default)]
struct Slots {
    /// `SETS * WAYS` entries once the first is stored (none before).
    entries: Vec<Option<Entry>>,
    /// Lookups so far: the LRU clock, and the sweep period's count.
    clock: u64,
}

struct Entry {
    hash: u64,
    /// `clock` at the last hit.
    used: u64,
    value: Box<str>,
    group: Group,
}

thread_local! {
    /// This thread's tables: (the cache it belongs to, the table).
    static TABLES: RefCell<Vec<(Weak<Cache>, Arc<Table>)>> = const { RefCell::new(Vec::new()) };
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing here panics while holding a lock; if something did, the
    // entries are still valid.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A hash of `value` (FxHash's step over 8-byte words; the set is taken
/// from its high bits, the best mixed).
fn hash(value: &str) -> u64 {
    const K: u64 = 0xf135_7aea_2e62_a9c5;
    let mut h: u64 = value.len() as u64;
    let mut chunks = value.as_bytes().chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h.rotate_left(26) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = (h.rotate_left(26) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    h
}

fn set_of(hash: u64) -> usize {
    (hash >> (64 - SETS.trailing_zeros())) as usize
}

impl Slots {
    /// The live group cached for `value`, or `None`; an entry whose group
    /// is offline is taken out and put in `dead` (to drop unlocked).
    fn hit(&mut self, h: u64, value: &str, dead: &mut Option<Group>) -> Option<Group> {
        self.clock += 1;
        let clock = self.clock;
        let set = set_of(h) * WAYS;
        let ways = self.entries.get_mut(set..set + WAYS)?;
        for slot in ways {
            let Some(e) = slot else { continue };
            if e.hash != h || *e.value != *value {
                continue;
            }
            if e.group.is_online() {
                e.used = clock;
                return Some(e.group.clone());
            }
            *dead = slot.take().map(|e| e.group);
            return None;
        }
        None
    }

    /// Store `group` for `value`, in a free way of its set or in place of
    /// the least recently used; returns the group replaced, if any.
    fn store(&mut self, h: u64, value: &str, group: Group) -> Option<Group> {
        if self.entries.is_empty() {
            self.entries.resize_with(SETS * WAYS, || None);
        }
        let set = set_of(h) * WAYS;
        let ways = &mut self.entries[set..set + WAYS];
        // Another span of this thread may have stored it meanwhile (a
        // rule that made spans): keep one entry per value.
        let i = ways
            .iter()
            .position(|s| {
                s.as_ref()
                    .is_some_and(|e| e.hash == h && *e.value == *value)
            })
            .or_else(|| ways.iter().position(Option::is_none))
            .unwrap_or_else(|| {
                (0..WAYS)
                    .min_by_key(|&i| ways[i].as_ref().map_or(0, |e| e.used))
                    .unwrap_or(0)
            });
        let old = ways[i].replace(Entry {
            hash: h,
            used: self.clock,
            value: value.into(),
            group,
        });
        old.map(|e| e.group)
    }

    /// Take out the entries whose group is offline.
    fn take_offline(&mut self, out: &mut Vec<Group>) {
        for slot in &mut self.entries {
            if slot.as_ref().is_some_and(|e| !e.group.is_online()) {
                out.extend(slot.take().map(|e| e.group));
            }
        }
    }

    /// Whether this lookup ends a sweep period.
    fn sweep_due(&self) -> bool {
        self.clock.is_multiple_of(CACHE_SWEEP_PERIOD as u64)
    }
}

impl Cache {
    /// The group for `value`: this thread's cached one if it is live,
    /// else `resolve(value)`'s answer (then cached, if a group). Runs
    /// `resolve` with no lock of the cache held.
    pub(crate) fn get_or(
        self: &Arc<Self>,
        value: &str,
        resolve: impl FnOnce(&str) -> Option<Group>,
    ) -> Option<Group> {
        if value.len() > MAX_CACHED_VALUE_BYTES {
            return resolve(value);
        }
        let h = hash(value);
        let mut dead = None;
        let mut sweep = false;
        // `None`: this thread's thread-locals are gone (it is exiting) or
        // in use further up this thread's stack; then no cache. On a miss,
        // the table to store the answer in.
        let looked = self.with_table(|t| {
            let mut s = lock(&t.slots);
            let hit = s.hit(h, value, &mut dead);
            sweep = s.sweep_due();
            hit.ok_or_else(|| Arc::clone(t))
        });
        drop(dead);
        if sweep {
            self.sweep();
        }
        let table = match looked {
            Some(Ok(g)) => return Some(g),
            Some(Err(t)) => Some(t),
            None => None,
        };
        let group = resolve(value)?;
        if let Some(t) = table {
            if group.is_online() {
                let old = lock(&t.slots).store(h, value, group.clone());
                drop(old);
            }
        }
        Some(group)
    }

    /// Run `f` on this thread's table for this cache (made at the first
    /// call), unless this thread's thread-locals are unavailable.
    fn with_table<R>(self: &Arc<Self>, f: impl FnOnce(&Arc<Table>) -> R) -> Option<R> {
        TABLES
            .try_with(|tables| {
                let mut tables = tables.try_borrow_mut().ok()?;
                let me = Arc::as_ptr(self);
                if let Some((_, t)) = tables.iter().find(|(c, _)| c.as_ptr() == me) {
                    return Some(f(t));
                }
                // First use of this cache on this thread; forget the
                // tables of dropped layers (emptied by their drop).
                tables.retain(|(c, _)| c.strong_count() > 0);
                let t = Arc::new(Table::default());
                let mut all = lock(&self.tables);
                // Tables of exited threads are gone.
                all.retain(|t| t.strong_count() > 0);
                all.push(Arc::downgrade(&t));
                drop(all);
                let r = f(&t);
                tables.push((Arc::downgrade(self), t));
                Some(r)
            })
            .ok()
            .flatten()
    }

    /// Drop the entries of removed groups from every thread's table.
    #[cold]
    fn sweep(&self) {
        let mut dead = Vec::new();
        let tables: Vec<Arc<Table>> = {
            let mut all = lock(&self.tables);
            // Tables of exited threads are gone.
            all.retain(|t| t.strong_count() > 0);
            all.iter().filter_map(Weak::upgrade).collect()
        };
        for t in &tables {
            lock(&t.slots).take_offline(&mut dead);
        }
        drop(tables);
        drop(dead);
    }
}

impl Drop for Cache {
    /// The last clone of the layer is gone: empty every thread's table,
    /// so no group stays referenced by it.
    fn drop(&mut self) {
        let all = std::mem::take(&mut *lock(&self.tables));
        for t in all.iter().filter_map(Weak::upgrade) {
            let entries = std::mem::take(&mut lock(&t.slots).entries);
            drop(entries);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{hash, set_of, SETS};

    #[test]
    fn the_hash_spreads_short_names_over_the_sets() {
        let mut per_set = [0usize; SETS];
        for i in 0..16 * SETS {
            per_set[set_of(hash(&format!("t{i:02}")))] += 1;
        }
        // 16 per set on average; none empty, none with a quarter.
        assert!(
            per_set.iter().all(|&n| n > 0 && n < 4 * SETS),
            "{per_set:?}"
        );
        assert_ne!(hash("ab"), hash("ba"));
        assert_ne!(hash(""), hash("\0"));
    }
}
