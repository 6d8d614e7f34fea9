//! loom models of the engine's lock-free protocols (run with
//! `RUSTFLAGS="--cfg rstat_loom" cargo test --release --test loom`).
//!
//! Tiny configurations: one controller with one item, 1-2 CPU slots, a few
//! groups, so loom can explore every interleaving.
#![cfg(rstat_loom)]

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use rstat::testing::{BuilderExt, ControllerHandleExt};
use rstat::{FlushPolicy, Rstat, UpdatePath};

/// The engines of these models: no `cpu` controller (the model's own
/// controller is the only one, so the state space stays small), no
/// periodic flusher; `Always` reads on the rseq path unless named
/// otherwise.
fn model_engine(nr_cpus: usize) -> Rstat {
    model_engine_with(nr_cpus, FlushPolicy::Always)
}

/// [`model_engine`] reading under `policy`.
fn model_engine_with(nr_cpus: usize, policy: FlushPolicy) -> Rstat {
    model_engine_on(nr_cpus, policy, UpdatePath::Rseq)
}

/// Models run on both update paths where the protocol differs: the
/// (simulated) restartable section with its asymmetric fence, and the
/// locked RMW.
fn model_engine_on(nr_cpus: usize, policy: FlushPolicy, path: UpdatePath) -> Rstat {
    Rstat::builder()
        .update_path(path)
        .nr_cpus(nr_cpus)
        .cpu_controller(false)
        .flush_policy(policy)
        .periodic_flush(None)
        .build()
        .unwrap()
}

/// (a) Concurrent claim/push vs drain: two updaters race to claim the same
/// (group, CPU) node while a flusher drains. Every update is flushed exactly
/// once: the final totals are exact (a lost node loses updates; a node
/// linked twice corrupts the backlog or double-counts).
fn claim_push_vs_drain_flushes_every_update_exactly_once_on(path: UpdatePath) {
    // Three threads and the flusher's wait for announced pushes: unbounded,
    // the exploration runs for many minutes. Three preemptions cover a
    // claimer preempted between claim and push while the other updater and
    // the reader both run.
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(move || {
        let rs = model_engine_on(1, FlushPolicy::Always, path);
        let c = rs.register_counters("c", &["n"]).unwrap();
        let g = rs.root().create_child("g").unwrap();
        // Each updater publishes "my add returned" after it returns, so the
        // reader knows which updates completed before its read began.
        let done = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let spawn = |i: usize, v: i64| {
            let (c, g, done) = (c.clone(), g.clone(), done.clone());
            thread::spawn(move || {
                c.add_on_cpu(&g, 0, 0, v).unwrap();
                done[i].store(true, Ordering::SeqCst);
            })
        };
        let u1 = spawn(0, 1);
        let u2 = spawn(1, 10);
        let completed: i64 = [1, 10]
            .iter()
            .zip(done.iter())
            .map(|(v, d)| if d.load(Ordering::SeqCst) { *v } else { 0 })
            .sum();
        let seen = c.read_exact(rs.root()).unwrap().hierarchical()[0];
        assert!(
            [0, 1, 10, 11].contains(&seen),
            "a read saw {seen}, a value that was never true"
        );
        assert_eq!(
            seen & completed,
            completed,
            "a read saw {seen}, missing updates that completed before it ({completed})"
        );
        u1.join().unwrap();
        u2.join().unwrap();
        assert_eq!(c.read_exact(&g).unwrap().local()[0], 11);
        assert_eq!(c.read_exact(rs.root()).unwrap().hierarchical()[0], 11);
    });
}

#[test]
fn claim_push_vs_drain_flushes_every_update_exactly_once() {
    claim_push_vs_drain_flushes_every_update_exactly_once_on(UpdatePath::Rseq);
}

#[test]
fn claim_push_vs_drain_flushes_every_update_exactly_once_locked() {
    claim_push_vs_drain_flushes_every_update_exactly_once_on(UpdatePath::Locked);
}

/// (a') Two groups sharing a parent, on two CPUs, pushed while a flusher
/// builds the tree: the bottom-up insertion and the subtree cut never lose
/// a node.
#[test]
fn sibling_pushes_on_two_cpus_vs_flush() {
    loom::model(|| {
        let rs = model_engine(2);
        let c = rs.register_counters("c", &["n"]).unwrap();
        let p = rs.root().create_child("p").unwrap();
        let a = p.create_child("a").unwrap();
        let b = p.create_child("b").unwrap();
        let done = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let ta = {
            let (c, a, done) = (c.clone(), a.clone(), done.clone());
            thread::spawn(move || {
                c.add_on_cpu(&a, 0, 0, 1).unwrap();
                done[0].store(true, Ordering::SeqCst);
            })
        };
        let tb = {
            let (c, b, done) = (c.clone(), b.clone(), done.clone());
            thread::spawn(move || {
                c.add_on_cpu(&b, 1, 0, 2).unwrap();
                done[1].store(true, Ordering::SeqCst);
            })
        };
        // Completed before the read began => in the read.
        let (a_done, b_done) = (
            done[0].load(Ordering::SeqCst),
            done[1].load(Ordering::SeqCst),
        );
        let seen = c.read_exact(&p).unwrap().hierarchical()[0];
        assert!((0..=3).contains(&seen), "a read of p saw {seen}");
        if a_done {
            assert!(seen & 1 == 1, "a's completed update is not in {seen}");
        }
        if b_done {
            assert!(seen & 2 == 2, "b's completed update is not in {seen}");
        }
        ta.join().unwrap();
        tb.join().unwrap();
        assert_eq!(c.read_exact(&p).unwrap().hierarchical()[0], 3);
        assert_eq!(c.read_exact(&b).unwrap().local()[0], 2);
        assert_eq!(c.read_exact(&a).unwrap().local()[0], 1);
    });
}

/// (b) Exactness: an update that happened before a read began is in that
/// read, even when the updater found its node already on a backlog that a
/// concurrent flusher is draining at that moment.
fn an_update_that_happened_before_a_read_is_in_it_on(path: UpdatePath) {
    loom::model(move || {
        let rs = model_engine_on(1, FlushPolicy::Always, path);
        let c = rs.register_counters("c", &["n"]).unwrap();
        let g = rs.root().create_child("g").unwrap();
        c.add_on_cpu(&g, 0, 0, 1).unwrap(); // node now on the backlog
        let done = Arc::new(AtomicBool::new(false));
        let flusher = {
            let (c, g, done) = (c.clone(), g.clone(), done.clone());
            thread::spawn(move || {
                let completed = done.load(Ordering::SeqCst);
                let seen = c.read_exact(&g).unwrap().local()[0];
                assert!(!completed || seen == 2, "completed update missing: {seen}");
                seen
            })
        };
        let updater = {
            let (c, g, done) = (c.clone(), g.clone(), done.clone());
            thread::spawn(move || {
                c.add_on_cpu(&g, 0, 0, 1).unwrap();
                done.store(true, Ordering::SeqCst);
            })
        };
        updater.join().unwrap(); // the update happens-before the next read
        assert_eq!(c.read_exact(&g).unwrap().local()[0], 2);
        let seen = flusher.join().unwrap();
        assert!(seen == 1 || seen == 2);
    });
}

#[test]
fn an_update_that_happened_before_a_read_is_in_it() {
    an_update_that_happened_before_a_read_is_in_it_on(UpdatePath::Rseq);
}

#[test]
fn an_update_that_happened_before_a_read_is_in_it_locked() {
    an_update_that_happened_before_a_read_is_in_it_on(UpdatePath::Locked);
}

/// (b') Two threads share CPU slot 0 (a preempted thread, or fewer slots
/// than CPUs): thread A adds while the main thread adds and then reads
/// exactly. The main thread's own update completed before its read began, so
/// the read includes it, whichever of the two claimed the node and however
/// long the winner takes between its claim and its push.
fn shared_slot_completed_update_is_in_the_next_exact_read_on(path: UpdatePath) {
    loom::model(move || {
        let rs = model_engine_on(1, FlushPolicy::Always, path);
        let c = rs.register_counters("c", &["n"]).unwrap();
        let g = rs.root().create_child("g").unwrap();
        let a = {
            let (c, g) = (c.clone(), g.clone());
            thread::spawn(move || c.add_on_cpu(&g, 0, 0, 1).unwrap())
        };
        c.add_on_cpu(&g, 0, 0, 10).unwrap();
        let seen = c.read_exact(&g).unwrap().local()[0];
        assert!(
            seen == 10 || seen == 11,
            "an exact read after our own completed add of 10 saw {seen}"
        );
        a.join().unwrap();
        assert_eq!(c.read_exact(&g).unwrap().local()[0], 11);
    });
}

#[test]
fn shared_slot_completed_update_is_in_the_next_exact_read() {
    shared_slot_completed_update_is_in_the_next_exact_read_on(UpdatePath::Rseq);
}

#[test]
fn shared_slot_completed_update_is_in_the_next_exact_read_locked() {
    shared_slot_completed_update_is_in_the_next_exact_read_on(UpdatePath::Locked);
}

/// (b'') The same on a two-level tree with the read at the parent, after a
/// flush cut the node from the tree: the racing claim is on the child, the
/// exact read is of the parent, and the child was flushed once before.
#[test]
fn shared_slot_after_a_flush_parent_read_sees_child_update() {
    loom::model(|| {
        let rs = model_engine(1);
        let c = rs.register_counters("c", &["n"]).unwrap();
        let p = rs.root().create_child("p").unwrap();
        let g = p.create_child("g").unwrap();
        c.add_on_cpu(&g, 0, 0, 100).unwrap();
        assert_eq!(c.read_exact(&p).unwrap().hierarchical()[0], 100);
        let a = {
            let (c, g) = (c.clone(), g.clone());
            thread::spawn(move || c.add_on_cpu(&g, 0, 0, 1).unwrap())
        };
        c.add_on_cpu(&g, 0, 0, 10).unwrap();
        let seen = c.read_exact(&p).unwrap().hierarchical()[0];
        assert!(
            seen == 110 || seen == 111,
            "an exact read of the parent after our completed add saw {seen}"
        );
        a.join().unwrap();
        assert_eq!(c.read_exact(&p).unwrap().hierarchical()[0], 111);
    });
}

/// (c) `Coalesced` wait/wake: three readers collide. One flushes its
/// subtree under the trylock, one becomes the root flusher, the third waits
/// for that root flush (nr_cpus = 1 waiter allowed) or gives up when the
/// waiter slot is taken. Nobody deadlocks or misses a wake-up, and every
/// read returns either nothing-yet (a stale reader) or the whole update.
#[test]
fn coalesced_readers_wait_and_wake_together() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| {
        let rs = model_engine_with(1, FlushPolicy::Coalesced);
        let c = rs.register_counters("c", &["n"]).unwrap();
        let g = rs.root().create_child("g").unwrap();
        c.add_on_cpu(&g, 0, 0, 5).unwrap();
        let readers: Vec<_> = (0..3)
            .map(|i| {
                let (c, g, root) = (c.clone(), g.clone(), rs.root().clone());
                thread::spawn(move || {
                    let target = if i == 2 { &root } else { &g };
                    c.read(target).unwrap().hierarchical()[0]
                })
            })
            .collect();
        for r in readers {
            let seen = r.join().unwrap();
            assert!(seen == 0 || seen == 5, "a read saw {seen}");
        }
        assert_eq!(c.read_exact(rs.root()).unwrap().hierarchical()[0], 5);
    });
}

/// (d) The `Threshold` counting: two CPUs each carry their slot across
/// three 64-unit boundaries at a time (0 -> 200 -> 400), folding 64 units per
/// crossing into the group's and every ancestor's counter, while a reader
/// decides whether to flush (it must once more than 64 x 2 units are
/// pending) and a flush subtracts what it folded. Checked: a read either
/// did not flush (0) or includes every update completed before it; the
/// staleness left after it is within the counter plus 63 per slot; every
/// crossing reaches every ancestor exactly once; and once the writers are
/// done, an exact read leaves no unit counted (a unit that outlived the
/// flush that folded its change would make every later read flush).
///
/// With `unit` > 1 the item is declared in that unit and every value is
/// scaled by it: the same crossings, now of multiples of 64 × unit, found
/// through the item's shift (the update loads it only when a multiple of
/// 64 is crossed); the counts stay in units.
fn threshold_fold_vs_reader_on(path: UpdatePath, unit: i64) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(move || {
        let rs = model_engine_on(2, FlushPolicy::Threshold, path);
        let c = rs
            .register_counters_with_units("c", &[("n", unit as u64)])
            .unwrap();
        let g = rs.root().create_child("g").unwrap();
        // Shared through a std Arc: the group's own reference count is not
        // what this model is about (percpu_ref has its own models).
        let shared = std::sync::Arc::new(g.clone());
        let done = Arc::new(AtomicUsize::new(0));
        let writers: Vec<_> = (0..2)
            .map(|cpu| {
                let (c, g, done) = (c.clone(), shared.clone(), done.clone());
                thread::spawn(move || {
                    for _ in 0..2 {
                        c.add_on_cpu(&g, cpu, 0, 200 * unit).unwrap();
                        done.fetch_add(200, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        let completed = done.load(Ordering::SeqCst) as i64 * unit;
        let seen = c.read(&g).unwrap().hierarchical()[0];
        assert!(
            seen == 0 || (seen >= completed && seen % (200 * unit) == 0 && seen <= 800 * unit),
            "a threshold read saw {seen} with {completed} completed before it"
        );
        for w in writers {
            w.join().unwrap();
        }
        let (pg, pr) = (
            c.pending_updates(&g).unwrap(),
            c.pending_updates(rs.root()).unwrap(),
        );
        // Twelve crossings in all; no read flushed the root.
        assert_eq!(pr, 12 * 64, "root pending");
        assert!(pg <= 12 * 64 && pg % 64 == 0, "pending {pg}");
        // What the group's published totals miss is covered by its count
        // plus less than a batch per slot (two slots), in units.
        let stale = 800 * unit - c.read(&g).unwrap().hierarchical()[0];
        let u = unit as u64;
        assert!(
            stale as u64 <= pg * u + 2 * (64 * u - 1),
            "stale by {stale} with {pg} pending"
        );
        assert_eq!(c.read_exact(&g).unwrap().hierarchical()[0], 800 * unit);
        assert_eq!(
            c.pending_updates(&g).unwrap(),
            0,
            "units outlived the flush"
        );
        assert_eq!(
            c.read_exact(rs.root()).unwrap().hierarchical()[0],
            800 * unit
        );
        assert_eq!(c.pending_updates(rs.root()).unwrap(), 0, "root units left");
    });
}

#[test]
fn threshold_fold_vs_reader() {
    threshold_fold_vs_reader_on(UpdatePath::Rseq, 1);
}

#[test]
fn threshold_fold_vs_reader_locked() {
    threshold_fold_vs_reader_on(UpdatePath::Locked, 1);
}

/// (d) with the item declared in units of 4.
#[test]
fn threshold_fold_vs_reader_in_units() {
    threshold_fold_vs_reader_on(UpdatePath::Rseq, 4);
}

/// (d) in units of 4, on the locked path.
#[test]
fn threshold_fold_vs_reader_in_units_locked() {
    threshold_fold_vs_reader_on(UpdatePath::Locked, 4);
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

/// A controller whose first flush call panics (after folding), then folds.
struct PanicsOnce {
    names: Vec<String>,
    armed: std::sync::atomic::AtomicBool,
}

impl rstat::Controller for PanicsOnce {
    fn name(&self) -> &str {
        "panics-once"
    }
    fn stat_names(&self) -> &[String] {
        &self.names
    }
    fn flush(&self, ctx: &mut rstat::FlushCtx<'_>) {
        ctx.fold();
        if self.armed.swap(false, std::sync::atomic::Ordering::Relaxed) {
            std::panic::panic_any(DeliberatePanic);
        }
    }
}

/// The payload of [`PanicsOnce`]'s panic, which the hook below keeps quiet
/// about (the model replays it in every interleaving).
struct DeliberatePanic;

/// A contained flush panic puts the group back on the backlog, under
/// the lock, while an updater may be pushing the same node: the node is
/// queued once, the read that panicked saw either nothing or only what it
/// had before, and afterwards every update is in the totals exactly once.
#[test]
fn a_panicking_flush_requeues_its_group_while_an_updater_pushes() {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !info.payload().is::<DeliberatePanic>() {
            prev(info);
        }
    }));
    loom::model(|| {
        let rs = model_engine(1);
        let c = rs
            .register(PanicsOnce {
                names: vec!["n".into()],
                armed: true.into(),
            })
            .unwrap();
        let g = rs.root().create_child("g").unwrap();
        c.add_on_cpu(&g, 0, 0, 1).unwrap();
        let updater = {
            let (c, g) = (c.clone(), g.clone());
            thread::spawn(move || c.add_on_cpu(&g, 0, 0, 10).unwrap())
        };
        let seen = c.read_exact(&g).unwrap().local()[0];
        assert_eq!(seen, 0, "the panicking fold was undone");
        assert_eq!(c.flush_panics(), 1);
        updater.join().unwrap();
        assert_eq!(c.read_exact(&g).unwrap().local()[0], 11);
        assert_eq!(c.read_exact(rs.root()).unwrap().hierarchical()[0], 11);
    });
}
