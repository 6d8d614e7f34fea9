//! loom models of the mode switch against the fast paths, on 2 CPUs.
//!
//! Each model tracks the references it holds in `held` (incremented after a
//! successful get, decremented before the put), and the release callback
//! checks `held == 0`: release only at zero. `releases` counts callbacks:
//! exactly once per cycle. `released` lets threads check that no get
//! succeeds after release.
//!
//! Run: `RUSTFLAGS="--cfg rstat_loom" cargo test -p rstat --release --lib percpu_ref`.
//!
//! The models guard the ordering claims of the parent module's
//! "Synchronization": weakening the put's Release, the freeze's Acquire,
//! the zeroing CAS's Acquire or the fold CAS's Release, splitting the
//! freeze into a load and an `or`, dropping `tryget_live`'s dying check or
//! forgetting `BIAS` on the way back to percpu mode each makes at least one
//! model fail.

use super::*;
use crate::sync::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicUsize};
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::Ordering::SeqCst;

const CPUS: usize = 2;

struct World {
    r: PercpuRef,
    held: Arc<AtomicUsize>,
    releases: Arc<AtomicUsize>,
    /// The object the ref guards: written by a holder before its put and by
    /// the release callback, without synchronisation of its own. loom reports
    /// a data race unless every put happens before release.
    obj: Arc<Obj>,
}

struct Obj(UnsafeCell<u64>);
// SAFETY: accesses go through loom's `UnsafeCell`, which checks at run time
// that they are ordered by happens-before; that check is the point.
unsafe impl Sync for Obj {}
// SAFETY: as above.
unsafe impl Send for Obj {}

/// A ref on two CPUs; `held` starts at 1 for the initial reference.
fn world(flags: InitFlags) -> Arc<World> {
    let want = if flags.contains(InitFlags::LOCKED_SLOTS) {
        FastPath::Locked
    } else {
        FastPath::Simulated
    };
    let held = Arc::new(AtomicUsize::new(1));
    let releases = Arc::new(AtomicUsize::new(0));
    let obj = Arc::new(Obj(UnsafeCell::new(0)));
    let (h, rel, o) = (Arc::clone(&held), Arc::clone(&releases), Arc::clone(&obj));
    let r = PercpuRef::with_nr_cpus(CPUS, flags, move || {
        assert_eq!(h.load(SeqCst), 0, "release ran while a reference was held");
        // SAFETY: loom checks that no holder's access races this one.
        o.0.with_mut(|p| unsafe { *p += 1 });
        rel.fetch_add(1, SeqCst);
    });
    assert_eq!(r.fast_path(), want);
    Arc::new(World {
        r,
        held,
        releases,
        obj,
    })
}

impl World {
    fn got(&self) {
        self.held.fetch_add(1, SeqCst);
    }
    fn get(&self, cpu: usize) {
        self.r.get_on(cpu).unwrap();
        assert_eq!(
            self.releases.load(SeqCst),
            0,
            "a get succeeded after release"
        );
        self.got();
    }
    fn put(&self, cpu: usize) {
        self.held.fetch_sub(1, SeqCst);
        self.r.put_on(cpu).unwrap();
    }
    fn kill(&self) {
        self.held.fetch_sub(1, SeqCst);
        self.r.kill().unwrap();
    }
    /// Put a reference after using the object. The object is touched after
    /// `held` is decremented, so the only thing that can order the touch
    /// before the release callback is the ref itself. One holder thread per
    /// model touches.
    fn put_touching(&self, cpu: usize) {
        self.held.fetch_sub(1, SeqCst);
        // SAFETY: loom checks the exclusion this model claims.
        self.obj.0.with_mut(|p| unsafe { *p += 1 });
        self.r.put_on(cpu).unwrap();
    }
    fn releases(&self) -> usize {
        self.releases.load(SeqCst)
    }
}

/// Preemption bound 4 (about 2 s for all models); `LOOM_MAX_PREEMPTIONS`
/// overrides it. With no bound at all every model here also passes (about a
/// minute in total).
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(4);
    }
    b.check(f);
}

/// A holder moves references between CPUs while the ref is killed: nothing
/// is lost or counted twice across the fold, and release runs exactly once,
/// at zero, after the holder's last put.
fn kill_vs_get_put_on_both_cpus(kind: InitFlags) {
    model(move || {
        let w = world(InitFlags::PERCPU | kind);
        w.get(0);
        let w2 = Arc::clone(&w);
        let t = thread::spawn(move || {
            w2.get(1);
            w2.put_touching(0);
            w2.put_touching(1);
        });
        w.kill();
        t.join().unwrap();
        assert_eq!(w.releases(), 1);
        assert!(w.r.is_zero());
        assert!(!w.r.tryget_on(0));
        assert_eq!(w.r.get_on(1), Err(PercpuRefError::Released));
    });
}

/// The fold and the final put on different threads, with no lock or join
/// between them: a holder drops its reference on a slot (before the freeze,
/// in the interesting interleavings), another thread folds (the owner, who
/// dropped the initial reference in percpu mode, where a put never
/// releases), and a third thread's put on `count` reaches zero and runs
/// release. The holder's use of the object must happen before release
/// through slot put → freeze → fold CAS → zeroing CAS (this model fails if
/// the fold CAS is not Release).
fn release_on_a_third_thread_sees_every_holder(kind: InitFlags) {
    model(move || {
        let w = world(InitFlags::PERCPU | kind);
        w.get(0); // for `t`
        w.get(1); // for `u`
        let (wt, wu) = (Arc::clone(&w), Arc::clone(&w));
        let t = thread::spawn(move || wt.put_touching(0));
        let u = thread::spawn(move || wu.put(1));
        w.put(0); // the initial reference: percpu mode, cannot release
        w.r.switch_to_atomic_sync().unwrap();
        t.join().unwrap();
        u.join().unwrap();
        assert_eq!(w.releases(), 1);
        assert!(w.r.is_zero());
    });
}

/// Lookups race a kill: once the kill is confirmed, tryget_live fails; one
/// that succeeded holds the object until its put.
fn tryget_live_fails_once_kill_is_confirmed(kind: InitFlags) {
    model(move || {
        let w = world(InitFlags::PERCPU | kind);
        let confirmed = Arc::new(AtomicBool::new(false));
        let (w2, c2) = (Arc::clone(&w), Arc::clone(&confirmed));
        let t = thread::spawn(move || {
            for cpu in 0..CPUS {
                let after_confirm = c2.load(SeqCst);
                if w2.r.tryget_live_on(cpu) {
                    assert!(
                        !after_confirm,
                        "tryget_live succeeded after the kill was confirmed"
                    );
                    assert_eq!(w2.releases(), 0, "tryget_live succeeded after release");
                    w2.got();
                    w2.put_touching(1 - cpu);
                }
            }
        });
        w.held.fetch_sub(1, SeqCst);
        w.r.kill_and_confirm(|| {
            assert!(!w.r.tryget_live_on(0) && !w.r.tryget_live_on(1));
            confirmed.store(true, SeqCst);
        })
        .unwrap();
        assert!(!w.r.tryget_live_on(1));
        t.join().unwrap();
        assert_eq!(w.releases(), 1);
        assert!(w.r.is_zero());
    });
}

/// A round trip to atomic mode and back while a reference is taken on one
/// CPU and dropped on the other: whichever of the four slot states (frozen
/// or reset, on either CPU) the get and put land on, the reference is
/// counted once and nothing releases while the initial reference is held.
fn switch_round_trip_keeps_every_reference(kind: InitFlags) {
    model(move || {
        let w = world(InitFlags::ALLOW_REINIT | kind);
        let w2 = Arc::clone(&w);
        let t = thread::spawn(move || {
            w2.get(0);
            w2.put_touching(1);
        });
        w.r.switch_to_atomic_sync().unwrap();
        w.r.switch_to_percpu().unwrap();
        t.join().unwrap();
        assert_eq!(w.releases(), 0);
        w.kill();
        assert_eq!(w.releases(), 1);
        assert!(w.r.is_zero());
    });
}

/// Lookups with `tryget` (not live) race the kill that drops the last
/// reference: none succeeds after release, and release runs once.
fn tryget_never_succeeds_after_release(kind: InitFlags) {
    model(move || {
        let w = world(InitFlags::PERCPU | kind);
        let w2 = Arc::clone(&w);
        let t = thread::spawn(move || {
            if w2.r.tryget_on(1) {
                assert_eq!(w2.releases(), 0, "tryget succeeded after release");
                w2.got();
                w2.put_touching(0);
            }
        });
        w.kill();
        t.join().unwrap();
        assert_eq!(w.releases(), 1);
        assert!(!w.r.tryget_on(1));
        assert_eq!(w.r.put_on(0), Err(PercpuRefError::Underflow));
        assert_eq!(w.releases(), 1);
    });
}

/// A resurrect races the put of the last reference of a killed ref: either
/// the resurrect comes first (no release in this cycle) or the put does
/// (release, then a new cycle). Never both, never neither, and the next
/// cycle ends with exactly one more release. `held` counts only the first
/// cycle's references: the old cycle's release may run after the new cycle
/// has begun (as in the kernel, release must not race a resurrect if it
/// frees the ref), so it checks that the old cycle's references are gone.
fn resurrect_vs_last_put(kind: InitFlags) {
    model(move || {
        let w = world(InitFlags::ALLOW_REINIT | kind);
        w.get(1);
        w.kill(); // the reference from `get` keeps it alive
        let w2 = Arc::clone(&w);
        let t = thread::spawn(move || w2.put(0));
        w.r.resurrect().unwrap();
        assert!(!w.r.is_dying());
        t.join().unwrap();
        let first = w.releases();
        assert!(first <= 1);
        assert!(w.r.is_percpu());
        assert!(w.r.tryget_live_on(1));
        w.r.put_on(0).unwrap();
        w.r.kill().unwrap(); // drops the new initial reference
        assert_eq!(
            w.releases(),
            first + 1,
            "the second cycle ends with exactly one release"
        );
        assert!(w.r.is_zero());
    });
}

/// Two killers: exactly one succeeds, release runs once.
fn concurrent_kills(kind: InitFlags) {
    model(move || {
        let w = world(InitFlags::PERCPU | kind);
        w.held.fetch_sub(1, SeqCst); // whichever kill wins drops it
        let w2 = Arc::clone(&w);
        let t = thread::spawn(move || w2.r.kill());
        let mine = w.r.kill();
        let theirs = t.join().unwrap();
        assert!(
            matches!(
                (mine, theirs),
                (Ok(()), Err(PercpuRefError::AlreadyDead))
                    | (Err(PercpuRefError::AlreadyDead), Ok(()))
            ),
            "{mine:?} {theirs:?}"
        );
        assert_eq!(w.releases(), 1);
    });
}

/// A CPU with no slot of its own (id 2 of 2: the sections send it to
/// `count` in percpu mode; the locked path folds it onto slot 0) races a
/// kill while another reference moves between the slots: the count stays
/// exact across the fold, and release runs once, after the last put.
fn cpu_without_a_slot_vs_kill(kind: InitFlags) {
    model(move || {
        let w = world(InitFlags::PERCPU | kind);
        w.get(2);
        w.get(0);
        let w2 = Arc::clone(&w);
        let t = thread::spawn(move || {
            w2.put_touching(2);
            w2.put(1);
        });
        w.kill();
        t.join().unwrap();
        assert_eq!(w.releases(), 1);
        assert!(w.r.is_zero());
    });
}

/// Every model runs on both fast paths: `locked` (the frozen-slot protocol)
/// and `sections` (the restartable-section protocol, simulated: each CPU's
/// sections serialised by a lock, the membarrier by taking every CPU's
/// lock).
macro_rules! on_both_fast_paths {
    ($($name:ident),* $(,)?) => {
        mod locked {
            $(#[test] fn $name() { super::$name(super::InitFlags::LOCKED_SLOTS) })*
        }
        mod sections {
            $(#[test] fn $name() { super::$name(super::InitFlags::PERCPU) })*
        }
    };
}

on_both_fast_paths!(
    kill_vs_get_put_on_both_cpus,
    release_on_a_third_thread_sees_every_holder,
    tryget_live_fails_once_kill_is_confirmed,
    switch_round_trip_keeps_every_reference,
    tryget_never_succeeds_after_release,
    resurrect_vs_last_put,
    concurrent_kills,
    cpu_without_a_slot_vs_kill,
);
