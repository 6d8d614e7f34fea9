//! loom models of the two lock-free protocols of the module docs. Run with
//! `RUSTFLAGS="--cfg rstat_loom" cargo test -p rstat --lib page_counter::tests_loom`.

use std::sync::Arc;

use super::*;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// Protocol 1: a charge racing with `set_max` either sees the new limit or
/// makes the setter retry, so an accepted limit is never exceeded.
#[test]
fn set_max_vs_try_charge() {
    model(|| {
        let c = Arc::new(PageCounter::<Padded>::new(None));
        c.charge(1).unwrap();
        let c2 = c.clone();
        let t = loom::thread::spawn(move || c2.try_charge(1).is_ok());
        let set = c.set_max(1);
        let charged = t.join().unwrap();
        // An accepted limit admits no charge. (Both can fail: the charge
        // may see the limit the setter is about to take back, as in the
        // kernel.)
        assert!(
            !(set.is_ok() && charged),
            "set_max {set:?} and the charge both succeeded"
        );
        assert_eq!(c.usage(), if charged { 2 } else { 1 });
    });
}

/// Protocol 2: a charge and an uncharge installing protected usage in the
/// wrong order are repaired.
#[test]
fn protected_usage_converges_charge_vs_uncharge() {
    model(|| {
        let root = Arc::new(PageCounter::<Padded>::new(None));
        let leaf = Arc::new(PageCounter::new(Some(root.clone())));
        leaf.set_min(5);
        leaf.charge(2).unwrap();
        let l2 = leaf.clone();
        let t = loom::thread::spawn(move || l2.charge(1).unwrap());
        leaf.uncharge(1).unwrap();
        t.join().unwrap();
        assert_eq!(leaf.usage(), 2);
        assert_eq!((leaf.min_usage(), root.children_min_usage()), (2, 2));
    });
}

/// Protocol 2 with a setting change as the racing input.
#[test]
fn protected_usage_converges_charge_vs_set_min() {
    model(|| {
        let root = Arc::new(PageCounter::<Padded>::new(None));
        let leaf = Arc::new(PageCounter::new(Some(root.clone())));
        leaf.set_min(5);
        leaf.charge(2).unwrap();
        let l2 = leaf.clone();
        let t = loom::thread::spawn(move || l2.charge(2).unwrap());
        leaf.set_min(3);
        t.join().unwrap();
        assert_eq!((leaf.min_usage(), root.children_min_usage()), (3, 3));
    });
}

/// An uncharge of more than was charged racing with a `try_charge`: the
/// uncharge must never lower `usage` below what is charged, even for a
/// moment, or the charge compares a too-low usage with `max` and is
/// admitted. With 2 charged and `max` 3, a charge of 4 exceeds the limit
/// whichever of the two goes first (2 + 4 before the uncharge, 0 + 4
/// after), so it must be refused in every interleaving. Whichever way the
/// two meet, the over-uncharge is counted exactly once and usage ends at 0.
#[test]
fn over_uncharge_vs_try_charge() {
    model(|| {
        let c = Arc::new(PageCounter::<Padded>::new(None));
        c.set_max(3).unwrap();
        c.charge(2).unwrap();
        let c2 = c.clone();
        let t = loom::thread::spawn(move || c2.try_charge(4));
        let _ = c.uncharge(5);
        let charged = t.join().unwrap();
        assert!(
            matches!(charged, Err(PageCounterError::OverLimit { .. })),
            "try_charge(4) under max 3 returned {charged:?}"
        );
        assert_eq!((c.usage(), c.cancel_underflows()), (0, 1));
    });
}

/// The same at two levels: an over-uncharge at one leaf lowers the shared
/// parent, where a sibling's charge is checked against the parent's `max`.
#[test]
fn over_uncharge_at_a_sibling_vs_try_charge() {
    model(|| {
        let root = Arc::new(PageCounter::<Padded>::new(None));
        let a = Arc::new(PageCounter::new(Some(root.clone())));
        let b = Arc::new(PageCounter::new(Some(root.clone())));
        root.set_max(3).unwrap();
        b.charge(2).unwrap();
        let a2 = a.clone();
        let t = loom::thread::spawn(move || a2.try_charge(4));
        let _ = b.uncharge(5);
        let charged = t.join().unwrap();
        assert!(
            matches!(charged, Err(PageCounterError::OverLimit { level: 1, .. })),
            "try_charge(4) under a root with max 3 returned {charged:?}"
        );
        assert_eq!((root.usage(), a.usage(), b.usage()), (0, 0, 0));
        assert_eq!((root.cancel_underflows(), b.cancel_underflows()), (1, 1));
    });
}
