//! Unit tests of reclaim: over `max`, proportional shares, `min` and `low`,
//! limit writes, `reclaim_high`, the OOM handler, removal.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::tests::setup;
use super::*;
use crate::page_counter::PAGE_COUNTER_MAX;
use crate::{Group, Rstat};

/// A cache of 1-unit charges whose reclaimer frees the newest ones. The
/// reclaimer holds it weakly (a strong reference would be a cycle: group →
/// reclaimer → charges → group).
struct Cache {
    mem: Memory,
    group: Group,
    items: std::sync::Mutex<Vec<OwnedCharge>>,
    /// Units the reclaimer charges each time it runs (to test recursion).
    charge_while_reclaiming: u64,
}

impl Cache {
    fn new(mem: &Memory, group: &Group, items: u64) -> Arc<Cache> {
        Self::with(mem, group, items, 0)
    }

    fn with(mem: &Memory, group: &Group, items: u64, charge_while_reclaiming: u64) -> Arc<Cache> {
        let c = Arc::new(Cache {
            mem: mem.clone(),
            group: group.clone(),
            items: std::sync::Mutex::new(Vec::new()),
            charge_while_reclaiming,
        });
        c.fill(items);
        let w: Weak<Cache> = Arc::downgrade(&c);
        mem.register_reclaimer(group, move |target: u64| {
            w.upgrade().map_or(0, |c| c.free(target))
        })
        .unwrap();
        c
    }

    fn fill(&self, items: u64) {
        for _ in 0..items {
            let c = self.mem.try_charge(&self.group, 1).unwrap();
            self.items.lock().unwrap().push(c.into_owned());
        }
    }

    fn free(&self, target: u64) -> u64 {
        if self.charge_while_reclaiming > 0 {
            let c = self
                .mem
                .try_charge(&self.group, self.charge_while_reclaiming)
                .unwrap();
            assert!(c.forced(), "a reclaimer's charge over the limit is forced");
        }
        let mut v = self.items.lock().unwrap();
        let k = (target as usize).min(v.len());
        let at = v.len() - k;
        v.truncate(at);
        k as u64
    }

    fn len(&self) -> u64 {
        self.items.lock().unwrap().len() as u64
    }
}

fn family(rs: &Rstat) -> (Group, Group, Group) {
    let p = rs.root().create_child("p").unwrap();
    let a = p.create_child("a").unwrap();
    let b = p.create_child("b").unwrap();
    (p, a, b)
}

#[test]
fn a_charge_over_max_reclaims_from_the_subtree() {
    let (rs, mem) = setup(2, 8);
    let (p, a, b) = family(&rs);
    mem.set_limit(&p, Limit::Max, 100).unwrap();
    let cache = Cache::new(&mem, &a, 100);
    assert_eq!(mem.current(&p).unwrap(), 100);
    let c = mem.try_charge(&b, 10).unwrap();
    assert!(cache.len() <= 90, "{}", cache.len());
    assert!(mem.current(&p).unwrap() <= 100);
    let ev = mem.events(&p).unwrap();
    assert_eq!((ev.max, ev.oom, ev.low), (1, 0, 0));
    let s = mem.read_exact(&p).unwrap();
    assert_eq!(s.get("reclaimed"), Some(100 - cache.len() as i64));
    assert_eq!(s.get_local("reclaimed"), Some(0));
    drop(c);
}

#[test]
fn reclaim_is_shared_in_proportion_to_reclaimable_usage() {
    let (rs, mem) = setup(1, 0);
    let (p, a, b) = family(&rs);
    let ca = Cache::new(&mem, &a, 300);
    let cb = Cache::new(&mem, &b, 100);
    assert_eq!(mem.reclaim(&p, 100).unwrap(), 100);
    assert_eq!((ca.len(), cb.len()), (225, 75));
    // A reclaimer's own count overrides the group's usage as its size.
    let (_, q) = (mem.drain_stocks(&p), rs.root().create_child("q").unwrap());
    let c = mem.try_charge(&q, 50).unwrap().into_owned();
    mem.register_reclaimer(&q, Sized10(std::sync::Mutex::new(Some(c))))
        .unwrap();
    struct Sized10(std::sync::Mutex<Option<OwnedCharge>>);
    impl Reclaimer for Sized10 {
        fn reclaim(&self, target: u64) -> u64 {
            assert!(target <= 10, "asked {target} of a reclaimer that has 10");
            self.0.lock().unwrap().take().map_or(0, |_| 50)
        }
        fn reclaimable(&self) -> Option<u64> {
            Some(10)
        }
    }
    assert_eq!(mem.reclaim(&q, 100).unwrap(), 50);
    assert_eq!(mem.current(&q).unwrap(), 0);
}

#[test]
fn min_is_never_reclaimed_from() {
    let (rs, mem) = setup(1, 0);
    let (p, a, b) = family(&rs);
    mem.set_limit(&a, Limit::Min, 200).unwrap();
    let ca = Cache::new(&mem, &a, 300);
    let cb = Cache::new(&mem, &b, 100);
    let w = mem.set_limit(&p, Limit::Max, 50).unwrap();
    assert!(!w.reached);
    assert_eq!(
        (w.usage_before, w.usage_after, w.reclaimed),
        (400, 200, 200)
    );
    assert_eq!((ca.len(), cb.len()), (200, 0));
    assert_eq!(mem.events(&p).unwrap().oom, 1);
    assert_eq!(mem.reclaim(&p, 1000).unwrap(), 0);
    assert_eq!(mem.events(&a).unwrap().low, 0);
    assert!(mem.try_charge(&b, 1).is_err());
}

#[test]
fn low_is_honoured_while_unprotected_memory_remains() {
    let (rs, mem) = setup(1, 0);
    let (p, a, b) = family(&rs);
    mem.set_limit(&a, Limit::Low, 200).unwrap();
    let ca = Cache::new(&mem, &a, 300);
    let cb = Cache::new(&mem, &b, 100);
    // Each gives in proportion to what it has above its protection.
    assert_eq!(mem.reclaim(&p, 150).unwrap(), 150);
    assert_eq!((ca.len(), cb.len()), (225, 25));
    assert_eq!(mem.reclaim(&p, 1000).unwrap(), 50);
    assert_eq!((ca.len(), cb.len()), (200, 0));
    assert_eq!(mem.events(&a).unwrap().low, 0, "low not breached yet");
    // Nothing unprotected is left: low gives way, and says so.
    assert_eq!(mem.reclaim(&p, 1000).unwrap(), 200);
    assert_eq!(ca.len(), 0);
    assert_eq!(mem.events_local(&a).unwrap().low, 1);
    assert_eq!(mem.events(&p).unwrap().low, 1);
    assert_eq!(mem.events_local(&p).unwrap().low, 0);
}

#[test]
fn recursive_protection_shares_a_parents_min_among_its_children() {
    for recursive in [false, true] {
        let (rs, mem) = setup(1, 0);
        let (p, a, b) = family(&rs);
        mem.set_recursive_protection(recursive).unwrap();
        mem.set_limit(&p, Limit::Min, 100).unwrap();
        let ca = Cache::new(&mem, &a, 100);
        let cb = Cache::new(&mem, &b, 100);
        mem.reclaim(rs.root(), 1000).unwrap();
        let left = (ca.len(), cb.len());
        if recursive {
            assert_eq!(left, (50, 50), "p's min covers its subtree");
        } else {
            assert_eq!(left, (0, 0), "no child claims p's min");
        }
    }
}

#[test]
fn limit_writes_reclaim_toward_the_new_value() {
    let (rs, mem) = setup(2, 8);
    let g = rs.root().create_child("g").unwrap();
    let cache = Cache::new(&mem, &g, 100);
    let w = mem.set_limit(&g, Limit::Max, 40).unwrap();
    assert!(w.reached, "{w:?}");
    assert!(
        w.usage_after <= 40 && w.drained > 0 && w.reclaimed >= 53,
        "{w:?}"
    );
    assert_eq!(cache.len() + mem.stocked(&g).unwrap(), w.usage_after);
    mem.set_limit(&g, Limit::Max, PAGE_COUNTER_MAX).unwrap();
    cache.fill(60);
    let w = mem.set_limit(&g, Limit::High, 50).unwrap();
    assert!(w.reached && w.usage_after <= 50, "{w:?}");
    assert_eq!(mem.events(&g).unwrap().oom, 0);
    // Over high: flagged, and reclaim_high brings it back.
    let mut over = Vec::new();
    loop {
        let c = mem.try_charge(&g, 4).unwrap();
        let flagged = c.over_high();
        over.push(c);
        if flagged {
            break;
        }
    }
    assert!(mem.current(&g).unwrap() > 50);
    assert!(mem.reclaim_high(&g).unwrap() > 0);
    assert!(mem.current(&g).unwrap() <= 50);
}

#[test]
fn the_oom_handler_gets_one_chance_per_charge() {
    let (rs, mem) = setup(1, 0);
    let g = rs.root().create_child("g").unwrap();
    mem.set_limit(&g, Limit::Max, 10).unwrap();
    let victim = Arc::new(std::sync::Mutex::new(Some(
        mem.try_charge(&g, 10).unwrap().into_owned(),
    )));
    let v = Arc::clone(&victim);
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let n = Arc::clone(&calls);
    mem.set_oom_handler(&g, move |ctx: &OomContext<'_>| {
        assert_eq!((ctx.group.name(), ctx.max), ("g", 10));
        assert!(ctx.amount == 5 || ctx.amount == 6);
        n.fetch_add(1, Ordering::Relaxed);
        v.lock().unwrap().take().is_some()
    })
    .unwrap();
    let c = mem.try_charge(&g, 5).unwrap();
    let ev = mem.events(&g).unwrap();
    assert_eq!((ev.oom, ev.oom_kill), (1, 1));
    // Nothing left to kill: the handler says so and the charge fails.
    assert!(mem.try_charge(&g, 6).is_err());
    let ev = mem.events(&g).unwrap();
    assert_eq!((ev.oom, ev.oom_kill), (2, 1));
    assert_eq!(calls.load(Ordering::Relaxed), 2);
    assert!(mem.clear_oom_handler(&g).unwrap());
    drop(c);
}

#[test]
fn reclaimers_move_to_the_parent_on_removal() {
    let (rs, mem) = setup(2, 8);
    let (p, a, _b) = family(&rs);
    let cache = Cache::new(&mem, &a, 40);
    let extra = Cache::new(&mem, &a, 0);
    a.remove().unwrap();
    assert_eq!(mem.current(&a).unwrap(), 0);
    assert_eq!(mem.current(&p).unwrap(), 40);
    assert_eq!(mem.reclaim(&p, 15).unwrap(), 15);
    assert_eq!(cache.len(), 25);
    assert_eq!(mem.current(&p).unwrap(), 25, "freed from the parent");
    // Reclaimers of a removed group can still be unregistered through it.
    let id = mem.register_reclaimer(&a, |_| 0).unwrap();
    assert!(mem.unregister_reclaimer(&a, id).unwrap());
    assert!(!mem.unregister_reclaimer(&a, id).unwrap());
    drop(extra);
    drop(cache);
    mem.drain_stocks(rs.root()).unwrap();
    assert_eq!(mem.current(rs.root()).unwrap(), 0);
}

#[test]
fn a_reclaimer_charging_over_the_limit_is_forced_not_recursed() {
    let (rs, mem) = setup(1, 0);
    let g = rs.root().create_child("g").unwrap();
    mem.set_limit(&g, Limit::Max, 20).unwrap();
    let cache = Cache::with(&mem, &g, 20, 1);
    let c = mem.try_charge(&g, 5).unwrap();
    assert!(!c.forced());
    assert!(cache.len() <= 15);
    assert!(mem.read_exact(&g).unwrap().get("forced").unwrap() >= 1);
    drop(c);
}

#[test]
fn the_walk_survives_the_removal_of_the_group_it_stopped_at() {
    let (rs, mem) = setup(1, 0);
    let (p, a, b) = family(&rs);
    let ca = Cache::new(&mem, &a, 300);
    let cb = Cache::new(&mem, &b, 100);
    // One unit: the cursor stops at `a` with credit left.
    assert_eq!(mem.reclaim(&p, 1).unwrap(), 1);
    assert_eq!((ca.len(), cb.len()), (299, 100));
    // `a` goes; its charges and reclaimer move to `p`, which the walk
    // visits first (tree order) when it starts again at the top.
    a.remove().unwrap();
    assert_eq!(mem.reclaim(&p, 10).unwrap(), 10);
    assert_eq!(ca.len() + cb.len(), 389);
    assert!(
        ca.len() < 299,
        "p's reclaimer (a's cache) was asked: {}",
        ca.len()
    );
    assert_eq!(mem.current(&p).unwrap(), 389);
}

#[test]
fn a_credit_carried_over_is_worth_at_most_a_quantum_of_the_current_sizes() {
    let (rs, mem) = setup(1, 0);
    let (p, a, b) = family(&rs);
    let ca = Cache::new(&mem, &a, 600);
    let cb = Cache::new(&mem, &b, 200);
    // One unit: `a` gets a quantum of ⌈13 × 600 / 800⌉ = 10 and keeps a
    // credit of 9.
    assert_eq!(mem.reclaim(&p, 1).unwrap(), 1);
    assert_eq!(ca.len(), 599);
    // Its users free most of it: its quantum is now ⌈4 × 20 / 220⌉ = 1.
    ca.items.lock().unwrap().truncate(20);
    for _ in 0..9 {
        assert_eq!(mem.reclaim(&p, 1).unwrap(), 1);
    }
    // In proportion, `a` gives about 9 × 20 / 220 ≈ 1; spending the old
    // credit, it would give all 9.
    let lost = 20 - ca.len();
    assert_eq!(lost + (200 - cb.len()), 9);
    assert!(lost <= 2, "a gave {lost} of 9");
}
