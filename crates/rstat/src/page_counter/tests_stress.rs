//! Multi-threaded stress tests: invariants sampled while threads charge,
//! and exact totals afterwards. Loop counts shrink under Miri.

use std::sync::atomic::{AtomicBool as StdAtomicBool, AtomicU64 as StdAtomicU64, Ordering as O};
use std::sync::Arc;

use super::*;

type Pc = PageCounter;

/// Threads charge and uncharge random amounts at the leaves of a 3-level
/// tree with limits at every level (tight enough that many charges fail),
/// while a sampler reads every counter and counts violations of:
///
/// 1a. *committed ≤ max*: the amounts of successful charges not yet
///     uncharged never sum above a level's `max`. Threads keep a shadow sum
///     per counter, raised after a charge succeeds and lowered before its
///     uncharge, so the shadow never exceeds the true committed sum.
/// 1b. *usage ≤ max + in-flight*: `usage` itself may exceed `max` only by
///     the speculative overshoot of charges about to be rolled back — at
///     most (threads charging under that counter) × (largest amount).
/// 2.  `local_watermark ≤ watermark` at every sample.
///
/// Afterwards: usage, protected usage and underflows are 0 everywhere.
#[test]
fn stress_charge_uncharge_under_limits() {
    const THREADS: usize = 4;
    const MAX_AMOUNT: u64 = 7;
    let ops = if cfg!(miri) { 60 } else { 200_000 };

    let root = Arc::new(Pc::new(None));
    let mids: Vec<Arc<Pc>> = (0..2)
        .map(|_| Arc::new(Pc::new(Some(root.clone()))))
        .collect();
    let leaves: Vec<Arc<Pc>> = (0..THREADS)
        .map(|i| Arc::new(Pc::new(Some(mids[i % 2].clone()))))
        .collect();
    root.set_max(40).unwrap();
    for m in &mids {
        m.set_max(25).unwrap();
        m.set_min(10);
        m.set_low(12);
    }
    for l in &leaves {
        l.set_max(15).unwrap();
        l.set_min(4);
    }
    let all: Vec<Arc<Pc>> = std::iter::once(root.clone())
        .chain(mids.iter().cloned())
        .chain(leaves.iter().cloned())
        .collect();
    // Sum of successful, not yet uncharged, charges per counter (index in
    // `all`): raised after a successful charge, lowered before uncharging,
    // so it never exceeds the true committed amount.
    let committed: Arc<Vec<StdAtomicU64>> =
        Arc::new(all.iter().map(|_| StdAtomicU64::new(0)).collect());
    let path = |leaf: usize| [0, 1 + leaf % 2, 3 + leaf];
    let stop = Arc::new(StdAtomicBool::new(false));
    let successes = Arc::new(StdAtomicU64::new(0));

    let sampler = {
        let (all, committed, stop) = (all.clone(), committed.clone(), stop.clone());
        std::thread::spawn(move || {
            // Violations of bounds 1a, 1b, 2.
            let (mut violations, mut samples) = ([0u64; 3], 0u64);
            while !stop.load(O::Relaxed) || samples == 0 {
                for (i, c) in all.iter().enumerate() {
                    let max = c.max();
                    if committed[i].load(O::SeqCst) > max {
                        violations[0] += 1;
                    }
                    let under = if i == 0 {
                        THREADS
                    } else if i <= 2 {
                        THREADS / 2
                    } else {
                        1
                    };
                    if c.usage() > max + under as u64 * MAX_AMOUNT {
                        violations[1] += 1;
                    }
                    // Local first: its Acquire load makes the watermark
                    // raise that preceded it visible.
                    let local = c.local_watermark();
                    if local > c.watermark() {
                        violations[2] += 1;
                    }
                }
                samples += 1;
                if cfg!(miri) {
                    std::thread::yield_now();
                }
            }
            (violations, samples)
        })
    };

    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (leaf, committed, successes) =
                (leaves[t].clone(), committed.clone(), successes.clone());
            let path = path(t);
            std::thread::spawn(move || {
                let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (t as u64 + 1);
                let mut held: Vec<u64> = Vec::new();
                for _ in 0..ops {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let amount = 1 + rng % MAX_AMOUNT;
                    if rng & 0x100 == 0 || held.is_empty() {
                        if leaf.try_charge(amount).is_ok() {
                            for &i in &path {
                                committed[i].fetch_add(amount, O::SeqCst);
                            }
                            held.push(amount);
                            successes.fetch_add(1, O::Relaxed);
                        }
                    } else {
                        let a = held.swap_remove((rng >> 20) as usize % held.len());
                        for &i in &path {
                            committed[i].fetch_sub(a, O::SeqCst);
                        }
                        leaf.uncharge(a).unwrap();
                    }
                }
                for a in held {
                    for &i in &path {
                        committed[i].fetch_sub(a, O::SeqCst);
                    }
                    leaf.uncharge(a).unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, O::Relaxed);
    let (violations, samples) = sampler.join().unwrap();

    assert_eq!(
        violations, [0; 3],
        "violations of bounds 1a, 1b, 2 in {samples} samples"
    );
    assert!(successes.load(O::Relaxed) > 0);
    for c in &all {
        assert_eq!(c.usage(), 0, "{c:?}");
        assert_eq!(c.cancel_underflows(), 0);
        assert_eq!((c.min_usage(), c.low_usage()), (0, 0), "{c:?}");
        assert_eq!(
            (c.children_min_usage(), c.children_low_usage()),
            (0, 0),
            "{c:?}"
        );
        assert!(c.watermark() <= c.max());
    }
    if !cfg!(miri) {
        // Limits this tight must have refused some charges.
        assert!(all.iter().map(|c| c.failcnt()).sum::<u64>() > 0);
    }
}

/// Protected usage converges exactly once threads stop, also when the
/// last operations leave usage non-zero.
#[test]
fn stress_protected_usage_converges() {
    const THREADS: usize = 4;
    let ops = if cfg!(miri) { 40 } else { 50_000 };
    let root = Arc::new(Pc::new(None));
    let mid = Arc::new(Pc::new(Some(root.clone())));
    let leaf = Arc::new(Pc::new(Some(mid.clone())));
    leaf.set_min(5);
    leaf.set_low(9);
    mid.set_min(7);
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let leaf = leaf.clone();
            std::thread::spawn(move || {
                for i in 0..ops {
                    leaf.charge(1 + (i + t) as u64 % 3).unwrap();
                    leaf.uncharge(1 + (i + t) as u64 % 3).unwrap();
                }
                leaf.charge(1).unwrap(); // leave 1 per thread
            })
        })
        .collect();
    let setter = {
        let leaf = leaf.clone();
        std::thread::spawn(move || {
            for i in 0..ops / 10 {
                leaf.set_min(i as u64 % 8);
            }
            leaf.set_min(3);
        })
    };
    for w in workers {
        w.join().unwrap();
    }
    setter.join().unwrap();
    assert_eq!(leaf.usage(), THREADS as u64);
    assert_eq!(leaf.min_usage(), 3); // min(4, 3)
    assert_eq!(leaf.low_usage(), 4); // min(4, 9)
    assert_eq!((mid.children_min_usage(), mid.children_low_usage()), (3, 4));
    assert_eq!((mid.min_usage(), root.children_min_usage()), (4, 4));
}

/// `set_max` racing with charges: once it has returned `Ok`, the committed
/// charges never exceed the new limit. Threads hold up to 5 units each
/// (15 in all), so the limit of 8 binds; a shadow sum of held units is
/// raised after each successful charge and checked against the limit when
/// the lowering was visible before the charge.
#[test]
fn set_max_racing_with_charges_is_never_exceeded() {
    const LIMIT: u64 = 8;
    let rounds = if cfg!(miri) { 2 } else { 100 };
    let ops = if cfg!(miri) { 30 } else { 5_000 };
    for round in 0..rounds {
        let root = Arc::new(Pc::new(None));
        let leaf = Arc::new(Pc::new(Some(root.clone())));
        let lowered = Arc::new(StdAtomicBool::new(false));
        let shadow = Arc::new(StdAtomicU64::new(0));
        let workers: Vec<_> = (0..3u64)
            .map(|t| {
                let (leaf, lowered, shadow) = (leaf.clone(), lowered.clone(), shadow.clone());
                std::thread::spawn(move || {
                    let (mut violations, mut held) = (0u64, 0u64);
                    let mut want = 1 + (t + round) % 5;
                    for i in 0..ops {
                        if held < want {
                            let after = lowered.load(O::SeqCst);
                            if leaf.try_charge(1).is_ok() {
                                held += 1;
                                let total = shadow.fetch_add(1, O::SeqCst) + 1;
                                if after && total > LIMIT {
                                    violations += 1;
                                }
                            }
                        } else {
                            shadow.fetch_sub(held, O::SeqCst);
                            leaf.uncharge(held).unwrap();
                            held = 0;
                            want = 1 + (i + t) % 5;
                        }
                    }
                    shadow.fetch_sub(held, O::SeqCst);
                    leaf.uncharge(held).unwrap();
                    violations
                })
            })
            .collect();
        while root.set_max(LIMIT).is_err() {
            std::thread::yield_now();
        }
        lowered.store(true, O::SeqCst);
        let violations: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        assert_eq!(violations, 0, "round {round}");
        assert_eq!(
            (root.usage(), root.max(), shadow.load(O::SeqCst)),
            (0, LIMIT, 0)
        );
        assert_eq!(root.cancel_underflows(), 0);
    }
}

/// Uncharges of more than was charged racing with charges: an
/// uncharge must never lower `usage` below what is charged, not even for
/// a moment, or a racing charge compares a too-low usage with `max`.
///
/// A root with `max` 3 and two leaves. Two threads force-charge 1 at a
/// leaf and then uncharge far more (each uncharge underflows, clamps and
/// is counted); two others `try_charge` 4 and 5 under the root. The
/// charged usage is never below 0, so every such charge exceeds `max`
/// whatever order the operations take: each success is a violation,
/// counted while the threads run. Afterwards every counter is empty.
#[test]
fn over_uncharge_never_lets_a_charge_pass_max() {
    let ops = if cfg!(miri) { 100 } else { 300_000 };
    let root = Arc::new(Pc::new(None));
    let leaves: Vec<Arc<Pc>> = (0..2)
        .map(|_| Arc::new(Pc::new(Some(root.clone()))))
        .collect();
    root.set_max(3).unwrap();
    let unchargers: Vec<_> = (0..2)
        .map(|t| {
            let leaf = leaves[t].clone();
            std::thread::spawn(move || {
                for i in 0..ops {
                    leaf.charge(1).unwrap();
                    let r = leaf.uncharge(1 + (i % 4096) as u64 * 1000);
                    assert!(
                        matches!(r, Ok(()) | Err(PageCounterError::Underflow { .. })),
                        "{r:?}"
                    );
                }
            })
        })
        .collect();
    let chargers: Vec<_> = (0..2)
        .map(|t| {
            let leaf = leaves[t].clone();
            std::thread::spawn(move || {
                let mut admitted = 0u64;
                for i in 0..ops {
                    let amount = 4 + (i as u64 + t as u64) % 2;
                    if leaf.try_charge(amount).is_ok() {
                        admitted += 1;
                        let _ = leaf.uncharge(amount);
                    }
                }
                admitted
            })
        })
        .collect();
    for u in unchargers {
        u.join().unwrap();
    }
    let admitted: u64 = chargers.into_iter().map(|c| c.join().unwrap()).sum();
    assert_eq!(
        admitted, 0,
        "charges of 4 or 5 admitted under max 3 while others over-uncharged"
    );
    assert_eq!(root.usage(), 0);
    for l in &leaves {
        assert_eq!(l.usage(), 0);
        assert!(l.cancel_underflows() > 0);
    }
}
