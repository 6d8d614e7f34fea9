//! What the value -> group cache of `children_of` and `by_path` must not
//! change: a removed group is never handed out again (a value names the
//! live group of that name, re-created or not), values past the cache's
//! bound resolve all the same, threads agree on one group per value, and
//! removed groups are let go (not kept as zombies by the cache).

use std::collections::HashSet;
use std::sync::{mpsc, Barrier};

use rstat::{current_group, Group, Rstat};
use rstat_tracing::{GroupLayer, CACHED_VALUES, CACHE_SWEEP_PERIOD};
use tracing::info_span;
use tracing_subscriber::prelude::*;

fn engine() -> Rstat {
    Rstat::builder().periodic_flush(None).build().unwrap()
}

fn dispatch(layer: GroupLayer) -> tracing::Dispatch {
    tracing::Dispatch::new(tracing_subscriber::registry().with(layer))
}

/// The group current inside a new span with `tenant = value`.
fn group_in(value: &str) -> Option<Group> {
    info_span!("req", tenant = value).in_scope(current_group)
}

/// One request counted in the current group.
fn count_one(rs: &Rstat) {
    let ctl = rs
        .controllers()
        .into_iter()
        .find(|c| c.name() == "req")
        .unwrap();
    ctl.item("n").unwrap().add_current(1);
}

fn requests(rs: &Rstat, g: &Group) -> i64 {
    let ctl = rs
        .controllers()
        .into_iter()
        .find(|c| c.name() == "req")
        .unwrap();
    ctl.read_exact(g).unwrap().get("n").unwrap()
}

#[test]
fn a_removed_and_recreated_child_is_charged_not_the_removed_one() {
    let rs = engine();
    rs.register_counters("req", &["n"]).unwrap();
    let tenants = rs.root().create_child("tenants").unwrap();
    let d = dispatch(GroupLayer::children_of("tenant", tenants.clone()));
    tracing::dispatcher::with_default(&d, || {
        let old = group_in("a").unwrap();
        info_span!("req", tenant = "a").in_scope(|| count_one(&rs));
        old.remove().unwrap();
        // The value names a child created anew, on first sight again.
        let new = group_in("a").unwrap();
        assert!(new.is_online());
        assert_ne!(new.id(), old.id());
        assert_eq!(tenants.child("a"), Some(new.clone()));
        for _ in 0..3 {
            info_span!("req", tenant = "a").in_scope(|| count_one(&rs));
        }
        assert_eq!(requests(&rs, &old), 1);
        assert_eq!(requests(&rs, &new), 3);
    });
}

#[test]
fn a_removed_path_names_the_group_made_in_its_place() {
    let rs = engine();
    rs.register_counters("req", &["n"]).unwrap();
    let tenants = rs.root().create_child("tenants").unwrap();
    let old = tenants.create_child("a").unwrap();
    let d = dispatch(GroupLayer::by_path("tenant", tenants.clone()));
    tracing::dispatcher::with_default(&d, || {
        assert_eq!(group_in("a"), Some(old.clone()));
        old.remove().unwrap();
        // Removed and not made again: the value matches nothing.
        assert_eq!(group_in("a"), None);
        let new = tenants.create_child("a").unwrap();
        assert_eq!(group_in("a"), Some(new.clone()));
        info_span!("req", tenant = "a").in_scope(|| count_one(&rs));
        assert_eq!(requests(&rs, &old), 0);
        assert_eq!(requests(&rs, &new), 1);
    });
}

#[test]
fn values_past_the_cache_bound_still_resolve() {
    let rs = engine();
    let tenants = rs.root().create_child("tenants").unwrap();
    let d = dispatch(GroupLayer::children_of("tenant", tenants.clone()));
    let n = 3 * CACHED_VALUES + 7;
    tracing::dispatcher::with_default(&d, || {
        for round in 0..3 {
            for i in 0..n {
                // Each round in another order, so every part of the
                // cache sees hits, misses and evictions.
                let i = (i * (2 * round + 1)) % n;
                let v = format!("t{i}");
                let g = group_in(&v).unwrap();
                assert_eq!(g.name(), v);
                assert!(g.is_online());
            }
        }
    });
    // Exactly one group per value.
    assert_eq!(tenants.children().len(), n);
}

#[test]
fn threads_agree_on_one_group_per_value() {
    let rs = engine();
    let tenants = rs.root().create_child("tenants").unwrap();
    let d = dispatch(GroupLayer::children_of("tenant", tenants.clone()));
    let names = 40u64;
    let start = Barrier::new(4);
    let seen: Vec<Vec<(String, u64)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4u64)
            .map(|k| {
                let (d, start) = (d.clone(), &start);
                s.spawn(move || {
                    tracing::dispatcher::with_default(&d, || {
                        start.wait();
                        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ k;
                        (0..2000)
                            .map(|_| {
                                x ^= x << 13;
                                x ^= x >> 7;
                                x ^= x << 17;
                                let v = format!("t{}", x % names);
                                let g = group_in(&v).unwrap();
                                assert_eq!(g.name(), v);
                                (v, g.id())
                            })
                            .collect()
                    })
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(tenants.children().len(), names as usize);
    let pairs: HashSet<(String, u64)> = seen.into_iter().flatten().collect();
    // Every value met one group id, on every thread.
    assert_eq!(pairs.len(), names as usize);
    for (v, id) in pairs {
        assert_eq!(tenants.child(&v).unwrap().id(), id);
    }
}

#[test]
fn a_removed_group_is_let_go_when_the_layer_is_dropped() {
    let rs = engine();
    let tenants = rs.root().create_child("tenants").unwrap();
    let d = dispatch(GroupLayer::children_of("tenant", tenants.clone()));
    tracing::dispatcher::with_default(&d, || {
        group_in("a").unwrap().remove().unwrap();
    });
    // This thread's CPU-time segments let go of the groups it was in.
    rstat::attach::charge_this_thread();
    assert_eq!(rs.zombie_count(), 1, "the cache holds it");
    drop(d);
    assert_eq!(rs.zombie_count(), 0);
}

#[test]
fn a_removed_group_is_let_go_by_other_threads_spans() {
    let rs = engine();
    let tenants = rs.root().create_child("tenants").unwrap();
    tenants.create_child("a").unwrap();
    tenants.create_child("b").unwrap();
    let d = dispatch(GroupLayer::by_path("tenant", tenants.clone()));
    let (done_tx, done_rx) = mpsc::channel();
    let (exit_tx, exit_rx) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        // Dropped if this thread panics, which ends the other.
        let exit_tx = exit_tx;
        // A thread that resolves "a" once, then idles (alive) while the
        // group is removed.
        let d2 = d.clone();
        s.spawn(move || {
            tracing::dispatcher::with_default(&d2, || {
                assert!(group_in("a").is_some());
            });
            rstat::attach::charge_this_thread();
            done_tx.send(()).unwrap();
            let _ = exit_rx.recv();
        });
        done_rx.recv().unwrap();
        tenants.child("a").unwrap().remove().unwrap();
        assert_eq!(rs.zombie_count(), 1, "the idle thread's cache holds it");
        // Spans of other values on this thread sweep every thread's cache.
        tracing::dispatcher::with_default(&d, || {
            for _ in 0..CACHE_SWEEP_PERIOD {
                let _ = info_span!("req", tenant = "b");
            }
        });
        assert_eq!(rs.zombie_count(), 0);
        exit_tx.send(()).unwrap();
    });
}
