//! loom models of the engine's lock-free protocols (run with
//! `RUSTFLAGS="--cfg rstat_loom" cargo test --release --test loom`).
//!
//! Tiny configurations: one controller with one item, 1-2 CPU slots, a few
//! groups, so loom can explore every interleaving.
#![cfg(rstat_loom)]

use loom::thread;
use rstat::Rstat;

fn engine(nr_cpus: usize) -> Rstat {
    Rstat::builder()
        .nr_cpus(nr_cpus)
        .cpu_controller(false)
        .build()
        .unwrap()
}

/// (a) Concurrent claim/push vs drain: two updaters race to claim the same
/// (group, CPU) node while a flusher drains. Every update is flushed exactly
/// once: the final totals are exact (a lost node loses updates; a node
/// linked twice corrupts the backlog or double-counts).
#[test]
fn claim_push_vs_drain_flushes_every_update_exactly_once() {
    loom::model(|| {
        let rs = engine(1);
        let c = rs.register_counters("c", &["n"]).unwrap();
        let g = rs.root().create_child("g").unwrap();
        let u1 = {
            let (c, g) = (c.clone(), g.clone());
            thread::spawn(move || c.add_on_cpu(&g, 0, 0, 1).unwrap())
        };
        let u2 = {
            let (c, g) = (c.clone(), g.clone());
            thread::spawn(move || c.add_on_cpu(&g, 0, 0, 10).unwrap())
        };
        let seen = c.read(rs.root()).unwrap().hierarchical()[0];
        assert!(
            [0, 1, 10, 11].contains(&seen),
            "a read saw {seen}, a value that was never true"
        );
        u1.join().unwrap();
        u2.join().unwrap();
        assert_eq!(c.read(&g).unwrap().local()[0], 11);
        assert_eq!(c.read(rs.root()).unwrap().hierarchical()[0], 11);
    });
}

/// (a') Two groups sharing a parent, on two CPUs, pushed while a flusher
/// builds the tree: the bottom-up insertion and the subtree cut never lose
/// a node.
#[test]
fn sibling_pushes_on_two_cpus_vs_flush() {
    loom::model(|| {
        let rs = engine(2);
        let c = rs.register_counters("c", &["n"]).unwrap();
        let p = rs.root().create_child("p").unwrap();
        let a = p.create_child("a").unwrap();
        let b = p.create_child("b").unwrap();
        let ta = {
            let (c, a) = (c.clone(), a.clone());
            thread::spawn(move || c.add_on_cpu(&a, 0, 0, 1).unwrap())
        };
        let tb = {
            let (c, b) = (c.clone(), b.clone());
            thread::spawn(move || c.add_on_cpu(&b, 1, 0, 2).unwrap())
        };
        let _ = c.read(&a).unwrap();
        ta.join().unwrap();
        tb.join().unwrap();
        assert_eq!(c.read(&p).unwrap().hierarchical()[0], 3);
        assert_eq!(c.read(&b).unwrap().local()[0], 2);
        assert_eq!(c.read(&a).unwrap().local()[0], 1);
    });
}

/// (b) Exactness: an update that happened before a read began is in that
/// read, even when the updater found its node already on a backlog that a
/// concurrent flusher is draining at that moment.
#[test]
fn an_update_that_happened_before_a_read_is_in_it() {
    loom::model(|| {
        let rs = engine(1);
        let c = rs.register_counters("c", &["n"]).unwrap();
        let g = rs.root().create_child("g").unwrap();
        c.add_on_cpu(&g, 0, 0, 1).unwrap(); // node now on the backlog
        let flusher = {
            let (c, g) = (c.clone(), g.clone());
            thread::spawn(move || c.read(&g).unwrap().local()[0])
        };
        let updater = {
            let (c, g) = (c.clone(), g.clone());
            thread::spawn(move || c.add_on_cpu(&g, 0, 0, 1).unwrap())
        };
        updater.join().unwrap(); // the update happens-before the next read
        assert_eq!(c.read(&g).unwrap().local()[0], 2);
        let seen = flusher.join().unwrap();
        assert!(seen == 1 || seen == 2);
    });
}
