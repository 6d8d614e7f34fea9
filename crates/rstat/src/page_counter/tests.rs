//! Unit tests with worked numbers, and layout checks.

use std::sync::Arc;

use super::*;
use crate::percpu::CACHE_LINE;

type Pc = PageCounter;

/// root → mid → leaf, all unlimited.
fn chain() -> (Arc<Pc>, Arc<Pc>, Arc<Pc>) {
    let root = Arc::new(Pc::new(None));
    let mid = Arc::new(Pc::new(Some(root.clone())));
    let leaf = Arc::new(Pc::new(Some(mid.clone())));
    (root, mid, leaf)
}

fn usages(cs: &[&Arc<Pc>]) -> Vec<u64> {
    cs.iter().map(|c| c.usage()).collect()
}

#[test]
fn try_charge_allows_usage_equal_to_max_and_names_the_refusing_level() {
    let (root, mid, leaf) = chain();
    mid.set_max(10).unwrap();
    root.set_max(100).unwrap();

    assert_eq!(leaf.try_charge(10), Ok(()));
    assert_eq!(usages(&[&leaf, &mid, &root]), [10, 10, 10]);

    // One more unit: the leaf (unlimited) takes it, the mid refuses.
    let err = leaf.try_charge(1).unwrap_err();
    assert_eq!(
        err,
        PageCounterError::OverLimit {
            level: 1,
            amount: 1,
            max: 10
        }
    );
    assert!(core::ptr::eq(leaf.ancestor(1).unwrap(), &*mid));
    // Rolled back below the refusing level; never reached above it.
    assert_eq!(usages(&[&leaf, &mid, &root]), [10, 10, 10]);
    assert_eq!((leaf.failcnt(), mid.failcnt(), root.failcnt()), (0, 1, 0));
    // The leaf recorded the speculative 11 as its peak (kernel behaviour);
    // the mid, which refused, did not.
    assert_eq!(
        (leaf.watermark(), mid.watermark(), root.watermark()),
        (11, 10, 10)
    );
    assert_eq!(leaf.cancel_underflows() + mid.cancel_underflows(), 0);

    // The root refuses a charge at a sibling leaf once its max is reached.
    let other = Arc::new(Pc::new(Some(root.clone())));
    assert_eq!(other.try_charge(90), Ok(()));
    assert_eq!(
        other.try_charge(1),
        Err(PageCounterError::OverLimit {
            level: 1,
            amount: 1,
            max: 100
        })
    );
    assert_eq!((other.usage(), root.usage(), root.failcnt()), (90, 100, 1));
    assert!(leaf.ancestor(3).is_none());
    assert!(core::ptr::eq(leaf.hierarchy_root(), &*root));
}

#[test]
fn forced_charge_ignores_max_but_never_passes_page_counter_max() {
    let (root, mid, leaf) = chain();
    mid.set_max(5).unwrap();
    assert_eq!(leaf.charge(8), Ok(()));
    assert_eq!(usages(&[&leaf, &mid, &root]), [8, 8, 8]);
    assert_eq!(mid.failcnt(), 0);
    assert_eq!(mid.watermark(), 8);

    // Root already holds 8; PAGE_COUNTER_MAX - 7 more would pass the cap.
    let big = PAGE_COUNTER_MAX - 7;
    assert_eq!(root.try_charge(0), Ok(()));
    assert_eq!(
        leaf.charge(big),
        Err(PageCounterError::Overflow {
            level: 0,
            amount: big
        })
    );
    assert_eq!(usages(&[&leaf, &mid, &root]), [8, 8, 8]);
    // A charge to exactly PAGE_COUNTER_MAX is fine (large-amount path).
    let other = Arc::new(Pc::new(Some(root.clone())));
    assert_eq!(other.charge(PAGE_COUNTER_MAX - 8), Ok(()));
    assert_eq!(root.usage(), PAGE_COUNTER_MAX);
    // Small amounts overflow too (speculative path: added, then taken back).
    assert_eq!(
        leaf.charge(1),
        Err(PageCounterError::Overflow {
            level: 2,
            amount: 1
        })
    );
    assert_eq!(usages(&[&leaf, &mid, &root]), [8, 8, PAGE_COUNTER_MAX]);
    assert_eq!(root.cancel_underflows(), 0);
    other.uncharge(PAGE_COUNTER_MAX - 8).unwrap();
    leaf.uncharge(8).unwrap();
    assert_eq!(usages(&[&leaf, &mid, &root]), [0, 0, 0]);
}

#[test]
fn amounts_above_page_counter_max_are_refused_untouched() {
    let (root, _mid, leaf) = chain();
    let a = PAGE_COUNTER_MAX + 1;
    assert_eq!(
        leaf.try_charge(a),
        Err(PageCounterError::TooLarge { amount: a })
    );
    assert_eq!(
        leaf.charge(u64::MAX),
        Err(PageCounterError::TooLarge { amount: u64::MAX })
    );
    assert_eq!(
        leaf.uncharge(a),
        Err(PageCounterError::TooLarge { amount: a })
    );
    assert_eq!(
        leaf.cancel(a),
        Err(PageCounterError::TooLarge { amount: a })
    );
    assert_eq!(
        (root.usage(), root.failcnt(), root.cancel_underflows()),
        (0, 0, 0)
    );
    // Limits above it clamp to it ("unlimited").
    root.set_max(u64::MAX).unwrap();
    root.set_high(u64::MAX);
    assert_eq!(
        (root.max(), root.high()),
        (PAGE_COUNTER_MAX, PAGE_COUNTER_MAX)
    );
}

#[test]
fn large_amounts_take_the_compare_and_swap_path_with_the_same_semantics() {
    let (root, mid, leaf) = chain();
    let g = 1u64 << 40;
    mid.set_max(3 * g).unwrap();
    assert_eq!(leaf.try_charge(2 * g), Ok(()));
    assert_eq!(
        leaf.try_charge(2 * g),
        Err(PageCounterError::OverLimit {
            level: 1,
            amount: 2 * g,
            max: 3 * g
        })
    );
    assert_eq!(usages(&[&leaf, &mid, &root]), [2 * g, 2 * g, 2 * g]);
    assert_eq!(leaf.try_charge(g), Ok(()));
    assert_eq!(mid.usage(), 3 * g);
    assert_eq!(
        leaf.uncharge(4 * g),
        Err(PageCounterError::Underflow {
            level: 0,
            amount: 4 * g,
            charged: 3 * g
        })
    );
    assert_eq!(usages(&[&leaf, &mid, &root]), [0, 0, 0]);
    assert_eq!(
        (
            leaf.cancel_underflows(),
            mid.cancel_underflows(),
            root.cancel_underflows()
        ),
        (1, 1, 1)
    );
}

#[test]
fn uncharging_more_than_charged_clamps_at_zero_and_reports_the_first_level() {
    let (root, mid, leaf) = chain();
    let sibling = Arc::new(Pc::new(Some(mid.clone())));
    leaf.try_charge(3).unwrap();
    sibling.try_charge(4).unwrap();
    // leaf holds 3, mid and root 7: only the leaf underflows.
    assert_eq!(
        leaf.uncharge(5),
        Err(PageCounterError::Underflow {
            level: 0,
            amount: 5,
            charged: 3
        })
    );
    assert_eq!(usages(&[&leaf, &mid, &root]), [0, 2, 2]);
    assert_eq!((leaf.cancel_underflows(), mid.cancel_underflows()), (1, 0));
    // Now the mid underflows (sibling holds 4, mid only 2).
    assert_eq!(
        sibling.uncharge(4),
        Err(PageCounterError::Underflow {
            level: 1,
            amount: 4,
            charged: 2
        })
    );
    assert_eq!(usages(&[&sibling, &mid, &root]), [0, 0, 0]);
    assert_eq!((mid.cancel_underflows(), root.cancel_underflows()), (1, 1));
    // A later charge is counted from zero, not from a wrapped value.
    leaf.try_charge(1).unwrap();
    assert_eq!(usages(&[&leaf, &mid, &root]), [1, 1, 1]);
}

#[test]
fn cancel_is_local() {
    let (root, mid, leaf) = chain();
    leaf.try_charge(6).unwrap();
    assert_eq!(mid.cancel(2), Ok(()));
    assert_eq!(usages(&[&leaf, &mid, &root]), [6, 4, 6]);
    assert_eq!(
        mid.cancel(5),
        Err(PageCounterError::Underflow {
            level: 0,
            amount: 5,
            charged: 4
        })
    );
    assert_eq!(mid.usage(), 0);
    assert_eq!(mid.cancel_underflows(), 1);
}

#[test]
fn set_max_refuses_to_go_below_usage_unless_forced() {
    let (root, _mid, leaf) = chain();
    leaf.try_charge(50).unwrap();
    assert_eq!(
        root.set_max(49),
        Err(PageCounterError::Busy { usage: 50, max: 49 })
    );
    assert_eq!(root.max(), PAGE_COUNTER_MAX);
    assert_eq!(root.set_max(50), Ok(()));
    assert_eq!(root.max(), 50);
    assert_eq!(root.set_max(60), Ok(()));
    assert_eq!(root.set_max_forced(10), 60);
    assert_eq!(root.max(), 10);
    // Over max after a forced limit: charges fail until usage drops.
    assert!(leaf.try_charge(1).is_err());
    leaf.uncharge(45).unwrap();
    assert_eq!(leaf.try_charge(5), Ok(()));
    assert_eq!(root.usage(), 10);
}

#[test]
fn watermarks_record_peaks_and_reset() {
    let (root, _mid, leaf) = chain();
    leaf.try_charge(7).unwrap();
    leaf.uncharge(5).unwrap();
    assert_eq!(
        (root.watermark(), root.local_watermark(), root.usage()),
        (7, 7, 2)
    );
    root.reset_local_watermark();
    assert_eq!((root.watermark(), root.local_watermark()), (7, 2));
    leaf.try_charge(3).unwrap(); // 5: a local peak, not a global one
    assert_eq!((root.watermark(), root.local_watermark()), (7, 5));
    leaf.try_charge(4).unwrap(); // 9: both
    assert_eq!((root.watermark(), root.local_watermark()), (9, 9));
    leaf.uncharge(8).unwrap();
    root.reset_watermark();
    assert_eq!((root.watermark(), root.local_watermark()), (1, 1));
    // Forced charges count as peaks too; failed ones do not at the refuser.
    root.set_max(1).unwrap();
    assert!(leaf.try_charge(1).is_err());
    assert_eq!(root.watermark(), 1);
    leaf.charge(4).unwrap();
    assert_eq!(root.watermark(), 5);
    root.reset_failcnt();
    assert_eq!(root.failcnt(), 0);
}

#[test]
fn protected_usage_propagates_to_the_parent() {
    let (root, mid, leaf) = chain();
    let sib = Arc::new(Pc::new(Some(mid.clone())));
    leaf.set_min(30);
    leaf.set_low(10);
    sib.set_min(5);
    // No usage yet: nothing protected.
    assert_eq!((mid.children_min_usage(), mid.children_low_usage()), (0, 0));
    leaf.try_charge(20).unwrap();
    sib.try_charge(20).unwrap();
    // leaf: min(20, 30) = 20, low min(20, 10) = 10; sib: min(20, 5) = 5.
    assert_eq!(
        (leaf.min_usage(), leaf.low_usage(), sib.min_usage()),
        (20, 10, 5)
    );
    assert_eq!(
        (mid.children_min_usage(), mid.children_low_usage()),
        (25, 10)
    );
    // The mid declares nothing, so the root's children protect nothing.
    assert_eq!((root.children_min_usage(), mid.min_usage()), (0, 0));
    leaf.try_charge(20).unwrap(); // leaf 40 → min(40, 30) = 30
    assert_eq!(mid.children_min_usage(), 35);
    leaf.set_min(0); // setting changes propagate too
    assert_eq!((leaf.min_usage(), mid.children_min_usage()), (0, 5));
    mid.set_low(100);
    assert_eq!((mid.low_usage(), root.children_low_usage()), (60, 60));
    leaf.uncharge(40).unwrap();
    sib.uncharge(20).unwrap();
    assert_eq!((mid.children_min_usage(), mid.children_low_usage()), (0, 0));
    assert_eq!(root.children_low_usage(), 0);
}

// ---- effective protection: one test per branch, worked numbers ----

#[test]
fn effective_protection_overcommitted_siblings_share_in_proportion() {
    // Parent emin 100. Children A (min 60, usage 70) and B (min 80,
    // usage 90) claim and use 60 + 80 = 140 > 100.
    // A: 60 × 100 / 140 = 42.857… → 42.   B: 80 × 100 / 140 = 57.14… → 57.
    assert_eq!(effective_protection(70, 160, 60, 100, 140, false), 42);
    assert_eq!(effective_protection(90, 160, 80, 100, 140, false), 57);
    // Recursive protection changes nothing when overcommitted.
    assert_eq!(effective_protection(70, 160, 60, 100, 140, true), 42);
    // Claimed but unused protection is not counted: if B uses only 20 of
    // its 80, claims are 60 + 20 = 80 ≤ 100 and A keeps its full 60.
    assert_eq!(effective_protection(70, 90, 60, 100, 80, false), 60);
}

#[test]
fn effective_protection_undercommitted_is_capped_by_own_setting() {
    // Parent emin 100. A (min 30, usage 50) protects min(50, 30) = 30;
    // B (min 20, usage 10) protects min(10, 20) = 10. Claims 40 ≤ 100.
    // Without recursive protection the 60 spare is nobody's.
    assert_eq!(effective_protection(50, 60, 30, 100, 40, false), 30);
    assert_eq!(effective_protection(10, 60, 20, 100, 40, false), 10);
    // A child declaring nothing gets nothing.
    assert_eq!(effective_protection(50, 60, 0, 100, 40, false), 0);
}

#[test]
fn effective_protection_recursive_shares_the_unclaimed_by_unprotected_usage() {
    // As above, parent usage 70 (10 of its own). Unclaimed: 100 − 40 = 60,
    // spread over unprotected parent usage 70 − 40 = 30.
    // A: unprotected 50 − 30 = 20 → 60 × 20 / 30 = 40 → 30 + 40 = 70.
    // B: unprotected 10 − 10 = 0 → nothing extra → 10.
    assert_eq!(effective_protection(50, 70, 30, 100, 40, true), 70);
    assert_eq!(effective_protection(10, 70, 20, 100, 40, true), 10);
    // No child declares anything: parent emin 100, parent usage 200,
    // A uses 150, B 50: A gets 100 × 150 / 200 = 75, B 100 × 50 / 200 = 25.
    assert_eq!(effective_protection(150, 200, 0, 100, 0, true), 75);
    assert_eq!(effective_protection(50, 200, 0, 100, 0, true), 25);
    // Rounding down: 100 × 1 / 3 = 33.3… → 33.
    assert_eq!(effective_protection(1, 3, 0, 100, 0, true), 33);
}

#[test]
fn effective_protection_recursive_guards_against_inconsistent_reads() {
    // Parent usage not above the claims (read at another time): skip.
    assert_eq!(effective_protection(50, 40, 30, 100, 40, true), 30);
    // Nothing unclaimed: parent_effective == siblings_protected.
    assert_eq!(effective_protection(50, 70, 30, 40, 40, true), 30);
    // Zero usage protects nothing.
    assert_eq!(effective_protection(0, 70, 30, 100, 40, true), 0);
}

#[test]
fn effective_protection_does_not_overflow_64_bits() {
    // 2^61 × 2^61 overflows a u64; the quotient does not.
    let a = 1u64 << 61;
    assert_eq!(effective_protection(a, 0, a, a, 2 * a, false), a / 2);
    let m = PAGE_COUNTER_MAX;
    assert_eq!(effective_protection(m, m, 0, m, 0, true), m);
}

#[test]
fn calculate_protection_walks_top_down() {
    // root (reclaim root) → p (min 100, low 50) → {a (min 60), b (min 80)}.
    let root = Arc::new(Pc::new(None));
    let p = Arc::new(Pc::new(Some(root.clone())));
    let a = Arc::new(Pc::new(Some(p.clone())));
    let b = Arc::new(Pc::new(Some(p.clone())));
    p.set_min(100);
    p.set_low(50);
    a.set_min(60);
    b.set_min(80);
    a.try_charge(70).unwrap();
    b.try_charge(90).unwrap();
    assert_eq!(p.children_min_usage(), 140);

    for c in [&root, &p, &a, &b] {
        c.calculate_protection(&root);
    }
    // Root: untouched. p: a child of the reclaim root gets its settings.
    assert_eq!((root.emin(), root.elow()), (0, 0));
    assert_eq!((p.emin(), p.elow()), (100, 50));
    // a, b: overcommitted, 60 × 100 / 140 = 42, 80 × 100 / 140 = 57.
    assert_eq!((a.emin(), b.emin()), (42, 57));
    // low: nobody below p declares any; not recursive → 0.
    assert_eq!((a.elow(), b.elow()), (0, 0));

    // Recursive protection (a flag on the root only): p's low 50 is
    // unclaimed and shared by usage: a 50 × 70 / 160 = 21.875 → 21,
    // b 50 × 90 / 160 = 28.125 → 28.
    assert_eq!(
        p.set_recursive_protection(true),
        Err(PageCounterError::NotRoot)
    );
    root.set_recursive_protection(true).unwrap();
    assert!(a.recursive_protection());
    for c in [&p, &a, &b] {
        c.calculate_protection(&root);
    }
    assert_eq!((a.elow(), b.elow()), (21, 28));

    // Reclaim rooted at p: p is the target (untouched), a and b are its
    // children and get their own settings.
    for c in [&p, &a, &b] {
        c.calculate_protection(&p);
    }
    assert_eq!((a.emin(), b.emin()), (60, 80));

    // Zero usage: values are left as they were (kernel behaviour).
    a.uncharge(70).unwrap();
    a.calculate_protection(&root);
    assert_eq!(a.emin(), 60);
}

// ---- layout ----

fn offset<T, U>(base: &T, field: &U) -> usize {
    (field as *const U as usize) - (base as *const T as usize)
}

#[test]
fn padded_layout_keeps_usage_alone_packed_puts_it_next_to_max() {
    let root = Arc::new(PageCounter::<Padded>::new(None));
    let c = PageCounter::<Padded>::new(Some(root));
    let usage = offset(&c, &*c.usage);
    let max = offset(&c, &c.rm().max);
    let high = offset(&c, &c.rm().high);
    let parent = offset(&c, &c.rm().parent);
    let watermark = offset(&c, &c.tr().watermark);
    let line = |o: usize| o / CACHE_LINE;
    assert_eq!(core::mem::align_of::<PageCounter<Padded>>(), CACHE_LINE);
    assert_eq!(line(usage), 0);
    for o in [max, high, parent, watermark] {
        assert_ne!(line(o), line(usage), "offset {o} shares usage's line");
    }
    assert_eq!(line(max), line(parent));

    let p = PageCounter::<Packed>::new(None);
    let line64 = |o: usize| o / 64;
    let (u, m, h, par) = (
        offset(&p, &*p.usage),
        offset(&p, &p.rm().max),
        offset(&p, &p.rm().high),
        offset(&p, &p.rm().parent),
    );
    assert_eq!((line64(u), line64(m), line64(h), line64(par)), (0, 0, 0, 0));
    assert!(
        core::mem::size_of::<PageCounter<Packed>>() < core::mem::size_of::<PageCounter<Padded>>()
    );
    // And the packed counter works the same.
    let child = PageCounter::<Packed>::new(Some(Arc::new(p)));
    child.parent().unwrap().set_max(1).unwrap();
    assert_eq!(child.try_charge(1), Ok(()));
    assert!(child.try_charge(1).is_err());
}

#[test]
fn error_messages_say_what_to_do() {
    let cases = [
        PageCounterError::OverLimit {
            level: 1,
            amount: 2,
            max: 3,
        },
        PageCounterError::Overflow {
            level: 0,
            amount: 2,
        },
        PageCounterError::TooLarge { amount: u64::MAX },
        PageCounterError::Underflow {
            level: 0,
            amount: 5,
            charged: 3,
        },
        PageCounterError::Busy { usage: 5, max: 3 },
        PageCounterError::NotRoot,
    ];
    let advice = [
        "its parent (level 1); free",
        "the counter itself past page_counter_max",
        "pass at most",
        "uncharge exactly what was charged",
        "retry",
        "root",
    ];
    for (e, want) in cases.iter().zip(advice) {
        let msg = e.to_string().to_lowercase();
        assert!(msg.contains(want), "{msg:?} lacks {want:?}");
    }
}
