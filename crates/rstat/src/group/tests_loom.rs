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

/// The kill protocol (module `kill`): a kill of a subtree racing the
/// creation of a child under it never leaves the child unkilled, and a
/// hook registered while the kill runs runs exactly once.
#[test]
fn a_kill_racing_a_child_creation_kills_the_child_and_runs_hooks_once() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| {
        let rs = engine();
        let parent = rs.root().create_child("p").unwrap();
        let runs = std::sync::Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let killer = {
            let parent = parent.clone();
            thread::spawn(move || parent.kill())
        };
        let child = parent.create_child("c").unwrap();
        {
            let runs = runs.clone();
            child.on_kill(move |_| {
                runs.fetch_add(1, loom::sync::atomic::Ordering::Relaxed);
            });
        }
        killer.join().unwrap();
        assert!(parent.is_killed());
        assert!(
            child.is_killed(),
            "a child created during the kill escaped it"
        );
        assert_eq!(runs.load(loom::sync::atomic::Ordering::Relaxed), 1);
        child.remove().unwrap();
        parent.remove().unwrap();
    });
}
