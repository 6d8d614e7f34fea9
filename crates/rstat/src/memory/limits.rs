//! Limits and protections: `memory.max`, `memory.high`, `memory.low`,
//! `memory.min`, set by [`Memory::set_limit`] (or written as text through
//! its thin wrapper [`Memory::write_limit`]), and the reclaim a
//! `memory.max` or `memory.high` write makes toward the new value.

use std::sync::Arc;

use super::error::{parse_limit, MemoryError};
use super::events::MemoryEvent;
use super::handle::Memory;
use super::memcg::MemCg;
use super::reclaim::ReclaimBudget;
use crate::group::Group;
use crate::page_counter::PAGE_COUNTER_MAX;

/// Which limit or protection a write sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limit {
    /// `memory.min`: hard protection.
    Min,
    /// `memory.low`: best-effort protection.
    Low,
    /// `memory.high`: throttling threshold.
    High,
    /// `memory.max`: hard limit.
    Max,
}

impl Limit {
    /// The cgroupfs file name (`"memory.max"`, ...).
    pub fn file_name(self) -> &'static str {
        match self {
            Limit::Min => "memory.min",
            Limit::Low => "memory.low",
            Limit::High => "memory.high",
            Limit::Max => "memory.max",
        }
    }
}

/// What a limit write ([`Memory::set_limit`]) did: the new value stands
/// either way; for `memory.max` and `memory.high`, whether reclaim brought
/// usage under it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitWrite {
    /// The value now in force (clamped to [`PAGE_COUNTER_MAX`]).
    pub limit: u64,
    /// Usage before the write.
    pub usage_before: u64,
    /// Usage when the write returned.
    pub usage_after: u64,
    /// Units returned from the subtree's stocks.
    pub drained: u64,
    /// Units the reclaimers reported freeing.
    pub reclaimed: u64,
    /// Whether usage ended at or under the limit (always true for `min` and
    /// `low`).
    pub reached: bool,
}

impl Memory {
    /// The current value of a limit or protection. One load.
    pub fn limit(&self, group: &Group, which: Limit) -> Result<u64, MemoryError> {
        let c = &self.memcg(group)?.counter;
        Ok(match which {
            Limit::Min => c.min(),
            Limit::Low => c.low(),
            Limit::High => c.high(),
            Limit::Max => c.max(),
        })
    }

    /// Set a limit or protection: the one way to write `memory.max`,
    /// `memory.high`, `memory.low` or `memory.min` (the text form,
    /// [`write_limit`](Self::write_limit), parses and calls this). Values
    /// above [`PAGE_COUNTER_MAX`] mean none. Refuses a removed group
    /// ([`MemoryError::Removed`]).
    ///
    /// - `Max` is set even below usage; then the subtree's stocks are
    ///   drained and reclaim works toward it (while reclaim makes progress,
    ///   bounded as a charge's:
    ///   [`max_reclaim_retries`](super::MemoryConfig::max_reclaim_retries)
    ///   rounds without progress,
    ///   [`MAX_RECLAIM_ROUNDS`](super::MAX_RECLAIM_ROUNDS) in all); if that
    ///   falls short, an `oom` is counted, the OOM handler gets a chance,
    ///   and the limit stays anyway (new charges must fit under it).
    /// - `High` is set, then the subtree's stocks are drained and reclaim
    ///   works toward it, bounded as for `Max`, with no OOM: `high` never
    ///   fails anything.
    /// - `Min` and `Low` are only set.
    ///
    /// The result says how far usage got ([`LimitWrite::reached`]).
    ///
    /// Cost: `Min` and `Low`, the counter's setter lock. `Max` and `High`,
    /// that, every CPU's stock lock, and the reclaimers' work.
    pub fn set_limit(
        &self,
        group: &Group,
        which: Limit,
        value: u64,
    ) -> Result<LimitWrite, MemoryError> {
        let m = self.live_memcg(group)?;
        let value = value.min(PAGE_COUNTER_MAX);
        match which {
            Limit::Max => Ok(self.set_max(group, m, value)),
            Limit::High => Ok(self.set_high(group, m, value)),
            Limit::Min | Limit::Low => {
                if which == Limit::Min {
                    m.counter.set_min(value);
                } else {
                    m.counter.set_low(value);
                }
                let usage = m.counter.usage();
                Ok(LimitWrite {
                    limit: value,
                    usage_before: usage,
                    usage_after: usage,
                    drained: 0,
                    reclaimed: 0,
                    reached: true,
                })
            }
        }
    }

    /// The text form of [`set_limit`](Self::set_limit), for writes as to
    /// the cgroupfs file (the C ABI's `rstat_memory_set_limit`, a value
    /// from a command line or a config file): a thin wrapper, exactly
    /// `self.set_limit(group, which, parse_limit(text)?)`. The text is
    /// `"max"` or a number with an optional K/M/G/T/P/E suffix
    /// ([`parse_limit`]); bad text is [`MemoryError::InvalidLimit`] and
    /// changes nothing.
    pub fn write_limit(
        &self,
        group: &Group,
        which: Limit,
        text: &str,
    ) -> Result<LimitWrite, MemoryError> {
        let v = parse_limit(text)?;
        self.set_limit(group, which, v)
    }

    /// [`set_limit`](Self::set_limit) of `Max` on `group`, whose live
    /// state is `m`, with `max` already clamped.
    fn set_max(&self, group: &Group, m: &Arc<MemCg>, max: u64) -> LimitWrite {
        let usage_before = m.counter.usage();
        m.counter.set_max_forced(max);
        let drained = self.drain_subtree(m);
        let mut reclaimed = 0u64;
        let mut budget = ReclaimBudget::new(self.inner.shared.max_retries);
        let mut passed_oom = false;
        loop {
            let usage = m.counter.usage();
            if usage <= max {
                break;
            }
            if budget.may_retry() {
                let (got, any) = self.reclaim_memcg_counted(group, m, usage - max);
                reclaimed = reclaimed.saturating_add(got);
                budget.record(got, any);
                continue;
            }
            m.raise(MemoryEvent::Oom);
            if !passed_oom && self.call_oom_handler(group, m, usage - max) {
                m.raise(MemoryEvent::OomKill);
                passed_oom = true;
                budget = ReclaimBudget::new(self.inner.shared.max_retries);
                continue;
            }
            break;
        }
        let usage_after = m.counter.usage();
        if usage_after > max {
            self.inner.shared.stocks.mark_over(m);
        } else {
            self.inner.shared.stocks.clear_over(m);
        }
        LimitWrite {
            limit: max,
            usage_before,
            usage_after,
            drained,
            reclaimed,
            reached: usage_after <= max,
        }
    }

    /// [`set_limit`](Self::set_limit) of `High` on `group`, whose live
    /// state is `m`, with `high` already clamped.
    fn set_high(&self, group: &Group, m: &Arc<MemCg>, high: u64) -> LimitWrite {
        let usage_before = m.counter.usage();
        m.counter.set_high(high);
        let drained = self.drain_subtree(m);
        let mut reclaimed = 0u64;
        let mut budget = ReclaimBudget::new(self.inner.shared.max_retries);
        while budget.may_retry() {
            let usage = m.counter.usage();
            if usage <= high {
                break;
            }
            let (got, any) = self.reclaim_memcg_counted(group, m, usage - high);
            reclaimed = reclaimed.saturating_add(got);
            budget.record(got, any);
        }
        let usage_after = m.counter.usage();
        LimitWrite {
            limit: high,
            usage_before,
            usage_after,
            drained,
            reclaimed,
            reached: usage_after <= high,
        }
    }
}
