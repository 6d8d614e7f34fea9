//! The `Threshold` policy's read pace: a read past its unit threshold
//! copies the published totals when a flush of its subtree (or of the
//! root's) started less than the pace ago, flushes when none did, and asks
//! the periodic flusher for a root flush, which it runs.
//!
//! Time is a [`ManualClock`] the test moves, so which reads flush is
//! decided by the test, not by how fast the machine runs; the one wait (for
//! the periodic flusher's thread) has a generous deadline that only a
//! flusher that never answers can miss.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::wait_until;
use rstat::testing::{BuilderExt, ControllerHandleExt, ManualClock};
use rstat::{Controller, Error, FlushCtx, FlushPolicy, Rstat, DEFAULT_READ_PACE};

const PACE: Duration = Duration::from_millis(100);

/// An engine of 2 slots on `clock` with the default policy and pace, and
/// no periodic flusher unless `periodic`.
fn engine_on(clock: &ManualClock, periodic: Option<Duration>) -> Rstat {
    Rstat::builder()
        .nr_cpus(2)
        .periodic_flush(periodic)
        .read_pace(Some(PACE))
        .manual_clock(clock)
        .build()
        .unwrap()
}

/// Push `g` past its threshold (64 x 2 units) by `6 x 64` on two slots.
fn past_the_threshold(c: &rstat::ControllerHandle, g: &rstat::Group) -> i64 {
    for _ in 0..3 {
        c.add_on_cpu(g, 0, 0, 64).unwrap();
        c.add_on_cpu(g, 1, 0, 64).unwrap();
    }
    assert!(c.pending_updates(g).unwrap() > 2 * 64, "past the threshold");
    6 * 64
}

#[test]
fn the_default_pace_and_out_of_range_paces() {
    assert_eq!(Rstat::new().read_pace(), Some(DEFAULT_READ_PACE));
    let rs = Rstat::builder().read_pace(None).build().unwrap();
    assert_eq!(rs.read_pace(), None);
    for p in [
        Duration::ZERO,
        Duration::from_micros(999),
        Duration::from_secs(24 * 3600 + 1),
    ] {
        let e = Rstat::builder().read_pace(Some(p)).build().err();
        assert!(matches!(e, Some(Error::InvalidReadPace { .. })), "{p:?}");
        let msg = e.unwrap().to_string();
        assert!(msg.contains("1 ms to 24 h"), "{msg}");
    }
}

/// Past the threshold, a read relies on its own group's last flush while
/// that flush started less than the pace ago (no flush: the flush count
/// stays, the value is the flush's), and flushes once it is older.
#[test]
fn a_read_past_the_threshold_copies_while_its_stamp_is_fresh_and_flushes_once_stale() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1));
    let rs = engine_on(&clock, None);
    let c = rs.register_counters("c", &["n"]).unwrap();
    let g = rs.root().create_child("g").unwrap();
    c.add_on_cpu(&g, 0, 0, 7).unwrap();
    assert_eq!(c.read_exact(&g).unwrap().hierarchical()[0], 7); // stamps g at 1 s
    let added = past_the_threshold(&c, &g);
    let flushes = c.flush_counts().0;

    clock.advance(PACE - Duration::from_nanos(1));
    assert_eq!(
        c.read(&g).unwrap().hierarchical()[0],
        7,
        "a stamp younger than the pace: the copy of its flush"
    );
    assert_eq!(c.flush_counts().0, flushes, "a fresh stamp: no flush");

    clock.advance(Duration::from_nanos(1));
    assert_eq!(
        c.read(&g).unwrap().hierarchical()[0],
        7 + added,
        "a stamp as old as the pace: the read flushes"
    );
    assert_eq!(c.flush_counts().0, flushes + 1);
}

/// A root flush covers every group: a read of any group past its threshold
/// relies on it while it is fresh.
#[test]
fn a_fresh_root_flush_serves_every_group() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(5));
    let rs = engine_on(&clock, None);
    let c = rs.register_counters("c", &["n"]).unwrap();
    let t = rs.root().create_child("tenant").unwrap();
    let leaf = t.create_child("leaf").unwrap();
    c.add_on_cpu(&leaf, 1, 0, 3).unwrap();
    c.flush(rs.root()).unwrap(); // the root's stamp: 5 s
    let added = past_the_threshold(&c, &leaf);
    let flushes = c.flush_counts().0;
    clock.advance(PACE / 2);
    for g in [&leaf, &t] {
        assert_eq!(c.read(g).unwrap().hierarchical()[0], 3);
    }
    assert_eq!(c.flush_counts().0, flushes, "both copied the root's flush");
    clock.advance(PACE);
    assert_eq!(c.read(&t).unwrap().hierarchical()[0], 3 + added);
    assert_eq!(c.flush_counts().0, flushes + 1);
}

/// Without a pace, or under another policy, a read past the threshold
/// flushes however fresh the last flush is.
#[test]
fn no_pace_means_every_read_past_the_threshold_flushes() {
    let clock = ManualClock::new();
    let rs = Rstat::builder()
        .nr_cpus(2)
        .periodic_flush(None)
        .read_pace(None)
        .manual_clock(&clock)
        .build()
        .unwrap();
    let c = rs.register_counters("c", &["n"]).unwrap();
    let g = rs.root().create_child("g").unwrap();
    c.read_exact(&g).unwrap();
    let added = past_the_threshold(&c, &g);
    assert_eq!(c.read(&g).unwrap().hierarchical()[0], added);
}

/// Panics `left` times in its flush (after folding), then folds quietly.
struct Flaky {
    names: Vec<String>,
    left: Arc<AtomicU32>,
}

impl Controller for Flaky {
    fn name(&self) -> &str {
        "flaky"
    }
    fn stat_names(&self) -> &[String] {
        &self.names
    }
    fn flush(&self, ctx: &mut FlushCtx<'_>) {
        ctx.fold();
        if self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            std::panic::panic_any("a deliberate panic from a test controller's flush");
        }
    }
}

/// A flush whose fold panicked (and was undone) did not fold everything
/// that completed before it started: it leaves no stamp, so the next read
/// past the threshold flushes instead of copying its incomplete totals.
#[test]
fn a_flush_with_an_undone_fold_leaves_no_stamp() {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.contains("deliberate"))
            != Some(true)
        {
            prev(info);
        }
    }));
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1));
    let rs = engine_on(&clock, None);
    let c = rs
        .register(Flaky {
            names: vec!["n".into()],
            left: Arc::new(AtomicU32::new(1)),
        })
        .unwrap();
    let g = rs.root().create_child("g").unwrap();
    c.add_on_cpu(&g, 0, 0, 1000).unwrap(); // far past the threshold
    assert_eq!(
        c.read_exact(&g).unwrap().local(),
        &[0],
        "the fold was undone"
    );
    assert_eq!(c.flush_panics(), 1);
    // The same instant: a stamp from that flush would be fresh.
    assert_eq!(
        c.read(&g).unwrap().local(),
        &[1000],
        "a read relied on the stamp of a flush that folded nothing"
    );
}

/// A paced read past its threshold whose stamp is half a pace old asks the
/// periodic flusher for a root flush, which it runs at once (its period
/// here is a day: only the ask can start it). Checked
/// while its thread runs: the flush count grows and the root's pending
/// updates are consumed, which only a root flush does.
#[test]
fn a_paced_read_asks_the_periodic_flusher_for_a_root_flush() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1));
    let rs = engine_on(&clock, Some(Duration::from_secs(24 * 3600)));
    let c = rs.register_counters("c", &["n"]).unwrap();
    let g = rs.root().create_child("g").unwrap();
    c.read_exact(&g).unwrap(); // stamps g
    let added = past_the_threshold(&c, &g);
    let flushes = c.flush_counts().0;
    assert!(c.pending_updates(rs.root()).unwrap() > 0);
    // Fresh but not young (half a pace old): the read looks at its
    // counters, finds them past the threshold, asks, and copies (the
    // flusher may already be at work, so the value is anything from before
    // the adds to all of them).
    clock.advance(PACE / 2);
    let seen = c.read(&g).unwrap().hierarchical()[0];
    assert!(seen == 0 || seen == added, "a read saw {seen}");
    assert!(
        wait_until(Duration::from_secs(30), Duration::from_millis(1), || {
            c.pending_updates(rs.root()).unwrap() == 0
        }),
        "the periodic flusher never ran the root flush a paced read asked for \
         (flushes {} -> {}, root pending {})",
        flushes,
        c.flush_counts().0,
        c.pending_updates(rs.root()).unwrap()
    );
    assert!(c.flush_counts().0 > flushes);
    // The root flush started after the adds: its copy has them all.
    assert_eq!(c.read(&g).unwrap().hierarchical()[0], added);
    assert_eq!(c.read(rs.root()).unwrap().hierarchical()[0], added);
}

/// Other policies ignore the pace: `Always` flushes on every read.
#[test]
fn always_ignores_the_pace() {
    let clock = ManualClock::new();
    let rs = Rstat::builder()
        .nr_cpus(2)
        .periodic_flush(None)
        .flush_policy(FlushPolicy::Always)
        .manual_clock(&clock)
        .build()
        .unwrap();
    let c = rs.register_counters("c", &["n"]).unwrap();
    let g = rs.root().create_child("g").unwrap();
    c.read_exact(&g).unwrap();
    let added = past_the_threshold(&c, &g);
    assert_eq!(c.read(&g).unwrap().hierarchical()[0], added);
}
