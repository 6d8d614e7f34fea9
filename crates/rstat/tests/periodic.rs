//! The periodic flusher: it folds what thresholds skip, and its thread stops
//! with the engine.
//!
//! The thread is found by its name (`rstat-flush`) in `/proc/self/task`, so
//! other threads of the test harness do not matter. Joining a thread does not
//! remove it from `/proc/self/task` at once: the kernel releases the task a
//! little after the futex wake that ends `pthread_join` (seen: up to ~100 µs).
//! So "stopped" is checked as "gone from /proc within 10 s", which a thread
//! that really still runs can never satisfy, and a loaded machine cannot make
//! fail. The join itself is what `Rstat::drop` guarantees; a leaked flusher
//! thread would keep its entry (and its name) forever.

mod common;

use std::time::Duration;

use common::wait_until;
use rstat::Rstat;

#[test]
fn the_periodic_flusher_folds_what_thresholds_skip_and_stops_with_the_engine() {
    let before = flusher_threads();
    if let Some(n) = before {
        assert_eq!(n, 0, "no flusher thread before the engine exists");
    }
    let rs = Rstat::builder()
        .nr_cpus(2)
        .periodic_flush(Some(Duration::from_millis(5)))
        .build()
        .unwrap();
    let c = rs.register_counters("c", &["n"]).unwrap();
    let g = rs.root().create_child("g").unwrap();
    c.add(&g, 0, 3).unwrap(); // far below the threshold: reads do not flush
                              // The flusher runs every 5 ms; only a flusher that never runs can miss
                              // the 30 s deadline.
    assert!(
        folded_within(&c, &g, 3),
        "the periodic flusher never folded the update"
    );
    if before.is_some() {
        // The thread is created by `build`; it names itself when it starts,
        // so the name can appear a little after `build` returns.
        assert!(
            listed_within(1, Duration::from_secs(10)),
            "one flusher thread while the engine lives, found {:?}",
            flusher_threads()
        );
        rs.set_periodic_flush(Some(Duration::from_millis(7)))
            .unwrap();
        assert!(
            listed_within(1, Duration::from_secs(10)),
            "restarting the flusher must leave exactly one thread, found {:?}",
            flusher_threads()
        );
        // The restarted flusher folds too.
        c.add(&g, 0, 4).unwrap();
        assert!(
            folded_within(&c, &g, 7),
            "the restarted flusher never folded"
        );
        drop(rs);
        // A thread the engine leaked (the first or the restarted one) would
        // stay listed forever and fail this.
        assert!(
            listed_within(0, Duration::from_secs(10)),
            "the flusher thread must stop with the engine, found {:?}",
            flusher_threads()
        );
    }
}

/// Wait until exactly `n` flusher threads are listed (a thread that is
/// starting may not carry its name yet; one that was joined may still be
/// listed for a moment).
fn listed_within(n: usize, limit: Duration) -> bool {
    wait_until(limit, Duration::from_micros(200), || {
        flusher_threads() == Some(n)
    })
}

/// Wait (up to 30 s) until a non-flushing read of `g` shows `want`.
fn folded_within(c: &rstat::ControllerHandle, g: &rstat::Group, want: i64) -> bool {
    wait_until(Duration::from_secs(30), Duration::from_millis(2), || {
        c.read(g).unwrap().hierarchical()[0] == want
    })
}

/// Threads of this process named `rstat-flush` (Linux), if /proc is readable.
fn flusher_threads() -> Option<usize> {
    if cfg!(miri) {
        return None;
    }
    let dir = std::fs::read_dir("/proc/self/task").ok()?;
    let mut n = 0;
    for e in dir.flatten() {
        // A task can exit between the listing and this read: not ours then.
        if let Ok(comm) = std::fs::read_to_string(e.path().join("comm")) {
            if comm.trim_end() == "rstat-flush" {
                n += 1;
            }
        }
    }
    Some(n)
}
