//! Pressure: how long a group's work was stalled by its limits, in the
//! kernel's PSI format (`cpu.pressure`, `memory.pressure`).
//!
//! A stall is an interval of wall time in which some of the group's work
//! could not run because of a limit:
//!
//! - **cpu**: the group (or an ancestor) spent its `cpu.max` quota, so
//!   its scoped polls wait for the next period (`group::bandwidth`): from
//!   a deferral to the period's end. Every scoped poll of the group, and of
//!   the groups up to the one whose quota is spent, waits then, so there
//!   it is both `some` and `full`; above that group only `some`.
//! - **memory**: a scoped future held back, or a thread sleeping at
//!   `throttle_point`, by a `memory.high` penalty; and the time an
//!   allocation spent in the reclaimers and the drains of the over-limit
//!   path. Other work of the group may run meanwhile, so this is `some`;
//!   `full` (no work of the group could run) would need to know which of
//!   the group's tasks are runnable, which an executor-agnostic wrapper
//!   does not, so it stays 0.
//!
//! As in the kernel, `total` is the union of the stall intervals, in µs
//! (two futures held over the same 100 ms count 100 ms, not 200), and a
//! stall counts in the group and every ancestor. `avg10`, `avg60`,
//! `avg300` are the share of wall time stalled, in percent, averaged
//! exponentially over 10 s, 60 s and 300 s windows; they are brought up
//! to date when read, with each window decayed by the time since the last
//! read (exact for a constant stall rate between reads).
//!
//! # Synchronization
//!
//! The union is kept with one atomic "stalled until" per (group, kind):
//! an interval adds the part of it past that mark, and moves the mark,
//! with a compare-and-swap loop; an interval that starts before the mark
//! and ends after it counts only its part past the mark, so intervals
//! recorded out of order may be under-counted, never counted twice. A
//! stall is counted when it starts, for its whole announced length (a
//! hold until a deadline), so `total` can run ahead of the time read by
//! up to that length. The averages are under a mutex taken only by readers. The
//! per-group state is made at its first stall, so a group that never
//! stalls costs a pointer.

use core::fmt::Write;
use std::sync::{Mutex, OnceLock};

use super::Group;
use std::sync::atomic::{AtomicU64, Ordering};

/// Which resource a stall was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PressureKind {
    /// `cpu.pressure`.
    Cpu,
    /// `memory.pressure`.
    Memory,
}

/// The averaging windows, seconds.
const WINDOWS: [f64; 3] = [10.0, 60.0, 300.0];

/// One line's running state (`some` or `full`).
#[derive(Default)]
struct Line {
    total_ns: AtomicU64,
    until_ns: AtomicU64,
}

impl Line {
    /// Add the part of `[start, end)` past the stalled-until mark.
    fn add(&self, start: u64, end: u64) {
        let mut until = self.until_ns.load(Ordering::Relaxed);
        loop {
            if end <= until {
                return;
            }
            match self.until_ns.compare_exchange_weak(
                until,
                end,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    let from = start.max(until);
                    self.total_ns.fetch_add(end - from, Ordering::Relaxed);
                    return;
                }
                Err(u) => until = u,
            }
        }
    }
}

/// The averages of one line, brought up to date at reads.
#[derive(Default, Clone, Copy)]
struct Avgs {
    at_ns: u64,
    total_ns: u64,
    pct: [f64; 3],
}

impl Avgs {
    fn update(&mut self, now: u64, total: u64) -> [f64; 3] {
        if self.at_ns == 0 {
            self.at_ns = now;
            self.total_ns = total;
            return self.pct;
        }
        let dt = now.saturating_sub(self.at_ns);
        if dt > 0 {
            let rate = (total.saturating_sub(self.total_ns)) as f64 / dt as f64 * 100.0;
            for (p, w) in self.pct.iter_mut().zip(WINDOWS) {
                let keep = (-(dt as f64) / 1e9 / w).exp();
                *p = *p * keep + rate.min(100.0) * (1.0 - keep);
            }
            self.at_ns = now;
            self.total_ns = total;
        }
        self.pct
    }
}

/// One resource's pressure in a group.
#[derive(Default)]
struct Resource {
    some: Line,
    full: Line,
    avgs: Mutex<[Avgs; 2]>,
}

/// A group's pressure state, made at its first stall.
#[derive(Default)]
pub(crate) struct Pressure {
    cpu: Resource,
    memory: Resource,
}

/// A group's pressure totals, µs (what the exporter and snapshots carry).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PressureTotals {
    /// `some` total, µs.
    pub some_usec: u64,
    /// `full` total, µs.
    pub full_usec: u64,
}

pub(crate) type PressureCell = OnceLock<Box<Pressure>>;

impl Pressure {
    fn resource(&self, kind: PressureKind) -> &Resource {
        match kind {
            PressureKind::Cpu => &self.cpu,
            PressureKind::Memory => &self.memory,
        }
    }
}

impl Group {
    /// Record that this group's work (and so every ancestor's) was
    /// stalled by `kind`'s limit over `[start, end)` (monotonic ns):
    /// `some`, and `full` too if `full`.
    pub(crate) fn record_stall(&self, kind: PressureKind, start: u64, end: u64, full: bool) {
        self.record_stall_levels(kind, start, end, if full { usize::MAX } else { 0 });
    }

    /// [`record_stall`](Self::record_stall), counting `full` only in the
    /// first `full_levels` groups of the chain (this group is the first):
    /// above the group whose limit stalled everything below it, other
    /// work runs, so there the stall is only `some`.
    pub(crate) fn record_stall_levels(
        &self,
        kind: PressureKind,
        start: u64,
        end: u64,
        full_levels: usize,
    ) {
        if end <= start {
            return;
        }
        let mut level = 0usize;
        let mut g = Some(self);
        while let Some(cur) = g {
            level += 1;
            let full = level <= full_levels;
            // The crate's memory, not the stalled group's to pay.
            let p = crate::sync::untracked(|| cur.inner().pressure.get_or_init(Default::default));
            let r = p.resource(kind);
            r.some.add(start, end);
            if full {
                r.full.add(start, end);
            }
            g = cur.inner().parent.as_ref();
        }
    }

    /// Whether this group (or a descendant) ever stalled.
    pub fn has_pressure(&self) -> bool {
        self.inner().pressure.get().is_some()
    }

    /// This group's `kind` pressure totals (stalls of it and its
    /// descendants), µs.
    pub fn pressure_totals(&self, kind: PressureKind) -> PressureTotals {
        match self.inner().pressure.get() {
            None => PressureTotals::default(),
            Some(p) => {
                let r = p.resource(kind);
                PressureTotals {
                    some_usec: r.some.total_ns.load(Ordering::Relaxed) / 1000,
                    full_usec: r.full.total_ns.load(Ordering::Relaxed) / 1000,
                }
            }
        }
    }

    /// This group's `cpu.pressure` or `memory.pressure` file, in the
    /// kernel's format (module docs):
    ///
    /// ```text
    /// some avg10=0.00 avg60=0.00 avg300=0.00 total=0
    /// full avg10=0.00 avg60=0.00 avg300=0.00 total=0
    /// ```
    pub fn pressure(&self, kind: PressureKind) -> String {
        let now = crate::os::mono_ns();
        let mut out = String::new();
        let (lines, totals) = match self.inner().pressure.get() {
            None => ([[0.0; 3]; 2], [0, 0]),
            Some(p) => {
                let r = p.resource(kind);
                let totals = [
                    r.some.total_ns.load(Ordering::Relaxed),
                    r.full.total_ns.load(Ordering::Relaxed),
                ];
                let mut a = r.avgs.lock().unwrap_or_else(|e| e.into_inner());
                (
                    [a[0].update(now, totals[0]), a[1].update(now, totals[1])],
                    totals,
                )
            }
        };
        for (i, name) in ["some", "full"].into_iter().enumerate() {
            let p = lines[i];
            // Writing to a String cannot fail.
            let _ = writeln!(
                out,
                "{name} avg10={:.2} avg60={:.2} avg300={:.2} total={}",
                p[0],
                p[1],
                p[2],
                totals[i] / 1000
            );
        }
        out
    }
}
