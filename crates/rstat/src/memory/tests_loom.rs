//! loom models of the charge stock (see `stock`'s `# Synchronization`):
//! consume/refill racing a drain, two threads sharing one CPU's stock, and a
//! refill racing the group going offline. Every unit is in exactly one
//! place at the end: no unit is created or lost.
//!
//! Run with `RUSTFLAGS="--cfg rstat_loom" cargo test --release -p rstat
//! --lib memory`. Tiny: one or two CPU slots, batch 2, two slots per CPU.

use std::sync::Arc;

use super::charge::{charge_memcg, uncharge_memcg};
use super::ext::Shared;
use super::memcg::MemCg;
use super::objcg::ObjCg;
use super::stock::Stocks;
use crate::sync::{AtomicBool, Ordering};

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
        let stocks = Arc::new(Stocks::new(1, 2, usize::MAX));
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
        let stocks = Arc::new(Stocks::new(1, 2, usize::MAX));
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
        let shared = Arc::new(Shared::new(Stocks::new(2, 2, usize::MAX), 0, 0));
        let stocks = &shared.stocks;
        let root = Arc::new(MemCg::new(None));
        let m = Arc::new(MemCg::new(Some(&root)));
        m.counter.charge(1).unwrap();
        let t = {
            let (shared, m) = (Arc::clone(&shared), Arc::clone(&m));
            loom::thread::spawn(move || uncharge_memcg(&shared.stocks, &m, 1, 1))
        };
        m.offline(&shared, Some(&root));
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

/// A stand-in for a group in the owner-handle model: "released" once its
/// removal returned, as a real group may be freed then.
struct StandIn {
    released: AtomicBool,
}

impl StandIn {
    fn addr(&self) -> *mut () {
        (self as *const StandIn).cast_mut().cast()
    }
}

/// A free of an object racing the removal of its group (see `objcg`'s
/// `# Synchronization`): the free's read side (any stock lock, then the
/// handle's word, then a use of the group it names) against the real
/// removal (`MemCg::offline`: reparent the handle, drain every CPU's stock
/// as the grace period, drop the base reference), after which the group is
/// released. The free never uses a released group, it ends on the parent
/// exactly when it read the reparented word, and the handle is freed
/// exactly once, by whichever of the two drops the last reference.
#[test]
fn free_racing_reparent_never_uses_a_released_group() {
    model(|| {
        let shared = Arc::new(Shared::new(Stocks::new(2, 2, usize::MAX), 0, 0));
        let root = Arc::new(MemCg::new(None));
        let m = Arc::new(MemCg::new(Some(&root)));
        let (parent_g, child_g) = (
            Arc::new(StandIn {
                released: AtomicBool::new(false),
            }),
            Arc::new(StandIn {
                released: AtomicBool::new(false),
            }),
        );
        // SAFETY: nobody else sees the handles yet.
        unsafe {
            root.objcg().as_ref().bind(parent_g.addr());
            m.objcg().as_ref().bind(child_g.addr());
        }
        // One live object of the child: a reference on its handle.
        let x = m.objcg();
        // SAFETY: the base reference is held.
        unsafe { ObjCg::get(x, 1) };
        // A raw pointer is not `Send`: carry the address, and the
        // provenance through `with_exposed_provenance` (a model only).
        let send_x = x.as_ptr().expose_provenance();
        let t = {
            let (shared, parent_g, child_g) = (
                Arc::clone(&shared),
                Arc::clone(&parent_g),
                Arc::clone(&child_g),
            );
            loom::thread::spawn(move || {
                let x = core::ptr::NonNull::new(core::ptr::with_exposed_provenance_mut::<ObjCg>(
                    send_x,
                ))
                .unwrap();
                let h = shared.stocks.lock_any(1);
                // SAFETY: the object's reference.
                let cur = unsafe { x.as_ref() }.current();
                if cur.group == child_g.addr() {
                    assert!(!cur.reparented);
                    assert!(
                        !child_g.released.load(Ordering::Relaxed),
                        "a free used a group released under it"
                    );
                } else {
                    assert_eq!(cur.group, parent_g.addr());
                    assert!(cur.reparented);
                }
                drop(h);
                // SAFETY: the object's reference, given back.
                unsafe { ObjCg::put(x, 1) }
            })
        };
        m.offline(&shared, Some(&root));
        // The removal returned: the group may be freed now.
        child_g.released.store(true, Ordering::Relaxed);
        let freed_by_free = t.join().unwrap();
        // The child's handle is gone (freed by the object's free or by the
        // base drop, once), and with it its reference on the root's.
        // SAFETY: the root's state holds its base reference.
        assert_eq!(unsafe { root.objcg().as_ref() }.refs(), 1);
        assert!(freed_by_free <= 1);
    });
}

/// The accounting allocator's fast paths racing the removal of the group:
/// a charge from this CPU's stock found by the owner handle alone
/// (`Stocks::heap_charge_fast`), then the object's free the same way
/// (`heap_uncharge_fast`), falling back to the full path's read of the
/// handle under a stock lock when no slot names the handle. A slot's
/// presence is the fast paths' only proof that the removal has not
/// drained this CPU yet. Afterwards, no unit is stuck in a slot of the
/// removed group or lost (the root's counter returns to 0 once the stocks
/// are drained) and the handle's references balance (the child's handle is
/// freed, its reference on the root's with it).
#[test]
fn fast_charge_and_free_racing_removal() {
    model(|| {
        let shared = Arc::new(Shared::new(Stocks::new(1, 2, usize::MAX), 0, 0));
        let root = Arc::new(MemCg::new(None));
        let m = Arc::new(MemCg::new(Some(&root)));
        // A batch charged for the child: 2 units, one stocked on CPU 0.
        assert!(charge_memcg(&shared.stocks, &m, 0, 1).unwrap());
        // ...and the unit charged given back into the stock: 2 stocked.
        uncharge_memcg(&shared.stocks, &m, 0, 1);
        assert_eq!(shared.stocks.stocked(&m), 2);
        let (serial, hint) = (m.objcg_serial(), m.objcg().as_ptr().addr());
        let t = {
            let (shared, root, m) = (Arc::clone(&shared), Arc::clone(&root), Arc::clone(&m));
            loom::thread::spawn(move || {
                // The allocation: the fast path, or (no slot: removed) none
                // at all in this model.
                let hint = core::ptr::without_provenance(hint);
                let Some(x) = shared.stocks.heap_charge_fast(0, serial, hint, 1, 0) else {
                    return;
                };
                // The free.
                if shared.stocks.heap_uncharge_fast(0, x.as_ptr(), 1, 0) {
                    return;
                }
                let h = shared.stocks.lock_any(0);
                // SAFETY: the object's reference.
                let cur = unsafe { x.as_ref() }.current();
                drop(h);
                // The full path uncharges the level the handle names now.
                let target = if cur.reparented { &root } else { &m };
                target.uncharge_counter(1);
                // SAFETY: the object's reference, given back.
                unsafe { ObjCg::put(x, 1) };
            })
        };
        m.offline(&shared, Some(&root));
        t.join().unwrap();
        assert_eq!(
            shared.stocks.stocked(&m),
            0,
            "units stuck in a removed group's slot"
        );
        shared.stocks.drain(|_| true);
        assert_eq!(root.counter.usage(), 0, "a unit was lost or made");
        // SAFETY: the root's state holds its base reference.
        assert_eq!(unsafe { root.objcg().as_ref() }.refs(), 1);
    });
}

/// The allocator's fast charge remembers a handle without a reference on
/// it (its charge cache), so the handle may be freed under it: its group
/// is removed while the thread is still inside, and no object holds the
/// handle. A new group's handle may then be made at the same address, with
/// a slot on this CPU. Modelled here by giving the new group's slot the
/// removed handle's address as its key (what an allocator that reuses the
/// block does): a fast charge racing the removal and the new slot takes
/// the removed group's own slot (before the drain) or nothing, never the
/// new group's.
#[test]
fn fast_charge_never_takes_a_slot_of_a_handle_at_a_reused_address() {
    model(|| {
        let shared = Arc::new(Shared::new(Stocks::new(1, 2, usize::MAX), 0, 0));
        let root = Arc::new(MemCg::new(None));
        let g = Arc::new(MemCg::new(Some(&root)));
        // A slot for `g` on CPU 0 with 2 units.
        assert!(charge_memcg(&shared.stocks, &g, 0, 1).unwrap());
        uncharge_memcg(&shared.stocks, &g, 0, 1);
        let (serial, g_addr) = (g.objcg_serial(), g.objcg().as_ptr().expose_provenance());
        let t = {
            let shared = Arc::clone(&shared);
            loom::thread::spawn(move || {
                shared
                    .stocks
                    .heap_charge_fast(0, serial, core::ptr::without_provenance(g_addr), 1, 0)
                    .map(|x| x.as_ptr().addr())
            })
        };
        g.offline(&shared, Some(&root));
        let h = Arc::new(MemCg::new(Some(&root)));
        // A slot for `h` on CPU 0 (1 unit), keyed by the removed handle's
        // address, as if `h`'s handle had been made in its block.
        assert!(charge_memcg(&shared.stocks, &h, 0, 1).unwrap());
        shared
            .stocks
            .rekey_for_model(0, &h, core::ptr::with_exposed_provenance(g_addr));
        let took = t.join().unwrap();
        // `h`'s counter holds the unit its charge took plus what its slot
        // holds (none if the slot's lock was busy at the refill).
        assert_eq!(
            h.counter.usage(),
            shared.stocks.stocked(&h) + 1,
            "a charge for the removed group took the new group's units"
        );
        if let Some(addr) = took {
            assert_eq!(addr, g_addr, "only the removed group's own handle");
        }
    });
}
