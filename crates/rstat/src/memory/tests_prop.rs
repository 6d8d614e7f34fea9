//! Random charge / uncharge / limit / removal / drain sequences on a random
//! tree, against a sequential model (plain vectors).
//!
//! After every operation, for every live group `g`:
//! - `usage(g)` is exactly the caller-held charges under `g` (removed
//!   descendants included: their charges were reparented) plus the stocked
//!   units of the live groups under `g`, and no group has more than
//!   `batch × nr_cpus` units stocked (the documented overcharge bound);
//! - the caller-held charges under `g` are at most its limit plus its
//!   outstanding forced charges (the limit being, after a `memory.max` write
//!   that reclaim could not reach, the usage it stopped at);
//! - a charge succeeds exactly when it fits every level's limit counting
//!   caller-held charges only (stocks never make a charge fail), or when
//!   it is served from units stocked before a forced charge took a level
//!   over (then no usage moves);
//! - removed groups read 0.
//!
//! At the end, once every charge is dropped or uncharged and the stocks are
//! drained, every usage is 0 and `charged == uncharged`: every unit charged
//! was uncharged exactly once.

use proptest::prelude::*;

use super::tests::setup;
use super::*;
use crate::page_counter::PAGE_COUNTER_MAX;
use crate::testing::MemoryExt;
use crate::Group;

const CPUS: usize = 2;
const BATCH: u64 = 4;

#[derive(Debug, Clone)]
enum Op {
    Charge {
        g: usize,
        n: u64,
        cpu: usize,
        force: bool,
        guard: bool,
    },
    Uncharge {
        k: usize,
        cpu: usize,
    },
    OverUncharge(usize),
    SetMax(usize, u64),
    SetHigh(usize, u64),
    Remove(usize),
    Drain(usize),
}

fn amount() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 0..=BATCH, 3 => (BATCH + 1)..25, 1 => Just(60)]
}

fn limit() -> impl Strategy<Value = u64> {
    prop_oneof![6 => 0..60u64, 1 => Just(PAGE_COUNTER_MAX)]
}

fn op(nodes: usize) -> impl Strategy<Value = Op> {
    let g = 0..nodes;
    prop_oneof![
        10 => (g.clone(), amount(), 0..CPUS, prop::bool::weighted(0.15), any::<bool>())
            .prop_map(|(g, n, cpu, force, guard)| Op::Charge { g, n, cpu, force, guard }),
        7 => (any::<usize>(), 0..CPUS).prop_map(|(k, cpu)| Op::Uncharge { k, cpu }),
        1 => g.clone().prop_map(Op::OverUncharge),
        3 => (g.clone(), limit()).prop_map(|(g, v)| Op::SetMax(g, v)),
        1 => (g.clone(), limit()).prop_map(|(g, v)| Op::SetHigh(g, v)),
        1 => g.clone().prop_map(Op::Remove),
        1 => g.prop_map(Op::Drain),
    ]
}

fn scenario() -> impl Strategy<Value = (Vec<usize>, Vec<Op>)> {
    (1usize..=6).prop_flat_map(|n| {
        let parents: Vec<BoxedStrategy<usize>> = (1..n).map(|i| (0..i).boxed()).collect();
        (parents, prop::collection::vec(op(n), 1..60))
    })
}

/// A charge the model knows about.
struct Held<'a> {
    /// The handle it was made through, the group it landed on.
    via: usize,
    landed: usize,
    n: u64,
    forced: bool,
    guard: Option<Charge<'a>>,
}

struct Model<'a> {
    parent: Vec<Option<usize>>,
    live: Vec<bool>,
    /// Per group: the limit the caller-held charges under it must respect.
    bound: Vec<u64>,
    max: Vec<u64>,
    held: Vec<Held<'a>>,
    charged: u64,
}

impl Model<'_> {
    fn in_subtree(&self, mut x: usize, g: usize) -> bool {
        loop {
            if x == g {
                return true;
            }
            match self.parent[x] {
                Some(p) => x = p,
                None => return false,
            }
        }
    }

    fn nearest_live(&self, mut x: usize) -> usize {
        while !self.live[x] {
            x = self.parent[x].expect("the root is live");
        }
        x
    }

    fn real(&self, g: usize) -> u64 {
        self.held
            .iter()
            .filter(|h| self.in_subtree(h.landed, g))
            .map(|h| h.n)
            .sum()
    }

    fn forced(&self, g: usize) -> u64 {
        self.held
            .iter()
            .filter(|h| h.forced && self.in_subtree(h.landed, g))
            .map(|h| h.n)
            .sum()
    }

    /// Whether `n` more under `t` fits every level's max.
    fn fits(&self, t: usize, n: u64) -> bool {
        let mut l = Some(t);
        while let Some(x) = l {
            if self.real(x) + n > self.max[x] {
                return false;
            }
            l = self.parent[x];
        }
        true
    }
}

fn check(mem: &Memory, groups: &[Group], m: &Model<'_>) -> Result<(), TestCaseError> {
    let n = groups.len();
    let stocked: Vec<u64> = groups.iter().map(|g| mem.stocked(g).unwrap()).collect();
    for g in 0..n {
        if !m.live[g] {
            prop_assert_eq!(mem.current(&groups[g]).unwrap(), 0, "removed group {}", g);
            prop_assert_eq!(stocked[g], 0, "removed group {} stocked", g);
            continue;
        }
        prop_assert!(
            stocked[g] <= BATCH * CPUS as u64,
            "group {} stocks {}",
            g,
            stocked[g]
        );
        let stock_below: u64 = (0..n)
            .filter(|&d| m.live[d] && m.in_subtree(d, g))
            .map(|d| stocked[d])
            .sum();
        let real = m.real(g);
        prop_assert_eq!(
            mem.current(&groups[g]).unwrap(),
            real + stock_below,
            "usage of group {}",
            g
        );
        prop_assert!(
            real <= m.bound[g].saturating_add(m.forced(g)),
            "group {}: {} held, bound {}, forced {}",
            g,
            real,
            m.bound[g],
            m.forced(g)
        );
    }
    Ok(())
}

fn run(parents: Vec<usize>, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let (rs, mem) = setup(CPUS, BATCH);
    let mut groups = vec![rs.root().clone()];
    for (i, &p) in parents.iter().enumerate() {
        let g = groups[p].create_child(&format!("g{}", i + 1)).unwrap();
        groups.push(g);
    }
    let n = groups.len();
    let mut m = Model {
        parent: std::iter::once(None)
            .chain(parents.iter().map(|&p| Some(p)))
            .collect(),
        live: vec![true; n],
        bound: vec![PAGE_COUNTER_MAX; n],
        max: vec![PAGE_COUNTER_MAX; n],
        held: Vec::new(),
        charged: 0,
    };
    for op in ops {
        match op {
            Op::Charge {
                g,
                n: amount,
                cpu,
                force,
                guard,
            } => {
                let t = m.nearest_live(g);
                let fits = m.fits(t, amount);
                let on_oom = if force { OnOom::Force } else { OnOom::Fail };
                let (usage0, stocked0) = (
                    mem.current(&groups[t]).unwrap(),
                    mem.stocked(&groups[t]).unwrap(),
                );
                let (landed, flags, kept) = if guard {
                    match mem.try_charge_on_cpu(&groups[g], amount, on_oom, cpu) {
                        Ok(c) => {
                            let landed = groups.iter().position(|x| x == c.group()).unwrap();
                            let flags = Charged {
                                forced: c.forced(),
                                over_high: false,
                            };
                            (Some(landed), flags, Some(c))
                        }
                        Err(e) => {
                            prop_assert!(matches!(e, MemoryError::OverLimit(_)), "{}", e);
                            (None, Charged::default(), None)
                        }
                    }
                } else {
                    match mem.charge_raw_on_cpu(&groups[g], amount, on_oom, cpu) {
                        Ok(f) => (Some(t), f, None),
                        Err(e) => {
                            prop_assert!(matches!(e, MemoryError::OverLimit(_)), "{}", e);
                            (None, Charged::default(), None)
                        }
                    }
                };
                // A charge that does not fit may still be served from units
                // already charged and stocked before the group went over
                // (usage does not move); it never reaches the counter.
                let from_stock = landed.is_some()
                    && amount > 0
                    && mem.current(&groups[t]).unwrap() == usage0
                    && stocked0.checked_sub(mem.stocked(&groups[t]).unwrap()) == Some(amount);
                let ok = landed.is_some();
                // Refused only if it does not fit and may not be forced.
                prop_assert!(
                    ok || (!fits && !force && amount > 0),
                    "charge {} to {}",
                    amount,
                    g
                );
                // Forced only if it does not fit.
                prop_assert!(!flags.forced || !fits, "forced though it fits");
                // Not forced and not fitting: served from the stock.
                prop_assert!(!ok || flags.forced || fits || amount == 0 || from_stock);
                if let Some(landed) = landed {
                    prop_assert_eq!(landed, t);
                    m.charged += amount;
                    m.held.push(Held {
                        via: g,
                        landed,
                        n: amount,
                        forced: flags.forced,
                        guard: kept,
                    });
                }
            }
            Op::Uncharge { k, cpu } => {
                if !m.held.is_empty() {
                    let h = m.held.swap_remove(k % m.held.len());
                    match h.guard {
                        Some(c) => drop(c),
                        None => mem.uncharge_raw_on_cpu(&groups[h.via], h.n, cpu).unwrap(),
                    }
                }
            }
            Op::OverUncharge(g) => {
                let t = m.nearest_live(g);
                let before = mem.current(&groups[t]).unwrap();
                let e = mem.uncharge_raw(&groups[g], before + 1).unwrap_err();
                prop_assert!(matches!(e, MemoryError::Underflow { .. }), "{}", e);
                prop_assert_eq!(mem.current(&groups[t]).unwrap(), before);
            }
            Op::SetMax(g, v) => match mem.set_limit(&groups[g], Limit::Max, v) {
                Ok(w) => {
                    prop_assert!(m.live[g]);
                    let real = m.real(g);
                    prop_assert_eq!(w.reached, real <= v);
                    prop_assert_eq!(w.usage_after, real, "the subtree was drained");
                    m.max[g] = v;
                    m.bound[g] = if w.reached { v } else { real };
                }
                Err(e) => {
                    prop_assert!(!m.live[g]);
                    prop_assert!(matches!(e, MemoryError::Removed { .. }), "{}", e);
                }
            },
            Op::SetHigh(g, v) => {
                prop_assert_eq!(mem.set_limit(&groups[g], Limit::High, v).is_ok(), m.live[g]);
            }
            Op::Remove(g) => {
                let has_live_children = (0..n).any(|c| m.parent[c] == Some(g) && m.live[c]);
                let r = groups[g].remove();
                prop_assert_eq!(r.is_ok(), g != 0 && m.live[g] && !has_live_children);
                if r.is_ok() {
                    m.live[g] = false;
                }
            }
            Op::Drain(g) => {
                mem.drain_stocks(&groups[g]).unwrap();
            }
        }
        check(&mem, &groups, &m)?;
    }
    for h in m.held.drain(..) {
        match h.guard {
            Some(c) => c.uncharge().unwrap(),
            None => mem.uncharge_raw(&groups[h.via], h.n).unwrap(),
        }
    }
    mem.drain_stocks(rs.root()).unwrap();
    for (i, g) in groups.iter().enumerate() {
        prop_assert_eq!(mem.current(g).unwrap(), 0, "group {} at the end", i);
        prop_assert_eq!(mem.page_counter(g).unwrap().cancel_underflows(), 0);
    }
    let s = mem.read_exact(rs.root()).unwrap();
    prop_assert_eq!(s.get("charged"), Some(m.charged as i64));
    prop_assert_eq!(s.get("uncharged"), Some(m.charged as i64));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 3 } else { 256 },
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn memory_matches_the_model((parents, ops) in scenario()) {
        run(parents, ops)?;
    }
}
