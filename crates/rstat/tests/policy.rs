//! Flush policies (who flushes, and when): every policy keeps its
//! documented staleness bound, concurrent readers never deadlock or see
//! impossible values, the periodic flusher runs and stops, and bad input
//! is refused.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::engine_with;
use proptest::prelude::*;
use rstat::testing::{BuilderExt, ControllerHandleExt, ManualClock};
use rstat::{Error, FlushPolicy, Group, Rstat};

#[test]
fn policy_names_parse_and_unknown_names_are_refused() {
    for p in FlushPolicy::ALL {
        assert_eq!(p.name().parse::<FlushPolicy>().unwrap(), p);
    }
    assert_eq!(FlushPolicy::default(), FlushPolicy::Threshold);
    let e = "fastest".parse::<FlushPolicy>().unwrap_err();
    assert!(matches!(e, Error::UnknownPolicy { .. }));
    assert!(e.to_string().contains("threshold"), "{e}");
}

#[test]
fn bounds_are_as_documented() {
    assert_eq!(FlushPolicy::Always.staleness_bound(4, 10, 4096), Some(0));
    // Per item, in the item's value terms: unit × 64 × nr_cpus + (64 × unit
    // − 1) × nr_cpus × groups.
    assert_eq!(
        FlushPolicy::Threshold.staleness_bound(4, 10, 1),
        Some(64 * 4 + 63 * 4 * 10)
    );
    assert_eq!(
        FlushPolicy::Threshold.staleness_bound(4, 10, 4096),
        Some(4096 * 64 * 4 + (64 * 4096 - 1) * 4 * 10)
    );
    assert_eq!(
        FlushPolicy::Threshold.staleness_bound(usize::MAX, usize::MAX, rstat::MAX_STAT_UNIT),
        Some(u64::MAX),
        "saturates"
    );
    assert_eq!(FlushPolicy::UnifiedRoot.staleness_bound(4, 10, 1), None);
    assert_eq!(FlushPolicy::Coalesced.staleness_bound(4, 10, 1), None);
}

/// Issue 10: the `Threshold` counting measures significance. A byte
/// counter declared in pages and charged a page at a time, at depth 5,
/// folds into its own and its five ancestors' pending counters once per
/// 64 updates per CPU (64 units each time), not on every update as a unit-1
/// item would (4096 units each time).
#[test]
fn a_page_unit_item_at_depth_5_folds_once_per_64_page_updates_per_cpu() {
    let nr = 2;
    let rs = engine_with(nr, FlushPolicy::Threshold);
    let c = rs
        .register_counters_with_units("io", &[("bytes", 4096), ("ops", 1)])
        .unwrap();
    assert_eq!(c.stat_units(), [4096, 1]);
    let mut chain = vec![rs.root().clone()];
    for d in 1..=5 {
        let g = chain[d - 1].create_child(&format!("d{d}")).unwrap();
        chain.push(g);
    }
    let deep = &chain[5];
    let pending = |c: &rstat::ControllerHandle| -> Vec<u64> {
        chain
            .iter()
            .map(|g| c.pending_updates(g).unwrap())
            .collect()
    };
    let mut want = 0u64;
    for i in 1..=3 * 64u64 {
        for cpu in 0..nr {
            c.add_on_cpu(deep, cpu, 0, 4096).unwrap();
        }
        if i % 64 == 0 {
            // One boundary of 64 pages per CPU: 64 units from each.
            want += 64 * nr as u64;
        }
        assert_eq!(pending(&c), vec![want; 6], "after {i} pages per CPU");
        if i == 64 {
            // 64 × nr_cpus is not past the threshold: a read copies, and
            // misses what the bound allows (here: everything).
            assert_eq!(c.read(deep).unwrap().hierarchical()[0], 0);
            let bound = FlushPolicy::Threshold.staleness_bound(nr, 1, 4096).unwrap();
            assert!(2 * 64 * 4096 <= bound);
        }
    }
    // Past the threshold: the read flushes, and subtracts what it folded.
    let total = 3 * 64 * 4096 * nr as i64;
    assert_eq!(c.read(deep).unwrap().hierarchical()[0], total);
    assert_eq!(c.pending_updates(deep).unwrap(), 0);
    // A delta of many pages folds once, with every page boundary it
    // crossed: 10^6 pages on CPU 0 (one update, one walk).
    c.add_on_cpu(deep, 0, 0, 1_000_000 * 4096).unwrap();
    assert_eq!(c.pending_updates(deep).unwrap(), 1_000_000 / 64 * 64);
    // The unit-1 item beside it still counts every 64.
    c.add_on_cpu(deep, 1, 1, 4096).unwrap();
    assert_eq!(
        c.pending_updates(deep).unwrap(),
        1_000_000 / 64 * 64 + 4096,
        "a unit-1 item folds 64 units per 64 of change"
    );
    assert_eq!(
        c.read_exact(rs.root()).unwrap().hierarchical()[0],
        total + 1_000_000 * 4096
    );
}

/// Every item counts in its own unit, wherever it sits in the list (a css
/// keeps the first eight items' shifts inline and reads later ones through
/// its controller): one delta of 64 × 4096 is one boundary (64 units) for
/// an item in pages, 4096 boundaries for an item in unit 1.
#[test]
fn every_item_counts_in_its_own_unit() {
    let rs = engine_with(1, FlushPolicy::Threshold);
    let names: Vec<String> = (0..12).map(|i| format!("i{i}")).collect();
    // Pages on even items, unit 1 on odd ones, and 2^20 on the last.
    let unit = |i: usize| -> u64 {
        match i {
            11 => 1 << 20,
            _ if i.is_multiple_of(2) => 4096,
            _ => 1,
        }
    };
    let items: Vec<(&str, u64)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), unit(i)))
        .collect();
    let c = rs.register_counters_with_units("many", &items).unwrap();
    assert_eq!(
        c.stat_units(),
        (0..12).map(unit).collect::<Vec<_>>(),
        "as declared"
    );
    let g = rs.root().create_child("g").unwrap();
    for i in 0..12 {
        let before = c.pending_updates(&g).unwrap();
        c.add_on_cpu(&g, 0, i, 64 * 4096).unwrap();
        let units = c.pending_updates(&g).unwrap() - before;
        // 64 × 4096 of change is (64 × 4096) / unit units, counted in
        // whole batches of 64.
        let want = 64 * 4096 / unit(i) / 64 * 64;
        assert_eq!(units, want, "item {i} in unit {}", unit(i));
    }
}

#[test]
fn stat_units_must_be_powers_of_two_in_range() {
    let rs = engine_with(1, FlushPolicy::Threshold);
    for (u, why) in [
        (0u64, "zero"),
        (1000, "not a power of two"),
        (rstat::MAX_STAT_UNIT * 2, "too large"),
    ] {
        let e = rs
            .register_counters_with_units("io", &[("ok", 1), ("bytes", u)])
            .unwrap_err();
        assert!(matches!(e, Error::InvalidController { .. }), "{why}: {e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains("\"bytes\"") && msg.contains("power of two"),
            "{why}: {msg}"
        );
    }
    // A controller whose units do not match its items is refused too.
    struct Mismatched(Vec<String>);
    impl rstat::Controller for Mismatched {
        fn name(&self) -> &str {
            "mismatched"
        }
        fn stat_names(&self) -> &[String] {
            &self.0
        }
        fn stat_units(&self) -> Vec<u64> {
            vec![1]
        }
    }
    let e = rs
        .register(Mismatched(vec!["a".into(), "b".into()]))
        .unwrap_err();
    assert!(e.to_string().contains("one unit per item"), "{e}");
    // Nothing was registered by the refusals: the name is still free.
    let c = rs
        .register_counters_with_units("io", &[("bytes", rstat::MAX_STAT_UNIT)])
        .unwrap();
    assert_eq!(c.stat_units(), [rstat::MAX_STAT_UNIT]);
    // The default is unit 1.
    let d = rs.register_counters("plain", &["a", "b"]).unwrap();
    assert_eq!(d.stat_units(), [1, 1]);
}

#[test]
fn periods_out_of_range_are_refused() {
    for p in [
        Duration::ZERO,
        Duration::from_micros(10),
        Duration::from_secs(365 * 86_400),
    ] {
        let e = Rstat::builder().periodic_flush(Some(p)).build().err();
        assert!(matches!(e, Some(Error::InvalidPeriod { .. })), "{p:?}");
        let rs = engine_with(1, FlushPolicy::Always);
        assert!(matches!(
            rs.set_periodic_flush(Some(p)),
            Err(Error::InvalidPeriod { .. })
        ));
    }
    let rs = Rstat::new();
    assert_eq!(rs.periodic_flush(), Some(rstat::DEFAULT_FLUSH_PERIOD));
    rs.set_periodic_flush(None).unwrap();
    assert_eq!(rs.periodic_flush(), None);
}

/// Build a 3-level tree: root / a{0..2} / b{0..2}.
fn tree(rs: &Rstat) -> Vec<(Group, Vec<usize>)> {
    // (group, indexes of the groups in its subtree, itself included)
    let mut v: Vec<(Group, Vec<usize>)> = vec![(rs.root().clone(), vec![0])];
    for a in 0..3 {
        let ga = rs.root().create_child(&format!("a{a}")).unwrap();
        let ia = v.len();
        v.push((ga.clone(), vec![ia]));
        v[0].1.push(ia);
        for b in 0..3 {
            let gb = ga.create_child(&format!("b{b}")).unwrap();
            let ib = v.len();
            v.push((gb, vec![ib]));
            v[0].1.push(ib);
            v[ia].1.push(ib);
        }
    }
    v
}

/// Operations per case of the two bound properties: their bounds are
/// explored natively; under Miri, which looks for undefined behaviour on
/// the paths they take (and interprets every operation and the checks'
/// sums), a shorter run covers the same paths.
const MAX_OPS: usize = if cfg!(miri) { 60 } else { 600 };

proptest! {
    #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 2 } else { 64 }, ..ProptestConfig::default() })]

    /// Single-threaded (no migration): every read of every policy stays
    /// within its documented bound, and `read_exact` is exact. Exact reads
    /// are rare so staleness can build up between them. Two items share
    /// the threshold, one in unit 1 and one in pages (4096, with deltas
    /// that are not whole pages): each keeps its own bound.
    #[test]
    fn reads_stay_within_the_documented_bound(
        ops in prop::collection::vec((0..13usize, 0..4usize, 1i64..200, 0..20u8, 0..2usize), 1..MAX_OPS),
        policy in prop::sample::select(FlushPolicy::ALL.to_vec()),
    ) {
        let nr = 4;
        let units = [1u64, 4096];
        let rs = engine_with(nr, policy);
        let c = rs
            .register_counters_with_units("c", &[("n", units[0]), ("bytes", units[1])])
            .unwrap();
        let groups = tree(&rs);
        let mut own = vec![[0i64; 2]; groups.len()];
        for (g, cpu, delta, kind, item) in ops {
            let exact = |i: usize| -> i64 { groups[g].1.iter().map(|&j| own[j][i]).sum() };
            match kind {
                0 => {
                    let s = c.read_exact(&groups[g].0).unwrap();
                    for i in 0..2 {
                        prop_assert_eq!(s.hierarchical()[i], exact(i));
                    }
                }
                1..=5 => {
                    let s = c.read(&groups[g].0).unwrap();
                    for (i, &unit) in units.iter().enumerate() {
                        let (got, want) = (s.hierarchical()[i], exact(i));
                        prop_assert!(got <= want, "a read exceeded the truth");
                        if let Some(bound) = policy.staleness_bound(nr, groups[g].1.len(), unit) {
                            prop_assert!((want - got) as u64 <= bound, "{} item {}: stale by {} > {}", policy, i, want - got, bound);
                        }
                    }
                }
                _ => {
                    // Pages of bytes, give or take a few bytes.
                    let d = if item == 1 { delta * 4096 - delta % 5 } else { delta };
                    c.add_on_cpu(&groups[g].0, cpu, item, d).unwrap();
                    own[g][item] += d;
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 2 } else { 64 }, ..ProptestConfig::default() })]

    /// With a read pace, on a clock the test moves between operations:
    /// every `Threshold` read is within the unit bound, or includes every
    /// update made at least a pace before it began (the time part), and
    /// never exceeds the truth; `read_exact` stays exact.
    #[test]
    fn paced_reads_stay_within_the_combined_bound(
        ops in prop::collection::vec((0..13usize, 0..4usize, 1i64..200, 0..24u8, 0..2usize), 1..MAX_OPS),
    ) {
        const PACE: Duration = Duration::from_millis(100);
        let nr = 4;
        let units = [1u64, 4096];
        let clock = ManualClock::new();
        let rs = Rstat::builder()
            .nr_cpus(nr)
            .flush_policy(FlushPolicy::Threshold)
            .periodic_flush(None)
            .read_pace(Some(PACE))
            .manual_clock(&clock)
            .build()
            .unwrap();
        let c = rs
            .register_counters_with_units("c", &[("n", units[0]), ("bytes", units[1])])
            .unwrap();
        let groups = tree(&rs);
        // Every update: (the time it was made, group, item, delta).
        let mut log: Vec<(Duration, usize, usize, i64)> = Vec::new();
        for (g, cpu, delta, kind, item) in ops {
            let now = clock.now();
            // The sum of item `i`'s updates in `g`'s subtree made at or
            // before `until`.
            let made = |i: usize, until: Option<Duration>| -> i64 {
                log.iter()
                    .filter(|&&(t, h, j, _)| {
                        j == i && groups[g].1.contains(&h) && until.is_some_and(|u| t <= u)
                    })
                    .map(|&(_, _, _, d)| d)
                    .sum()
            };
            match kind {
                0 => {
                    let s = c.read_exact(&groups[g].0).unwrap();
                    for i in 0..2 {
                        prop_assert_eq!(s.hierarchical()[i], made(i, Some(now)));
                    }
                }
                1..=7 => {
                    let s = c.read(&groups[g].0).unwrap();
                    for (i, &unit) in units.iter().enumerate() {
                        let (got, want) = (s.hierarchical()[i], made(i, Some(now)));
                        let bound = FlushPolicy::Threshold
                            .staleness_bound(nr, groups[g].1.len(), unit)
                            .unwrap();
                        let a_pace_before = made(i, now.checked_sub(PACE));
                        prop_assert!(got <= want, "a read exceeded the truth");
                        prop_assert!(
                            (want - got) as u64 <= bound || got >= a_pace_before,
                            "item {}: {} behind (bound {}), and below the {} made a pace before",
                            i, want - got, bound, a_pace_before
                        );
                    }
                }
                8..=10 => clock.advance(Duration::from_millis(delta as u64)),
                _ => {
                    // Pages of bytes, give or take a few bytes.
                    let d = if item == 1 { delta * 4096 - delta % 5 } else { delta };
                    c.add_on_cpu(&groups[g].0, cpu, item, d).unwrap();
                    log.push((now, g, item, d));
                }
            }
        }
    }
}

#[test]
fn threshold_skips_small_changes_and_flushes_large_ones() {
    let nr = 2;
    let rs = engine_with(nr, FlushPolicy::Threshold);
    let c = rs.register_counters("c", &["n"]).unwrap();
    let g = rs.root().create_child("g").unwrap();
    c.add_on_cpu(&g, 0, 0, 10).unwrap();
    // 10 units sit in CPU 0's residue: nothing was folded, no flush.
    assert_eq!(c.pending_updates(&g).unwrap(), 0);
    assert_eq!(
        c.read(&g).unwrap().hierarchical()[0],
        0,
        "below the threshold: stale"
    );
    assert_eq!(c.read_exact(&g).unwrap().hierarchical()[0], 10);
    // The exact read flushed g: its counters were reset.
    assert_eq!(c.pending_updates(&g).unwrap(), 0);
    // 64 x nr_cpus + more units: the read must flush.
    for _ in 0..3 {
        c.add_on_cpu(&g, 0, 0, 64).unwrap();
        c.add_on_cpu(&g, 1, 0, 64).unwrap();
    }
    // Six boundaries crossed, each counted in g and every ancestor.
    assert_eq!(c.pending_updates(&g).unwrap(), 6 * 64);
    assert_eq!(
        c.pending_updates(rs.root()).unwrap(),
        6 * 64,
        "folded into every ancestor"
    );
    assert_eq!(c.read(&g).unwrap().hierarchical()[0], 10 + 6 * 64);
    // The flush subtracted exactly what it folded into g...
    assert_eq!(c.pending_updates(&g).unwrap(), 0);
    // ...which is still pending for the root until the root folds it in.
    assert_eq!(c.pending_updates(rs.root()).unwrap(), 6 * 64);
    assert_eq!(c.read(rs.root()).unwrap().hierarchical()[0], 10 + 6 * 64);
    assert_eq!(c.pending_updates(rs.root()).unwrap(), 0);
}

/// A removed group's counted units pass to its parent, which subtracts
/// them when it folds the removed group's changes in: nothing stays
/// counted forever (which would make every later read flush).
#[test]
fn threshold_counts_of_a_removed_group_end_with_its_parent_flush() {
    let rs = engine_with(2, FlushPolicy::Threshold);
    let c = rs.register_counters("c", &["n"]).unwrap();
    let p = rs.root().create_child("p").unwrap();
    let g = p.create_child("g").unwrap();
    for d in [1000, -300, 5, 70_000] {
        c.add_on_cpu(&g, 1, 0, d).unwrap();
    }
    let counted = c.pending_updates(&p).unwrap();
    assert!(counted > 0);
    assert_eq!(c.pending_updates(rs.root()).unwrap(), counted);
    g.remove().unwrap();
    drop(g);
    assert_eq!(rs.zombie_count(), 0);
    assert_eq!(c.read_exact(&p).unwrap().hierarchical()[0], 70_705);
    assert_eq!(c.pending_updates(&p).unwrap(), 0);
    assert_eq!(c.read_exact(rs.root()).unwrap().hierarchical()[0], 70_705);
    assert_eq!(c.pending_updates(rs.root()).unwrap(), 0);
}

#[test]
fn concurrent_readers_on_every_policy_never_deadlock_or_go_backwards() {
    for policy in FlushPolicy::ALL {
        let rs = Arc::new(
            Rstat::builder()
                .flush_policy(policy)
                .periodic_flush(Some(Duration::from_millis(5)))
                .build()
                .unwrap(),
        );
        let c = rs.register_counters("c", &["n"]).unwrap();
        let groups: Arc<Vec<(Group, Vec<usize>)>> = Arc::new(tree(&rs));
        let added: Arc<Vec<AtomicU64>> =
            Arc::new((0..groups.len()).map(|_| AtomicU64::new(0)).collect());
        let stop = Arc::new(AtomicBool::new(false));
        let violations = Arc::new(AtomicU64::new(0));
        let iters = if cfg!(miri) { 100 } else { 50_000 };
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let (c, groups, added) = (c.clone(), groups.clone(), added.clone());
                std::thread::spawn(move || {
                    for i in 0..iters {
                        let g = (i * 7 + w * 3) % groups.len();
                        c.add(&groups[g].0, 0, 1).unwrap();
                        added[g].fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        let readers: Vec<_> = (0..6)
            .map(|r| {
                let (c, groups, stop, violations) =
                    (c.clone(), groups.clone(), stop.clone(), violations.clone());
                std::thread::spawn(move || {
                    // Readers 0-2 share one subtree; 3-5 read different ones.
                    let mine = if r < 3 {
                        1
                    } else {
                        1 + 4 * (r - 3) % groups.len()
                    };
                    let mut last = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let s = c.read(&groups[mine].0).unwrap();
                        let (h, l) = (s.hierarchical()[0], s.local()[0]);
                        if h < last || h < l || l < 0 {
                            violations.fetch_add(1, Ordering::Relaxed);
                        }
                        last = h;
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        assert_eq!(violations.load(Ordering::Relaxed), 0, "{policy}");
        for (i, (g, sub)) in groups.iter().enumerate() {
            let want: u64 = sub.iter().map(|&j| added[j].load(Ordering::Relaxed)).sum();
            assert_eq!(
                c.read_exact(g).unwrap().hierarchical()[0] as u64,
                want,
                "{policy}: group {i}"
            );
        }
    }
}

/// Pin this thread to the CPU it runs on, so its public `add`s all land on
/// one slot. Returns that CPU, or `None` if it could not be pinned.
fn pin_here() -> Option<usize> {
    if cfg!(miri) {
        return None;
    }
    // SAFETY: no arguments; returns -1 on failure.
    let cpu = usize::try_from(unsafe { libc::sched_getcpu() }).ok()?;
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { core::mem::zeroed() };
    // SAFETY: `cpu` is a CPU the kernel reported, below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: a valid set and its size; 0 is this thread.
    let pinned = unsafe { libc::sched_setaffinity(0, core::mem::size_of_val(&set), &set) } == 0;
    pinned.then_some(cpu)
}

/// The `Threshold` bound holds for every delta size, also
/// when an add carries a per-CPU slot across the `i64` wrap (slots are
/// modular) and when an item swings up and down by huge amounts (each
/// swing crosses ~2^55 boundaries). One slot takes the adds (CPU 0
/// through `add_on_cpu`, or this thread's own slot through the public
/// `add` when it can be pinned); the other slot holds the opposite of the
/// starting value, so the totals stay in range and exact. On both update
/// paths: after an exact read, the adds, then a `read()` within the
/// documented bound of the exact value.
#[test]
fn threshold_bound_holds_across_slot_wrap_and_huge_swings() {
    let nr = 2;
    let pinned = pin_here();
    let swings: Vec<i64> = [1i64 << 61, -(1 << 61)].repeat(8);
    let cases: [(&str, i64, Vec<i64>); 4] = [
        ("across the wrap", i64::MAX - 10, vec![1000]),
        ("a large add across the wrap", i64::MAX - 10, vec![1 << 40]),
        ("across the wrap downwards", i64::MIN + 10, vec![-1000]),
        (
            "huge swings, then a small add",
            0,
            [swings, vec![1_000_000]].concat(),
        ),
    ];
    for path in [rstat::UpdatePath::Locked, rstat::UpdatePath::Rseq] {
        for via_add in [false, true] {
            let slot = match (via_add, pinned) {
                (false, _) => 0,
                (true, Some(cpu)) => cpu % nr,
                (true, None) => {
                    eprintln!("not pinned (Miri, or affinity refused): public add case not run");
                    continue;
                }
            };
            for (name, start, adds) in &cases {
                let rs = Rstat::builder()
                    .nr_cpus(nr)
                    .flush_policy(FlushPolicy::Threshold)
                    .periodic_flush(None)
                    .read_pace(None)
                    .update_path(path)
                    .build()
                    .unwrap();
                let c = rs.register_counters("c", &["n"]).unwrap();
                let g = rs.root().create_child("g").unwrap();
                let add = |d: i64| {
                    if via_add {
                        c.add(&g, 0, d).unwrap()
                    } else {
                        c.add_on_cpu(&g, slot, 0, d).unwrap()
                    }
                };
                add(*start);
                c.add_on_cpu(&g, 1 - slot, 0, start.wrapping_neg()).unwrap();
                let mut want = 0i64;
                assert_eq!(c.read_exact(&g).unwrap().hierarchical()[0], want);
                for &d in adds {
                    add(d);
                    want += d;
                }
                let got = c.read(&g).unwrap().hierarchical()[0];
                let bound = FlushPolicy::Threshold.staleness_bound(nr, 1, 1).unwrap();
                let behind = want.abs_diff(got);
                assert!(
                    behind <= bound,
                    "{path:?} {} {name}: read {got}, exact {want}: {behind} behind, bound {bound}",
                    if via_add { "add" } else { "add_on_cpu" }
                );
                let exact = c.read_exact(&g).unwrap();
                assert_eq!((exact.hierarchical()[0], exact.overflows()), (want, 0));
            }
        }
    }
}
