//! `memory.events` and `memory.events.local`: counts of limit and
//! protection events, per group.
//!
//! An event raised on a group adds one to that group's local count and to
//! the hierarchical count of the group and every ancestor (the kernel's
//! `memcg_memory_event` with the default mount options), so a parent's
//! `memory.events` says how often anything below it hit a boundary.
//!
//! # Synchronization
//!
//! Every count is a `Relaxed` atomic add or load: each is a statistic read
//! on its own, nothing is published through it, and atomicity alone makes
//! every increment land exactly once.

use core::fmt;

use crate::sync::{AtomicU64, Ordering};

/// The kinds of `memory.events`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryEvent {
    /// Reclaim took memory from a group whose usage was within its
    /// effective `memory.low`, because nothing unprotected was left.
    Low,
    /// A charge left a group's usage above its `memory.high`.
    High,
    /// A charge found a group at its `memory.max`: it had to drain stocks
    /// and reclaim, or (the accounting allocator in
    /// [`HeapLimitMode::Account`](super::HeapLimitMode::Account)) was
    /// charged past it. (The kernel counts one per reclaim attempt; we
    /// count one per charge, so the figure does not depend on the retry
    /// count.)
    Max,
    /// A charge could not be satisfied within a group's `memory.max` after
    /// draining and reclaim: it failed, or (asked with
    /// [`OnOom::Force`](super::OnOom::Force), the kernel's `__GFP_NOFAIL`)
    /// was forced past it; or a `memory.max` write could not reclaim down
    /// to the new limit. Never raised for an allocation that was accounted
    /// past the limit without trying to reclaim (`HeapLimitMode::Account`):
    /// nothing was refused or about to be, so an alert on `oom` means
    /// work failed or had to be stopped.
    Oom,
    /// The group's OOM handler reported that it freed something (killed a
    /// task, cancelled a query): the analog of the kernel's `oom_kill`.
    OomKill,
}

impl MemoryEvent {
    /// Every kind, in `memory.events` order.
    pub const ALL: [MemoryEvent; 5] = [
        MemoryEvent::Low,
        MemoryEvent::High,
        MemoryEvent::Max,
        MemoryEvent::Oom,
        MemoryEvent::OomKill,
    ];

    /// The key in `memory.events`.
    pub fn name(self) -> &'static str {
        match self {
            MemoryEvent::Low => "low",
            MemoryEvent::High => "high",
            MemoryEvent::Max => "max",
            MemoryEvent::Oom => "oom",
            MemoryEvent::OomKill => "oom_kill",
        }
    }
}

/// A snapshot of one group's `memory.events` (hierarchical) or
/// `memory.events.local`. `Display` prints the cgroupfs format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct MemoryEvents {
    /// [`MemoryEvent::Low`] count.
    pub low: u64,
    /// [`MemoryEvent::High`] count.
    pub high: u64,
    /// [`MemoryEvent::Max`] count.
    pub max: u64,
    /// [`MemoryEvent::Oom`] count.
    pub oom: u64,
    /// [`MemoryEvent::OomKill`] count.
    pub oom_kill: u64,
}

impl MemoryEvents {
    /// The count of one kind.
    pub fn get(&self, ev: MemoryEvent) -> u64 {
        match ev {
            MemoryEvent::Low => self.low,
            MemoryEvent::High => self.high,
            MemoryEvent::Max => self.max,
            MemoryEvent::Oom => self.oom,
            MemoryEvent::OomKill => self.oom_kill,
        }
    }
}

impl fmt::Display for MemoryEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for ev in MemoryEvent::ALL {
            writeln!(f, "{} {}", ev.name(), self.get(ev))?;
        }
        Ok(())
    }
}

/// One group's event counters.
pub(crate) struct Events {
    local: [AtomicU64; 5],
    hierarchical: [AtomicU64; 5],
}

impl Events {
    pub(crate) fn new() -> Self {
        Events {
            local: core::array::from_fn(|_| AtomicU64::new(0)),
            hierarchical: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    pub(crate) fn add_local(&self, ev: MemoryEvent) {
        self.local[ev as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add_hierarchical(&self, ev: MemoryEvent) {
        self.hierarchical[ev as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(counts: &[AtomicU64; 5]) -> MemoryEvents {
        let v = |ev: MemoryEvent| counts[ev as usize].load(Ordering::Relaxed);
        MemoryEvents {
            low: v(MemoryEvent::Low),
            high: v(MemoryEvent::High),
            max: v(MemoryEvent::Max),
            oom: v(MemoryEvent::Oom),
            oom_kill: v(MemoryEvent::OomKill),
        }
    }

    pub(crate) fn local(&self) -> MemoryEvents {
        Self::snapshot(&self.local)
    }

    pub(crate) fn hierarchical(&self) -> MemoryEvents {
        Self::snapshot(&self.hierarchical)
    }
}
