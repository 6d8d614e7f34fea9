//! The per-CPU caches in front of the arena (`shared_arena`) and the
//! per-CPU reader-writer lock (`rwlock`): what they hand out, what they
//! count, and whom they exclude, also while threads run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use super::arena::PcpuPtr;
use super::rwlock::PercpuRwLock;
use super::shared_arena::{SharedArena, CACHED, CLASSES, REFILL};

/// Iterations of the threaded tests: fewer under Miri, which runs them
/// slowly.
const ROUNDS: usize = if cfg!(miri) { 60 } else { 20_000 };

#[test]
fn cached_offsets_count_as_free() {
    let a = SharedArena::new(4);
    let n = 3 * CACHED + REFILL + 1;
    let mut l = a.local();
    let ptrs: Vec<PcpuPtr<u64>> = (0..n)
        .map(|i| l.alloc(1, |_, _| i as u64).expect("fits"))
        .collect();
    drop(l);
    let s = a.stats();
    assert_eq!(s.live_allocations, n);
    assert_eq!(s.bytes_in_use_per_unit, 16 * n);
    let mut l = a.local();
    for p in ptrs {
        // SAFETY: allocated above, freed once, not used after.
        unsafe { l.free(p) };
    }
    drop(l);
    let s = a.stats();
    assert_eq!(s.live_allocations, 0, "cached offsets are free");
    assert_eq!(s.bytes_in_use_per_unit, 0);
    // More than a cache keeps went back to the arena itself.
    let arena_live = a.arena().stats().live_allocations;
    assert!(
        (1..=CACHED).contains(&arena_live),
        "the cache keeps at most {CACHED} offsets ({arena_live} counted in use by the arena)"
    );
    // And what is taken from the cache again is counted in use again.
    let mut l = a.local();
    let again: Vec<PcpuPtr<u64>> = (0..5)
        .map(|_| l.alloc(1, |_, _| 0).expect("fits"))
        .collect();
    drop(l);
    assert_eq!(a.stats().live_allocations, 5);
    assert_eq!(
        a.arena().stats().live_allocations,
        arena_live,
        "served from the cache"
    );
    let mut l = a.local();
    for p in again {
        // SAFETY: as above.
        unsafe { l.free(p) };
    }
}

#[test]
fn sizes_past_the_cache_classes_go_to_the_arena() {
    let a = SharedArena::new(2);
    let mut l = a.local();
    // `CLASSES + 3` sizes (16 bytes apart), two allocations each.
    let ptrs: Vec<PcpuPtr<[u8; 16]>> = (1..=CLASSES + 3)
        .flat_map(|len| [len, len])
        .map(|len| l.alloc(len, |_, _| [7; 16]).expect("fits"))
        .collect();
    drop(l);
    assert_eq!(a.stats().live_allocations, ptrs.len());
    let mut l = a.local();
    for p in ptrs {
        // SAFETY: allocated above, freed once.
        unsafe { l.free(p) };
    }
    drop(l);
    assert_eq!(a.stats().live_allocations, 0);
    assert_eq!(a.stats().bytes_in_use_per_unit, 0);
}

#[test]
fn a_zeroed_offset_comes_back_zero_in_every_unit() {
    let a = SharedArena::new(4);
    let mut l = a.local();
    // SAFETY: `u64`s, zero is their value and they need no drop.
    let p: PcpuPtr<u64> = unsafe { l.alloc_zero_state(3, || 0) }.expect("fits");
    for cpu in [1, 3] {
        for i in 0..3 {
            // SAFETY: unit `cpu` of a live allocation, written by us only.
            unsafe { p.raw(cpu).cast_mut().add(i).write(0xdead_0000 + i as u64) };
        }
    }
    // SAFETY: units 1 and 3 are the ones written.
    unsafe { l.free_zero_state(p, [1, 3].into_iter()) };
    // SAFETY: as above.
    let q: PcpuPtr<u64> = unsafe { l.alloc_zero_state(3, || 0) }.expect("fits");
    assert_eq!(
        q.offset(),
        p.offset(),
        "the cache hands the offset back first"
    );
    for cpu in 0..4 {
        // SAFETY: a live allocation of 3 values per unit.
        let unit = unsafe { q.slot(cpu) };
        assert_eq!(unit, &[0, 0, 0], "unit {cpu}");
    }
    // SAFETY: never written.
    unsafe { l.free_zero_state(q, core::iter::empty()) };
}

/// Threads allocate, tag every unit of what they hold with their own
/// number, check the tags are still theirs, and free, in batches larger
/// than a cache keeps (so refills and give-backs run concurrently): an
/// offset handed to two holders at once would show another thread's tag.
#[test]
fn no_offset_is_held_twice_while_threads_allocate_and_free() {
    const THREADS: u64 = 4;
    let a = Arc::new(SharedArena::new(3));
    let start = Arc::new(Barrier::new(THREADS as usize));
    let threads: Vec<_> = (1..=THREADS)
        .map(|t| {
            let (a, start) = (Arc::clone(&a), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                let mut held: Vec<PcpuPtr<AtomicU64>> = Vec::new();
                for round in 0..ROUNDS {
                    let batch = 1 + (round * 7 + t as usize) % (2 * CACHED + 3);
                    let mut l = a.local();
                    while held.len() < batch {
                        held.push(l.alloc(2, |_, _| AtomicU64::new(t)).expect("fits"));
                    }
                    for p in &held {
                        for cpu in 0..3 {
                            // SAFETY: a live allocation of ours.
                            for v in unsafe { p.slot(cpu) } {
                                assert_eq!(v.load(Ordering::Relaxed), t, "offset held twice");
                            }
                        }
                    }
                    for p in held.drain(batch / 2..) {
                        // SAFETY: ours, freed once.
                        unsafe { l.free(p) };
                    }
                }
                let mut l = a.local();
                for p in held {
                    // SAFETY: as above.
                    unsafe { l.free(p) };
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a thread failed");
    }
    assert_eq!(a.stats().live_allocations, 0);
}

/// A writer holds every slot's lock: readers on any slot never see its
/// update half made, while readers and the writer run.
#[test]
fn a_writer_excludes_the_readers_of_every_slot() {
    const SLOTS: usize = 4;
    let l = Arc::new(PercpuRwLock::new(
        SLOTS,
        (AtomicU64::new(0), AtomicU64::new(0)),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..SLOTS)
        .map(|slot| {
            let (l, stop, seen) = (Arc::clone(&l), Arc::clone(&stop), Arc::clone(&seen));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let g = l.read_slot(slot);
                    let (a, b) = (g.0.load(Ordering::Relaxed), g.1.load(Ordering::Relaxed));
                    assert_eq!(a, b, "a reader of slot {slot} saw a write half made");
                    seen.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for i in 1..=ROUNDS as u64 / 10 {
        let g = l.write();
        g.0.store(i, Ordering::Relaxed);
        std::thread::yield_now();
        g.1.store(i, Ordering::Relaxed);
        drop(g);
        // Let the readers in between writes.
        if i % 64 == 0 {
            let before = seen.load(Ordering::Relaxed);
            while seen.load(Ordering::Relaxed) < before + SLOTS as u64 {
                std::thread::yield_now();
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("a reader failed");
    }
    let g = l.read();
    assert_eq!(g.0.load(Ordering::Relaxed), ROUNDS as u64 / 10);
}
