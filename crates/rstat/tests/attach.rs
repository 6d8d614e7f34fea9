//! The current group: nesting, out-of-order drops, removed groups, groups
//! of another engine, threads.

mod common;

use common::engine;
use rstat::{current_group, Error};

#[test]
fn a_thread_that_never_entered_is_in_the_root() {
    let rs = engine();
    std::thread::spawn(move || {
        assert_eq!(current_group(), None);
        assert_eq!(rs.current_group(), *rs.root());
    })
    .join()
    .unwrap();
}

#[test]
fn nesting_restores_the_outer_group() {
    let rs = engine();
    let a = rs.root().create_child("a").unwrap();
    let b = a.create_child("b").unwrap();
    let c = rs.root().create_child("c").unwrap();
    let ga = a.enter();
    assert_eq!(current_group(), Some(a.clone()));
    {
        let _gb = b.enter();
        assert_eq!(current_group(), Some(b.clone()));
        {
            let _gc = c.enter();
            assert_eq!(rs.current_group(), c);
            // The same group entered twice nests too.
            let _gc2 = c.enter();
            assert_eq!(current_group(), Some(c.clone()));
        }
        assert_eq!(current_group(), Some(b.clone()));
    }
    assert_eq!(current_group(), Some(a.clone()));
    drop(ga);
    assert_eq!(current_group(), None);
}

#[test]
fn out_of_order_drops_keep_the_innermost_live_guard_current() {
    let rs = engine();
    let a = rs.root().create_child("a").unwrap();
    let b = rs.root().create_child("b").unwrap();
    let c = rs.root().create_child("c").unwrap();
    let ga = a.enter();
    let gb = b.enter();
    let gc = c.enter();
    drop(gb); // a middle level
    assert_eq!(current_group(), Some(c.clone()));
    drop(gc); // back to a, skipping the dropped b
    assert_eq!(current_group(), Some(a.clone()));
    let gb = b.enter();
    drop(ga); // the outermost, while b is inside
    assert_eq!(current_group(), Some(b.clone()));
    drop(gb);
    assert_eq!(current_group(), None);
}

#[test]
fn entering_a_removed_group_enters_its_nearest_live_ancestor() {
    let rs = engine();
    let a = rs.root().create_child("a").unwrap();
    let b = a.create_child("b").unwrap();
    let c = b.create_child("c").unwrap();
    c.remove().unwrap();
    b.remove().unwrap();
    let g = c.enter();
    assert_eq!(g.group(), &a);
    assert_eq!(current_group(), Some(a.clone()));
    drop(g);
    match c.try_enter() {
        Err(Error::Removed { path }) => assert_eq!(path, "/a/b/c"),
        other => panic!("expected Removed, got {other:?}"),
    }
    assert_eq!(current_group(), None);
    let ok = a.try_enter().unwrap();
    assert_eq!(current_group(), Some(a.clone()));
    drop(ok);
}

#[test]
fn a_group_removed_while_inside_stays_current_and_is_freed_after() {
    let rs = engine();
    let a = rs.root().create_child("a").unwrap();
    let g = a.enter();
    a.remove().unwrap();
    drop(a);
    // The guard's reference keeps the zombie: still current.
    assert_eq!(rs.zombie_count(), 1);
    let cur = current_group().unwrap();
    assert!(!cur.is_online());
    assert_eq!(cur.path(), "/a");
    drop(cur);
    drop(g);
    assert_eq!(rs.zombie_count(), 0);
    assert_eq!(current_group(), None);
}

#[test]
fn a_group_of_another_engine_is_current_but_each_engine_sees_its_own() {
    let rs1 = engine();
    let rs2 = engine();
    let a = rs1.root().create_child("a").unwrap();
    let x = rs2.root().create_child("x").unwrap();
    let ga = a.enter();
    assert_eq!(rs2.current_group(), *rs2.root());
    let gx = x.enter();
    assert_eq!(current_group(), Some(x.clone()));
    assert_eq!(rs2.current_group(), x);
    assert_eq!(rs1.current_group(), *rs1.root());
    assert!(x.belongs_to(&rs2) && !x.belongs_to(&rs1));
    drop(gx);
    assert_eq!(rs1.current_group(), a);
    drop(ga);
}

#[test]
fn each_thread_has_its_own_current_group() {
    let rs = engine();
    let groups: Vec<_> = (0..4)
        .map(|i| rs.root().create_child(&format!("t{i}")).unwrap())
        .collect();
    let _main = groups[0].enter();
    std::thread::scope(|s| {
        for g in &groups[1..] {
            s.spawn(move || {
                assert_eq!(current_group(), None);
                for _ in 0..100 {
                    let _in = g.enter();
                    assert_eq!(current_group().as_ref(), Some(g));
                }
                assert_eq!(current_group(), None);
            });
        }
    });
    assert_eq!(current_group(), Some(groups[0].clone()));
}

#[test]
fn dropping_the_engine_while_inside_is_safe() {
    let rs = engine();
    let a = rs.root().create_child("a").unwrap();
    let g = a.enter();
    drop(rs);
    assert!(!a.is_online());
    assert_eq!(current_group(), Some(a.clone()));
    // Entering a group of a dropped engine falls back to its (offline)
    // root, the top of the chain.
    let again = a.enter();
    assert_eq!(again.group().depth(), 0);
    drop(again);
    drop(g);
}
