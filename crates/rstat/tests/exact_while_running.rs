//! Exactness checked *while* threads run, not only after they join.
//!
//! Every updater counts an update as *started* before it calls `add` and as
//! *done* after `add` returns. A reader that loads `done` before its read
//! and `started` after it must find
//!
//! ```text
//! done before the read began  <=  read_exact  <=  started before it ended
//! ```
//!
//! for every read, under every sharing of CPU slots users hit: two threads on
//! one slot (`nr_cpus(1)`), more threads than CPUs on the default slots
//! (preemption shares rseq slots), and group churn (children created,
//! updated, removed and released while the parent is read). The `Threshold`
//! staleness bound is checked the same way with deltas up to 10^6 units, on
//! items in units of 1 and of 4096: its unit part alone with no read pace,
//! and with a pace the combined bound (within the unit part, or everything
//! completed a pace before the read), on a clock the reader moves.
//!
//! Each configuration runs for `RSTAT_STRESS_SECS` seconds (default 2; the
//! loop script `scripts/stress-loop.sh` shortens it); under Miri a few
//! hundred operations.

mod common;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::xorshift;
use rstat::testing::{BuilderExt, ManualClock};
use rstat::{FlushPolicy, Group, Rstat, UpdatePath};

fn run_for() -> Duration {
    let secs: f64 = std::env::var("RSTAT_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    Duration::from_secs_f64(secs)
}

/// Work units per thread: time-bounded natively, count-bounded under Miri.
struct Budget {
    end: Instant,
    left: u64,
}

impl Budget {
    fn new() -> Self {
        Budget {
            end: Instant::now() + run_for(),
            left: if cfg!(miri) { 60 } else { u64::MAX },
        }
    }
    fn more(&mut self) -> bool {
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        // Check the clock every 64 steps.
        !(self.left.is_multiple_of(64) && Instant::now() >= self.end)
    }
}

/// Bounds shared by updaters and readers of one parent group.
#[derive(Default)]
struct Ledger {
    started: AtomicI64,
    done: AtomicI64,
}

impl Ledger {
    fn add(&self, ctl: &rstat::ControllerHandle, g: &Group, delta: i64) {
        self.add_item(ctl, g, 0, delta);
    }

    /// Add to item `item`, which this ledger covers.
    fn add_item(&self, ctl: &rstat::ControllerHandle, g: &Group, item: usize, delta: i64) {
        // SeqCst on both counters and `add`'s own SeqCst RMW: a reader that
        // sees `done` include this update also happens-after the update.
        self.started.fetch_add(delta, Ordering::SeqCst);
        ctl.add(g, item, delta).unwrap();
        self.done.fetch_add(delta, Ordering::SeqCst);
    }

    /// Add through a resolved [`rstat::StatItem`] (the handle's own
    /// update path) to an item this ledger covers.
    fn add_stat(&self, item: &rstat::StatItem, delta: i64) {
        self.started.fetch_add(delta, Ordering::SeqCst);
        item.add(delta);
        self.done.fetch_add(delta, Ordering::SeqCst);
    }

    /// Check one exact read of `g` (whose subtree this ledger covers).
    fn check_exact(&self, ctl: &rstat::ControllerHandle, g: &Group) -> Result<(), String> {
        let lo = self.done.load(Ordering::SeqCst);
        let v = ctl.read_exact(g).unwrap().hierarchical()[0];
        let hi = self.started.load(Ordering::SeqCst);
        if v < lo || v > hi {
            return Err(format!(
                "read_exact saw {v}: {lo} completed before it began, {hi} started before it ended"
            ));
        }
        Ok(())
    }
}

/// `threads` updaters on one group, each reading exactly after every few of
/// its own updates, plus (with `churn`) a thread creating, updating and
/// removing children of that group.
fn exact_reads_while_updating(nr_cpus: Option<usize>, threads: usize, churn: bool) {
    exact_reads_on(nr_cpus, UpdatePath::Rseq, threads, churn)
}

/// With default slots the engine takes the rseq path where the machine has
/// it (unlocked adds, exact reads fenced by `membarrier`); `nr_cpus(1)`
/// always shares slots and takes the locked path.
fn exact_reads_on(nr_cpus: Option<usize>, path: UpdatePath, threads: usize, churn: bool) {
    let mut b = Rstat::builder().update_path(path);
    if let Some(n) = nr_cpus {
        b = b.nr_cpus(n);
    }
    let rs = b.build().unwrap();
    // (Miri simulates sections on every slot, shared or not.)
    if path == UpdatePath::Locked || (nr_cpus == Some(1) && !cfg!(miri)) {
        assert_eq!(rs.update_path(), UpdatePath::Locked);
    }
    eprintln!("update path: {}", rs.update_path());
    let ctl = rs.register_counters("c", &["n"]).unwrap();
    let g = rs.root().create_child("g").unwrap();
    let ledger = Arc::new(Ledger::default());
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let failure: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let mut hs = Vec::new();
    for t in 0..threads {
        let (ctl, g, ledger, reads, failure) = (
            ctl.clone(),
            g.clone(),
            ledger.clone(),
            reads.clone(),
            failure.clone(),
        );
        hs.push(thread::spawn(move || {
            let mut budget = Budget::new();
            let mut i = 0u64;
            // Every other update goes through a resolved item, the rest
            // through the controller handle's lookup: both paths race the
            // same reads.
            let item = ctl.stat_handle(&g).and_then(|h| h.item(0)).unwrap();
            while budget.more() {
                if i.is_multiple_of(2) {
                    ledger.add(&ctl, &g, 1 + (t as i64 & 1));
                } else {
                    ledger.add_stat(&item, 1 + (t as i64 & 1));
                }
                i += 1;
                // Read after every update on half the threads, every 16 on
                // the others: reads race both claims and pushes.
                if t % 2 == 0 || i.is_multiple_of(16) {
                    reads.fetch_add(1, Ordering::Relaxed);
                    if let Err(e) = ledger.check_exact(&ctl, &g) {
                        failure.lock().unwrap().get_or_insert(e);
                        return;
                    }
                }
            }
        }));
    }
    let churner = churn.then(|| {
        let (ctl, g, ledger, stop) = (ctl.clone(), g.clone(), ledger.clone(), stop.clone());
        thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let kid = g.create_child(&format!("k{n}")).unwrap();
                let item = ctl.stat_handle(&kid).and_then(|h| h.item(0)).unwrap();
                for _ in 0..4 {
                    ledger.add(&ctl, &kid, 3);
                    ledger.add_stat(&item, 3);
                }
                kid.remove().unwrap();
                // Updates through handles of a removed group still count.
                ledger.add(&ctl, &kid, 5);
                ledger.add_stat(&item, 7);
                drop(item);
                drop(kid); // released: its stats fold into `g`
                n += 1;
                if cfg!(miri) && n > 20 {
                    break;
                }
            }
        })
    });
    for h in hs {
        h.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(c) = churner {
        c.join().unwrap();
    }
    if let Some(e) = failure.lock().unwrap().take() {
        panic!(
            "nr_cpus {nr_cpus:?}, {threads} threads, churn {churn}: {e} ({} reads)",
            reads.load(Ordering::Relaxed)
        );
    }
    let want = ledger.done.load(Ordering::SeqCst);
    assert_eq!(ctl.read_exact(&g).unwrap().hierarchical()[0], want);
    assert!(reads.load(Ordering::Relaxed) > 0);
}

#[test]
fn two_threads_on_one_slot() {
    exact_reads_while_updating(Some(1), 2, false);
}

#[test]
fn six_threads_on_default_slots() {
    exact_reads_while_updating(None, 6, false);
}

#[test]
fn six_threads_on_the_locked_path() {
    exact_reads_on(None, UpdatePath::Locked, 6, false);
}

#[test]
fn more_threads_than_slots_with_group_churn() {
    exact_reads_while_updating(Some(1), 4, true);
    exact_reads_while_updating(None, 5, true);
}

/// The `Threshold` policy's documented bound, checked while threads run:
/// every `read` that does not flush is, for each item, at most
/// `FlushPolicy::Threshold.staleness_bound(.., unit)` plus `64 × unit − 1`
/// per update in progress when it began (at most one per updater thread)
/// below what completed before it began, and never above what started
/// before it ended. Deltas range from 1 to 10^6 units, so one update can
/// cross thousands of batch boundaries while a flush is reading the same
/// slots.
#[test]
fn threshold_bound_holds_with_large_deltas_while_flushes_race() {
    threshold_bound_while_flushes_race(&[("n", 1)], UpdatePath::Locked, Via::Handle, Time::Off);
}

/// As above on the rseq update path (where the machine has it), every
/// update through a resolved [`rstat::StatItem`] (its own update path).
#[test]
fn threshold_bound_holds_with_large_deltas_through_items_on_the_rseq_path() {
    threshold_bound_while_flushes_race(&[("n", 1)], UpdatePath::Rseq, Via::Items, Time::Off);
}

/// With a read pace, every `read` is within the unit bound (as above) or
/// includes every update completed a pace before it began: the combined
/// bound, checked while the updaters, a flusher of the children, the
/// periodic flusher (answering the paced reads' asks, and every
/// millisecond) and the reader run. The reader moves a manual clock a
/// quarter pace every few reads, recording what had completed before each
/// move: what a read must include is what completed before the clock
/// showed a pace less than when the read began.
#[test]
fn threshold_combined_bound_holds_with_a_read_pace_while_flushes_race() {
    threshold_bound_while_flushes_race(&[("n", 1)], UpdatePath::Locked, Via::Handle, Time::Paced);
}

/// As above, on the rseq path through items, with items in units of 4096
/// and 1.
#[test]
fn threshold_combined_bound_holds_per_item_with_a_read_pace_on_the_rseq_path() {
    let items = [("bytes", 4096), ("n", 1)];
    threshold_bound_while_flushes_race(&items, UpdatePath::Rseq, Via::Both, Time::Paced);
}

/// As above with two items sharing the threshold: bytes declared in pages
/// (4096, deltas that are not whole pages, up to 10^6 pages) and a plain
/// count. Each item keeps its own bound, in its own unit. Ten items, so
/// that items past the eight whose units a css keeps inline are covered.
#[test]
fn threshold_bound_holds_per_item_in_its_unit_while_flushes_race() {
    let items = [
        ("bytes", 4096),
        ("n", 1),
        ("a", 1),
        ("b", 1),
        ("c", 1),
        ("d", 1),
        ("e", 1),
        ("f", 1),
        ("pages", 4096),
        ("kb", 1024),
    ];
    threshold_bound_while_flushes_race(&items, UpdatePath::Rseq, Via::Both, Time::Off);
}

/// Which update calls a threshold test makes.
#[derive(Clone, Copy, PartialEq)]
enum Via {
    /// `ControllerHandle::add` only.
    Handle,
    /// `StatItem::add` only.
    Items,
    /// Half and half, at random.
    Both,
}

/// Whether a threshold test's engine has a read pace.
#[derive(Clone, Copy, PartialEq)]
enum Time {
    /// None: the unit bound alone.
    Off,
    /// [`PACE`] on a manual clock that the reader moves by [`STEP`] every
    /// [`READS_PER_STEP`] reads, with the periodic flusher running.
    Paced,
}

const PACE: Duration = Duration::from_millis(100);
/// A quarter pace: a stamp is fresh for at most four steps.
const STEP: Duration = Duration::from_millis(25);
const STEPS_PER_PACE: usize = 4;
const READS_PER_STEP: u64 = 8;

fn threshold_bound_while_flushes_race(
    items: &[(&str, u64)],
    path: UpdatePath,
    via: Via,
    time: Time,
) {
    const UPDATERS: usize = 3;
    // Two slots on the locked path; on the rseq path the engine's own
    // count (one per CPU plus one for threads without a CPU id: an engine
    // with fewer slots than that takes the locked path).
    let clock = ManualClock::new();
    let mut b = Rstat::builder()
        .update_path(path)
        .flush_policy(FlushPolicy::Threshold);
    b = match time {
        Time::Off => b.periodic_flush(None).read_pace(None),
        Time::Paced => b
            .periodic_flush(Some(Duration::from_millis(1)))
            .read_pace(Some(PACE))
            .manual_clock(&clock),
    };
    if path == UpdatePath::Locked {
        b = b.nr_cpus(2);
    }
    let rs = b.build().unwrap();
    eprintln!("update path: {}", rs.update_path());
    let slots = rs.nr_cpus();
    let ctl = rs.register_counters_with_units("c", items).unwrap();
    let p = rs.root().create_child("p").unwrap();
    let kids: Vec<Group> = (0..3)
        .map(|i| p.create_child(&format!("k{i}")).unwrap())
        .collect();
    let units: Vec<u64> = items.iter().map(|&(_, u)| u).collect();
    // Subtree of `p`: itself and 3 children, `slots` slots; plus one unit batch
    // per update in progress when a read begins.
    let bounds: Arc<Vec<i64>> = Arc::new(
        units
            .iter()
            .map(|&u| {
                let b = FlushPolicy::Threshold.staleness_bound(slots, 4, u).unwrap();
                (b + UPDATERS as u64 * (64 * u - 1)) as i64
            })
            .collect(),
    );
    let ledgers: Arc<Vec<Ledger>> = Arc::new(items.iter().map(|_| Ledger::default()).collect());
    let failure: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let mut hs = Vec::new();
    for t in 0..UPDATERS {
        let (ctl, kids, ledgers, units) =
            (ctl.clone(), kids.clone(), ledgers.clone(), units.clone());
        hs.push(thread::spawn(move || {
            let mut budget = Budget::new();
            let mut x = 0x2545f4914f6cdd1du64 ^ (t as u64 + 1);
            // Resolved items of every child, for the updates `via` sends
            // through them.
            let resolved: Vec<Vec<rstat::StatItem>> = kids
                .iter()
                .map(|k| {
                    let h = ctl.stat_handle(k).unwrap();
                    (0..units.len()).map(|i| h.item(i).unwrap()).collect()
                })
                .collect();
            while budget.more() {
                xorshift(&mut x);
                let item = (x >> 40) as usize % units.len();
                let unit = units[item] as i64;
                // Mostly small deltas, sometimes up to 10^6 units; in raw
                // terms, so not whole units.
                let delta = if x & 15 == 0 {
                    1 + (x >> 20) as i64 % (1_000_000 * unit)
                } else {
                    1 + (x >> 20) as i64 % (100 * unit)
                };
                let k = (x >> 8) as usize % kids.len();
                if via == Via::Handle || (via == Via::Both && x & 32 == 0) {
                    ledgers[item].add_item(&ctl, &kids[k], item, delta);
                } else {
                    ledgers[item].add_stat(&resolved[k][item], delta);
                }
            }
        }));
    }
    // A thread that flushes children exactly (the race in question: a flush
    // of a child reads its slots while another CPU folds a large delta).
    {
        let (ctl, kids) = (ctl.clone(), kids.clone());
        hs.push(thread::spawn(move || {
            let mut budget = Budget::new();
            let mut i = 0;
            while budget.more() {
                ctl.flush(&kids[i % kids.len()]).unwrap();
                i += 1;
            }
        }));
    }
    // Reads that only the time part of the bound allowed.
    let paced_reads = Arc::new(AtomicU64::new(0));
    {
        let (ctl, p, ledgers, bounds, failure, clock, paced_reads) = (
            ctl.clone(),
            p.clone(),
            ledgers.clone(),
            bounds.clone(),
            failure.clone(),
            clock.clone(),
            paced_reads.clone(),
        );
        hs.push(thread::spawn(move || {
            let mut budget = Budget::new();
            // `moved[k]`: per item, what had completed before the clock
            // moved to k steps (loaded before the move).
            let mut moved: Vec<Vec<i64>> = vec![vec![0; ledgers.len()]];
            let mut reads = 0u64;
            while budget.more() {
                if time == Time::Paced && reads > 0 && reads.is_multiple_of(READS_PER_STEP) {
                    moved.push(ledgers.iter().map(|l| l.done.load(Ordering::SeqCst)).collect());
                    clock.set(STEP * (moved.len() - 1) as u32);
                }
                reads += 1;
                // The step the clock shows as the read begins, and what
                // had completed a pace before it (`None`: that time is
                // before 0, when nothing had completed).
                let at = moved.len() - 1;
                let a_pace_before = at.checked_sub(STEPS_PER_PACE).map(|k| &moved[k]);
                let lo: Vec<i64> = ledgers.iter().map(|l| l.done.load(Ordering::SeqCst)).collect();
                let s = ctl.read(&p).unwrap();
                let mut by_time = false;
                for (i, l) in ledgers.iter().enumerate() {
                    let hi = l.started.load(Ordering::SeqCst);
                    let (v, bound) = (s.hierarchical()[i], bounds[i]);
                    let in_units = v >= lo[i] - bound;
                    let in_time = a_pace_before.is_none_or(|m| v >= m[i]);
                    by_time |= !in_units;
                    if !(in_units || (time == Time::Paced && in_time)) || v > hi {
                        failure.lock().unwrap().get_or_insert(format!(
                            "a threshold read saw {v} of item {i}: {} completed before it (bound {bound}), \
                             {:?} a pace before it (clock at step {at}), {hi} started",
                            lo[i],
                            a_pace_before.map(|m| m[i]),
                        ));
                        return;
                    }
                }
                if by_time {
                    paced_reads.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for h in hs {
        h.join().unwrap();
    }
    if let Some(e) = failure.lock().unwrap().take() {
        panic!("{e}");
    }
    if time == Time::Paced {
        eprintln!(
            "reads within the time part only: {}",
            paced_reads.load(Ordering::Relaxed)
        );
    }
    // Quiescent: the documented bound holds, with nothing in progress
    // (and, with a pace, a clock moved past any stamp).
    clock.advance(PACE * 10);
    let s = ctl.read(&p).unwrap();
    let exact = ctl.read_exact(&p).unwrap();
    for (i, &u) in units.iter().enumerate() {
        let want = ledgers[i].done.load(Ordering::SeqCst);
        let bound = FlushPolicy::Threshold.staleness_bound(slots, 4, u).unwrap() as i64;
        let v = s.hierarchical()[i];
        assert!(
            v <= want && v >= want - bound,
            "quiescent read {v} of item {i}, want {want} (bound {bound})"
        );
        assert_eq!(exact.hierarchical()[i], want);
    }
}
