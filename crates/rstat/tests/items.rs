//! Counters by name ([`ControllerHandle::item`]) and for the current group
//! ([`ItemHandle::add_current`]): unknown names, groups of another engine,
//! removed groups, a thread in no group, and two threads charging their
//! current groups while a reader checks the totals.

mod common;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use common::engine;
use rstat::{Error, Group, ItemHandle};

fn hier(rs_ctl: &rstat::ControllerHandle, g: &Group, item: &str) -> i64 {
    rs_ctl.read_exact(g).unwrap().get(item).unwrap()
}

fn local(rs_ctl: &rstat::ControllerHandle, g: &Group, item: &str) -> i64 {
    rs_ctl.read_exact(g).unwrap().get_local(item).unwrap()
}

#[test]
fn an_item_is_resolved_by_name_once() {
    let rs = engine();
    let a = rs.root().create_child("a").unwrap();
    let http = rs
        .register_counters("http", &["requests", "errors"])
        .unwrap();
    let errors = http.item("errors").unwrap();
    assert_eq!(errors.name(), "errors");
    assert_eq!(errors.index(), 1);
    errors.add(&a, 3).unwrap();
    assert_eq!(local(&http, &a, "errors"), 3);
    assert_eq!(local(&http, &a, "requests"), 0);
    // The index API still works beside it.
    http.add(&a, 1, 2).unwrap();
    assert_eq!(local(&http, &a, "errors"), 5);
}

#[test]
fn an_unknown_name_is_an_error_that_lists_the_items() {
    let rs = engine();
    let http = rs
        .register_counters("http", &["requests", "errors"])
        .unwrap();
    let e = http.item("request").unwrap_err();
    match &e {
        Error::UnknownStatName {
            controller,
            name,
            items,
        } => {
            assert_eq!(controller, "http");
            assert_eq!(name, "request");
            assert_eq!(items, &["requests", "errors"]);
        }
        other => panic!("wrong error: {other:?}"),
    }
    let msg = e.to_string();
    assert!(msg.contains("request") && msg.contains("errors"), "{msg}");
}

#[test]
fn a_group_of_another_engine_is_refused() {
    let rs = engine();
    let other = engine();
    let http = rs.register_counters("http", &["requests"]).unwrap();
    let requests = http.item("requests").unwrap();
    let foreign = other.root().create_child("x").unwrap();
    assert!(matches!(
        requests.add(&foreign, 1),
        Err(Error::ForeignGroup)
    ));
    assert_eq!(hier(&http, rs.root(), "requests"), 0);
}

#[test]
fn add_current_charges_the_threads_current_group() {
    let rs = engine();
    let a = rs.root().create_child("a").unwrap();
    let b = a.create_child("b").unwrap();
    let http = rs.register_counters("http", &["requests"]).unwrap();
    let requests = http.item("requests").unwrap();
    {
        let _a = a.enter();
        requests.add_current(1);
        {
            let _b = b.enter();
            requests.add_current(10);
        }
        requests.add_current(100);
    }
    assert_eq!(local(&http, &a, "requests"), 101);
    assert_eq!(local(&http, &b, "requests"), 10);
    assert_eq!(hier(&http, &a, "requests"), 111);
    assert_eq!(local(&http, rs.root(), "requests"), 0);
}

#[test]
fn add_current_in_no_group_charges_the_root() {
    let rs = engine();
    let http = rs.register_counters("http", &["requests"]).unwrap();
    let requests = http.item("requests").unwrap();
    // A thread that never entered a group.
    let r2 = requests.clone();
    std::thread::spawn(move || r2.add_current(7))
        .join()
        .unwrap();
    // A thread in a group of another engine counts in this engine's root,
    // as `Rstat::current_group` says.
    let other = engine();
    let x = other.root().create_child("x").unwrap();
    {
        let _x = x.enter();
        requests.add_current(5);
    }
    assert_eq!(local(&http, rs.root(), "requests"), 12);
}

#[test]
fn add_current_in_a_removed_group_reaches_its_parent() {
    let rs = engine();
    let a = rs.root().create_child("a").unwrap();
    let r = a.create_child("req").unwrap();
    let http = rs.register_counters("http", &["requests"]).unwrap();
    let requests = http.item("requests").unwrap();
    {
        let _r = r.enter();
        requests.add_current(2);
        r.remove().unwrap();
        // Still current: what it charges now is kept too.
        requests.add_current(3);
        // And by hand through the removed group's handle.
        requests.add(&r, 4).unwrap();
    }
    drop(r);
    assert_eq!(local(&http, &a, "requests"), 0);
    assert_eq!(hier(&http, &a, "requests"), 9);
}

#[test]
fn a_group_removed_before_the_counters_existed_charges_its_ancestor() {
    let rs = engine();
    let a = rs.root().create_child("a").unwrap();
    let r = a.create_child("req").unwrap();
    let _in = r.enter();
    r.remove().unwrap();
    // Registered after the removal: `r` has no state of `http`.
    let http = rs.register_counters("http", &["requests"]).unwrap();
    let requests = http.item("requests").unwrap();
    requests.add_current(1);
    requests.add(&r, 2).unwrap();
    assert_eq!(local(&http, &a, "requests"), 3);
}

#[test]
fn an_item_outlives_its_engine() {
    let rs = engine();
    let http = rs.register_counters("http", &["requests"]).unwrap();
    let requests = http.item("requests").unwrap();
    drop(http);
    drop(rs);
    // The root is offline; charging it is harmless.
    requests.add_current(1);
}

/// Two threads each in their own group charge it with `add_current` while
/// a reader checks that each group's exact total never goes down and lies
/// between what the thread finished before the read and what it started
/// before the read ended; after the join the totals are exact.
#[test]
fn concurrent_add_current_is_exact_while_threads_run() {
    let rs = engine();
    let http = rs.register_counters("http", &["requests"]).unwrap();
    let requests: ItemHandle = http.item("requests").unwrap();
    let groups: Vec<Group> = (0..2)
        .map(|i| rs.root().create_child(&format!("t{i}")).unwrap())
        .collect();
    let n: i64 = if cfg!(miri) { 200 } else { 200_000 };
    let started = [AtomicI64::new(0), AtomicI64::new(0)];
    let done = [AtomicI64::new(0), AtomicI64::new(0)];
    let stop = AtomicBool::new(false);
    let (violations, reads) = std::thread::scope(|s| {
        let writers: Vec<_> = (0..2)
            .map(|i| {
                let (g, requests) = (&groups[i], &requests);
                let (started, done) = (&started[i], &done[i]);
                s.spawn(move || {
                    let _in = g.enter();
                    for k in 0..n {
                        let delta = 1 + (k % 3);
                        started.fetch_add(delta, Ordering::SeqCst);
                        requests.add_current(delta);
                        done.fetch_add(delta, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        let reader = s.spawn(|| {
            let mut last = [0i64; 2];
            let (mut v, mut r) = (0u64, 0u64);
            loop {
                // Read once more after the writers finished.
                let finished = stop.load(Ordering::SeqCst);
                for i in 0..2 {
                    let lo = done[i].load(Ordering::SeqCst);
                    let got = local(&http, &groups[i], "requests");
                    let hi = started[i].load(Ordering::SeqCst);
                    if got < lo || got > hi || got < last[i] {
                        eprintln!(
                            "t{i}: read {got}, done {lo}, started {hi}, last {}",
                            last[i]
                        );
                        v += 1;
                    }
                    last[i] = got;
                    r += 1;
                }
                if finished {
                    return (v, r);
                }
            }
        });
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::SeqCst);
        reader.join().unwrap()
    });
    assert_eq!(violations, 0, "{violations} violations in {reads} reads");
    let want: i64 = (0..n).map(|k| 1 + (k % 3)).sum();
    for g in &groups {
        assert_eq!(local(&http, g, "requests"), want);
    }
    assert_eq!(hier(&http, rs.root(), "requests"), 2 * want);
    assert_eq!(local(&http, rs.root(), "requests"), 0);
}
