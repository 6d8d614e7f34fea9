//! loom model of the deferred-release stack ([`Group::drop_deferred`],
//! [`release_deferred`]): groups whose last references are dropped on
//! two threads at once, while a third empties the stack. Every group is
//! released exactly once (a lost push leaks a zombie; a group on the
//! stack twice, or popped while being pushed, is released twice, which
//! loom reports as a use after free or a double free of its state).

use super::Group;
use crate::engine::Rstat;
use crate::testing::BuilderExt;
use loom::thread;

fn engine() -> Rstat {
    Rstat::builder()
        .nr_cpus(1)
        .cpu_controller(false)
        .periodic_flush(None)
        .build()
        .unwrap()
}

/// A removed group and one handle on it that is its last reference.
fn zombie(rs: &Rstat, name: &str) -> Group {
    let g = rs.root().create_child(name).unwrap();
    g.remove().unwrap();
    g
}

#[test]
fn concurrent_last_drops_and_release_release_each_group_once() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| {
        let rs = engine();
        let g1 = zombie(&rs, "a");
        let g2 = zombie(&rs, "b");
        assert_eq!(rs.zombie_count(), 2);
        let t1 = thread::spawn(move || g1.drop_deferred());
        let t2 = thread::spawn(move || g2.drop_deferred());
        rs.release_deferred();
        t1.join().unwrap();
        t2.join().unwrap();
        rs.release_deferred();
        assert_eq!(rs.zombie_count(), 0);
    });
}
