//! loom models of the `Threshold` read pace (`stat::pace`): a copy that
//! relies on a flush stamp includes every update completed before that
//! flush started, and a reader's ask for a root flush always wakes the
//! flusher.
//!
//! The clock is a manual one the writer moves after each update it
//! completes (time k: k updates done), so "completed before the flush
//! started" is "the flush read time k or later". Breaking the protocol
//! makes `a_paced_copy_includes_what_completed_before_its_flush_started`
//! fail: storing the stamp before the fold publishes the totals, storing or
//! loading it `Relaxed`, or stamping with the time the flush ended.

use super::*;
use crate::stat::policy::ReadBy;

/// Stamps never go stale here: the models are about what a stamp
/// promises, not how old it may be.
const FOREVER: Duration = Duration::from_secs(1 << 40);

/// A writer completes two updates of 1, moving the clock to k after the
/// k-th; a flusher flushes `g`'s subtree or the root's, stamping it; a
/// reader reads under `Threshold` (every stamp is young: it copies as soon
/// as one exists). If it relied on a stamp of a flush that started at
/// time k, its copy has at least k.
fn paced_copy_on(path: UpdatePath, flush_root: bool) {
    model_bounded(3, move || {
        let (mut m, clock) = Model::paced(1, path, FOREVER);
        let g = m.child(ROOT, "g");
        let m = Arc::new(m);
        let writer = {
            let (m, clock) = (Arc::clone(&m), Arc::clone(&clock));
            thread::spawn(move || {
                for k in 1..=2 {
                    m.add(g, 0, 1);
                    clock.set(k);
                }
            })
        };
        let flusher = {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                if flush_root {
                    m.domain.flush_root();
                } else {
                    m.read_exact(g);
                }
            })
        };
        let before = clock.now() as i64;
        let (copy, by) = policy::read_threshold(&m.domain, m.css(g));
        let seen = copy.hierarchical()[0];
        assert!(seen <= 2, "a read saw {seen}, more than ever started");
        match by {
            ReadBy::Stamp(start) => assert!(
                seen >= start as i64,
                "a paced copy saw {seen}, relying on a flush that started at time {start} \
                 ({start} updates completed before it)"
            ),
            // Two updates of 1 never reach the threshold (64 units).
            ReadBy::Units => {}
            ReadBy::Flush => assert!(seen >= before, "a flush missed a completed update"),
        }
        writer.join().unwrap();
        flusher.join().unwrap();
        assert_eq!(m.read_exact(ROOT).hierarchical()[0], 2);
    });
}

#[test]
fn a_paced_copy_includes_what_completed_before_its_flush_started() {
    paced_copy_on(UpdatePath::Rseq, true);
}

#[test]
fn a_paced_copy_includes_what_completed_before_its_flush_started_locked() {
    paced_copy_on(UpdatePath::Locked, true);
}

/// The same, relying on the group's own subtree flush.
#[test]
fn a_paced_copy_of_a_subtree_flush_includes_what_completed_before_it() {
    paced_copy_on(UpdatePath::Rseq, false);
}

/// The end of a paced read that found no fresh stamp: it takes the lock,
/// and copies if a flush that ran meanwhile left a fresh stamp, or
/// flushes. Either way its copy has every update completed before that
/// flush started, or before the read began.
#[test]
fn a_read_that_waited_for_the_lock_copies_what_a_racing_flush_stamped() {
    model_bounded(3, || {
        let (mut m, clock) = Model::paced(1, UpdatePath::Locked, FOREVER);
        let g = m.child(ROOT, "g");
        let m = Arc::new(m);
        let writer = {
            let (m, clock) = (Arc::clone(&m), Arc::clone(&clock));
            thread::spawn(move || {
                for k in 1..=2 {
                    m.add(g, 0, 1);
                    clock.set(k);
                }
            })
        };
        let flusher = {
            let m = Arc::clone(&m);
            thread::spawn(move || m.domain.flush_root())
        };
        let before = clock.now() as i64;
        let (copy, stamp) = policy::read_flushed_unless_paced(&m.domain, m.css(g));
        let seen = copy.hierarchical()[0];
        let must = stamp.map_or(before, |s| s as i64);
        assert!(
            seen >= must && seen <= 2,
            "a read saw {seen}: {before} updates completed before it began, stamp {stamp:?}"
        );
        writer.join().unwrap();
        flusher.join().unwrap();
    });
}

/// A reader that asks for a root flush while the flusher goes to sleep
/// wakes it (a lost wake leaves the flusher asleep forever: loom reports
/// the deadlock), and the flusher finds the domain's ask.
#[test]
fn an_ask_for_a_root_flush_wakes_the_flusher() {
    loom::model(|| {
        let (m, _clock) = Model::paced(1, UpdatePath::Locked, FOREVER);
        let m = Arc::new(m);
        let reader = {
            let m = Arc::clone(&m);
            thread::spawn(move || m.domain.ask_root_flush())
        };
        assert!(m.domain.nudge.wait_asked(), "woken by a stop, not an ask");
        assert!(m.domain.take_root_flush_ask(), "woken without an ask");
        reader.join().unwrap();
    });
}
