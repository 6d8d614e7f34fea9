//! Scoped futures on tokio's multi-threaded runtime: tasks that migrate
//! between workers are charged per group what they burn.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::cpu::{burn_in_steps, usage};
use common::engine;
use rstat::attach::FutureExt;
use rstat::{current_group, Group};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_time()
        .build()
        .unwrap()
}

/// A task: burn `chunks` × `chunk` between awaits; returns the burn its
/// own clock saw and the worker threads it ran on.
async fn task(chunks: u32, chunk: Duration) -> (Duration, HashSet<std::thread::ThreadId>) {
    let mut burned = Duration::ZERO;
    let mut threads = HashSet::new();
    for i in 0..chunks {
        threads.insert(std::thread::current().id());
        // Within one poll, so in short steps.
        burned += burn_in_steps(chunk, 500);
        if i % 3 == 0 {
            // A timer wake-up: the task is rescheduled by whichever worker
            // runs the timer, which makes migration likely.
            tokio::time::sleep(Duration::from_micros(200)).await;
        } else {
            tokio::task::yield_now().await;
        }
    }
    threads.insert(std::thread::current().id());
    (burned, threads)
}

#[test]
fn per_group_cpu_time_of_migrating_tasks_matches_within_5_percent() {
    let rs = engine();
    let groups: Vec<Group> = (0..3)
        .map(|i| rs.root().create_child(&format!("tenant-{i}")).unwrap())
        .collect();
    let rt = runtime();
    let chunk = Duration::from_millis(2);
    let (expected, migrated) = rt.block_on(async {
        let mut handles = Vec::new();
        for (i, g) in groups.iter().enumerate() {
            for _ in 0..4 {
                // Tenant i burns (i + 1) × 20 chunks per task.
                let chunks = 20 * (i as u32 + 1);
                handles.push((i, tokio::spawn(g.scope(task(chunks, chunk)))));
            }
        }
        let mut expected = [Duration::ZERO; 3];
        let mut migrated = 0;
        for (i, h) in handles {
            let (burned, threads) = h.await.unwrap();
            expected[i] += burned;
            migrated += usize::from(threads.len() > 1);
        }
        (expected, migrated)
    });
    drop(rt);
    for (g, want) in groups.iter().zip(expected) {
        let got = usage(&rs, g);
        let want = want.as_micros() as i64;
        let err = (got - want) as f64 / want as f64;
        eprintln!(
            "{}: charged {got} µs, burned {want} µs ({:+.3}%)",
            g.path(),
            err * 100.0
        );
        // Each poll is charged its burn plus the poll's own overhead.
        assert!(got >= want, "{}: {got} < {want}", g.path());
        assert!(err <= 0.05, "{}: {got} vs {want}", g.path());
    }
    eprintln!("tasks that ran on more than one worker: {migrated} of 12");
    assert!(
        migrated > 0,
        "no task migrated: the test did not test migration"
    );
}

#[test]
fn a_scoped_future_is_in_its_group_on_every_poll_and_no_other_time() {
    let rs = engine();
    let g = rs.root().create_child("g").unwrap();
    let rt = runtime();
    let g2 = g.clone();
    rt.block_on(async move {
        let inner = tokio::spawn(g2.clone().scope(async move {
            for _ in 0..20 {
                assert_eq!(current_group(), Some(g2.clone()));
                tokio::time::sleep(Duration::from_micros(100)).await;
            }
        }));
        inner.await.unwrap();
        // Not in the block_on future, which is not scoped.
        assert_eq!(current_group(), None);
    });
}

#[test]
fn spawned_tasks_inherit_only_when_asked() {
    let rs = engine();
    let g = rs.root().create_child("g").unwrap();
    let rt = runtime();
    let seen = rt.block_on(g.scope(async {
        // Created inside the scope's poll: captures `g`.
        let asked = tokio::spawn(async { current_group() }.in_current_group());
        // Plain spawn: runs outside the scope.
        let plain = tokio::spawn(async { current_group() });
        (asked.await.unwrap(), plain.await.unwrap())
    }));
    assert_eq!(seen, (Some(g.clone()), None));
}

#[test]
fn a_scope_of_a_removed_group_charges_its_nearest_live_ancestor() {
    let rs = engine();
    let p = rs.root().create_child("p").unwrap();
    let a = p.create_child("a").unwrap();
    a.remove().unwrap();
    let fut = a.scope(async { current_group() });
    assert_eq!(fut.group(), Some(&p));
    let rt = runtime();
    assert_eq!(rt.block_on(fut), Some(p.clone()));
}
