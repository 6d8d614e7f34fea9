//! Tests of the restartable sections on this machine: each section adds
//! once on the CPU it reports, refuses where it must, and loses no add
//! while `membarrier`s abort sections in flight. They need rseq, and skip
//! (or fail, under `RSTAT_REQUIRE_RSEQ`) without it.

use super::*;
use crate::percpu::testing::rseq_for_test;
use crate::percpu::CachePadded;
use std::sync::atomic::AtomicU64;

/// A count and its gate, padded as `percpu_ref`'s owned slots.
#[repr(C)]
struct Gated(AtomicU64, AtomicU64);
type Slot = CachePadded<Gated>;
const _: () = assert!(core::mem::size_of::<Slot>() == 1 << SLOT_SHIFT);
const _: () = assert!(core::mem::offset_of!(Gated, 1) == GATE_OFFSET);

fn open_slots(nr: usize) -> Vec<Slot> {
    (0..nr)
        .map(|_| CachePadded::new(Gated(AtomicU64::new(0), AtomicU64::new(1))))
        .collect()
}

#[test]
fn sections_add_on_this_cpu_slot_and_respect_the_switch() {
    let Some(off) = rseq_for_test(
        "sections_add_on_this_cpu_slot_and_respect_the_switch",
        available(),
    ) else {
        return;
    };
    let nr = super::super::cpu::possible_cpus();
    let slots = open_slots(nr);
    let base = slots.as_ptr().cast::<u8>();
    let mut done = 0u64;
    for _ in 0..10_000 {
        // SAFETY: `slots` has `nr` slots `1 << SLOT_SHIFT` apart, each
        // followed by its gate; only this thread writes them.
        done += u64::from(unsafe { add_on_this_cpu(off, base, nr, 3) });
    }
    assert_eq!(
        done, 10_000,
        "a registered thread with cpu < nr always commits"
    );
    let sum: u64 = slots.iter().map(|s| s.0.load(Ordering::Relaxed)).sum();
    assert_eq!(sum, 30_000);
    // SAFETY: as above; a slot count of 0 admits no CPU.
    assert!(!unsafe { add_on_this_cpu(off, base, 0, 3) });
    // Closed gates admit no CPU either.
    for s in &slots {
        s.1.store(0, Ordering::Relaxed);
    }
    // SAFETY: as above.
    assert!(!unsafe { add_on_this_cpu(off, base, nr, 3) });
    let sum: u64 = slots.iter().map(|s| s.0.load(Ordering::Relaxed)).sum();
    assert_eq!(sum, 30_000, "a refused section writes nothing");
    membarrier().expect("membarrier works once available() said so");
}

#[test]
fn concurrent_sections_and_membarriers_lose_no_add() {
    let Some(off) = rseq_for_test(
        "concurrent_sections_and_membarriers_lose_no_add",
        available(),
    ) else {
        return;
    };
    let nr = super::super::cpu::possible_cpus();
    let slots = open_slots(nr);
    let base = slots.as_ptr() as usize;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let threads = 2 * nr.max(2);
    let per_thread = 200_000u64;
    std::thread::scope(|s| {
        s.spawn(|| {
            // Aborts sections in flight over and over.
            while !stop.load(Ordering::Relaxed) {
                membarrier().unwrap();
            }
        });
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || {
                    let mut missed = 0u64;
                    for i in 0..per_thread {
                        // SAFETY: as in the test above; several threads
                        // share a CPU's slot only through sections.
                        let ok = unsafe { add_on_this_cpu(off, base as *const u8, nr, 1) };
                        missed += u64::from(!ok);
                        if i % 4096 == 0 {
                            std::thread::yield_now();
                        }
                    }
                    missed
                })
            })
            .collect();
        let missed: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        stop.store(true, Ordering::Relaxed);
        assert_eq!(missed, 0);
    });
    let sum: u64 = slots.iter().map(|s| s.0.load(Ordering::Relaxed)).sum();
    assert_eq!(
        sum,
        threads as u64 * per_thread,
        "every committed add counted once"
    );
}

/// A buffer laid out like the per-CPU arena: one `i64` per unit, for
/// `nr` CPUs and the slot past them that a refused section writes.
fn unit_slots(nr: usize) -> Vec<std::sync::atomic::AtomicI64> {
    let per = crate::percpu::arena::UNIT_STRIDE / 8;
    (0..(nr + 1) * per)
        .map(|_| std::sync::atomic::AtomicI64::new(0))
        .collect()
}

#[test]
fn fetching_sections_return_their_cpu_and_the_old_value() {
    let Some(off) = rseq_for_test(
        "fetching_sections_return_their_cpu_and_the_old_value",
        available(),
    ) else {
        return;
    };
    let nr = super::super::cpu::possible_cpus();
    let per = crate::percpu::arena::UNIT_STRIDE / 8;
    let slots = unit_slots(nr);
    let base = slots.as_ptr().cast::<u8>();
    for i in 0..10_000i64 {
        // SAFETY: `slots` has an i64 every UNIT_STRIDE bytes for `nr`
        // CPUs; only this thread writes them.
        let (at, new, changed) = unsafe { add_fetch_on_this_cpu(off, base, nr as u32, 5) };
        assert_eq!(changed, (new - 5) ^ new, "the bits the add changed");
        assert_eq!(at % crate::percpu::arena::UNIT_STRIDE, 0, "a unit offset");
        let cpu = crate::percpu::arena::unit_of(at);
        assert!(cpu < nr);
        let now = slots[cpu * per].load(Ordering::Relaxed);
        assert_eq!(now, new, "add {i}: the slot of the CPU reported");
    }
    let sum: i64 = (0..nr)
        .map(|c| slots[c * per].load(Ordering::Relaxed))
        .sum();
    assert_eq!(sum, 50_000);
    // A limit of 0 admits no CPU: the refused thread adds to slot 0
    // (the slot at the limit) with a locked RMW, and is told so.
    let before = slots[0].load(Ordering::Relaxed);
    // SAFETY: as above; slot 0 is written only by this thread.
    let (at, new, changed) = unsafe { add_fetch_on_this_cpu(off, base, 0, 5) };
    assert_eq!((at, new, changed), (0, before + 5, before ^ (before + 5)));
    assert_eq!(slots[0].load(Ordering::Relaxed), before + 5);
    let sum: i64 = (0..nr)
        .map(|c| slots[c * per].load(Ordering::Relaxed))
        .sum();
    assert_eq!(sum, 50_005, "a refused section adds once, at the limit");
}

#[test]
fn concurrent_fetching_sections_and_membarriers_lose_no_add() {
    let Some(off) = rseq_for_test(
        "concurrent_fetching_sections_and_membarriers_lose_no_add",
        available(),
    ) else {
        return;
    };
    let nr = super::super::cpu::possible_cpus();
    let per = crate::percpu::arena::UNIT_STRIDE / 8;
    let slots = unit_slots(nr);
    let base = slots.as_ptr() as usize;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let threads = 2 * nr.max(2);
    let per_thread = 200_000i64;
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                membarrier().unwrap();
            }
        });
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || {
                    for i in 0..per_thread {
                        // SAFETY: as above; threads share a CPU's slot
                        // only through sections.
                        let (at, new, changed) =
                            unsafe { add_fetch_on_this_cpu(off, base as *const u8, nr as u32, 1) };
                        assert!(crate::percpu::arena::unit_of(at) < nr);
                        assert_eq!(changed, (new - 1) ^ new);
                        if i % 4096 == 0 {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    let sum: i64 = (0..nr)
        .map(|c| slots[c * per].load(Ordering::Relaxed))
        .sum();
    assert_eq!(
        sum,
        threads as i64 * per_thread,
        "every committed add counted once"
    );
}

/// More threads than CPUs (so they share slots through preemption),
/// deltas of several sizes: the bare counter's sum is every add once,
/// with sections on every CPU, on none (every add takes the locked
/// slot past the limit) and on some.
#[test]
fn the_bare_section_counter_counts_every_add_once() {
    let Some(c) = rseq_for_test(
        "the_bare_section_counter_counts_every_add_once",
        BareSectionCounter::new(),
    ) else {
        return;
    };
    count_every_add_once(&c);
    for limit in [0, 1] {
        count_every_add_once(&BareSectionCounter::with_limit(limit).unwrap());
    }
}

fn count_every_add_once(c: &BareSectionCounter) {
    let threads = 2 * super::super::cpu::possible_cpus().max(2);
    let per_thread = 100_000i64;
    std::thread::scope(|s| {
        for t in 0..threads as i64 {
            s.spawn(move || {
                for i in 0..per_thread {
                    c.add(1 + (i & 7) * t);
                    if i % 4096 == 0 {
                        std::thread::yield_now();
                    }
                }
            });
        }
    });
    let want: i64 = (0..threads as i64)
        .map(|t| (0..per_thread).map(|i| 1 + (i & 7) * t).sum::<i64>())
        .sum();
    assert_eq!(c.sum(), want);
}
