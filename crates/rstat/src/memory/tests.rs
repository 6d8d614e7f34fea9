//! Unit tests of the charge path, the stock, limits, events, stats, removal
//! and bad input. Reclaim is in `tests_reclaim`.

use std::sync::Arc;

use super::*;
use crate::error::Error;
use crate::page_counter::PAGE_COUNTER_MAX;
use crate::testing::MemoryExt;
use crate::{Group, Rstat};

pub(super) fn engine(nr_cpus: usize) -> Rstat {
    Rstat::builder()
        .nr_cpus(nr_cpus)
        .periodic_flush(None)
        .build()
        .unwrap()
}

pub(super) fn setup(nr_cpus: usize, batch: u64) -> (Rstat, Memory) {
    let rs = engine(nr_cpus);
    let mem = Memory::register_with(
        &rs,
        MemoryConfig {
            batch,
            ..MemoryConfig::default()
        },
    )
    .unwrap();
    (rs, mem)
}

fn stat(mem: &Memory, g: &Group, item: &str) -> (i64, i64) {
    let s = mem.read_exact(g).unwrap();
    (s.get_local(item).unwrap(), s.get(item).unwrap())
}

#[test]
fn handles_are_send_and_sync() {
    fn ok<T: Send + Sync>() {}
    ok::<Memory>();
    ok::<Charge<'_>>();
    ok::<OwnedCharge>();
    ok::<MemoryError>();
}

#[test]
fn charge_and_uncharge_go_through_the_stock() {
    let (rs, mem) = setup(2, 64);
    let g = rs.root().create_child("g").unwrap();
    let c = mem.try_charge_on_cpu(&g, 10, OnOom::Fail, 0).unwrap();
    assert_eq!(c.amount(), 10);
    assert_eq!(c.group(), &g);
    assert!(!c.over_high() && !c.forced());
    // A batch went to the page counter; the surplus is stocked on CPU 0.
    assert_eq!(mem.current(&g).unwrap(), 64);
    assert_eq!(mem.current(rs.root()).unwrap(), 64);
    assert_eq!(mem.stocked(&g).unwrap(), 54);
    // Served from the stock: the counter does not move.
    let pc = mem.page_counter(&g).unwrap();
    for _ in 0..50 {
        mem.charge_raw_on_cpu(&g, 1, OnOom::Fail, 0).unwrap();
        mem.uncharge_raw_on_cpu(&g, 1, 0).unwrap();
    }
    assert_eq!((pc.usage(), pc.watermark()), (64, 64));
    c.uncharge().unwrap();
    assert_eq!(mem.stocked(&g).unwrap(), 64);
    assert_eq!(mem.drain_stocks(rs.root()).unwrap(), 64);
    assert_eq!(mem.current(&g).unwrap(), 0);
    assert_eq!(mem.current(rs.root()).unwrap(), 0);
    assert_eq!(stat(&mem, &g, "charged"), (60, 60));
    assert_eq!(stat(&mem, &g, "uncharged"), (60, 60));
    assert_eq!(stat(&mem, rs.root(), "charged"), (0, 60));
}

#[test]
fn a_large_charge_bypasses_the_stock() {
    let (rs, mem) = setup(1, 8);
    let g = rs.root().create_child("g").unwrap();
    mem.charge_raw(&g, 100, OnOom::Fail).unwrap();
    assert_eq!(
        (mem.current(&g).unwrap(), mem.stocked(&g).unwrap()),
        (100, 0)
    );
    mem.uncharge_raw(&g, 100).unwrap();
    assert_eq!((mem.current(&g).unwrap(), mem.stocked(&g).unwrap()), (0, 0));
}

#[test]
fn batch_zero_disables_the_stock() {
    let (rs, mem) = setup(2, 0);
    let g = rs.root().create_child("g").unwrap();
    let c = mem.try_charge(&g, 1).unwrap();
    assert_eq!((mem.current(&g).unwrap(), mem.stocked(&g).unwrap()), (1, 0));
    drop(c);
    assert_eq!(mem.current(&g).unwrap(), 0);
}

#[test]
fn refill_past_the_batch_empties_the_slot() {
    let (rs, mem) = setup(1, 8);
    let g = rs.root().create_child("g").unwrap();
    mem.charge_raw_on_cpu(&g, 1, OnOom::Fail, 0).unwrap();
    assert_eq!((mem.current(&g).unwrap(), mem.stocked(&g).unwrap()), (8, 7));
    // 8 > 7 stocked: charged to the counter directly (batch = max(8, 8)).
    mem.charge_raw_on_cpu(&g, 8, OnOom::Fail, 0).unwrap();
    assert_eq!(
        (mem.current(&g).unwrap(), mem.stocked(&g).unwrap()),
        (16, 7)
    );
    // 7 + 8 > 8: the whole slot goes back to the counter.
    mem.uncharge_raw_on_cpu(&g, 8, 0).unwrap();
    assert_eq!((mem.current(&g).unwrap(), mem.stocked(&g).unwrap()), (1, 0));
    mem.uncharge_raw_on_cpu(&g, 1, 0).unwrap();
    assert_eq!((mem.current(&g).unwrap(), mem.stocked(&g).unwrap()), (1, 1));
}

/// A CPU whose slots are all taken: each further group evicts exactly one
/// stocked group (whose units go back to its page counter), so the CPU
/// keeps `NR_STOCK` groups stocked, and no unit is lost or made.
#[test]
fn a_full_stock_evicts_one_group_per_new_group() {
    const BATCH: u64 = 4;
    let (rs, mem) = setup(1, BATCH);
    let gs: Vec<Group> = (0..NR_STOCK + 2)
        .map(|i| rs.root().create_child(&format!("g{i}")).unwrap())
        .collect();
    let stocked = |g: &Group| mem.stocked(g).unwrap();
    for g in &gs[..NR_STOCK] {
        mem.charge_raw_on_cpu(g, 1, OnOom::Fail, 0).unwrap();
        assert_eq!(stocked(g), BATCH - 1);
    }
    for (k, g) in gs[NR_STOCK..].iter().enumerate() {
        let before: Vec<u64> = gs.iter().map(stocked).collect();
        mem.charge_raw_on_cpu(g, 1, OnOom::Fail, 0).unwrap();
        assert_eq!(stocked(g), BATCH - 1, "the new group got a slot");
        let evicted: Vec<usize> = (0..NR_STOCK + k)
            .filter(|&j| before[j] > 0 && stocked(&gs[j]) == 0)
            .collect();
        assert_eq!(evicted.len(), 1, "exactly one group evicted: {evicted:?}");
        let e = &gs[evicted[0]];
        assert_eq!(mem.current(e).unwrap(), 1, "its stock was uncharged");
        for (j, h) in gs[..NR_STOCK + k].iter().enumerate() {
            if j != evicted[0] {
                assert_eq!(stocked(h), before[j], "group {j} kept its stock");
            }
        }
        let n = gs.iter().filter(|h| stocked(h) > 0).count();
        assert_eq!(n, NR_STOCK, "stocked groups");
    }
    // Every group holds its unit; NR_STOCK of them also a stocked batch
    // less one.
    assert_eq!(
        mem.current(rs.root()).unwrap(),
        (NR_STOCK as u64 + 2) + (BATCH - 1) * NR_STOCK as u64
    );
    let total: u64 = gs.iter().map(stocked).sum();
    assert_eq!(total, (BATCH - 1) * NR_STOCK as u64);
    for g in &gs {
        mem.uncharge_raw_on_cpu(g, 1, 0).unwrap();
    }
    mem.drain_stocks(rs.root()).unwrap();
    assert_eq!(mem.current(rs.root()).unwrap(), 0);
}

/// A worker thread serving many tenants in turn on one CPU (a group per
/// request, as a server's poll loop switches): while no more than
/// `NR_STOCK` groups are active there, each keeps its slot, so after the
/// first charge no charge or uncharge of any of them reaches a page
/// counter, and no group's stock is evicted by another's.
#[test]
fn many_groups_taking_turns_on_one_cpu_keep_their_stock() {
    const GROUPS: usize = 20;
    const BATCH: u64 = 4;
    let (rs, mem) = setup(1, BATCH);
    let gs: Vec<Group> = (0..GROUPS)
        .map(|i| rs.root().create_child(&format!("t{i}")).unwrap())
        .collect();
    let rounds = if cfg!(miri) { 3 } else { 50 };
    for round in 0..rounds {
        for g in &gs {
            mem.charge_raw_on_cpu(g, 1, OnOom::Fail, 0).unwrap();
        }
        for (k, g) in gs.iter().enumerate() {
            assert_eq!(
                (mem.current(g).unwrap(), mem.stocked(g).unwrap()),
                (BATCH, BATCH - 1),
                "round {round}: tenant {k} lost its stock after its charge"
            );
        }
        for g in &gs {
            mem.uncharge_raw_on_cpu(g, 1, 0).unwrap();
        }
        for (k, g) in gs.iter().enumerate() {
            let pc = mem.page_counter(g).unwrap();
            assert_eq!(
                (pc.usage(), pc.watermark(), mem.stocked(g).unwrap()),
                (BATCH, BATCH, BATCH),
                "round {round}: tenant {k} lost its stock after its uncharge"
            );
        }
    }
    assert_eq!(mem.drain_stocks(rs.root()).unwrap(), GROUPS as u64 * BATCH);
    assert_eq!(mem.current(rs.root()).unwrap(), 0);
}

/// A group's drain (its removal's) looks for its slot only on the CPUs it
/// was stocked on (by the bit `cpu % 64` of its CPU mask), however many
/// CPUs the stocks have, and still finds every slot: here on CPUs 3 and
/// 67 of 70 (one bit), then none for a group never stocked.
#[test]
fn a_drain_of_one_group_looks_only_on_the_cpus_it_was_stocked_on() {
    use super::memcg::MemCg;
    use super::stock::Stocks;
    const BATCH: u64 = 4;
    let stocks = Stocks::new(70, BATCH, usize::MAX);
    let m = Arc::new(MemCg::new_in(None, 0, core::ptr::null()));
    let idle = Arc::new(MemCg::new_in(None, 0, core::ptr::null()));
    for cpu in [3, 67] {
        m.counter.charge(BATCH).unwrap();
        stocks.refill(cpu, &m, BATCH);
    }
    assert_eq!(stocks.stocked(&m), 2 * BATCH);
    let before = Stocks::drain_lookups();
    assert_eq!(stocks.drain_one(&m), 2 * BATCH);
    assert_eq!(
        Stocks::drain_lookups() - before,
        2,
        "lookups on CPUs 3 and 67 only"
    );
    assert_eq!((stocks.stocked(&m), m.counter.usage()), (0, 0));
    let before = Stocks::drain_lookups();
    assert_eq!(stocks.drain_one(&idle), 0);
    assert_eq!(
        Stocks::drain_lookups() - before,
        0,
        "no lookup for a group never stocked"
    );
}

/// Two groups whose owner handles hash to the same preferred slot both
/// get slots on one CPU (the second at the next index) and are both found
/// there by every lookup: by group (explicit charges), by handle serial
/// (the allocator's fast charge) and by handle address (its fast free);
/// and the second is still found once the first's slot is emptied, past
/// the hole at its preferred index.
#[test]
fn groups_with_the_same_preferred_slot_are_both_stocked_and_found() {
    use super::memcg::MemCg;
    use super::stock::Stocks;
    const BATCH: u64 = 4;
    let stocks = Stocks::new(1, BATCH, usize::MAX);
    // Of NR_STOCK + 1 states, two share a preferred index (pigeonhole).
    let ms: Vec<Arc<MemCg>> = (0..=NR_STOCK)
        .map(|_| Arc::new(MemCg::new_in(None, 0, core::ptr::null())))
        .collect();
    let (a, b) = (0..ms.len())
        .flat_map(|i| (i + 1..ms.len()).map(move |j| (i, j)))
        .map(|(i, j)| (&ms[i], &ms[j]))
        .find(|(a, b)| Stocks::preferred_slot(a) == Stocks::preferred_slot(b))
        .expect("two of NR_STOCK + 1 share a preferred slot");
    let home = Stocks::preferred_slot(a);
    for m in [a, b] {
        m.counter.charge(BATCH).unwrap();
        stocks.refill(0, m, BATCH);
    }
    assert_eq!(stocks.slot_index(0, a), Some(home));
    assert_eq!(stocks.slot_index(0, b), Some((home + 1) % NR_STOCK));
    assert_eq!((stocks.stocked(a), stocks.stocked(b)), (BATCH, BATCH));
    let find_all_ways = |m: &Arc<MemCg>| {
        // By group: an explicit charge from the stock, given back.
        assert!(stocks.consume(0, m, 1), "found by group");
        stocks.refill(0, m, 1);
        // By serial (with the handle's address as the start hint), then by
        // address: the allocator's fast charge and free of one object.
        let x = stocks
            .heap_charge_fast(0, m.objcg_serial(), m.objcg().as_ptr(), 1, 0)
            .expect("found by serial");
        assert_eq!(x, m.objcg());
        assert!(
            stocks.heap_uncharge_fast(0, x.as_ptr(), 1, 0),
            "found by key"
        );
        assert_eq!(stocks.stocked(m), BATCH);
        assert_eq!(m.counter.usage(), BATCH, "nothing went to the counter");
    };
    find_all_ways(a);
    find_all_ways(b);
    // Empty `a`'s slot: a hole at `b`'s preferred index.
    assert_eq!(stocks.drain(|m| core::ptr::eq(m, &**a)), BATCH);
    assert_eq!(stocks.slot_index(0, a), None);
    assert_eq!(stocks.slot_index(0, b), Some((home + 1) % NR_STOCK));
    find_all_ways(b);
    assert_eq!(stocks.drain(|_| true), BATCH);
    assert_eq!((a.counter.usage(), b.counter.usage()), (0, 0));
}

/// The stock's overcharge: units charged to a group that no caller holds
/// are at most batch × nr_cpus, and never make a charge fail.
#[test]
fn overcharge_is_bounded_by_batch_times_cpus() {
    const CPUS: usize = 4;
    const BATCH: u64 = 64;
    const MAX: u64 = 1000;
    let (rs, mem) = setup(CPUS, BATCH);
    let g = rs.root().create_child("g").unwrap();
    mem.set_limit(&g, Limit::Max, MAX).unwrap();
    let mut held = 0u64;
    let mut worst = 0u64;
    // One unit on every CPU: each stocks a batch less one.
    for cpu in 0..CPUS {
        mem.charge_raw_on_cpu(&g, 1, OnOom::Fail, cpu).unwrap();
        held += 1;
    }
    assert_eq!(mem.current(&g).unwrap(), CPUS as u64 * BATCH);
    // Fill up to the limit from all CPUs in turn: every charge that fits
    // succeeds, the other CPUs' stocks notwithstanding.
    let mut cpu = 0;
    while held < MAX {
        let n = (MAX - held).min(7);
        mem.charge_raw_on_cpu(&g, n, OnOom::Fail, cpu).unwrap();
        held += n;
        cpu = (cpu + 1) % CPUS;
        let usage = mem.current(&g).unwrap();
        assert!(usage <= MAX, "usage {usage} above max");
        let over = usage - held;
        assert_eq!(over, mem.stocked(&g).unwrap());
        worst = worst.max(over);
        assert!(over <= BATCH * CPUS as u64, "overcharge {over}");
    }
    assert!(
        worst > BATCH,
        "the stocks did hold several batches: {worst}"
    );
    let e = mem.try_charge_on_cpu(&g, 1, OnOom::Fail, 1).unwrap_err();
    assert!(matches!(
        e,
        MemoryError::OverLimit(OverLimit {
            amount: 1,
            max: MAX,
            ..
        })
    ));
    assert_eq!(mem.current(&g).unwrap(), MAX);
    for _ in 0..held {
        mem.uncharge_raw_on_cpu(&g, 1, cpu).unwrap();
        cpu = (cpu + 1) % CPUS;
        assert!(mem.current(&g).unwrap() <= MAX);
    }
    mem.drain_stocks(&g).unwrap();
    assert_eq!(mem.current(&g).unwrap(), 0);
}

#[test]
fn limits_refuse_events_and_failcnt() {
    let (rs, mem) = setup(2, 16);
    let p = rs.root().create_child("p").unwrap();
    let c = p.create_child("c").unwrap();
    assert!(mem.write_limit(&p, Limit::Max, "100").unwrap().reached);
    assert_eq!(mem.limit(&p, Limit::Max).unwrap(), 100);
    let held = mem.try_charge(&c, 100).unwrap();
    match mem.try_charge(&c, 1) {
        Err(MemoryError::OverLimit(o)) => {
            assert_eq!((o.path.as_str(), o.amount, o.max), ("/p", 1, 100));
            assert_eq!(o.usage, 100, "the stocks were drained before giving up");
        }
        other => panic!("{other:?}"),
    }
    let (ev_p, ev_c) = (mem.events(&p).unwrap(), mem.events(&c).unwrap());
    assert_eq!((ev_p.max, ev_p.oom), (1, 1));
    assert_eq!(mem.events_local(&p).unwrap().oom, 1);
    assert_eq!(
        (ev_c.max, ev_c.oom),
        (0, 0),
        "counted on the group that refused"
    );
    assert_eq!(mem.events(rs.root()).unwrap().oom, 1, "and its ancestors");
    assert_eq!(mem.events_local(rs.root()).unwrap().oom, 0);
    assert_eq!(stat(&mem, &c, "failcnt"), (1, 1));
    assert_eq!(
        ev_p.to_string(),
        "low 0\nhigh 0\nmax 1\noom 1\noom_kill 0\n"
    );
    // Forced past the limit, and counted.
    let f = mem.try_charge_with(&c, 5, OnOom::Force).unwrap();
    assert!(f.forced());
    assert_eq!(mem.current(&p).unwrap(), 105);
    assert_eq!(mem.events(&p).unwrap().oom, 2);
    assert_eq!(stat(&mem, &c, "forced"), (5, 5));
    drop((held, f));
    mem.drain_stocks(rs.root()).unwrap();
    assert_eq!(mem.current(rs.root()).unwrap(), 0);
}

#[test]
fn over_high_is_flagged_and_counted() {
    let (rs, mem) = setup(1, 8);
    let p = rs.root().create_child("p").unwrap();
    let c = p.create_child("c").unwrap();
    mem.set_limit(&p, Limit::High, 20).unwrap();
    let a = mem.try_charge(&c, 16).unwrap();
    assert!(!a.over_high());
    let b = mem.try_charge(&c, 8).unwrap(); // usage 24 > 20
    assert!(b.over_high());
    assert_eq!(mem.events_local(&p).unwrap().high, 1);
    assert_eq!(mem.events(&c).unwrap().high, 0);
    assert_eq!(mem.events(rs.root()).unwrap().high, 1);
    // Not a limit: charging goes on.
    let d = mem.try_charge(&c, 100).unwrap();
    assert!(d.over_high());
    drop((a, b, d));
}

#[test]
fn limit_writes_drain_the_subtree_stocks() {
    let (rs, mem) = setup(2, 64);
    let p = rs.root().create_child("p").unwrap();
    let c = p.create_child("c").unwrap();
    let other = rs.root().create_child("other").unwrap();
    for cpu in 0..2 {
        mem.charge_raw_on_cpu(&c, 1, OnOom::Fail, cpu).unwrap();
        mem.charge_raw_on_cpu(&other, 1, OnOom::Fail, cpu).unwrap();
    }
    let w = mem.set_limit(&p, Limit::Max, 1000).unwrap();
    assert_eq!((w.drained, w.reached, w.usage_after), (126, true, 2));
    assert_eq!(mem.stocked(&other).unwrap(), 126, "outside the subtree");
    mem.charge_raw_on_cpu(&c, 1, OnOom::Fail, 0).unwrap();
    let w = mem.set_limit(&p, Limit::High, 1000).unwrap();
    assert_eq!(w.drained, 63);
    mem.set_limit(&c, Limit::Low, 5).unwrap();
    assert_eq!(mem.stocked(&other).unwrap(), 126);
}

#[test]
fn max_below_usage_stands_even_if_unreached() {
    let (rs, mem) = setup(1, 4);
    let g = rs.root().create_child("g").unwrap();
    let held = mem.try_charge(&g, 50).unwrap();
    let w = mem.write_limit(&g, Limit::Max, "20").unwrap();
    assert_eq!(
        (w.limit, w.usage_before, w.usage_after, w.reached),
        (20, 50, 50, false)
    );
    assert_eq!(mem.events(&g).unwrap().oom, 1);
    assert_eq!(mem.limit(&g, Limit::Max).unwrap(), 20);
    assert!(
        mem.try_charge(&g, 1).is_err(),
        "new charges must fit the new limit"
    );
    drop(held);
    mem.drain_stocks(&g).unwrap();
    let ok = mem.try_charge(&g, 20).unwrap();
    assert!(mem.current(&g).unwrap() <= 20);
    drop(ok);
}

#[test]
fn removal_drains_and_reparents() {
    let (rs, mem) = setup(2, 64);
    let p = rs.root().create_child("p").unwrap();
    let c = p.create_child("c").unwrap();
    mem.set_limit(&c, Limit::Min, 10).unwrap();
    let held = mem.try_charge_on_cpu(&c, 10, OnOom::Fail, 0).unwrap();
    let raw = mem.charge_raw_on_cpu(&c, 5, OnOom::Fail, 1);
    assert!(raw.is_ok());
    assert_eq!(mem.current(&p).unwrap(), 128);
    assert_eq!(mem.page_counter(&p).unwrap().children_min_usage(), 10);
    c.remove().unwrap();
    // Stocks drained, the rest moved to the parent, protection dropped.
    assert_eq!(mem.stocked(&c).unwrap(), 0);
    assert_eq!(mem.current(&c).unwrap(), 0);
    assert_eq!(mem.current(&p).unwrap(), 15);
    assert_eq!(mem.page_counter(&p).unwrap().children_min_usage(), 0);
    assert!(matches!(
        mem.set_limit(&c, Limit::Max, 1),
        Err(MemoryError::Removed { .. })
    ));
    // New charges through the removed group land on the parent.
    let late = mem.try_charge(&c, 3).unwrap();
    assert_eq!(late.group(), &p);
    // Uncharges of its old charges come out of the parent.
    drop(held);
    mem.uncharge_raw(&c, 5).unwrap();
    drop(late);
    assert_eq!(
        mem.current(&c).unwrap(),
        0,
        "the zombie's counter never went negative"
    );
    mem.drain_stocks(rs.root()).unwrap();
    assert_eq!(mem.current(&p).unwrap(), 0);
    assert_eq!(mem.current(rs.root()).unwrap(), 0);
    assert_eq!(stat(&mem, &p, "charged").1, 18);
    assert_eq!(stat(&mem, &p, "uncharged").1, 18);
    drop(c);
    assert_eq!(mem.current(rs.root()).unwrap(), 0);
}

#[test]
fn dropping_the_engine_releases_everything() {
    let (rs, mem) = setup(2, 64);
    let g = rs.root().create_child("g").unwrap();
    let c = mem.try_charge(&g, 1).unwrap();
    mem.charge_raw(rs.root(), 1, OnOom::Fail).unwrap();
    let root = mem.page_counter(rs.root()).unwrap();
    drop(c);
    drop(g);
    drop(rs);
    // The root's stock was drained at its release.
    assert_eq!(root.usage(), 1);
    drop(mem);
}

#[test]
fn peak_tracks_and_resets() {
    let (rs, mem) = setup(1, 0);
    let g = rs.root().create_child("g").unwrap();
    let a = mem.try_charge(&g, 30).unwrap();
    drop(mem.try_charge(&g, 20).unwrap());
    assert_eq!((mem.current(&g).unwrap(), mem.peak(&g).unwrap()), (30, 50));
    mem.reset_peak(&g).unwrap();
    assert_eq!(mem.peak(&g).unwrap(), 30);
    drop(a);
}

#[test]
fn errors_print_paths_absolute_with_the_root_as_slash() {
    // As the engine's errors do (crate docs, "Errors say where"): a path
    // that `Rstat::lookup` accepts back.
    let (rs, mem) = setup(1, 0);
    let root = rs.root();
    match mem.uncharge_raw(root, 1) {
        Err(e @ MemoryError::Underflow { .. }) => {
            assert!(matches!(&e, MemoryError::Underflow { path, .. } if path == "/"));
            assert!(e.to_string().contains("group \"/\""), "{e}");
        }
        other => panic!("{other:?}"),
    }
    mem.set_limit(root, Limit::Max, 10).unwrap();
    match mem.try_charge(root, 11) {
        Err(MemoryError::OverLimit(o)) => assert_eq!(o.path, "/"),
        other => panic!("{other:?}"),
    }
    let g = root.create_child("g").unwrap();
    let c = g.create_child("c").unwrap();
    mem.set_limit(&g, Limit::Max, 10).unwrap();
    match mem.try_charge(&c, 11) {
        Err(MemoryError::OverLimit(o)) => assert_eq!(o.path, "/g"),
        other => panic!("{other:?}"),
    }
    c.remove().unwrap();
    match mem.set_limit(&c, Limit::Max, 1) {
        Err(MemoryError::Removed { path }) => assert_eq!(path, "/g/c"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_input_is_refused_with_a_typed_error() {
    let (rs, mem) = setup(1, 8);
    let g = rs.root().create_child("g").unwrap();
    mem.set_limit(&g, Limit::Max, 100).unwrap();
    for bad in [
        "-5",
        "abc",
        "1.5",
        "",
        "K",
        "+5",
        "5X",
        "99999999999999999999",
        "16E",
        "1,5",
    ] {
        let e = mem.write_limit(&g, Limit::Max, bad).unwrap_err();
        assert!(
            matches!(e, MemoryError::InvalidLimit { .. }),
            "{bad:?}: {e:?}"
        );
        assert!(e.to_string().contains("\"max\""), "{e}");
        assert_eq!(
            mem.limit(&g, Limit::Max).unwrap(),
            100,
            "{bad:?} changed the limit"
        );
    }
    assert_eq!(parse_limit("max").unwrap(), PAGE_COUNTER_MAX);
    assert_eq!(parse_limit(" 2k\n").unwrap(), 2048);
    assert_eq!(parse_limit("3M").unwrap(), 3 << 20);
    assert_eq!(parse_limit("15E").unwrap(), PAGE_COUNTER_MAX, "clamped");
    assert_eq!(parse_limit("0").unwrap(), 0);
    // Amounts.
    assert!(matches!(
        mem.try_charge(&g, u64::MAX),
        Err(MemoryError::TooLarge { .. })
    ));
    assert!(matches!(
        mem.uncharge_raw(&g, PAGE_COUNTER_MAX + 1),
        Err(MemoryError::TooLarge { .. })
    ));
    let f = mem
        .try_charge_with(&g, PAGE_COUNTER_MAX - 10, OnOom::Force)
        .unwrap();
    assert!(matches!(
        mem.try_charge_with(&g, 100, OnOom::Force),
        Err(MemoryError::Overflow { .. })
    ));
    drop(f);
    // Uncharging more than was charged.
    let c = mem.try_charge(&g, 3).unwrap();
    let usage = mem.current(&g).unwrap();
    let e = mem.uncharge_raw(&g, usage + 1).unwrap_err();
    assert!(matches!(e, MemoryError::Underflow { .. }));
    assert!(
        e.to_string().contains("Uncharge exactly what was charged"),
        "{e}"
    );
    assert_eq!(mem.current(&g).unwrap(), usage, "nothing was uncharged");
    drop(c);
    // A group of another engine.
    let other = engine(1);
    assert!(matches!(
        mem.try_charge(other.root(), 1),
        Err(MemoryError::Engine(Error::ForeignGroup))
    ));
    // Registering twice, and bad settings.
    assert!(matches!(
        Memory::register(&rs),
        Err(MemoryError::Engine(Error::ControllerExists { .. }))
    ));
    for cfg in [
        MemoryConfig {
            batch: MAX_BATCH + 1,
            ..Default::default()
        },
        MemoryConfig {
            max_reclaim_retries: 1001,
            ..Default::default()
        },
    ] {
        let e = Memory::register_with(&engine(1), cfg).unwrap_err();
        assert!(matches!(e, MemoryError::InvalidConfig { .. }), "{e}");
    }
    assert_eq!(mem.page_counter(&g).unwrap().cancel_underflows(), 0);
}

#[test]
fn zero_amounts_are_no_ops() {
    let (rs, mem) = setup(1, 8);
    let g = rs.root().create_child("g").unwrap();
    let c = mem.try_charge(&g, 0).unwrap();
    mem.uncharge_raw(&g, 0).unwrap();
    drop(c);
    assert_eq!(mem.current(&g).unwrap(), 0);
}

#[test]
fn into_raw_hands_over_the_uncharge() {
    let (rs, mem) = setup(1, 8);
    let g = rs.root().create_child("g").unwrap();
    let (group, n) = mem.try_charge(&g, 5).unwrap().into_raw();
    assert_eq!((group, n), (g.clone(), 5));
    assert_eq!(mem.current(&g).unwrap(), 8);
    mem.uncharge_raw(&g, 5).unwrap();
    mem.drain_stocks(&g).unwrap();
    assert_eq!(mem.current(&g).unwrap(), 0);
}

/// The borrowing guard writes no reference count of the controller (a line
/// every thread shares), whether the stock or the page counter served it;
/// an owned one takes exactly one and gives it back when it drops.
#[test]
fn the_guard_borrows_and_into_owned_takes_one_reference() {
    let (rs, mem) = setup(1, 8);
    let g = rs.root().create_child("g").unwrap();
    let refs = || Arc::strong_count(&mem.inner);
    let before = refs();
    let a = mem.try_charge(&g, 3).unwrap(); // page counter, 5 stocked
    let b = mem.try_charge(&g, 2).unwrap(); // stock
    assert_eq!(mem.stocked(&g).unwrap(), 3);
    assert_eq!(refs(), before);
    let owned = b.into_owned();
    assert_eq!(refs(), before + 1);
    assert_eq!((owned.amount(), owned.group()), (2, &g));
    drop(a);
    assert_eq!(refs(), before + 1);
    assert_eq!(mem.current(&g).unwrap(), 8);
    owned.uncharge().unwrap();
    assert_eq!(refs(), before);
    mem.drain_stocks(&g).unwrap();
    assert_eq!(mem.current(&g).unwrap(), 0);
    let s = mem.read_exact(&g).unwrap();
    assert_eq!((s.get("charged"), s.get("uncharged")), (Some(5), Some(5)));
}

/// An owned charge outlives every handle it was made from (the controller
/// handle it borrowed, and the caller's group, removed meanwhile) and drops
/// on another thread: it keeps what it uncharges alive, and the uncharge
/// lands on the nearest live ancestor, which holds the reparented units.
/// Small enough for Miri, which checks that nothing is used after it is
/// freed.
#[test]
fn an_owned_charge_outlives_the_handles_it_borrowed() {
    let (rs, mem) = setup(2, 4);
    let check = mem.clone();
    let p = rs.root().create_child("p").unwrap();
    let owned = {
        let g = p.create_child("g").unwrap();
        let c = mem.try_charge_on_cpu(&g, 3, OnOom::Fail, 1).unwrap();
        assert_eq!(c.group(), &g);
        g.remove().unwrap();
        c.into_owned()
    };
    drop(mem);
    // Reparented: p holds the 3 units; the 1 stocked for g was drained.
    assert_eq!(check.current(&p).unwrap(), 3);
    let t = std::thread::spawn(move || {
        assert_eq!((owned.amount(), owned.group().name()), (3, "g"));
        assert_eq!(owned.group().parent().as_ref(), Some(&p));
        drop(owned);
    });
    t.join().unwrap();
    check.drain_stocks(rs.root()).unwrap();
    assert_eq!(check.current(rs.root()).unwrap(), 0);
    let s = check.read_exact(rs.root()).unwrap();
    assert_eq!((s.get("charged"), s.get("uncharged")), (Some(3), Some(3)));
}

/// A guard made through a removed group holds its nearest live ancestor,
/// which may itself be removed before the guard drops: the uncharge then
/// goes one level further up, where the units were reparented.
#[test]
fn a_guard_on_a_removed_group_holds_the_ancestor_it_charged() {
    let (rs, mem) = setup(1, 0);
    let p = rs.root().create_child("p").unwrap();
    let g = p.create_child("g").unwrap();
    g.remove().unwrap();
    let c = mem.try_charge(&g, 7).unwrap();
    assert_eq!(c.group(), &p);
    p.remove().unwrap();
    drop(p);
    assert_eq!(c.group().name(), "p");
    assert_eq!(mem.current(rs.root()).unwrap(), 7);
    drop(c);
    assert_eq!(mem.current(rs.root()).unwrap(), 0);
}

/// Threads charging and uncharging one limited group, on whatever CPU they
/// run, against drains and limit writes: no unit is created or lost, and
/// non-forced charges never take usage past the highest max ever set.
#[test]
fn stress_charge_uncharge_drain() {
    let threads = 4;
    let ops = if cfg!(miri) { 30 } else { 20_000 };
    let writes = if cfg!(miri) { 3 } else { 2_000 };
    let (rs, mem) = setup(2, 8);
    let p = rs.root().create_child("p").unwrap();
    let leaves: Vec<Group> = (0..2)
        .map(|i| p.create_child(&format!("l{i}")).unwrap())
        .collect();
    mem.set_limit(&p, Limit::Max, 200).unwrap();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (mem, leaf) = (&mem, &leaves[t % 2]);
            s.spawn(move || {
                let mut held = Vec::new();
                for i in 0..ops {
                    let n = 1 + (i * 7 + t) as u64 % 12;
                    if let Ok(c) = mem.try_charge(leaf, n) {
                        held.push(c);
                    }
                    if held.len() > 4 || i % 3 == 0 {
                        held.pop();
                    }
                }
            });
        }
        s.spawn(|| {
            for i in 0..writes {
                mem.drain_stocks(&p).unwrap();
                let _ = mem.set_limit(&p, Limit::Max, 150 + i % 100);
            }
        });
    });
    // Every max ever set was at most 249, and charges are only admitted
    // under the max in force (a lowered one included).
    assert!(
        mem.peak(&p).unwrap() <= 249,
        "peak {}",
        mem.peak(&p).unwrap()
    );
    mem.drain_stocks(rs.root()).unwrap();
    for g in leaves.iter().chain([&p, rs.root()]) {
        assert_eq!(mem.current(g).unwrap(), 0, "{g:?}");
    }
    assert_eq!(mem.page_counter(&p).unwrap().cancel_underflows(), 0);
    let s = mem.read_exact(rs.root()).unwrap();
    assert_eq!(s.get("charged"), s.get("uncharged"));
}

/// `memory.stat` items counted in charge units declare `batch / 64` (a
/// power of two) as their unit, `failcnt` 1: a caller charging bytes a
/// page at a time with the kernel's 64-page batch walks the ancestors'
/// pending counters once per 64 pages per CPU.
#[test]
fn stat_units_follow_the_batch() {
    assert_eq!(stat_unit(0), 1);
    assert_eq!(stat_unit(MEMCG_CHARGE_BATCH), 1);
    assert_eq!(stat_unit(100), 1);
    assert_eq!(stat_unit(64 * 4096), 4096);
    assert_eq!(stat_unit(64 * 4096 + 64 * 1000), 4096, "rounded down");
    assert_eq!(stat_unit(MAX_BATCH), MAX_BATCH / 64);
    let (_rs, mem) = setup(2, MEMCG_CHARGE_BATCH);
    assert_eq!(mem.stat_controller().stat_units(), [1; 10]);
    let (rs, mem) = setup(2, 64 * 4096);
    // heap bytes in the charge unit; failcnt and the heap object counts 1.
    assert_eq!(
        mem.stat_controller().stat_units(),
        [4096, 4096, 4096, 4096, 1, 4096, 4096, 1, 1, 4096]
    );
    let a = rs.root().create_child("a").unwrap();
    let b = a.create_child("b").unwrap();
    let pending = || mem.stat_controller().pending_updates(&a).unwrap();
    for i in 1..=64 {
        mem.charge_raw_on_cpu(&b, 4096, OnOom::Fail, 0).unwrap();
        assert_eq!(pending(), if i < 64 { 0 } else { 64 }, "after {i} pages");
    }
    assert_eq!(stat(&mem, &a, "charged"), (0, 64 * 4096));
}

/// An uncharge of more than the group holds is refused even where its
/// stock, whose units count in its usage, would have hidden the excess
/// (a group charged 10 reads a usage of 64 with 54 stocked): nothing is
/// uncharged, so its parent keeps its other children's charges and its
/// `memory.max` still holds. Once, the excess went into the stock and,
/// given back, took a sibling's units off every ancestor.
#[test]
fn an_uncharge_of_more_than_the_group_holds_is_refused() {
    let (rs, mem) = setup(2, 64);
    let t = rs.root().create_child("t").unwrap();
    let a = t.create_child("a").unwrap();
    let b = t.create_child("b").unwrap();
    mem.set_limit(&t, Limit::Max, 1000).unwrap();
    mem.charge_raw_on_cpu(&b, 700, OnOom::Fail, 0).unwrap();
    mem.charge_raw_on_cpu(&a, 10, OnOom::Fail, 0).unwrap();
    assert_eq!(
        (mem.current(&a).unwrap(), mem.stocked(&a).unwrap()),
        (64, 54)
    );
    // Through the CPU whose stock holds the 54, and above the batch (the
    // exact path). (Through another CPU, an excess within what CPU 0's
    // stock holds is not seen at once: see `uncharge_raw`.)
    for (amount, cpu) in [(60, 0), (11, 0), (65, 1), (100, 0)] {
        match mem.uncharge_raw_on_cpu(&a, amount, cpu) {
            Err(MemoryError::Underflow { usage, .. }) => assert_eq!(usage, 10),
            r => panic!("uncharging {amount} of 10 through CPU {cpu}: {r:?}"),
        }
    }
    assert_eq!(
        (mem.current(&a).unwrap(), mem.stocked(&a).unwrap()),
        (64, 54)
    );
    // What it holds can be uncharged, through either CPU.
    mem.uncharge_raw_on_cpu(&a, 4, 1).unwrap();
    mem.uncharge_raw_on_cpu(&a, 6, 0).unwrap();
    mem.drain_stocks(rs.root()).unwrap();
    assert_eq!(mem.current(&a).unwrap(), 0);
    assert_eq!(mem.current(&t).unwrap(), 700);
    assert_eq!(mem.current(rs.root()).unwrap(), 700);
    assert!(
        mem.charge_raw_on_cpu(&b, 340, OnOom::Fail, 0).is_err(),
        "t's memory.max was bypassed"
    );
    for g in [&a, &t, rs.root()] {
        assert_eq!(mem.uncharge_underflows(g).unwrap(), 0);
    }
    // More than the whole usage, as before.
    assert!(matches!(
        mem.uncharge_raw(&a, 1),
        Err(MemoryError::Underflow { .. })
    ));
}

/// Idle stock goes back: a slot not used between two passes of the
/// periodic housekeeping is emptied into its page counter, so an idle
/// group's `memory.current` comes down to what its callers hold; a slot
/// used in between is kept for one more pass.
#[test]
fn idle_stock_is_returned_within_two_passes() {
    let (rs, mem) = setup(2, 64);
    let idle = rs.root().create_child("idle").unwrap();
    let busy = rs.root().create_child("busy").unwrap();
    let held = mem.try_charge_on_cpu(&idle, 10, OnOom::Fail, 0).unwrap();
    mem.charge_raw_on_cpu(&busy, 1, OnOom::Fail, 1).unwrap();
    assert_eq!(mem.current(&idle).unwrap(), 64, "a batch, 54 of it stocked");
    let stocks = &mem.inner.shared.stocks;
    // First pass: both slots were used since the start; kept, marked.
    assert_eq!(stocks.return_idle(), 0);
    assert_eq!(mem.current(&idle).unwrap(), 64);
    // `busy` charges again between the passes; `idle` does not.
    mem.charge_raw_on_cpu(&busy, 1, OnOom::Fail, 1).unwrap();
    assert_eq!(stocks.return_idle(), 54);
    assert_eq!(mem.current(&idle).unwrap(), 10, "what its caller holds");
    assert_eq!(mem.stocked(&idle).unwrap(), 0);
    assert_eq!(mem.current(&busy).unwrap(), 64, "used: still stocked");
    // Idle from now on: gone at the next pass.
    assert_eq!(stocks.return_idle(), 62);
    assert_eq!(mem.current(&busy).unwrap(), 2);
    held.uncharge().unwrap();
    mem.uncharge_raw_on_cpu(&busy, 2, 1).unwrap();
    mem.drain_stocks(rs.root()).unwrap();
    assert_eq!(mem.current(rs.root()).unwrap(), 0, "nothing lost or made");
}

/// The engine's periodic flusher runs the idle pass: a group that stops
/// using its stock has it back out of `memory.current` after two periods
/// (waited for with a generous deadline: a liveness check, not a timing
/// one).
#[test]
#[cfg_attr(miri, ignore = "waits for the periodic flusher's wall-clock period")]
fn the_periodic_flusher_returns_idle_stock() {
    let rs = Rstat::builder()
        .nr_cpus(2)
        .periodic_flush(Some(std::time::Duration::from_millis(5)))
        .build()
        .unwrap();
    let mem = Memory::register_with(
        &rs,
        MemoryConfig {
            batch: 64,
            ..MemoryConfig::default()
        },
    )
    .unwrap();
    let g = rs.root().create_child("g").unwrap();
    let held = mem.try_charge_on_cpu(&g, 10, OnOom::Fail, 0).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while mem.current(&g).unwrap() != 10 {
        assert!(
            std::time::Instant::now() < deadline,
            "idle stock not returned: current {}, stocked {}",
            mem.current(&g).unwrap(),
            mem.stocked(&g).unwrap()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(mem.stocked(&g).unwrap(), 0);
    held.uncharge().unwrap();
}

/// A byte-charged controller registered with `MemoryConfig::bytes()`
/// serves byte-sized charges from the stock; with the page-sized default
/// each such charge goes to the page counter.
#[test]
fn byte_config_serves_byte_charges_from_the_stock() {
    let rs = engine(2);
    let mem = Memory::register_with(&rs, MemoryConfig::bytes()).unwrap();
    let g = rs.root().create_child("g").unwrap();
    mem.charge_raw_on_cpu(&g, 1500, OnOom::Fail, 0).unwrap();
    let pc = mem.page_counter(&g).unwrap();
    let after_first = pc.usage();
    assert_eq!(
        after_first, BYTES_BATCH,
        "one batch charged, the rest stocked"
    );
    for _ in 0..100 {
        mem.charge_raw_on_cpu(&g, 1500, OnOom::Fail, 0).unwrap();
        mem.uncharge_raw_on_cpu(&g, 1500, 0).unwrap();
    }
    assert_eq!(pc.usage(), after_first, "served from the stock");
    let (rs2, pages) = setup(2, MemoryConfig::pages().batch);
    let g2 = rs2.root().create_child("g").unwrap();
    pages.charge_raw_on_cpu(&g2, 1500, OnOom::Fail, 0).unwrap();
    assert_eq!(
        pages.stocked(&g2).unwrap(),
        0,
        "above the batch: not stocked"
    );
}

/// The raw stat controller misses fewer than `HEAP_STAT_BATCH` heap
/// operations per (group, CPU): a slot adds its pending deltas at the
/// batch's last operation, allocations and frees together, while
/// `Memory::read_exact` adds them first and sees every one.
#[test]
fn the_raw_stat_controller_misses_less_than_a_stat_batch() {
    use crate::memory::stock::HEAP_STAT_BATCH;
    let rs = engine(2);
    let mem = Memory::register_with(&rs, crate::alloc::heap_config()).unwrap();
    let t = rs.root().create_child("t").unwrap();
    let cpu = 0;
    let raw = |item: &str| {
        let s = mem.stat_controller().read_exact(&t).unwrap();
        s.get_local(item).unwrap()
    };
    let batch = i64::from(HEAP_STAT_BATCH);
    let mut live = Vec::new();
    // Allocations and frees interleaved (two of one, one of the other),
    // for several batches, checking the bound after each operation.
    let (mut allocs, mut frees) = (0i64, 0i64);
    let rounds = if cfg!(miri) { 2 } else { 5 };
    for k in 0..rounds * batch {
        if k % 3 == 2 {
            let x = live.pop().unwrap();
            // SAFETY: each charge's reference, given back once.
            unsafe { mem.heap_uncharge(x, 40, 8, cpu) };
            frees += 1;
        } else {
            live.push(mem.heap_charge(&t, 40, 8, cpu).unwrap());
            allocs += 1;
        }
        let (ra, rf) = (raw("heap_allocs"), raw("heap_frees"));
        assert!(ra <= allocs && rf <= frees, "{ra} {rf} of {allocs} {frees}");
        let missed = (allocs - ra) + (frees - rf);
        assert!(missed < batch, "missed {missed} at op {k}");
        // What the raw items do show is consistent: 40 bytes per object.
        assert_eq!(raw("heap"), 40 * (ra - rf), "at op {k}");
    }
    // The exact read adds the slots' pending deltas first.
    let s = mem.read_exact(&t).unwrap();
    assert_eq!(s.get_local("heap_allocs").unwrap(), allocs);
    assert_eq!(s.get_local("heap_frees").unwrap(), frees);
    assert_eq!(s.get_local("heap").unwrap(), 40 * (allocs - frees));
    assert_eq!(s.get_local("heap_overhead").unwrap(), 8 * (allocs - frees));
    for x in live {
        // SAFETY: as above.
        unsafe { mem.heap_uncharge(x, 40, 8, cpu) };
    }
}
