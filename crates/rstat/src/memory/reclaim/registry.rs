//! Registering what reclaim calls: reclaimers per group
//! ([`Memory::register_reclaimer`]) and the OOM handler
//! ([`Memory::set_oom_handler`]), and the call of that handler when reclaim
//! cannot make room.

use std::sync::Arc;

use super::{OomContext, OomHandler, Reclaimer, ReclaimerId};
use crate::group::Group;
use crate::memory::error::MemoryError;
use crate::memory::handle::Memory;
use crate::memory::memcg::MemCg;
use crate::sync;

/// Ids for reclaimers: process-wide, part of no protocol (std's atomic,
/// not the model checker's, so it can be a static).
static NEXT_RECLAIMER_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Memory {
    /// Register a reclaimer for `group` (a removed group's goes to its
    /// nearest live ancestor; a group's reclaimers move to its parent when
    /// it is removed). Cost: the group's reclaimer lock.
    pub fn register_reclaimer<R: Reclaimer>(
        &self,
        group: &Group,
        reclaimer: R,
    ) -> Result<ReclaimerId, MemoryError> {
        let t = self.target(group)?;
        // Relaxed: a unique number, nothing else.
        let id = ReclaimerId(NEXT_RECLAIMER_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        sync::lock(&t.memcg.reclaimers)
            .0
            .push((id, Arc::new(reclaimer)));
        Ok(id)
    }

    /// Remove a reclaimer registered on `group` (found there or on an
    /// ancestor it moved to). Returns whether it was found. A call to it
    /// already under way may still complete.
    pub fn unregister_reclaimer(
        &self,
        group: &Group,
        id: ReclaimerId,
    ) -> Result<bool, MemoryError> {
        let mut m = Some(Arc::clone(self.memcg(group)?));
        while let Some(c) = m {
            let mut list = sync::lock(&c.reclaimers);
            if let Some(i) = list.0.iter().position(|(r, _)| *r == id) {
                let (_, r) = list.0.remove(i);
                drop(list);
                drop(r);
                return Ok(true);
            }
            drop(list);
            m = c.parent.clone();
        }
        Ok(false)
    }

    /// Set `group`'s OOM handler (replacing any). Dropped when the group is
    /// removed.
    pub fn set_oom_handler<H: OomHandler>(
        &self,
        group: &Group,
        handler: H,
    ) -> Result<(), MemoryError> {
        let m = self.live_memcg(group)?;
        *sync::lock(&m.oom_handler) = Some(Arc::new(handler));
        Ok(())
    }

    /// Remove `group`'s OOM handler; returns whether it had one.
    pub fn clear_oom_handler(&self, group: &Group) -> Result<bool, MemoryError> {
        let m = self.memcg(group)?;
        Ok(sync::lock(&m.oom_handler).take().is_some())
    }

    pub(crate) fn call_oom_handler(&self, group: &Group, m: &MemCg, amount: u64) -> bool {
        let h = sync::lock(&m.oom_handler).clone();
        h.is_some_and(|h| {
            h.on_oom(&OomContext {
                group,
                amount,
                usage: m.counter.usage(),
                max: m.counter.max(),
            })
        })
    }
}
