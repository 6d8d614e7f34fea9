//! Limits and protections: `memory.max`, `memory.high`, `memory.low`,
//! `memory.min`, set as numbers or written as text, and the reclaim a
//! `memory.max` or `memory.high` write makes toward the new value.

use super::error::{parse_limit, MemoryError};
use super::events::MemoryEvent;
use super::handle::Memory;
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

/// What a limit write did: the new value stands either way; for
/// `memory.max` and `memory.high`, whether reclaim brought usage under it.
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

    /// Set a limit or protection (values above [`PAGE_COUNTER_MAX`] mean
    /// none). `Max` and `High` drain the subtree's stocks and reclaim toward
    /// the new value ([`set_max`](Self::set_max), [`set_high`](Self::set_high));
    /// `Min` and `Low` only set it.
    pub fn set_limit(
        &self,
        group: &Group,
        which: Limit,
        value: u64,
    ) -> Result<LimitWrite, MemoryError> {
        match which {
            Limit::Max => self.set_max(group, value),
            Limit::High => self.set_high(group, value),
            Limit::Min | Limit::Low => {
                let m = self.live_memcg(group)?;
                let value = value.min(PAGE_COUNTER_MAX);
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

    /// Write a limit as text, as to the cgroupfs file: `"max"` or a number
    /// with an optional K/M/G/T/P/E suffix ([`parse_limit`]). Bad text is
    /// [`MemoryError::InvalidLimit`] and changes nothing.
    pub fn write_limit(
        &self,
        group: &Group,
        which: Limit,
        text: &str,
    ) -> Result<LimitWrite, MemoryError> {
        let v = parse_limit(text)?;
        self.set_limit(group, which, v)
    }

    /// `memory.max` write: set the limit even below usage, drain the
    /// subtree's stocks, reclaim toward it (while reclaim makes progress,
    /// bounded as a charge's:
    /// [`max_reclaim_retries`](super::MemoryConfig::max_reclaim_retries)
    /// rounds without progress, [`MAX_RECLAIM_ROUNDS`](super::MAX_RECLAIM_ROUNDS)
    /// in all); if that falls
    /// short, count `oom`, give the OOM handler a chance, and keep the limit
    /// anyway (new charges must fit under it). The result says how far
    /// usage got.
    ///
    /// Cost: the counter's setter lock, every CPU's stock lock, and the
    /// reclaimers' work.
    pub fn set_max(&self, group: &Group, max: u64) -> Result<LimitWrite, MemoryError> {
        let m = self.live_memcg(group)?;
        let max = max.min(PAGE_COUNTER_MAX);
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
        Ok(LimitWrite {
            limit: max,
            usage_before,
            usage_after,
            drained,
            reclaimed,
            reached: usage_after <= max,
        })
    }

    /// `memory.high` write: set the threshold, drain the subtree's stocks,
    /// and reclaim toward it (bounded as [`set_max`](Self::set_max)'s, no
    /// OOM: `high` never fails anything). Cost as
    /// [`set_max`](Self::set_max).
    pub fn set_high(&self, group: &Group, high: u64) -> Result<LimitWrite, MemoryError> {
        let m = self.live_memcg(group)?;
        let high = high.min(PAGE_COUNTER_MAX);
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
        Ok(LimitWrite {
            limit: high,
            usage_before,
            usage_after,
            drained,
            reclaimed,
            reached: usage_after <= high,
        })
    }
}
