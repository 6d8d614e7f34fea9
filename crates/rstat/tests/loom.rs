//! loom models of what the engine adds above its mechanism: group
//! handles and removal, and the CPU ids model threads see (run with
//! `RUSTFLAGS="--cfg rstat_loom" cargo test --release --test loom`). The
//! mechanism's own models (the update's claim and push against the flush,
//! exact reads, the `Threshold` counting, the `Coalesced` readers, a
//! contained flush panic) are beside it, in `src/stat/tests_loom.rs`.
//!
//! Tiny configurations: one controller with one item, 1-2 CPU slots, a few
//! groups, so loom can explore every interleaving.
#![cfg(rstat_loom)]

use loom::thread;
use rstat::testing::{BuilderExt, ControllerHandleExt};
use rstat::{FlushPolicy, Rstat, UpdatePath};

/// The engines of these models: no `cpu` controller (the model's own
/// controller is the only one, so the state space stays small), no
/// periodic flusher; `Always` reads on the rseq path.
fn model_engine(nr_cpus: usize) -> Rstat {
    Rstat::builder()
        .update_path(UpdatePath::Rseq)
        .nr_cpus(nr_cpus)
        .cpu_controller(false)
        .flush_policy(FlushPolicy::Always)
        .periodic_flush(None)
        .build()
        .unwrap()
}

/// Group handles cloned into threads and dropped there, racing the
/// removal's kill: the group is freed exactly once, after the last drop.
#[test]
fn group_handles_vs_removal() {
    loom::model(|| {
        let rs = model_engine(2);
        let c = rs.register_counters("c", &["n"]).unwrap();
        let g = rs.root().create_child("g").unwrap();
        let t = {
            let (c, g) = (c.clone(), g.clone());
            thread::spawn(move || c.add_on_cpu(&g, 1, 0, 1).unwrap())
        };
        g.remove().unwrap();
        drop(g);
        t.join().unwrap();
        assert_eq!(rs.zombie_count(), 0);
        assert_eq!(c.read_exact(rs.root()).unwrap().hierarchical()[0], 1);
    });
}

/// Removal flushes nothing: a zombie stays in its parent's subtree. An
/// update made before the removal, and a late one racing an exact read of
/// the parent, are in that parent's exact reads while the zombie is still
/// held (the late one once it completed), and stay there, exactly once,
/// after its final release folds it.
#[test]
fn a_zombies_updates_stay_in_its_parents_exact_reads() {
    loom::model(|| {
        let rs = model_engine(2);
        let c = rs.register_counters("c", &["n"]).unwrap();
        let p = rs.root().create_child("p").unwrap();
        let g = p.create_child("g").unwrap();
        c.add_on_cpu(&g, 0, 0, 1).unwrap();
        g.remove().unwrap();
        assert_eq!(c.read_exact(&p).unwrap().hierarchical()[0], 1);
        let t = {
            let (c, g) = (c.clone(), g.clone());
            thread::spawn(move || c.add_on_cpu(&g, 1, 0, 2).unwrap())
        };
        let racing = c.read_exact(&p).unwrap().hierarchical()[0];
        assert!(racing == 1 || racing == 3, "read {racing}");
        t.join().unwrap();
        assert_eq!(c.read_exact(&p).unwrap().hierarchical()[0], 3);
        assert_eq!(rs.zombie_count(), 1);
        drop(g);
        assert_eq!(rs.zombie_count(), 0);
        assert_eq!(c.read_exact(&p).unwrap().hierarchical()[0], 3);
        assert_eq!(c.read_exact(rs.root()).unwrap().hierarchical()[0], 3);
    });
}

/// Under loom the CPU id is the model thread's number: the same in every
/// replay of an interleaving (a machine CPU id would change when the OS
/// migrates the thread running the model, and steer replays to other slots),
/// and different between threads, so `Group` clones and drops in these
/// models really cross slots.
#[test]
fn model_threads_have_stable_distinct_cpu_ids() {
    loom::model(|| {
        let main = rstat::percpu::cpu::current();
        assert_eq!(rstat::percpu::cpu::current(), main);
        let other = thread::spawn(rstat::percpu::cpu::current).join().unwrap();
        assert_ne!(other, main);
    });
}

/// Creations and removals share the topology lock: a creation under a
/// group racing that group's removal is ordered by the group's children
/// lock. Either the child is made and the removal refuses (the group has
/// a child), or the removal wins and the creation refuses (the group is
/// removed): never a child under a removed group.
#[test]
fn a_removal_racing_a_child_creation_never_leaves_a_child_under_a_removed_group() {
    loom::model(|| {
        let rs = model_engine(1);
        let p = rs.root().create_child("p").unwrap();
        let t = {
            let p = p.clone();
            thread::spawn(move || p.create_child("c"))
        };
        let removed = p.remove();
        let created = t.join().unwrap();
        match (&removed, &created) {
            (Ok(()), Err(rstat::Error::Removed { .. })) => {
                assert!(!p.is_online());
                assert!(p.children().is_empty());
            }
            (Err(rstat::Error::HasChildren { .. }), Ok(c)) => {
                assert!(p.is_online() && c.is_online());
                assert_eq!(p.children(), vec![c.clone()]);
            }
            other => panic!("creation and removal both or neither took effect: {other:?}"),
        }
    });
}

/// Two removals of one group through two handles: exactly one removes
/// it, the other is told it is removed, and the group is a zombie once.
#[test]
fn two_racing_removals_of_one_group_remove_it_once() {
    loom::model(|| {
        let rs = model_engine(1);
        let g = rs.root().create_child("g").unwrap();
        let t = {
            let g = g.clone();
            thread::spawn(move || g.remove())
        };
        let here = g.remove();
        let there = t.join().unwrap();
        assert_eq!(
            [here.is_ok(), there.is_ok()]
                .iter()
                .filter(|ok| **ok)
                .count(),
            1,
            "{here:?} / {there:?}"
        );
        for r in [&here, &there] {
            if let Err(e) = r {
                assert!(matches!(e, rstat::Error::Removed { .. }), "{e:?}");
            }
        }
        assert_eq!(rs.zombie_count(), 1);
        drop(g);
        assert_eq!(rs.zombie_count(), 0);
        assert!(rs.root().children().is_empty());
    });
}
