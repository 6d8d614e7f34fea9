//! Sequential semantics (the kernel's, mode by mode) and a small
//! multi-threaded check. The kill-vs-everything stress test is in
//! `tests/percpu_ref_stress.rs`; the interleavings are in `tests_loom`.
//!
//! Every test that makes a ref runs twice, once per fast path: as
//! `locked::NAME` on the locked fast path, and as `default_path::NAME` on
//! the default one (restartable sections where the machine has them;
//! simulated under Miri). Each is a function of the `InitFlags` that
//! selects the path, instantiated for both by `on_both_fast_paths!`.

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// For each listed function `NAME(kind: InitFlags)` of this module, a test
/// `locked::NAME` that runs it on the locked fast path and a test
/// `default_path::NAME` that runs it on the default one. Attributes before
/// a name (`#[cfg_attr(miri, ignore = ...)]`) go to both tests. A function
/// left out of the list is dead code, which the lints refuse.
macro_rules! on_both_fast_paths {
    ($($(#[$attr:meta])* $name:ident,)*) => {
        mod locked {
            use super::InitFlags;
            $($(#[$attr])* #[test] fn $name() { super::$name(InitFlags::LOCKED_SLOTS) })*
        }
        mod default_path {
            use super::InitFlags;
            $($(#[$attr])* #[test] fn $name() { super::$name(InitFlags::PERCPU) })*
        }
    };
}

on_both_fast_paths! {
    starts_live_in_percpu_mode_with_one_reference,
    percpu_gets_and_puts_on_different_cpus_fold_exactly,
    a_percpu_put_never_releases_and_the_next_fold_does,
    kill_releases_at_once_when_only_the_initial_reference_is_held,
    tryget_live_fails_after_kill_but_tryget_and_get_work_while_referenced,
    confirm_runs_once_synchronously_after_the_fold_and_before_release,
    double_kill_is_refused_without_effect,
    excess_percpu_puts_are_reported_by_the_fold_and_release_runs_once,
    kill_after_the_initial_reference_was_put_reports_underflow,
    atomic_mode_puts_below_zero_are_refused,
    init_dead_starts_at_zero_and_reinit_brings_it_to_life,
    reinit_needs_zero_and_starts_a_new_cycle,
    reinit_resurrect_and_switch_to_percpu_need_allow_reinit,
    switching_round_trips_keep_the_count,
    switch_to_percpu_of_a_dying_ref_waits_for_resurrect,
    resurrect_undoes_kill_or_starts_a_new_cycle,
    get_many_and_put_many_bounds,
    #[cfg_attr(miri, ignore = "millions of operations")]
    atomic_overflow_is_refused,
    #[cfg_attr(miri, ignore = "millions of operations")]
    slot_counts_wrap_without_losing_the_total,
    arena_slots_work_like_owned_ones,
    slot_counts_are_clamped,
    threads_get_and_put_while_switching_back_and_forth,
    the_fast_path_is_the_one_asked_for,
    threads_on_their_own_cpus_while_switching,
}

/// A ref on 4 slots, on the fast path `kind` selects, whose release bumps
/// the returned counter.
fn counted(kind: InitFlags, flags: InitFlags) -> (PercpuRef, Arc<AtomicUsize>) {
    counted_on(kind, 4, flags)
}

/// As [`counted`], with `nr_cpus` slots.
fn counted_on(kind: InitFlags, nr_cpus: usize, flags: InitFlags) -> (PercpuRef, Arc<AtomicUsize>) {
    let released = Arc::new(AtomicUsize::new(0));
    let r2 = Arc::clone(&released);
    let r = PercpuRef::with_nr_cpus(nr_cpus, flags | kind, move || {
        r2.fetch_add(1, Ordering::SeqCst);
    });
    (r, released)
}

fn releases(c: &AtomicUsize) -> usize {
    c.load(Ordering::SeqCst)
}

fn starts_live_in_percpu_mode_with_one_reference(kind: InitFlags) {
    let (r, rel) = counted(kind, InitFlags::PERCPU);
    assert!(r.is_percpu());
    assert!(!r.is_dying());
    assert!(!r.is_zero());
    assert_eq!(r.atomic_count(), None);
    assert_eq!(r.nr_cpus(), 4);
    r.switch_to_atomic_sync().unwrap();
    assert_eq!(r.atomic_count(), Some(1));
    assert_eq!(releases(&rel), 0);
}

fn percpu_gets_and_puts_on_different_cpus_fold_exactly(kind: InitFlags) {
    let (r, rel) = counted(kind, InitFlags::PERCPU);
    // 10 references taken on CPU 0 and dropped on CPUs 1..3: slots go
    // negative, only the sum is meaningful.
    for _ in 0..10 {
        r.get_on(0).unwrap();
    }
    r.get_many_on(5, 7).unwrap(); // CPU 5 folds onto slot 1
    for i in 0..10 {
        r.put_on(1 + i % 3).unwrap();
    }
    r.put_many_on(2, 3).unwrap();
    r.kill().unwrap();
    assert!(!r.is_percpu());
    assert_eq!(
        r.atomic_count(),
        Some(4),
        "7 - 3 references remain; the initial one is gone"
    );
    assert_eq!(releases(&rel), 0);
    r.put_many_on(3, 3).unwrap();
    assert_eq!(releases(&rel), 0);
    r.put_on(0).unwrap();
    assert_eq!(releases(&rel), 1);
    assert!(r.is_zero());
}

fn a_percpu_put_never_releases_and_the_next_fold_does(kind: InitFlags) {
    let (r, rel) = counted(kind, InitFlags::PERCPU);
    // Dropping the initial reference in percpu mode: nothing can see zero.
    r.put().unwrap();
    assert_eq!(releases(&rel), 0);
    assert!(!r.is_zero());
    // The fold finds zero and releases (the kernel does the same).
    r.switch_to_atomic_sync().unwrap();
    assert_eq!(releases(&rel), 1);
    assert!(r.is_zero());
}

fn kill_releases_at_once_when_only_the_initial_reference_is_held(kind: InitFlags) {
    let (r, rel) = counted(kind, InitFlags::PERCPU);
    r.get().unwrap();
    r.put().unwrap();
    r.kill().unwrap();
    assert_eq!(releases(&rel), 1);
    assert!(r.is_zero() && r.is_dying());
}

fn tryget_live_fails_after_kill_but_tryget_and_get_work_while_referenced(kind: InitFlags) {
    let (r, rel) = counted(kind, InitFlags::PERCPU);
    assert!(r.tryget_live());
    r.kill().unwrap();
    assert!(r.is_dying());
    assert!(!r.tryget_live());
    assert!(!r.tryget_live_on(3));
    assert!(r.tryget(), "one reference is still held");
    r.get_on(2).unwrap();
    r.put().unwrap();
    r.put().unwrap();
    assert_eq!(releases(&rel), 0);
    r.put().unwrap();
    assert_eq!(releases(&rel), 1);
    assert!(!r.tryget());
    assert_eq!(r.get(), Err(PercpuRefError::Released));
    assert_eq!(r.get_many(2), Err(PercpuRefError::Released));
    assert_eq!(r.put(), Err(PercpuRefError::Underflow));
    assert_eq!(releases(&rel), 1, "misuse after release changes nothing");
    assert!(r.is_zero());
}

fn confirm_runs_once_synchronously_after_the_fold_and_before_release(kind: InitFlags) {
    let (r, rel) = counted(kind, InitFlags::PERCPU);
    let confirmed = AtomicUsize::new(0);
    r.kill_and_confirm(|| {
        assert!(!r.is_percpu());
        assert!(
            !r.tryget_live(),
            "the kill is visible to lookups in confirm"
        );
        assert_eq!(releases(&rel), 0, "confirm runs before release");
        // `confirm` may use the ref: the lock is not held.
        assert_eq!(r.atomic_count(), Some(1));
        confirmed.fetch_add(1, Ordering::Relaxed);
    })
    .unwrap();
    assert_eq!(confirmed.load(Ordering::Relaxed), 1);
    assert_eq!(releases(&rel), 1);
}

fn double_kill_is_refused_without_effect(kind: InitFlags) {
    let (r, rel) = counted(kind, InitFlags::PERCPU);
    r.get().unwrap();
    r.kill().unwrap();
    let mut ran = false;
    assert_eq!(
        r.kill_and_confirm(|| ran = true),
        Err(PercpuRefError::AlreadyDead)
    );
    assert!(!ran, "confirm does not run for a refused kill");
    assert_eq!(r.atomic_count(), Some(1), "the second kill dropped nothing");
    assert_eq!(releases(&rel), 0);
    r.put().unwrap();
    assert_eq!(releases(&rel), 1);
}

fn excess_percpu_puts_are_reported_by_the_fold_and_release_runs_once(kind: InitFlags) {
    let (r, rel) = counted(kind, InitFlags::PERCPU);
    r.put_on(0).unwrap();
    r.put_on(1).unwrap(); // one more than was ever taken
    assert_eq!(r.kill(), Err(PercpuRefError::Underflow));
    assert_eq!(releases(&rel), 1);
    assert!(r.is_zero() && r.is_dying());
    assert_eq!(r.put(), Err(PercpuRefError::Underflow));
    assert_eq!(releases(&rel), 1);

    let (r, rel) = counted(kind, InitFlags::PERCPU);
    r.put_many_on(0, 3).unwrap();
    assert_eq!(r.switch_to_atomic_sync(), Err(PercpuRefError::Underflow));
    assert_eq!(releases(&rel), 1);
    assert!(r.is_zero());
}

fn kill_after_the_initial_reference_was_put_reports_underflow(kind: InitFlags) {
    let (r, rel) = counted(kind, InitFlags::PERCPU);
    r.put().unwrap();
    assert_eq!(r.kill(), Err(PercpuRefError::Underflow));
    assert_eq!(releases(&rel), 1, "the cycle still ends exactly once");
}

fn atomic_mode_puts_below_zero_are_refused(kind: InitFlags) {
    let (r, rel) = counted(kind, InitFlags::ATOMIC);
    assert!(!r.is_percpu());
    r.get_many(2).unwrap();
    assert_eq!(r.put_many(4), Err(PercpuRefError::Underflow));
    assert_eq!(r.atomic_count(), Some(3), "a refused put changes nothing");
    r.put_many(3).unwrap();
    // Atomic mode releases at zero even without a kill, as the kernel does.
    assert_eq!(releases(&rel), 1);
    assert!(!r.is_dying());
}

fn init_dead_starts_at_zero_and_reinit_brings_it_to_life(kind: InitFlags) {
    let (r, rel) = counted(kind, InitFlags::DEAD);
    assert!(r.is_zero() && r.is_dying() && !r.is_percpu());
    assert!(!r.tryget());
    assert!(!r.tryget_live());
    assert_eq!(r.kill(), Err(PercpuRefError::AlreadyDead));
    r.reinit().unwrap();
    assert!(r.is_percpu(), "DEAD alone does not force atomic mode");
    assert!(!r.is_dying() && !r.is_zero());
    assert!(r.tryget_live());
    r.put().unwrap();
    r.kill().unwrap();
    assert_eq!(releases(&rel), 1);
    assert_eq!(releases(&rel), 1, "DEAD init itself never released");
}

fn reinit_needs_zero_and_starts_a_new_cycle(kind: InitFlags) {
    let (r, rel) = counted(kind, InitFlags::ALLOW_REINIT);
    assert_eq!(r.reinit(), Err(PercpuRefError::NotZero));
    r.get().unwrap();
    r.kill().unwrap();
    assert_eq!(
        r.reinit(),
        Err(PercpuRefError::NotZero),
        "a dying ref with references"
    );
    r.put().unwrap();
    assert_eq!(releases(&rel), 1);
    r.reinit().unwrap();
    assert!(r.is_percpu() && !r.is_dying() && !r.is_zero());
    for cpu in 0..8 {
        assert!(r.tryget_live_on(cpu));
        r.put_on(7 - cpu).unwrap();
    }
    r.kill().unwrap();
    assert_eq!(releases(&rel), 2, "release runs once per cycle");
}

fn reinit_resurrect_and_switch_to_percpu_need_allow_reinit(kind: InitFlags) {
    let (r, rel) = counted(kind, InitFlags::PERCPU);
    assert_eq!(r.switch_to_percpu(), Ok(()), "already percpu: a no-op");
    r.switch_to_atomic_sync().unwrap();
    assert_eq!(r.switch_to_percpu(), Err(PercpuRefError::ReinitNotAllowed));
    assert!(!r.is_percpu());
    r.get().unwrap();
    r.kill().unwrap();
    assert_eq!(r.resurrect(), Err(PercpuRefError::ReinitNotAllowed));
    r.put().unwrap();
    assert_eq!(releases(&rel), 1);
    assert_eq!(r.reinit(), Err(PercpuRefError::ReinitNotAllowed));
    assert!(r.is_zero() && r.is_dying());
}

fn switching_round_trips_keep_the_count(kind: InitFlags) {
    let (r, rel) = counted(kind, InitFlags::ALLOW_REINIT);
    r.get_many_on(0, 5).unwrap();
    r.switch_to_atomic_sync().unwrap();
    assert_eq!(r.atomic_count(), Some(6));
    r.put_on(1).unwrap(); // atomic mode
    r.switch_to_percpu().unwrap();
    assert!(r.is_percpu());
    r.put_many_on(2, 2).unwrap(); // percpu mode, on a freshly reset slot
    r.get_on(3).unwrap();
    r.switch_to_atomic(|| {}).unwrap();
    assert_eq!(r.atomic_count(), Some(4));
    // Sticky across kill and reinit until switch_to_percpu.
    r.put_many(3).unwrap();
    r.kill().unwrap();
    assert_eq!(releases(&rel), 1);
    r.reinit().unwrap();
    assert!(!r.is_percpu(), "forced atomic mode survives reinit");
    r.switch_to_percpu().unwrap();
    assert!(r.is_percpu());
    r.kill().unwrap();
    assert_eq!(releases(&rel), 2);
}

fn switch_to_percpu_of_a_dying_ref_waits_for_resurrect(kind: InitFlags) {
    let (r, rel) = counted(kind, InitFlags::ATOMIC);
    r.get().unwrap();
    r.kill().unwrap();
    r.switch_to_percpu().unwrap();
    assert!(!r.is_percpu(), "dying refs stay atomic");
    r.resurrect().unwrap();
    assert!(r.is_percpu());
    assert_eq!(releases(&rel), 0);
    r.put().unwrap(); // the reference taken before the kill
    r.kill().unwrap();
    assert_eq!(releases(&rel), 1);
}

fn resurrect_undoes_kill_or_starts_a_new_cycle(kind: InitFlags) {
    let (r, rel) = counted(kind, InitFlags::ALLOW_REINIT);
    assert_eq!(r.resurrect(), Err(PercpuRefError::NotDead));
    r.get().unwrap();
    r.kill().unwrap();
    assert!(!r.tryget_live());
    r.resurrect().unwrap();
    assert!(r.is_percpu() && !r.is_dying());
    assert!(r.tryget_live());
    r.put().unwrap();
    r.put().unwrap(); // the reference from before the kill
    assert_eq!(releases(&rel), 0, "resurrect added a new initial reference");
    r.kill().unwrap();
    assert_eq!(releases(&rel), 1);
    // Resurrecting a released ref is a reinit.
    r.resurrect().unwrap();
    assert!(r.tryget_live());
    r.put().unwrap();
    r.kill().unwrap();
    assert_eq!(releases(&rel), 2);
}

fn get_many_and_put_many_bounds(kind: InitFlags) {
    let (r, rel) = counted(kind, InitFlags::PERCPU);
    assert_eq!(
        r.get_many(MAX_MANY + 1),
        Err(PercpuRefError::TooMany { n: MAX_MANY + 1 })
    );
    assert_eq!(
        r.put_many(usize::MAX),
        Err(PercpuRefError::TooMany { n: usize::MAX })
    );
    r.get_many(0).unwrap();
    r.put_many(0).unwrap();
    r.get_many(MAX_MANY).unwrap();
    r.put_many_on(1, MAX_MANY).unwrap();
    r.kill().unwrap();
    assert_eq!(releases(&rel), 1);
}

fn atomic_overflow_is_refused(kind: InitFlags) {
    let (r, rel) = counted(kind, InitFlags::ATOMIC);
    // 1 + (2^22 - 1) * 2^40 is below the limit; one more batch is not.
    for _ in 0..(1 << 22) - 1 {
        r.get_many(MAX_MANY).unwrap();
    }
    assert_eq!(r.get_many(MAX_MANY), Err(PercpuRefError::Overflow));
    assert_eq!(
        r.atomic_count(),
        Some(1 + ((1 << 22) - 1) * MAX_MANY as u64)
    );
    r.get_many(MAX_MANY - 1).unwrap();
    assert_eq!(r.atomic_count(), Some(VALUE_LIMIT));
    assert_eq!(r.get(), Err(PercpuRefError::Overflow));
    assert!(!r.tryget());
    assert!(!r.tryget_live());
    r.put().unwrap();
    assert!(r.tryget());
    assert_eq!(releases(&rel), 0);
}

fn slot_counts_wrap_without_losing_the_total(kind: InitFlags) {
    let (r, rel) = counted(kind, InitFlags::PERCPU);
    // Drive slot 0 far negative and slot 1 far positive, wrapping their
    // doubled 64-bit encoding: only the sum (2) must survive.
    let steps = (1u64 << 23) + 12_345; // x 2^40: more than 2^63 references each way
    for _ in 0..steps {
        r.put_many_on(0, MAX_MANY).unwrap();
        r.get_many_on(1, MAX_MANY).unwrap();
    }
    r.get_many_on(2, 2).unwrap();
    r.switch_to_atomic_sync().unwrap();
    assert_eq!(r.atomic_count(), Some(3));
    assert_eq!(releases(&rel), 0);
}

fn arena_slots_work_like_owned_ones(kind: InitFlags) {
    use crate::percpu::arena::Arena;
    let mut arena = Arena::new(3);
    let slots = arena
        .alloc::<PercpuRefSlot>(1, |_, _| PercpuRefSlot::new())
        .unwrap();
    let released = Arc::new(AtomicUsize::new(0));
    let r2 = Arc::clone(&released);
    // SAFETY: fresh allocation of len 1 from a 3-unit arena; freed only after
    // the ref is dropped below, and used by nothing else.
    let r = unsafe {
        PercpuRef::with_arena_slots(slots, 3, InitFlags::ALLOW_REINIT | kind, move || {
            r2.fetch_add(1, Ordering::SeqCst);
        })
    };
    for cpu in 0..6 {
        r.get_on(cpu).unwrap();
    }
    for cpu in 0..5 {
        r.put_on(cpu + 1).unwrap();
    }
    r.switch_to_atomic_sync().unwrap();
    assert_eq!(r.atomic_count(), Some(2));
    r.switch_to_percpu().unwrap();
    r.put_on(4).unwrap();
    r.kill().unwrap();
    assert_eq!(releases(&released), 1);
    assert_eq!(
        r.fast_path(),
        FastPath::Locked,
        "arena slots are never section slots"
    );
    drop(r);
    // SAFETY: allocated above; the ref that used it is gone.
    unsafe { arena.free(slots) };
    assert_eq!(arena.stats().live_allocations, 0);
}

fn slot_counts_are_clamped(kind: InitFlags) {
    let r = PercpuRef::with_nr_cpus(0, kind, || {});
    assert_eq!(r.nr_cpus(), 1);
    r.get_on(12_345).unwrap();
    r.put_on(7).unwrap();
    if !cfg!(miri) {
        let r = PercpuRef::with_nr_cpus(usize::MAX, kind, || {});
        assert_eq!(r.nr_cpus(), MAX_SLOTS);
        r.get_on(usize::MAX).unwrap();
        r.put_on(0).unwrap();
        r.kill().unwrap();
        assert!(r.is_zero());
    }
}

#[test]
fn errors_say_what_to_do() {
    let all = [
        PercpuRefError::AlreadyDead,
        PercpuRefError::Released,
        PercpuRefError::Underflow,
        PercpuRefError::NotDead,
        PercpuRefError::NotZero,
        PercpuRefError::ReinitNotAllowed,
        PercpuRefError::TooMany { n: 7 },
        PercpuRefError::Overflow,
        PercpuRefError::Membarrier { errno: 1 },
    ];
    for e in all {
        let msg = e.to_string();
        assert!(msg.starts_with("percpu_ref: "), "{msg}");
        assert!(
            msg.contains(';'),
            "message names a remedy after the cause: {msg}"
        );
    }
    assert!(PercpuRefError::TooMany { n: 7 }.to_string().contains('7'));
    assert!(InitFlags::ATOMIC.contains(InitFlags::PERCPU));
    assert!((InitFlags::DEAD | InitFlags::ALLOW_REINIT).contains(InitFlags::ALLOW_REINIT));
    assert!(!InitFlags::DEAD.contains(InitFlags::ATOMIC));
}

fn threads_get_and_put_while_switching_back_and_forth(kind: InitFlags) {
    let iters = if cfg!(miri) { 30 } else { 20_000 };
    let (r, rel) = counted(kind, InitFlags::ALLOW_REINIT);
    let running = AtomicUsize::new(3);
    let flips = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..3 {
            let (r, running) = (&r, &running);
            s.spawn(move || {
                for i in 0..iters {
                    // Take on one CPU, drop on another, sometimes many.
                    r.get_on(t + i).unwrap();
                    assert!(r.tryget_on(i));
                    r.put_on(t + 2 * i).unwrap();
                    r.get_many_on(i, 3).unwrap();
                    r.put_many_on(t, 4).unwrap();
                }
                running.fetch_sub(1, Ordering::SeqCst);
            });
        }
        s.spawn(|| {
            while running.load(Ordering::SeqCst) > 0 || flips.load(Ordering::Relaxed) < 4 {
                r.switch_to_atomic_sync().unwrap();
                assert!(!r.is_percpu());
                r.switch_to_percpu().unwrap();
                flips.fetch_add(1, Ordering::Relaxed);
            }
        });
    });
    assert!(flips.load(Ordering::Relaxed) >= 4);
    assert_eq!(
        releases(&rel),
        0,
        "no put released while the initial reference was held"
    );
    r.switch_to_atomic_sync().unwrap();
    assert_eq!(r.atomic_count(), Some(1), "every get was matched by a put");
    r.kill().unwrap();
    assert_eq!(releases(&rel), 1);
}

fn the_fast_path_is_the_one_asked_for(kind: InitFlags) {
    let (r, _) = counted(kind, InitFlags::PERCPU);
    let want = if kind.contains(InitFlags::LOCKED_SLOTS) {
        FastPath::Locked
    } else if cfg!(miri) {
        FastPath::Simulated
    } else if crate::percpu::testing::rseq_for_test(
        "default_path::the_fast_path_is_the_one_asked_for (and the rest of the \
         default-path suite runs on the locked path, as the locked suite does)",
        crate::percpu::rseq::available(),
    )
    .is_some()
    {
        FastPath::Rseq
    } else {
        FastPath::Locked
    };
    assert_eq!(r.fast_path(), want);
    eprintln!("fast path: {}", r.fast_path().name());
    assert!(format!("{r:?}").contains(&format!("{want:?}")));
}

/// Threads take and drop references on the CPUs they run on (the real fast
/// path: restartable sections where available) while another thread flips
/// the ref between the modes and back, then kills it at the end: every
/// reference is counted exactly once, nothing releases early, and release
/// runs once.
fn threads_on_their_own_cpus_while_switching(kind: InitFlags) {
    let iters = if cfg!(miri) { 40 } else { 100_000 };
    // A slot per possible CPU (not `counted`'s 4), so that on a large
    // machine the threads really use their CPUs' slots.
    let (r, rel) = counted_on(
        kind,
        crate::percpu::cpu::possible_cpus(),
        InitFlags::ALLOW_REINIT,
    );
    let running = AtomicUsize::new(4);
    let flips = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..4 {
            let (r, running) = (&r, &running);
            s.spawn(move || {
                for i in 0..iters {
                    r.get().unwrap();
                    assert!(r.tryget());
                    assert!(r.tryget_live());
                    r.put_many(2).unwrap();
                    r.get_many(1 + (t + i) % 3).unwrap();
                    r.put_many(1 + (t + i) % 3).unwrap();
                    r.put().unwrap();
                    if i % 1024 == 0 {
                        std::thread::yield_now();
                    }
                }
                running.fetch_sub(1, Ordering::SeqCst);
            });
        }
        s.spawn(|| {
            while running.load(Ordering::SeqCst) > 0 || flips.load(Ordering::Relaxed) < 4 {
                r.switch_to_atomic_sync().unwrap();
                r.switch_to_percpu().unwrap();
                flips.fetch_add(1, Ordering::Relaxed);
            }
        });
    });
    assert!(flips.load(Ordering::Relaxed) >= 4);
    assert_eq!(
        releases(&rel),
        0,
        "no put released while the initial reference was held"
    );
    r.switch_to_atomic_sync().unwrap();
    assert_eq!(r.atomic_count(), Some(1), "every get was matched by a put");
    r.kill().unwrap();
    assert_eq!(releases(&rel), 1);
}
