//! Reads through a [`StatHandle`]: the same totals as the controller's
//! reads of its group ([`ControllerHandle::read`],
//! [`ControllerHandle::read_exact`]) under every policy and at every
//! depth, a removed group's, the cpu controller's root (the process), and
//! while writers run.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::{engine, engine_with};
use rstat::{FlushPolicy, StatHandle};

fn pair(s: &rstat::GroupStats) -> (Vec<i64>, Vec<i64>) {
    (s.local().to_vec(), s.hierarchical().to_vec())
}

#[test]
fn a_handle_reads_what_the_controller_reads_of_its_group() {
    for policy in FlushPolicy::ALL {
        let rs = engine_with(2, policy);
        let io = rs.register_counters("io", &["reads", "bytes"]).unwrap();
        let a = rs.root().create_child("a").unwrap();
        let b = a.create_child("b").unwrap();
        let c = b.create_child("c").unwrap();
        io.add(&a, 0, 1).unwrap();
        io.add(&b, 1, 4096).unwrap();
        io.add(&c, 0, 7).unwrap();
        io.add(&c, 1, -96).unwrap();
        for g in [rs.root(), &a, &b, &c] {
            let h: StatHandle = io.stat_handle(g).unwrap();
            let exact = pair(&h.read_exact());
            assert_eq!(
                exact,
                pair(&io.read_exact(g).unwrap()),
                "{policy}: {} read exactly",
                g.path()
            );
            // After an exact read nothing is pending: every policy's bounded
            // read copies the same totals.
            assert_eq!(pair(&h.read()), exact, "{policy}: {} read", g.path());
            assert_eq!(pair(&io.read(g).unwrap()), exact);
            assert_eq!(h.read().get("bytes"), io.read(g).unwrap().get("bytes"));
        }
        let h = io.stat_handle(&a).unwrap();
        assert_eq!(h.read_exact().get("reads"), Some(8), "{policy}");
        assert_eq!(h.read_exact().get_local("reads"), Some(1), "{policy}");
        assert_eq!(h.read_exact().get("bytes"), Some(4000), "{policy}");
    }
}

#[test]
fn a_handle_of_a_removed_group_still_reads_its_last_totals() {
    let rs = engine();
    let io = rs.register_counters("io", &["n"]).unwrap();
    let a = rs.root().create_child("a").unwrap();
    let h = io.stat_handle(&a).unwrap();
    h.add(0, 5).unwrap();
    a.remove().unwrap();
    assert_eq!(h.read_exact().get("n"), Some(5));
    assert_eq!(h.read().get("n"), Some(5));
    // The parent has the removed group's history.
    assert_eq!(io.read_exact(rs.root()).unwrap().get("n"), Some(5));
}

#[test]
#[cfg_attr(miri, ignore = "reads the process's CPU clock after 30 ms of work")]
fn the_cpu_controllers_root_handle_reads_the_process() {
    let rs = engine();
    let cpu = rs.cpu().expect("a default engine has the cpu controller");
    let root = cpu.stat_handle(rs.root()).unwrap();
    // Time outside every group: the tree's own total stays 0, the process
    // clock does not.
    let t = std::time::Instant::now();
    let mut x = 1u64;
    while t.elapsed() < std::time::Duration::from_millis(30) {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
    let before = cpu
        .read_exact(rs.root())
        .unwrap()
        .get("usage_usec")
        .unwrap();
    let mid = root.read_exact().get("usage_usec").unwrap();
    let bounded = root.read().get("usage_usec").unwrap();
    let after = cpu
        .read_exact(rs.root())
        .unwrap()
        .get("usage_usec")
        .unwrap();
    assert!(
        before >= 20_000,
        "the root is the process: {before} µs after 30 ms of work"
    );
    assert!(
        (before..=after).contains(&mid) && (before..=after).contains(&bounded),
        "the handle's reads {mid} and {bounded} µs, the controller's {before} and {after} µs"
    );
    // A child's handle reads the child, not the process.
    let a = rs.root().create_child("a").unwrap();
    assert_eq!(
        cpu.stat_handle(&a).unwrap().read_exact().get("usage_usec"),
        Some(0)
    );
}

#[test]
fn a_handle_reads_are_monotonic_and_exact_while_writers_run() {
    let rs = engine();
    let io = rs.register_counters("io", &["n"]).unwrap();
    let tenant = rs.root().create_child("tenant").unwrap();
    let leaves: Vec<_> = (0..4)
        .map(|i| tenant.create_child(&format!("l{i}")).unwrap())
        .collect();
    let handle = io.stat_handle(&tenant).unwrap();
    let stop = AtomicBool::new(false);
    // Reads completed: each writer waits halfway for one, so reads happen
    // while the writers run however the threads are scheduled.
    let reads = AtomicU64::new(0);
    const PER: i64 = if cfg!(miri) { 200 } else { 200_000 };
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let items: Vec<_> = leaves
                    .iter()
                    .map(|l| io.stat_handle(l).unwrap().item(0).unwrap())
                    .collect();
                let reads = &reads;
                s.spawn(move || {
                    for i in 0..PER {
                        if i == PER / 2 {
                            while reads.load(Ordering::Acquire) == 0 {
                                std::thread::yield_now();
                            }
                        }
                        items[(i as usize + w) % items.len()].add(1);
                    }
                })
            })
            .collect();
        let reader = s.spawn(|| {
            let mut last = 0;
            loop {
                // Before the reads: a stop seen here comes after the writers
                // joined, so the last round still reads.
                let stopping = stop.load(Ordering::Relaxed);
                let v = handle.read().get("n").unwrap();
                let e = handle.read_exact().get("n").unwrap();
                assert!(v >= last, "a bounded read went back: {v} after {last}");
                assert!(
                    e >= v,
                    "an exact read {e} below the bounded read {v} before it"
                );
                assert!(e <= 2 * PER, "more than was added: {e}");
                last = e;
                reads.fetch_add(1, Ordering::Release);
                if stopping {
                    break;
                }
            }
        });
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap();
    });
    assert_eq!(handle.read_exact().get("n"), Some(2 * PER));
}
