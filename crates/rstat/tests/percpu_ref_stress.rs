//! Multi-threaded stress tests of `PercpuRef` through its public API, on the
//! real CPU ids: lookups and nested gets race a kill, and gets/puts race
//! mode switches. Every check is counted as a violation; the count must be 0.
#![cfg(not(rstat_loom))]

use rstat::percpu_ref::{InitFlags, PercpuRef};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

#[derive(Default)]
struct Counters {
    /// References the test believes are held (incremented after a
    /// successful get, decremented before the put).
    held: AtomicUsize,
    releases: AtomicUsize,
    violations: AtomicUsize,
}

impl Counters {
    fn violation(&self, what: &str) {
        eprintln!("violation: {what}");
        self.violations.fetch_add(1, SeqCst);
    }
}

fn counted_ref(flags: InitFlags) -> (PercpuRef, Arc<Counters>) {
    let c = Arc::new(Counters::default());
    c.held.store(1, SeqCst); // the initial reference
    let c2 = Arc::clone(&c);
    let r = PercpuRef::with_flags(flags, move || {
        if c2.held.load(SeqCst) != 0 {
            c2.violation("release ran while references were held");
        }
        c2.releases.fetch_add(1, SeqCst);
    });
    (r, c)
}

#[test]
fn kill_under_concurrent_lookups_releases_exactly_once() {
    let iters = if cfg!(miri) { 200 } else { 200_000 };
    let workers = 4;
    let (r, c) = counted_ref(InitFlags::PERCPU);
    let confirmed = AtomicBool::new(false);
    // Per-worker iterations done. The killer waits until every worker has
    // done half, so a worker's lookups in its first half happen before the
    // kill and must all succeed.
    let progress: Vec<AtomicUsize> = (0..workers).map(|_| AtomicUsize::new(0)).collect();
    let live_hits = AtomicU64::new(0);
    let misses_after_confirm = AtomicU64::new(0);

    std::thread::scope(|s| {
        for w in 0..workers {
            let (r, c) = (&r, &c);
            let (confirmed, progress) = (&confirmed, &progress[w]);
            let (live_hits, misses_after_confirm) = (&live_hits, &misses_after_confirm);
            s.spawn(move || {
                // Even workers keep a long-lived reference across the kill
                // and use it for nested get/put pairs, which must always work.
                let base = w % 2 == 0 && r.tryget_live();
                if base {
                    c.held.fetch_add(1, SeqCst);
                }
                for i in 0..iters {
                    let after_confirm = confirmed.load(SeqCst);
                    let before_kill = i < iters / 2;
                    if r.tryget_live() {
                        c.held.fetch_add(1, SeqCst);
                        live_hits.fetch_add(1, SeqCst);
                        if after_confirm {
                            c.violation("tryget_live succeeded after the kill was confirmed");
                        }
                        if c.releases.load(SeqCst) != 0 {
                            c.violation("tryget_live succeeded after release");
                        }
                        // A nested reference, dropped in the opposite order.
                        match r.get() {
                            Ok(()) => c.held.fetch_add(1, SeqCst),
                            Err(e) => {
                                c.violation(&format!("nested get failed: {e}"));
                                0
                            }
                        };
                        c.held.fetch_sub(2, SeqCst);
                        if r.put_many(2).is_err() {
                            c.violation("put of held references failed");
                        }
                    } else {
                        if before_kill {
                            c.violation("tryget_live failed before the kill");
                        }
                        if after_confirm {
                            misses_after_confirm.fetch_add(1, SeqCst);
                        }
                    }
                    if base {
                        if r.get().is_err() {
                            c.violation("get with a reference held failed");
                        } else if r.put().is_err() {
                            c.violation("put of a held reference failed");
                        }
                    }
                    progress.store(i + 1, SeqCst);
                }
                // Fast workers may finish before the kill: look up a few
                // more times once it is confirmed; all must fail.
                while !confirmed.load(SeqCst) {
                    std::thread::yield_now();
                }
                for _ in 0..100 {
                    if r.tryget_live() {
                        c.violation("tryget_live succeeded after the kill was confirmed");
                    } else {
                        misses_after_confirm.fetch_add(1, SeqCst);
                    }
                }
                if base {
                    c.held.fetch_sub(1, SeqCst);
                    if r.put().is_err() {
                        c.violation("put of the base reference failed");
                    }
                }
            });
        }
        s.spawn(|| {
            // Kill once every worker is halfway through its loop.
            while progress.iter().any(|p| p.load(SeqCst) < iters / 2) {
                std::thread::yield_now();
            }
            c.held.fetch_sub(1, SeqCst);
            let res = r.kill_and_confirm(|| {
                if r.tryget_live() {
                    c.violation("tryget_live succeeded inside confirm");
                }
                confirmed.store(true, SeqCst);
            });
            if let Err(e) = res {
                c.violation(&format!("kill failed: {e}"));
            }
        });
    });

    assert_eq!(c.violations.load(SeqCst), 0);
    assert_eq!(c.releases.load(SeqCst), 1, "release runs exactly once");
    assert_eq!(c.held.load(SeqCst), 0);
    assert!(r.is_zero() && r.is_dying());
    assert!(!r.tryget() && !r.tryget_live());
    assert!(
        live_hits.load(SeqCst) > 0,
        "lookups succeeded before the kill"
    );
    assert!(
        misses_after_confirm.load(SeqCst) > 0,
        "lookups failed after the kill"
    );
}

#[test]
fn mode_switches_under_gets_and_puts_keep_the_exact_count() {
    let iters = if cfg!(miri) { 100 } else { 100_000 };
    let workers = 3;
    let (r, c) = counted_ref(InitFlags::ALLOW_REINIT);
    let running = AtomicUsize::new(workers);
    let flips = AtomicUsize::new(0);

    std::thread::scope(|s| {
        for w in 0..workers {
            let (r, c, running) = (&r, &c, &running);
            s.spawn(move || {
                // Hold a varying number of references (up to 1 + w) and drop
                // them in batches, so the count moves in both directions.
                let mut mine = 0usize;
                for i in 0..iters {
                    if mine <= w && r.tryget() {
                        mine += 1;
                        c.held.fetch_add(1, SeqCst);
                    } else if i % 7 == 0 && mine > 0 {
                        c.held.fetch_sub(mine, SeqCst);
                        if r.put_many(mine).is_err() {
                            c.violation("put_many of held references failed");
                        }
                        mine = 0;
                    } else if mine > 0 {
                        mine -= 1;
                        c.held.fetch_sub(1, SeqCst);
                        if r.put().is_err() {
                            c.violation("put of a held reference failed");
                        }
                    }
                }
                c.held.fetch_sub(mine, SeqCst);
                if r.put_many(mine).is_err() {
                    c.violation("final put_many failed");
                }
                running.fetch_sub(1, SeqCst);
            });
        }
        s.spawn(|| {
            while running.load(SeqCst) > 0 || flips.load(SeqCst) < 3 {
                if r.switch_to_atomic_sync().is_err() {
                    c.violation("switch_to_atomic failed");
                }
                match r.atomic_count() {
                    // Other threads hold at most 1 + 2 + 3 references.
                    Some(n) if (1..=7).contains(&n) => {}
                    other => c.violation(&format!("atomic count {other:?} outside 1..=7")),
                }
                if r.switch_to_percpu().is_err() {
                    c.violation("switch_to_percpu failed");
                }
                flips.fetch_add(1, SeqCst);
            }
        });
    });

    assert_eq!(c.violations.load(SeqCst), 0);
    assert_eq!(
        c.releases.load(SeqCst),
        0,
        "nothing released while the initial reference was held"
    );
    assert!(flips.load(SeqCst) >= 3);
    r.switch_to_atomic_sync().unwrap();
    assert_eq!(r.atomic_count(), Some(1), "every get was matched by a put");
    c.held.fetch_sub(1, SeqCst);
    r.kill().unwrap();
    assert_eq!(c.releases.load(SeqCst), 1);
    assert_eq!(c.violations.load(SeqCst), 0);
}
