//! Random operation sequences on a random small tree against a sequential
//! model: results, usage, limits, watermarks, failcnt, underflows and
//! protected usage agree exactly after every operation.

use std::sync::Arc;

use proptest::prelude::*;

use super::*;

const PCM: u64 = PAGE_COUNTER_MAX;

#[derive(Debug, Clone)]
enum Op {
    TryCharge(usize, u64),
    Charge(usize, u64),
    Uncharge(usize, u64),
    Cancel(usize, u64),
    SetMax(usize, u64),
    SetMaxForced(usize, u64),
    SetMin(usize, u64),
    SetLow(usize, u64),
    ResetWatermark(usize),
    ResetLocalWatermark(usize),
}

/// Mostly small amounts; some on the compare-and-swap path (> 2³²); some
/// at the edge of PAGE_COUNTER_MAX, on both sides.
fn amount() -> impl Strategy<Value = u64> {
    prop_oneof![
        12 => 0..20u64,
        2 => (1u64 << 33)..(1u64 << 34),
        1 => (PCM - 20)..=(PCM + 5),
        1 => Just(u64::MAX),
    ]
}

fn limit() -> impl Strategy<Value = u64> {
    prop_oneof![6 => 0..60u64, 1 => Just(PCM), 1 => Just(u64::MAX), 1 => (1u64 << 33)..(1u64 << 35)]
}

fn op(nodes: usize) -> impl Strategy<Value = Op> {
    let n = 0..nodes;
    prop_oneof![
        8 => (n.clone(), amount()).prop_map(|(i, a)| Op::TryCharge(i, a)),
        3 => (n.clone(), amount()).prop_map(|(i, a)| Op::Charge(i, a)),
        6 => (n.clone(), amount()).prop_map(|(i, a)| Op::Uncharge(i, a)),
        1 => (n.clone(), amount()).prop_map(|(i, a)| Op::Cancel(i, a)),
        3 => (n.clone(), limit()).prop_map(|(i, v)| Op::SetMax(i, v)),
        1 => (n.clone(), limit()).prop_map(|(i, v)| Op::SetMaxForced(i, v)),
        1 => (n.clone(), limit()).prop_map(|(i, v)| Op::SetMin(i, v)),
        1 => (n.clone(), limit()).prop_map(|(i, v)| Op::SetLow(i, v)),
        1 => n.clone().prop_map(Op::ResetWatermark),
        1 => n.prop_map(Op::ResetLocalWatermark),
    ]
}

/// A tree of 1..=6 nodes (node 0 the root, each other node's parent an
/// earlier node) and a sequence of operations on it.
fn scenario() -> impl Strategy<Value = (Vec<usize>, Vec<Op>)> {
    (1..=6usize)
        .prop_flat_map(|n| (proptest::collection::vec(any::<usize>(), n), Just(n)))
        .prop_flat_map(|(seeds, n)| {
            let parents: Vec<usize> = seeds
                .iter()
                .enumerate()
                .map(|(i, s)| if i == 0 { 0 } else { s % i })
                .collect();
            (Just(parents), proptest::collection::vec(op(n), 1..60))
        })
        .prop_map(|(parents, ops)| {
            // Local cancels only on leaves: on an inner counter they break
            // "children's usage sums to at most the parent's", which the
            // children's protected-usage sums rely on to stay in range.
            let inner = |i: usize| (1..parents.len()).any(|k| parents[k] == i);
            let ops = ops
                .into_iter()
                .map(|op| match op {
                    Op::Cancel(i, a) if inner(i) => Op::Uncharge(i, a),
                    op => op,
                })
                .collect();
            (parents, ops)
        })
}

/// The sequential model: plain integers, the semantics written out.
#[derive(Debug, Clone, Default)]
struct Node {
    usage: u64,
    max: u64,
    min: u64,
    low: u64,
    watermark: u64,
    local_watermark: u64,
    failcnt: u64,
    underflows: u64,
    /// A forced charge or forced limit left usage above max, and it has not
    /// come back under since.
    excused: bool,
}

struct Model {
    parents: Vec<usize>,
    nodes: Vec<Node>,
}

impl Model {
    fn new(parents: &[usize]) -> Self {
        let node = Node {
            max: PCM,
            ..Node::default()
        };
        Model {
            parents: parents.to_vec(),
            nodes: vec![node; parents.len()],
        }
    }

    /// `i` and its ancestors, bottom-up.
    fn path(&self, mut i: usize) -> Vec<usize> {
        let mut p = vec![i];
        while i != 0 {
            i = self.parents[i];
            p.push(i);
        }
        p
    }

    fn peak(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        n.watermark = n.watermark.max(n.usage);
        n.local_watermark = n.local_watermark.max(n.usage);
    }

    fn charge(&mut self, i: usize, a: u64, forced: bool) -> Result<(), PageCounterError> {
        if a > PCM {
            return Err(PageCounterError::TooLarge { amount: a });
        }
        let path = self.path(i);
        for (level, &c) in path.iter().enumerate() {
            let limit = if forced { PCM } else { self.nodes[c].max };
            let new = self.nodes[c].usage + a;
            if new > limit {
                for &below in &path[..level] {
                    self.nodes[below].usage -= a;
                }
                if forced {
                    return Err(PageCounterError::Overflow { level, amount: a });
                }
                self.nodes[c].failcnt += 1;
                return Err(PageCounterError::OverLimit {
                    level,
                    amount: a,
                    max: limit,
                });
            }
            self.nodes[c].usage = new;
            self.peak(c);
            if forced && new > self.nodes[c].max {
                self.nodes[c].excused = true;
            }
        }
        Ok(())
    }

    fn cancel_one(&mut self, c: usize, a: u64) -> Option<u64> {
        let n = &mut self.nodes[c];
        if n.usage >= a {
            n.usage -= a;
            None
        } else {
            let held = n.usage;
            n.usage = 0;
            n.underflows += 1;
            Some(held)
        }
    }

    fn apply(&mut self, op: &Op) -> Result<(), PageCounterError> {
        match *op {
            Op::TryCharge(i, a) => self.charge(i, a, false),
            Op::Charge(i, a) => self.charge(i, a, true),
            Op::Uncharge(i, a) => {
                if a > PCM {
                    return Err(PageCounterError::TooLarge { amount: a });
                }
                let mut first = None;
                for (level, c) in self.path(i).into_iter().enumerate() {
                    if let Some(charged) = self.cancel_one(c, a) {
                        first.get_or_insert(PageCounterError::Underflow {
                            level,
                            amount: a,
                            charged,
                        });
                    }
                }
                first.map_or(Ok(()), Err)
            }
            Op::Cancel(i, a) => {
                if a > PCM {
                    return Err(PageCounterError::TooLarge { amount: a });
                }
                match self.cancel_one(i, a) {
                    None => Ok(()),
                    Some(charged) => Err(PageCounterError::Underflow {
                        level: 0,
                        amount: a,
                        charged,
                    }),
                }
            }
            Op::SetMax(i, v) => {
                let v = v.min(PCM);
                let n = &mut self.nodes[i];
                if n.usage > v {
                    return Err(PageCounterError::Busy {
                        usage: n.usage,
                        max: v,
                    });
                }
                n.max = v;
                Ok(())
            }
            Op::SetMaxForced(i, v) => {
                let n = &mut self.nodes[i];
                n.max = v.min(PCM);
                if n.usage > n.max {
                    n.excused = true;
                }
                Ok(())
            }
            Op::SetMin(i, v) => {
                self.nodes[i].min = v.min(PCM);
                Ok(())
            }
            Op::SetLow(i, v) => {
                self.nodes[i].low = v.min(PCM);
                Ok(())
            }
            Op::ResetWatermark(i) => {
                let n = &mut self.nodes[i];
                n.watermark = n.usage;
                n.local_watermark = n.usage;
                Ok(())
            }
            Op::ResetLocalWatermark(i) => {
                let n = &mut self.nodes[i];
                n.local_watermark = n.usage.min(n.watermark);
                Ok(())
            }
        }
    }

    /// Protected usage of node `i` as its parent sees it (roots propagate
    /// nothing).
    fn protected(&self, i: usize) -> (u64, u64) {
        if i == 0 {
            return (0, 0);
        }
        let n = &self.nodes[i];
        (n.usage.min(n.min), n.usage.min(n.low))
    }
}

fn run(c: &Arc<PageCounter>, op: &Op) -> Result<(), PageCounterError> {
    match *op {
        Op::TryCharge(_, a) => c.try_charge(a),
        Op::Charge(_, a) => c.charge(a),
        Op::Uncharge(_, a) => c.uncharge(a),
        Op::Cancel(_, a) => c.cancel(a),
        Op::SetMax(_, v) => c.set_max(v),
        Op::SetMaxForced(_, v) => {
            c.set_max_forced(v);
            Ok(())
        }
        Op::SetMin(_, v) => {
            c.set_min(v);
            Ok(())
        }
        Op::SetLow(_, v) => {
            c.set_low(v);
            Ok(())
        }
        Op::ResetWatermark(_) => {
            c.reset_watermark();
            Ok(())
        }
        Op::ResetLocalWatermark(_) => {
            c.reset_local_watermark();
            Ok(())
        }
    }
}

fn target(op: &Op) -> usize {
    match *op {
        Op::TryCharge(i, _)
        | Op::Charge(i, _)
        | Op::Uncharge(i, _)
        | Op::Cancel(i, _)
        | Op::SetMax(i, _)
        | Op::SetMaxForced(i, _)
        | Op::SetMin(i, _)
        | Op::SetLow(i, _)
        | Op::ResetWatermark(i)
        | Op::ResetLocalWatermark(i) => i,
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 3 } else { 512 },
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn matches_sequential_model((parents, ops) in scenario()) {
        let mut counters: Vec<Arc<PageCounter>> = Vec::new();
        for (i, &p) in parents.iter().enumerate() {
            let parent = if i == 0 { None } else { Some(counters[p].clone()) };
            counters.push(Arc::new(PageCounter::new(parent)));
        }
        let mut model = Model::new(&parents);

        for (step, op) in ops.iter().enumerate() {
            let want = model.apply(op);
            let got = run(&counters[target(op)], op);
            prop_assert_eq!(&got, &want, "step {} {:?}", step, op);

            for (i, c) in counters.iter().enumerate() {
                let n = &mut model.nodes[i];
                let seen = (c.usage(), c.max(), c.watermark(), c.local_watermark(), c.failcnt(), c.cancel_underflows());
                let expect = (n.usage, n.max, n.watermark, n.local_watermark, n.failcnt, n.underflows);
                prop_assert_eq!(seen, expect, "node {} after step {} {:?}", i, step, op);
                prop_assert!(c.local_watermark() <= c.watermark());
                // Above max only through a forced charge or forced limit.
                if n.usage <= n.max {
                    n.excused = false;
                }
                prop_assert!(c.usage() <= c.max() || n.excused, "node {} over max unforced", i);
                prop_assert_eq!((c.min(), c.low()), (n.min, n.low));
            }
            for (i, c) in counters.iter().enumerate() {
                prop_assert_eq!((c.min_usage(), c.low_usage()), model.protected(i), "node {}", i);
                let kids = (1..parents.len()).filter(|&k| parents[k] == i);
                let (cmin, clow) = kids.fold((0, 0), |(a, b), k| {
                    let (m, l) = model.protected(k);
                    (a + m, b + l)
                });
                prop_assert_eq!((c.children_min_usage(), c.children_low_usage()), (cmin, clow), "node {}", i);
            }
        }
    }
}
