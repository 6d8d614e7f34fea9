//! The engine through its public API: groups, controllers, exact reads.

use rstat::testing::ControllerHandleExt;
use rstat::{Error, FlushPolicy, Rstat};

/// Engines with the `Always` policy: every read is exact. The periodic
/// flusher runs, as by default (unlike the engines of `tests/common`).
fn exact_engine(nr_cpus: usize, unified: bool) -> Rstat {
    Rstat::builder()
        .nr_cpus(nr_cpus)
        .unified(unified)
        .flush_policy(FlushPolicy::Always)
        .build()
        .unwrap()
}

#[test]
fn hierarchical_and_local_totals_are_exact_in_both_modes() {
    for unified in [false, true] {
        let rs = exact_engine(4, unified);
        let io = rs.register_counters("io", &["rbytes", "wbytes"]).unwrap();
        let a = rs.root().create_child("a").unwrap();
        let b = a.create_child("b").unwrap();
        let c = a.create_child("c").unwrap();
        for cpu in 0..6 {
            io.add_on_cpu(&b, cpu, 0, 10).unwrap();
            io.add_on_cpu(&c, cpu, 1, 3).unwrap();
            io.add_on_cpu(&a, cpu, 0, 1).unwrap();
        }
        let sa = io.read(&a).unwrap();
        assert_eq!(sa.hierarchical(), &[66, 18]);
        assert_eq!(sa.local(), &[6, 0]);
        let sb = io.read(&b).unwrap();
        assert_eq!(
            (sb.hierarchical(), sb.local()),
            (&[60, 0][..], &[60, 0][..])
        );
        // Read a child first, then the parent: the child's flush left its
        // deltas pending in the parent, which the parent's read folds.
        io.add_on_cpu(&c, 2, 1, 100).unwrap();
        assert_eq!(io.read(&c).unwrap().hierarchical(), &[0, 118]);
        assert_eq!(io.read(&a).unwrap().hierarchical(), &[66, 118]);
        assert_eq!(io.read(rs.root()).unwrap().hierarchical(), &[66, 118]);
        // Negative deltas (gauges) fold too.
        io.add(&b, 0, -60).unwrap();
        assert_eq!(io.read(rs.root()).unwrap().hierarchical(), &[6, 118]);
    }
}

#[test]
fn cpu_controller_accounts_usage_user_system() {
    let rs = exact_engine(2, false);
    let t = rs.root().create_child("t").unwrap();
    rs.account_cputime(&t, 70, 30).unwrap();
    rs.account_cputime(rs.root(), 1, 2).unwrap();
    let s = rs.cpu_stat(&t).unwrap();
    assert_eq!(s.hierarchical(), &[100, 70, 30]);
    let r = rs.cpu_stat(rs.root()).unwrap();
    // The root is the process (its own time is the process's CPU time not
    // charged below it, at least what was charged to it by hand): its
    // totals are still its own plus its child's.
    let (h, l) = (r.hierarchical(), r.local());
    let children: Vec<i64> = (0..3).map(|i| h[i] - l[i]).collect();
    assert_eq!(children, [100, 70, 30]);
    assert!(l[0] >= 3 && l[1] + l[2] == l[0], "{l:?}");
    if cfg!(miri) {
        // No process clock: the root reads as charged.
        assert_eq!(h, &[103, 71, 32]);
    }
}

#[test]
fn removal_folds_history_into_the_parent_and_zombies_stay_readable() {
    for unified in [false, true] {
        let rs = exact_engine(3, unified);
        let io = rs.register_counters("io", &["ops"]).unwrap();
        let p = rs.root().create_child("p").unwrap();
        let leaf = p.create_child("leaf").unwrap();
        io.add_on_cpu(&leaf, 1, 0, 5).unwrap();
        io.add_on_cpu(&leaf, 2, 0, 7).unwrap();
        assert_eq!(io.read(&p).unwrap().hierarchical(), &[12]);
        io.add_on_cpu(&leaf, 0, 0, 1).unwrap(); // not yet flushed when removed
        leaf.remove().unwrap();
        assert!(!leaf.is_online());
        assert_eq!(io.read(&p).unwrap().hierarchical(), &[13]);
        assert_eq!(io.read(&p).unwrap().local(), &[0]);
        // The zombie is still readable through its handle ...
        assert_eq!(io.read(&leaf).unwrap().local(), &[13]);
        // ... and late updates through it reach the ancestors.
        io.add_on_cpu(&leaf, 2, 0, 100).unwrap();
        assert_eq!(io.read(&p).unwrap().hierarchical(), &[113]);
        drop(leaf); // final release: state returned to the arena
        assert_eq!(io.read(&p).unwrap().hierarchical(), &[113]);
        assert_eq!(io.read(rs.root()).unwrap().hierarchical(), &[113]);
    }
}

#[test]
fn late_updates_are_folded_at_final_release() {
    let rs = exact_engine(2, false);
    let io = rs.register_counters("io", &["ops"]).unwrap();
    let p = rs.root().create_child("p").unwrap();
    let leaf = p.create_child("leaf").unwrap();
    leaf.remove().unwrap();
    let h = io.stat_handle(&leaf).unwrap();
    h.add(0, 9).unwrap();
    assert!(
        matches!(h.add(1, 9), Err(rstat::Error::UnknownStat { index: 1, .. })),
        "an out-of-range item is refused"
    );
    drop(h);
    drop(leaf); // never read after the update: the release flush folds it
    assert_eq!(io.read(&p).unwrap().hierarchical(), &[9]);
}

#[test]
fn arena_returns_to_its_start_after_groups_are_freed() {
    let rs = exact_engine(2, false);
    let io = rs.register_counters("io", &["a", "b", "c"]).unwrap();
    let start = rs.arena_stats();
    let mut groups = Vec::new();
    for i in 0..50 {
        let g = rs.root().create_child(&format!("g{i}")).unwrap();
        io.add(&g, 1, 1).unwrap();
        groups.push(g);
    }
    assert!(rs.arena_stats().live_allocations > start.live_allocations);
    for g in groups {
        g.remove().unwrap();
    }
    assert_eq!(rs.arena_stats().live_allocations, start.live_allocations);
    assert_eq!(
        rs.arena_stats().bytes_in_use_per_unit,
        start.bytes_in_use_per_unit
    );
    assert_eq!(io.read(rs.root()).unwrap().hierarchical(), &[0, 50, 0]);
}

#[test]
fn names_paths_and_lookups() {
    let rs = exact_engine(1, false);
    let a = rs.root().create_child("a").unwrap();
    let b = a.create_child("b").unwrap();
    b.create_child("c").unwrap();
    assert_eq!(rs.lookup("a/b/c").unwrap().path(), "/a/b/c");
    assert_eq!(rs.lookup("").unwrap(), *rs.root());
    assert_eq!(rs.lookup("a/b").unwrap(), b);
    assert_eq!(b.depth(), 2);
    assert_eq!(
        a.children()
            .iter()
            .map(|g| g.name().to_owned())
            .collect::<Vec<_>>(),
        ["b"]
    );
    let long = "x".repeat(256);
    for bad in ["", "a/b", "nul\0", ".", "..", long.as_str()] {
        assert!(
            matches!(rs.root().create_child(bad), Err(Error::InvalidName { .. })),
            "{bad:?}"
        );
    }
    assert!(rs.root().create_child(&"x".repeat(255)).is_ok());
    assert!(matches!(
        rs.root().create_child("a"),
        Err(Error::NameExists { .. })
    ));
    assert!(matches!(rs.lookup("a/zz"), Err(Error::NotFound { .. })));
    assert!(matches!(rs.lookup("a//b"), Err(Error::InvalidPath { .. })));
    assert!(matches!(
        a.remove(),
        Err(Error::HasChildren { children: 1, .. })
    ));
    assert!(matches!(rs.root().remove(), Err(Error::RootNotRemovable)));
    let c = rs.lookup("a/b/c").unwrap();
    c.remove().unwrap();
    assert!(
        matches!(rs.lookup("a/b/c"), Err(Error::NotFound { .. })),
        "a removed group's path is unknown"
    );
    assert!(matches!(c.remove(), Err(Error::Removed { .. })));
    assert!(matches!(c.create_child("d"), Err(Error::Removed { .. })));
    // The name is free again once the old group is offline.
    b.create_child("c").unwrap();
    let msg = rs.root().create_child("a/b").unwrap_err().to_string();
    assert!(msg.contains("'/'"), "{msg}");
}

#[test]
fn controller_registration_errors_and_late_registration() {
    let rs = exact_engine(2, false);
    let a = rs.root().create_child("a").unwrap();
    let zombie = a.create_child("z").unwrap();
    zombie.remove().unwrap();
    let io = rs.register_counters("io", &["x"]).unwrap();
    assert!(matches!(
        rs.register_counters("io", &["y"]),
        Err(Error::ControllerExists { .. })
    ));
    assert!(matches!(
        rs.register_counters("cpu", &["y"]),
        Err(Error::ControllerExists { .. })
    ));
    assert!(matches!(
        rs.register_counters("e", &[]),
        Err(Error::InvalidController { .. })
    ));
    assert!(matches!(
        rs.register_counters("d", &["x", "x"]),
        Err(Error::InvalidController { .. })
    ));
    assert!(matches!(
        rs.register_counters("s", &["has space"]),
        Err(Error::InvalidController { .. })
    ));
    assert!(matches!(
        rs.register_counters("bad/name", &["x"]),
        Err(Error::InvalidController { .. })
    ));
    assert!(matches!(
        io.add(&a, 1, 1),
        Err(Error::UnknownStat {
            index: 1,
            len: 1,
            ..
        })
    ));
    // Registered after `a` existed: `a` has state.
    io.add(&a, 0, 2).unwrap();
    // The zombie predates the controller: it charges its nearest ancestor.
    io.add(&zombie, 0, 3).unwrap();
    assert_eq!(io.read(&a).unwrap().local(), &[5]);
    let other = exact_engine(2, false);
    assert!(matches!(
        io.add(other.root(), 0, 1),
        Err(Error::ForeignGroup)
    ));
    // Another engine's group with a controller at the same index: still
    // foreign, and its counters are left alone.
    let theirs = other.register_counters("theirs", &["x", "y"]).unwrap();
    assert!(matches!(
        io.add(other.root(), 0, 1),
        Err(Error::ForeignGroup)
    ));
    assert_eq!(theirs.read_exact(other.root()).unwrap().local(), &[0, 0]);
    for i in rs_controllers_left(&rs) {
        rs.register_counters(&format!("c{i}"), &["x"]).unwrap();
    }
    assert!(matches!(
        rs.register_counters("one-too-many", &["x"]),
        Err(Error::TooManyControllers { .. })
    ));
}

fn rs_controllers_left(_rs: &Rstat) -> std::ops::Range<usize> {
    // cpu + io are registered; fill the table.
    0..rstat::MAX_CONTROLLERS - 2
}

#[test]
fn separate_trees_do_not_flush_other_controllers() {
    for unified in [false, true] {
        let rs = exact_engine(2, unified);
        let heavy = rs.register_counters("heavy", &["x"]).unwrap();
        let g = rs.root().create_child("g").unwrap();
        heavy.add_on_cpu(&g, 1, 0, 1).unwrap();
        let before = heavy.flush_counts();
        rs.cpu_stat(&g).unwrap();
        let after = heavy.flush_counts();
        if unified {
            // One tree: the cpu read flushed g (and the root) for everyone.
            assert_eq!(after.0, before.0 + 1);
            assert_eq!(
                after.1,
                before.1 + 1,
                "g on CPU 1 was folded by the cpu read"
            );
        } else {
            assert_eq!(
                after, before,
                "a cpu read must not touch the heavy controller"
            );
        }
        assert_eq!(heavy.read(&g).unwrap().local(), &[1]);
    }
}

#[test]
fn dropping_the_engine_frees_the_tree_but_not_held_groups() {
    let rs = exact_engine(2, false);
    let io = rs.register_counters("io", &["x"]).unwrap();
    let a = rs.root().create_child("a").unwrap();
    let b = a.create_child("b").unwrap();
    io.add(&b, 0, 4).unwrap();
    drop(rs);
    assert!(!b.is_online());
    assert_eq!(io.read(&b).unwrap().local(), &[4]);
    assert_eq!(io.read(&a).unwrap().hierarchical(), &[4]);
}

#[test]
fn zombies_are_counted_and_freed_when_the_last_handle_drops() {
    let rs = exact_engine(2, false);
    let io = rs.register_counters("io", &["x"]).unwrap();
    let start = rs.arena_stats();
    let p = rs.root().create_child("p").unwrap();
    let a = p.create_child("a").unwrap();
    let a2 = a.clone();
    let h = io.stat_handle(&a).unwrap();
    h.add(0, 5).unwrap();
    a.remove().unwrap();
    assert_eq!(rs.zombie_count(), 1);
    drop(a);
    assert_eq!(rs.zombie_count(), 1, "a2 and the stat handle still hold it");
    assert_eq!(
        io.read(&a2).unwrap().local(),
        &[5],
        "a zombie stays readable"
    );
    h.add(0, 1).expect("and updatable");
    drop(a2);
    assert_eq!(rs.zombie_count(), 1);
    drop(h);
    assert_eq!(rs.zombie_count(), 0, "the last handle freed it");
    assert_eq!(
        io.read(&p).unwrap().hierarchical(),
        &[6],
        "nothing was lost"
    );
    p.remove().unwrap();
    drop(p);
    assert_eq!(rs.zombie_count(), 0);
    assert_eq!(rs.arena_stats().live_allocations, start.live_allocations);
    assert_eq!(
        rs.arena_stats().bytes_in_use_per_unit,
        start.bytes_in_use_per_unit
    );
    assert_eq!(io.read(rs.root()).unwrap().hierarchical(), &[6]);
}

#[test]
fn handles_cloned_and_dropped_across_threads_during_removal_leak_nothing() {
    let rs = exact_engine(2, false);
    let io = rs.register_counters("io", &["x"]).unwrap();
    let start = rs.arena_stats();
    let rounds = if cfg!(miri) { 3 } else { 200 };
    for r in 0..rounds {
        let g = rs.root().create_child(&format!("g{r}")).unwrap();
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let (g, io) = (g.clone(), io.clone());
                std::thread::spawn(move || {
                    for _ in 0..if cfg!(miri) { 5 } else { 200 } {
                        let c = g.clone();
                        io.add(&c, 0, 1).unwrap();
                        drop(c);
                    }
                })
            })
            .collect();
        g.remove().unwrap();
        drop(g);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(rs.zombie_count(), 0);
    }
    assert_eq!(rs.arena_stats().live_allocations, start.live_allocations);
    let per = if cfg!(miri) { 5 } else { 200 };
    assert_eq!(
        io.read(rs.root()).unwrap().hierarchical(),
        &[rounds * 3 * per]
    );
}

/// A group's final release visits only the CPU slots its node went on
/// (`TreeNode::touched`, bit `slot % 64`): on an engine of 66 slots, so
/// that slots 0 and 64, and 1 and 65, share a bit, groups changed on one or two
/// slots each, some folded once before their release (their node then on
/// a tree, off list) and changed again after (back on a backlog), some
/// only through a child (a path node): every count reaches the parent and
/// the root exactly, and no pending-update unit is left behind.
#[test]
fn a_removed_group_folds_the_few_slots_it_changed_on_a_large_engine() {
    // Under Miri (slow), the separate trees only.
    let modes: &[bool] = if cfg!(miri) { &[false] } else { &[false, true] };
    for &unified in modes {
        let rs = Rstat::builder()
            .nr_cpus(66)
            .unified(unified)
            .build()
            .unwrap();
        let io = rs.register_counters("io", &["n"]).unwrap();
        let mut expected_root = 0i64;
        for (i, &(slot, other)) in [(0, 0), (1, 65), (63, 63), (64, 1), (65, 0), (64, 0)]
            .iter()
            .enumerate()
        {
            let t = rs.root().create_child(&format!("t{i}")).unwrap();
            let mid = t.create_child("mid").unwrap();
            let leaf = mid.create_child("leaf").unwrap();
            // Large deltas cross batch boundaries: units get counted.
            io.add_on_cpu(&leaf, slot, 0, 1000 + i as i64).unwrap();
            if i % 2 == 1 {
                // Folded once (the leaf now on `slot`'s tree, off list),
                // then changed again on another slot (on that backlog).
                assert_eq!(
                    io.read_exact(&t).unwrap().hierarchical()[0],
                    1000 + i as i64
                );
                io.add_on_cpu(&leaf, other, 0, 7).unwrap();
            }
            let want = 1000 + i as i64 + if i % 2 == 1 { 7 } else { 0 };
            // `mid` is changed only through `leaf`: a path node.
            leaf.remove().unwrap();
            drop(leaf);
            assert_eq!(
                io.read_exact(&mid).unwrap().hierarchical()[0],
                want,
                "group {i}"
            );
            mid.remove().unwrap();
            drop(mid);
            let read = io.read_exact(&t).unwrap();
            assert_eq!(read.hierarchical()[0], want, "group {i}");
            assert_eq!(read.local()[0], 0, "group {i}");
            expected_root += want;
            // A group never changed costs its release nothing and folds
            // nothing.
            let idle = t.create_child("idle").unwrap();
            idle.remove().unwrap();
            drop(idle);
            assert_eq!(
                io.read_exact(&t).unwrap().hierarchical()[0],
                want,
                "group {i}"
            );
        }
        assert_eq!(
            io.read_exact(rs.root()).unwrap().hierarchical()[0],
            expected_root
        );
        assert_eq!(
            io.pending_updates(rs.root()).unwrap(),
            0,
            "units left behind"
        );
    }
}

/// A group's per-CPU stat slots are handed out zero without being written
/// (`Arena::alloc_zeroed`; its release zeroes only the CPU slots it
/// changed, which the arena's own tests check): a group made again and
/// again on the slots its predecessor changed on a few CPUs and freed (the
/// counter set's slots are of a size no other controller's are) reads
/// zero, then exactly what it is given.
#[test]
fn a_new_group_on_freed_slots_starts_at_zero() {
    let rs = Rstat::builder().nr_cpus(16).build().unwrap();
    let io = rs.register_counters("io", &["a", "b", "c", "d"]).unwrap();
    let p = rs.root().create_child("p").unwrap();
    for round in 0..20i64 {
        let g = p.create_child("g").unwrap();
        let read = io.read_exact(&g).unwrap();
        assert_eq!(read.local(), &[0; 4], "round {round}");
        assert_eq!(read.hierarchical(), &[0; 4], "round {round}");
        for (k, cpu) in [round % 16, (round * 7 + 3) % 16].into_iter().enumerate() {
            for item in 0..4 {
                io.add_on_cpu(&g, cpu as usize, item, 1000 + round + k as i64)
                    .unwrap();
            }
        }
        let want = 2000 + 2 * round + 1;
        assert_eq!(io.read_exact(&g).unwrap().local(), &[want; 4]);
        g.remove().unwrap();
    }
    let want: i64 = (0..20).map(|r| 2001 + 2 * r).sum();
    assert_eq!(io.read_exact(&p).unwrap().hierarchical(), &[want; 4]);
}
