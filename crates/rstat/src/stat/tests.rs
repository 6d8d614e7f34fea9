//! Unit tests of the css layout.

/// What every update reads is on the css's first line; what any CPU's
/// crossing writes is on another (see `Css`). Not under loom, whose
/// atomics are larger than the machine's: the layout is the real build's.
#[cfg(not(rstat_loom))]
#[test]
fn css_keeps_the_updates_line_apart_from_the_counters_folds_write() {
    use super::css::{Css, Published, INLINE_PUBLISHED};
    use core::mem::{align_of, offset_of, size_of};
    assert_eq!(align_of::<Css>(), 64);
    assert_eq!(size_of::<Css>(), 192, "three lines");
    for (field, at) in [
        ("stats", offset_of!(Css, stats)),
        ("links", offset_of!(Css, links)),
        ("backlog", offset_of!(Css, backlog)),
        ("unit_shifts", offset_of!(Css, unit_shifts)),
        ("section_limit", offset_of!(Css, section_limit)),
        ("rseq_off", offset_of!(Css, rseq_off)),
    ] {
        assert!(at < 64, "{field} at {at}: off the updates' line");
    }
    let at = offset_of!(Css, totals);
    assert!(at >= 64, "totals at {at}: on the updates' line");
    // A lock-free read of a one-item controller loads one line of the css:
    // the entry `css_of` checks, the node, and the inline published totals.
    let line = |at: usize| at / 64;
    for (field, at, end) in [
        ("ctl", offset_of!(Css, ctl), offset_of!(Css, ctl) + 8),
        ("node", offset_of!(Css, node), offset_of!(Css, node) + 8),
        (
            "published",
            offset_of!(Css, published),
            offset_of!(Css, published) + size_of::<Published>(),
        ),
    ] {
        assert_eq!(
            (line(at), line(end - 1)),
            (1, 1),
            "{field} at {at}..{end}: off the reads' line"
        );
    }
    // ... inline: the values lie inside the css's own bytes; past the
    // inline room, in the tail of its allocation.
    for n in [0, 1, 2] {
        let mut tail = [const { crate::sync::AtomicI64::new(0) }; 8];
        // SAFETY: the array has room for `spill_len(2)` = 5 atomics and
        // outlives `p`.
        let p = unsafe { Published::in_tail(n, tail.as_mut_ptr()) };
        let (at, base) = (p.values().as_ptr() as usize, &p as *const _ as usize);
        let inline = (base..base + size_of::<Published>()).contains(&at);
        assert_eq!(inline, 2 * n < INLINE_PUBLISHED, "n {n}");
        assert_eq!(inline, Published::spill_len(n) == 0, "n {n}");
        assert_eq!(!inline, at == tail.as_ptr() as usize, "n {n}");
        assert!(p.values().len() > 2 * n, "n {n}: no room for the overflows");
    }
}

mod crossing {
    use super::super::css::{may_cross, units_to_fold};
    use proptest::prelude::*;

    /// The cheap test never skips an update that crosses a boundary: if it
    /// says "no crossing", the exact count is 0, for every old value, delta
    /// (wrapping ones included) and boundary shift (B × a unit of at most
    /// 2^63: shifts up to 69).
    fn check(old: i64, delta: i64, shift: u8) {
        let new = old.wrapping_add(delta);
        if !may_cross((old ^ new) as u64, shift) {
            assert_eq!(
                units_to_fold(old, new, shift),
                0,
                "old {old}, delta {delta}, shift {shift}: skipped a crossing"
            );
        }
    }

    proptest! {
        // Safe arithmetic: Miri has no undefined behaviour to find here, so
        // it runs a few cases; the property is explored natively.
        #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 256 }))]

        #[test]
        fn never_skips_a_crossing(old: i64, delta: i64, shift in 0u8..=69) {
            check(old, delta, shift);
        }

        #[test]
        fn never_skips_a_crossing_near_a_boundary(
            k in 0u32..=62, below in 0i64..4, delta in -(1i64 << 20)..(1i64 << 20), shift in 0u8..=63
        ) {
            // Start just below a multiple of 2^k, the edges the test is made of.
            check((1i64 << k).wrapping_sub(below), delta, shift);
            check((-(1i64 << k)).wrapping_sub(below), delta, shift);
        }
    }

    #[test]
    fn the_edges() {
        for shift in [0u8, 6, 12, 18, 56, 57, 58, 63, 64, 69] {
            for old in [i64::MIN, -1, 0, 1, i64::MAX, i64::MAX - 4095] {
                for delta in [i64::MIN, -1, 1, 4096, 1 << 18, i64::MAX] {
                    check(old, delta, shift);
                }
            }
        }
        // And it skips what it should: a byte counter in pages (boundaries
        // every B pages, shift 6 + 12), an add of two pages.
        assert!(!may_cross(4096u64 ^ (4096 + 8192), 18));
        assert!(may_cross(((1u64 << 18) - 1) ^ (1 << 18), 18));
    }
}

/// A `StatItem` is one cache line: an update loads only it, the slot and
/// the links (`stat::update::ItemPath`).
#[test]
fn a_stat_item_is_one_line() {
    assert_eq!(align_of::<crate::StatItem>(), 64);
    assert_eq!(size_of::<crate::StatItem>(), 64);
}

/// A copy returns what it was given, inline or boxed, at every size
/// around the inline capacity.
#[test]
fn totals_copies_keep_their_values_inline_or_boxed() {
    use super::ops::{TotalsCopy, INLINE_VALUES};
    for n in 0..=INLINE_VALUES + 2 {
        let local: Vec<i64> = (0..n as i64).map(|i| i * 3 - 1).collect();
        let hierarchical: Vec<i64> = (0..n as i64).map(|i| -i * 7 + 2).collect();
        let a = TotalsCopy::new(&local, &hierarchical, n as u64);
        let b = TotalsCopy::from_halves(n, local.iter().chain(&hierarchical).copied(), n as u64);
        for c in [&a, &b] {
            assert_eq!(c.local(), &local[..], "n {n}");
            assert_eq!(c.hierarchical(), &hierarchical[..], "n {n}");
            assert_eq!(c.overflows, n as u64);
        }
        assert_eq!(a, b);
        assert_eq!(a.clone(), b);
    }
    // Unequal lengths (a controller that resized its totals by hand).
    let c = TotalsCopy::new(&[1], &[2, 3, 4, 5, 6], 0);
    assert_eq!(
        (c.local(), c.hierarchical()),
        (&[1][..], &[2, 3, 4, 5, 6][..])
    );
}

/// The paced read's clock: the coarse clock only for a pace of eight of
/// its ticks or more (else the monotonic one), and its slack (what the
/// domain takes off the pace) is its resolution; the monotonic and manual
/// clocks have none.
#[cfg(all(target_os = "linux", not(miri), not(rstat_loom)))]
#[test]
fn the_coarse_clock_serves_paces_of_many_ticks_and_declares_its_lag() {
    use super::pace::Clock;
    use std::time::Duration;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    let res = if unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) } == 0 {
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    } else {
        0
    };
    let long = Clock::real(Some(
        Duration::from_nanos(res * 8).max(Duration::from_millis(1)),
    ));
    match long {
        Clock::Coarse { res_ns, .. } => assert_eq!((res_ns, long.slack_ns()), (res, res)),
        ref c => assert!(res == 0, "{c:?} for a pace of 8 ticks of {res} ns"),
    }
    // A pace shorter than 8 ticks, or none, reads the monotonic clock.
    if res > 1 {
        let short = Clock::real(Some(Duration::from_nanos(res * 8 - 1)));
        assert!(matches!(short, Clock::Real(_)), "{short:?}");
    }
    let none = Clock::real(None);
    assert!(matches!(none, Clock::Real(_)) && none.slack_ns() == 0);
    // Readings never go back.
    let mut last = long.now().expect("the clock reads");
    for _ in 0..10_000 {
        let now = long.now().expect("the clock reads");
        assert!(now >= last, "{now} after {last}");
        last = now;
    }
}

/// A clock that cannot be read is never taken for a fresh stamp: before,
/// a failed read of the coarse clock gave 0, so every stamp looked young
/// (and a flush with the failing clock stamped 0), and a `Threshold` read
/// past its threshold copied totals of any age. Now such a flush stamps
/// nothing and such a read flushes: exact.
#[cfg(all(target_os = "linux", not(miri), not(rstat_loom)))]
#[test]
fn a_clock_that_cannot_be_read_makes_no_stamp_look_fresh() {
    use super::pace::Clock;
    // No such clock id: `clock_gettime` fails with EINVAL.
    let broken = Clock::Coarse {
        origin_ns: 0,
        res_ns: 1,
        id: 1 << 20,
    };
    assert_eq!(broken.now(), None);
    let rs = crate::Rstat::builder()
        .periodic_flush(None)
        .with_clock(broken)
        .build()
        .unwrap();
    let io = rs.register_counters("io", &["n"]).unwrap();
    let g = rs.root().create_child("g").unwrap();
    // Each add is far past the threshold (64 units per CPU slot).
    let big = 1 << 20;
    for round in 1..=3 {
        io.add(&g, 0, big).unwrap();
        let read = io.read(&g).unwrap();
        assert_eq!(
            read.hierarchical()[0],
            big * round,
            "read {round} was stale"
        );
    }
}

/// A flush prefetches for its first folds only: each CPU's cut from its
/// end (the folds take a cut in reverse pre-order), CPU after CPU, up to
/// the budget.
#[test]
fn a_flush_prefetches_for_its_first_folds_only() {
    use super::tree::TreeNode;
    use super::tree::{first_folds, PREFETCH_FOLDS};
    let n = PREFETCH_FOLDS + 40;
    let order: Vec<*const TreeNode> = (0..n).map(|i| (i + 1) as *const TreeNode).collect();
    let index = |s: &[*const TreeNode]| s.iter().map(|p| *p as usize - 1).collect::<Vec<_>>();
    // Three CPUs: 10 nodes, then the budget's rest out of the next cut's
    // end, and nothing of the third.
    let cuts = [10, n - 20, n];
    let got: Vec<Vec<usize>> = first_folds(&order, &cuts).map(index).collect();
    let rest = PREFETCH_FOLDS - 10;
    assert_eq!(
        got,
        vec![
            (0..10).collect::<Vec<_>>(),
            (n - 20 - rest..n - 20).collect()
        ]
    );
    // Small cuts are prefetched whole, empty ones included.
    let cuts = [0, 3, 3, 7];
    let got: Vec<Vec<usize>> = first_folds(&order, &cuts).map(index).collect();
    assert_eq!(got, vec![vec![], vec![0, 1, 2], vec![], vec![3, 4, 5, 6]]);
    // Nothing to fold, nothing to prefetch.
    assert_eq!(first_folds(&order, &[]).count(), 0);
}

/// A touched mask names slot `c` of `nr_cpus` when bit `c % 64` is set:
/// walked bit by bit, it gives the slots a pass over `0..nr_cpus` would,
/// in the same (increasing) order, for any mask and slot count.
#[test]
fn a_touched_mask_names_the_slots_a_full_pass_would() {
    use super::tree::cpus_in;
    let masks = [
        0u64,
        1,
        1 << 63,
        0b1010_0110,
        u64::MAX,
        0x8000_0000_0000_0001,
        0x0123_4567_89ab_cdef,
    ];
    for mask in masks {
        for nr_cpus in [0, 1, 2, 7, 63, 64, 65, 127, 128, 130, 200] {
            let want: Vec<usize> = (0..nr_cpus)
                .filter(|c| mask & (1u64 << (c % 64)) != 0)
                .collect();
            let got: Vec<usize> = cpus_in(mask, nr_cpus).collect();
            assert_eq!(got, want, "mask {mask:#x}, {nr_cpus} slots");
        }
    }
}

/// A group's final release unlinks its node from its parent's list of
/// updated children in constant time, whatever the node's place in the
/// list: with N (100) updated siblings under each of two parents, removing
/// them oldest first under one and newest first under the other (so that
/// one of the two orders always finds its node at the far end of a
/// singly linked list) visits at most 2 links per removal. Counted by
/// the flushes of this thread (the releases run here).
#[cfg(not(rstat_loom))]
#[test]
fn a_release_unlinks_its_node_without_walking_its_siblings() {
    use crate::testing::ControllerHandleExt;
    // Under Miri fewer (a walk would still visit 66 links for 12 nodes).
    const N: usize = if cfg!(miri) { 12 } else { 100 };
    let rs = crate::Rstat::builder()
        .nr_cpus(2)
        .periodic_flush(None)
        .build()
        .unwrap();
    let c = rs.register_counters("c", &["n"]).unwrap();
    let parents = [
        rs.root().create_child("a").unwrap(),
        rs.root().create_child("b").unwrap(),
    ];
    let kids: Vec<Vec<crate::Group>> = parents
        .iter()
        .map(|p| {
            (0..N)
                .map(|i| p.create_child(&format!("k{i}")).unwrap())
                .collect()
        })
        .collect();
    for k in kids.iter().flatten() {
        c.add_on_cpu(k, 0, 0, 1).unwrap();
    }
    // A flush of one child drains the backlog: every child is now linked
    // in its parent's list (the flushed one stays linked too).
    c.read_exact(&kids[0][0]).unwrap();
    let before = super::tree::unlink_visits();
    for (k, newest_first) in kids.into_iter().zip([false, true]) {
        let order: Vec<crate::Group> = if newest_first {
            k.into_iter().rev().collect()
        } else {
            k
        };
        for g in order {
            g.remove().unwrap();
            drop(g);
        }
    }
    let visits = super::tree::unlink_visits() - before;
    assert!(
        visits <= 2 * 2 * N,
        "{visits} links visited to unlink {} nodes",
        2 * N
    );
    // Nothing was lost on the way: the parents hold every child's add.
    for p in &parents {
        assert_eq!(c.read_exact(p).unwrap().hierarchical()[0], N as i64);
    }
}
