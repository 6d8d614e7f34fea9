//! loom models of the charge stock (see `stock`'s `# Synchronization`):
//! consume/refill racing a drain, two threads sharing one CPU's stock, and a
//! refill racing the group going offline. Every unit is in exactly one
//! place at the end: no unit is created or lost.
//!
//! Run with `RUSTFLAGS="--cfg rstat_loom" cargo test --release -p rstat
//! --lib memory`. Tiny: one or two CPU slots, batch 2, two slots per CPU.

use std::sync::Arc;

use super::charge::{charge_memcg, uncharge_memcg};
use super::stock::Stocks;
use super::MemCg;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

fn is(m: &Arc<MemCg>) -> impl Fn(&MemCg) -> bool + '_ {
    move |x| core::ptr::eq(x, &**m)
}

/// A thread charges a unit (from the stock or by refilling it) and
/// uncharges it into the stock while another drains: afterwards the
/// counter holds exactly what the stock holds, and a final drain leaves 0.
#[test]
fn consume_refill_vs_drain() {
    model(|| {
        let stocks = Arc::new(Stocks::new(1, 2));
        let m = Arc::new(MemCg::new(None));
        // Start with one unit in the stock (charged, held by nobody).
        m.counter.charge(1).unwrap();
        stocks.refill(0, &m, 1);
        let t = {
            let (stocks, m) = (Arc::clone(&stocks), Arc::clone(&m));
            loom::thread::spawn(move || {
                charge_memcg(&stocks, &m, 0, 1).unwrap();
                // The unit we hold is charged whatever the drain does.
                assert!(m.counter.usage() >= 1);
                uncharge_memcg(&stocks, &m, 0, 1);
            })
        };
        let drained = stocks.drain(is(&m));
        t.join().unwrap();
        assert!(drained <= 2, "drained {drained}");
        assert_eq!(m.counter.usage(), stocks.stocked(&m));
        stocks.drain(is(&m));
        assert_eq!(m.counter.usage(), 0);
        assert_eq!(m.counter.cancel_underflows(), 0);
    });
}

/// Two threads on one CPU's stock (one preempted or migrated mid-way, the
/// other falling back to the page counter) against a drain.
#[test]
fn two_threads_share_one_cpu_stock_vs_drain() {
    model(|| {
        let stocks = Arc::new(Stocks::new(1, 2));
        let m = Arc::new(MemCg::new(None));
        let spawn = |n: u64| {
            let (stocks, m) = (Arc::clone(&stocks), Arc::clone(&m));
            loom::thread::spawn(move || {
                charge_memcg(&stocks, &m, 0, n).unwrap();
                uncharge_memcg(&stocks, &m, 0, n);
            })
        };
        let (a, b) = (spawn(1), spawn(2));
        stocks.drain(is(&m));
        a.join().unwrap();
        b.join().unwrap();
        let held = stocks.stocked(&m);
        assert!(held <= 2, "a slot holds at most the batch: {held}");
        assert_eq!(m.counter.usage(), held);
        stocks.drain(is(&m));
        assert_eq!(m.counter.usage(), 0);
        assert_eq!(m.counter.cancel_underflows(), 0);
    });
}

/// An uncharge refilling the stock races the group going offline (which
/// drains its slots and reparents what is left): no slot names the group
/// afterwards, and the parent ends exact.
#[test]
fn refill_vs_offline() {
    model(|| {
        let stocks = Arc::new(Stocks::new(2, 2));
        let root = Arc::new(MemCg::new(None));
        let m = Arc::new(MemCg::new(Some(&root)));
        m.counter.charge(1).unwrap();
        let t = {
            let (stocks, m) = (Arc::clone(&stocks), Arc::clone(&m));
            loom::thread::spawn(move || uncharge_memcg(&stocks, &m, 1, 1))
        };
        m.offline(&stocks, Some(&root));
        t.join().unwrap();
        assert_eq!(
            stocks.stocked(&m),
            0,
            "an offline group stays out of the stocks"
        );
        assert_eq!(root.counter.usage(), 0);
        assert_eq!(m.counter.usage(), 0);
    });
}
