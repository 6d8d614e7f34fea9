//! Removal watches: be told which groups were removed, to report their
//! final values once.
//!
//! A metrics exporter that walks the live tree at each scrape never sees a
//! group created and removed between two scrapes (cAdvisor's and netdata's
//! blind spot for short-lived cgroups). [`Rstat::watch_removals`] gives it
//! a queue: every successful [`Group::remove`] from then on appends a
//! handle to the removed group, and the exporter [`take`](RemovalWatch::take)s
//! them at its next scrape, reads them (a removed group's handle still
//! reads its totals, and its local ones stay its own), reports them once
//! and drops them.
//!
//! # Cost and bound
//!
//! `remove` pays one load when no watch was ever created, or when the
//! group is deeper than every watch's `max_depth`; otherwise one lock of
//! the engine's watcher list, and per live watch one lock of its queue and
//! one group reference (a per-CPU add). A queued group is a zombie
//! ([`Rstat::zombie_count`]): its per-CPU state stays allocated until the
//! watch lets go of it, so each queue holds at most `capacity` groups;
//! removals past that are counted ([`RemovalWatch::lost`]) and not queued.
//! Groups deeper than the watch's `max_depth` (per-request groups, say,
//! that an exporter does not report) are not queued. Dropping the watch drops its queued handles and
//! stops the queueing.
//!
//! [`Rstat::watch_removals`]: crate::Rstat::watch_removals
//! [`Rstat::zombie_count`]: crate::Rstat::zombie_count

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use crate::group::EngineInner;
use crate::group::Group;
use crate::sync::{self, AtomicU64, Mutex, Ordering};

/// The queue one watch owns; the engine keeps a weak reference.
pub(crate) struct RemovalQueue {
    groups: Mutex<VecDeque<Group>>,
    capacity: usize,
    max_depth: usize,
    lost: AtomicU64,
}

/// A queue of groups removed since it was created or last emptied; see the
/// [module docs](self).
pub struct RemovalWatch {
    queue: Arc<RemovalQueue>,
}

impl std::fmt::Debug for RemovalWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemovalWatch")
            .field("capacity", &self.queue.capacity)
            .field("lost", &self.lost())
            .finish()
    }
}

impl RemovalWatch {
    pub(crate) fn new(engine: &EngineInner, capacity: usize, max_depth: usize) -> Self {
        let queue = Arc::new(RemovalQueue {
            groups: Mutex::new(VecDeque::new()),
            capacity,
            max_depth,
            lost: AtomicU64::new(0),
        });
        let mut w = sync::lock(&engine.removal_watchers);
        w.retain(|q| q.strong_count() > 0);
        w.push(Arc::downgrade(&queue));
        // Release, after the push: a removal that sees the new depth finds
        // the queue under the lock anyway; this only lets removals deeper
        // than every watch skip the lock.
        engine
            .removal_watch_depth
            .fetch_max(max_depth.max(1), Ordering::Release);
        RemovalWatch { queue }
    }

    /// The groups removed since the last call, in removal order (a child
    /// before its parent). Cost: the queue's lock, a move of its contents.
    pub fn take(&self) -> Vec<Group> {
        let taken = core::mem::take(&mut *sync::lock(&self.queue.groups));
        taken.into()
    }

    /// Removals not queued because the queue held `capacity` groups. Never
    /// reset.
    pub fn lost(&self) -> u64 {
        self.queue.lost.load(Ordering::Relaxed)
    }

    /// The deepest groups queued (the root is depth 0).
    pub fn max_depth(&self) -> usize {
        self.queue.max_depth
    }

    /// The most groups the queue holds.
    pub fn capacity(&self) -> usize {
        self.queue.capacity
    }
}

impl EngineInner {
    /// Tell every live watch that `g` was removed (called by
    /// [`Group::remove`] once the group is offline, holding no lock).
    pub(crate) fn notify_removed(&self, g: &Group) {
        if g.depth() > self.removal_watch_depth.load(Ordering::Acquire) {
            return;
        }
        let mut w = sync::lock(&self.removal_watchers);
        if w.is_empty() {
            return;
        }
        w.retain(|q: &Weak<RemovalQueue>| match q.upgrade() {
            Some(q) if g.depth() > q.max_depth => true,
            Some(q) => {
                let mut groups = sync::lock(&q.groups);
                if groups.len() < q.capacity {
                    groups.push_back(g.clone());
                } else {
                    q.lost.fetch_add(1, Ordering::Relaxed);
                }
                true
            }
            None => false,
        });
    }
}
