//! `cpu.max` for work that is not a thread of its own: a quota of run time
//! per period, per group, for the futures scoped in it
//! ([`Group::scope`](crate::Group::scope), [`Group::killable`](crate::Group::killable),
//! and what is built on them: the tracing and tower layers).
//!
//! The kernel's CFS bandwidth control gives a cgroup `quota` µs of CPU
//! time per `period` µs and stops its threads when the quota is spent,
//! until the next period. A cooperative executor cannot be stopped in the
//! middle of a poll, so here a poll is charged, when it ends, the CPU
//! time it ran (the worker thread's CPU clock read around it, so time the
//! worker spent preempted does not count), to its group and every
//! ancestor with a quota; and before a
//! poll, a group (or an ancestor) whose quota for the current period is
//! spent has its poll deferred to the next period: the future returns
//! pending and is woken at the period's start (`attach`'s throttle timer).
//! A poll that overruns the quota leaves a debt the next periods pay
//! first, so the long-run share is the quota whatever the polls' length;
//! the debt is capped at one period of run time past the quota, so one
//! very long poll defers the group for about a period, not for as long as
//! it ran (the kernel bounds a thread's overrun by its tick). The group's `cpu.stat` gains the kernel's
//! `nr_periods` (periods in which the group ran), `nr_throttled` (periods
//! in which a poll was deferred) and `throttled_usec` (from each deferral
//! to the period's end, once per period).
//!
//! Only scoped polls are timed and held: work made current by
//! [`Group::enter`](crate::Group::enter) (a thread, or `rstat-tracing`'s
//! span layer, which enters the span's group in a synchronous callback
//! that cannot hold a poll back) is charged but not limited. To cap a
//! span-instrumented future, scope it as well
//! (`fut.instrument(span).in_group(&tenant)`).
//!
//! What it does not do: stop a thread that is not in a scoped poll (a
//! thread that [`enter`](crate::Group::enter)s a group is charged, and its
//! time counts against the quota at its polls' ends only if it runs
//! scoped futures), or share CPU in proportion to weights: `cpu.weight`
//! needs the executor to choose *which* runnable task runs next, which an
//! executor-agnostic wrapper around each future cannot do; deferring
//! polls can only cap a group (leaving the CPU to whoever else is
//! runnable), not give it a share it cannot take.
//!
//! # Synchronization
//!
//! Every field is an atomic read on its own. A period's accounting is
//! approximate at the edges: a poll ending just as the period turns may be
//! charged to either, and two pollers rolling the period over at once make
//! one roll; the quota is an average over periods, not a hard per-period
//! wall. Setting a quota marks the subtree limited under each group's
//! children lock, as `kill` marks it, so a group created meanwhile
//! inherits the mark; clearing it leaves the marks (a limited-marked group
//! with no quota above it costs its polls the clock reads and nothing
//! else).

use core::fmt;

use super::Group;
use crate::error::{Error, Result};
use crate::sync::{self, AtomicU64, Ordering};

/// The kernel's default `cpu.max` period, 100 ms.
pub const DEFAULT_CPU_PERIOD_US: u64 = 100_000;
/// The shortest and longest periods (the kernel's bounds: 1 ms to 1 s).
pub const MIN_CPU_PERIOD_US: u64 = 1_000;
/// See [`MIN_CPU_PERIOD_US`].
pub const MAX_CPU_PERIOD_US: u64 = 1_000_000;

/// A group's `cpu.max`: `quota_us` of run time per `period_us` (`None`:
/// `max`, no limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CpuMax {
    /// µs per period; `None` for no limit.
    pub quota_us: Option<u64>,
    /// The period, µs.
    pub period_us: u64,
}

impl Default for CpuMax {
    fn default() -> Self {
        CpuMax {
            quota_us: None,
            period_us: DEFAULT_CPU_PERIOD_US,
        }
    }
}

impl fmt::Display for CpuMax {
    /// The kernel's `cpu.max` text: `"max 100000"`, `"20000 100000"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.quota_us {
            Some(q) => write!(f, "{q} {}", self.period_us),
            None => write!(f, "max {}", self.period_us),
        }
    }
}

impl std::str::FromStr for CpuMax {
    type Err = Error;

    /// The kernel's `cpu.max` format: `"QUOTA PERIOD"` or `"QUOTA"` (the
    /// period unchanged: the default here), `QUOTA` a number of µs or
    /// `max`.
    fn from_str(s: &str) -> Result<Self> {
        let bad = |reason: &str| {
            Error::InvalidCpuMax {
            input: s.chars().take(64).collect(),
            reason: format!(
                "{reason}; write \"QUOTA PERIOD\" in µs (QUOTA a number or max), e.g. \"20000 100000\""
            ),
        }
        };
        let mut words = s.split_ascii_whitespace();
        let quota = match words.next() {
            None => return Err(bad("empty")),
            Some("max") => None,
            Some(w) => Some(
                w.parse::<u64>()
                    .map_err(|_| bad("the quota is not a number"))?,
            ),
        };
        let period_us = match words.next() {
            None => DEFAULT_CPU_PERIOD_US,
            Some(w) => w
                .parse::<u64>()
                .map_err(|_| bad("the period is not a number"))?,
        };
        if words.next().is_some() {
            return Err(bad("more than two fields"));
        }
        let m = CpuMax {
            quota_us: quota,
            period_us,
        };
        m.check().map_err(|r| bad(&r))?;
        Ok(m)
    }
}

impl CpuMax {
    fn check(&self) -> std::result::Result<(), String> {
        if !(MIN_CPU_PERIOD_US..=MAX_CPU_PERIOD_US).contains(&self.period_us) {
            return Err(format!(
                "the period {} µs is outside {MIN_CPU_PERIOD_US}..={MAX_CPU_PERIOD_US}",
                self.period_us
            ));
        }
        if let Some(q) = self.quota_us {
            if q < MIN_CPU_PERIOD_US {
                return Err(format!("the quota {q} µs is below {MIN_CPU_PERIOD_US}"));
            }
            if q > self.period_us.saturating_mul(1024) {
                return Err(format!("the quota {q} µs is above 1024 periods"));
            }
        }
        Ok(())
    }
}

/// A group's `cpu.max` throttling counts (its `cpu.stat`'s last lines).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CpuMaxStat {
    /// Periods in which the group's scoped work ran, while it had a quota.
    pub nr_periods: u64,
    /// Periods in which a poll of the group was deferred.
    pub nr_throttled: u64,
    /// Time from each period's first deferral to the period's end, µs.
    pub throttled_usec: u64,
}

/// The per-group state. `quota_ns` is `u64::MAX` for no limit.
pub(crate) struct Bandwidth {
    quota_ns: AtomicU64,
    period_ns: AtomicU64,
    /// The period (now / period_ns) `used_ns` counts in.
    period_id: AtomicU64,
    used_ns: AtomicU64,
    /// The last period counted in `nr_periods` / `nr_throttled`.
    ran_period: AtomicU64,
    throttled_period: AtomicU64,
    nr_periods: AtomicU64,
    nr_throttled: AtomicU64,
    throttled_ns: AtomicU64,
}

impl Bandwidth {
    pub(crate) fn new() -> Self {
        Bandwidth {
            quota_ns: AtomicU64::new(u64::MAX),
            period_ns: AtomicU64::new(DEFAULT_CPU_PERIOD_US * 1000),
            period_id: AtomicU64::new(0),
            used_ns: AtomicU64::new(0),
            ran_period: AtomicU64::new(u64::MAX),
            throttled_period: AtomicU64::new(u64::MAX),
            nr_periods: AtomicU64::new(0),
            nr_throttled: AtomicU64::new(0),
            throttled_ns: AtomicU64::new(0),
        }
    }

    /// Roll `used_ns` over to the period of `now`, paying its debt with the
    /// quota of each period gone by. Returns (period id, period, quota).
    fn roll(&self, now: u64) -> (u64, u64, u64) {
        let period = self.period_ns.load(Ordering::Relaxed).max(1);
        let quota = self.quota_ns.load(Ordering::Relaxed);
        let pid = now / period;
        let old = self.period_id.load(Ordering::Relaxed);
        // `pid < old` only after the period grew (`set_cpu_max` resets the
        // id, but a poll may race it): start over in the new numbering.
        if pid != old
            && self
                .period_id
                .compare_exchange(old, pid, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let paid = if pid > old {
                quota.saturating_mul(pid - old)
            } else {
                u64::MAX
            };
            let mut cur = self.used_ns.load(Ordering::Relaxed);
            while let Err(c) = self.used_ns.compare_exchange_weak(
                cur,
                cur.saturating_sub(paid),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                cur = c;
            }
        }
        (pid, period, quota)
    }
}

impl Group {
    /// Set this group's `cpu.max` (module docs): its scoped futures' polls
    /// get `quota` of run time per `period` between them and its
    /// descendants'; then they are deferred to the next period. `quota_us:
    /// None` removes the limit.
    ///
    /// Errors: [`Error::InvalidCpuMax`] for a period outside 1 ms..=1 s or a
    /// quota below 1 ms or above 1024 periods.
    pub fn set_cpu_max(&self, max: CpuMax) -> Result<()> {
        max.check().map_err(|reason| Error::InvalidCpuMax {
            input: max.to_string(),
            reason,
        })?;
        // Made at the first setting (most groups never have one), as the
        // crate's memory.
        let bw = crate::sync::untracked(|| {
            self.inner()
                .bandwidth
                .get_or_init(|| Box::new(Bandwidth::new()))
        });
        let period = max.period_us.saturating_mul(1000);
        bw.period_ns.store(period, Ordering::Relaxed);
        bw.quota_ns.store(
            max.quota_us.map_or(u64::MAX, |q| q.saturating_mul(1000)),
            Ordering::Relaxed,
        );
        // A new setting starts a new account in its own period numbering
        // (an old period id under a longer period would never roll over).
        let now = crate::os::mono_ns();
        bw.period_id.store(now / period.max(1), Ordering::Relaxed);
        bw.used_ns.store(0, Ordering::Relaxed);
        if max.quota_us.is_some() {
            self.inner()
                .engine
                .cpu_max_used
                .store(true, Ordering::Relaxed);
            // Mark the subtree (module docs: as `kill` marks it).
            let mut todo = vec![self.clone()];
            while let Some(g) = todo.pop() {
                g.inner().cpu_limited.store(true, Ordering::Release);
                let children = sync::lock(&g.inner().children);
                todo.extend(children.values().copied().filter_map(Group::from_map));
            }
        }
        Ok(())
    }

    /// [`set_cpu_max`](Self::set_cpu_max) from the kernel's text
    /// (`"20000 100000"`, `"max"`).
    pub fn write_cpu_max(&self, text: &str) -> Result<()> {
        self.set_cpu_max(text.parse()?)
    }

    /// This group's `cpu.max`.
    pub fn cpu_max(&self) -> CpuMax {
        let Some(bw) = self.inner().bandwidth.get() else {
            return CpuMax::default();
        };
        let q = bw.quota_ns.load(Ordering::Relaxed);
        CpuMax {
            quota_us: (q != u64::MAX).then_some(q / 1000),
            period_us: bw.period_ns.load(Ordering::Relaxed) / 1000,
        }
    }

    /// This group's throttling counts.
    pub fn cpu_max_stat(&self) -> CpuMaxStat {
        let Some(bw) = self.inner().bandwidth.get() else {
            return CpuMaxStat::default();
        };
        CpuMaxStat {
            nr_periods: bw.nr_periods.load(Ordering::Relaxed),
            nr_throttled: bw.nr_throttled.load(Ordering::Relaxed),
            throttled_usec: bw.throttled_ns.load(Ordering::Relaxed) / 1000,
        }
    }

    /// Whether polls of this group are timed (it or an ancestor has had a
    /// quota). One load; in an engine where some group has a quota, a walk
    /// up the chain for groups outside the marked subtrees.
    #[inline]
    pub(crate) fn cpu_limited(&self) -> bool {
        let inner = self.inner();
        inner.cpu_limited.load(Ordering::Relaxed)
            || (inner.engine.cpu_max_used.load(Ordering::Relaxed) && self.quota_above())
    }

    /// Some ancestor has a quota (for a group outside the marked subtree:
    /// removed before the quota was set). A walk up the chain.
    #[cold]
    fn quota_above(&self) -> bool {
        let mut g = self.inner().parent.as_ref();
        while let Some(cur) = g {
            if cur
                .inner()
                .bandwidth
                .get()
                .is_some_and(|bw| bw.quota_ns.load(Ordering::Relaxed) != u64::MAX)
            {
                return true;
            }
            g = cur.inner().parent.as_ref();
        }
        false
    }

    /// If this group or an ancestor has spent its quota for the period of
    /// `now` (monotonic ns), the time its next poll may run (that period's
    /// end), counting the deferral.
    pub(crate) fn cpu_throttled_until(&self, now: u64) -> Option<u64> {
        let mut until = None::<u64>;
        // Levels from this group up to the highest one whose quota is
        // spent: every scoped poll below it waits (a full stall there),
        // while above it other work runs.
        let mut full_levels = 0usize;
        let mut level = 0usize;
        let mut g = Some(self);
        while let Some(cur) = g {
            level += 1;
            let Some(bw) = cur.inner().bandwidth.get() else {
                g = cur.inner().parent.as_ref();
                continue;
            };
            if bw.quota_ns.load(Ordering::Relaxed) != u64::MAX {
                let (pid, period, quota) = bw.roll(now);
                if bw.used_ns.load(Ordering::Relaxed) >= quota {
                    let end = (pid + 1).saturating_mul(period);
                    if bw.throttled_period.swap(pid, Ordering::Relaxed) != pid {
                        bw.nr_throttled.fetch_add(1, Ordering::Relaxed);
                        bw.throttled_ns
                            .fetch_add(end.saturating_sub(now), Ordering::Relaxed);
                    }
                    until = Some(until.map_or(end, |u| u.max(end)));
                    full_levels = level;
                }
            }
            g = cur.inner().parent.as_ref();
        }
        if let Some(end) = until {
            self.record_stall_levels(super::PressureKind::Cpu, now, end, full_levels);
        }
        until
    }

    /// Charge a poll that ran `ran` ns and ended at `now` to this group's
    /// and its ancestors' quotas.
    pub(crate) fn cpu_consume(&self, ran: u64, now: u64) {
        let mut g = Some(self);
        while let Some(cur) = g {
            let Some(bw) = cur.inner().bandwidth.get() else {
                g = cur.inner().parent.as_ref();
                continue;
            };
            if bw.quota_ns.load(Ordering::Relaxed) != u64::MAX {
                let (pid, period, quota) = bw.roll(now);
                // Debt is capped at one period of run time past the quota:
                // one very long poll defers the group for a period or so,
                // not for as long as it ran.
                let cap = quota.saturating_add(period);
                let mut cur_used = bw.used_ns.load(Ordering::Relaxed);
                while let Err(c) = bw.used_ns.compare_exchange_weak(
                    cur_used,
                    cur_used.saturating_add(ran).min(cap.max(cur_used)),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    cur_used = c;
                }
                if bw.ran_period.swap(pid, Ordering::Relaxed) != pid {
                    bw.nr_periods.fetch_add(1, Ordering::Relaxed);
                }
            }
            g = cur.inner().parent.as_ref();
        }
    }
}
