//! The accounting allocator's edges, as this binary's `#[global_allocator]`:
//! pass-through before `install` (everything allocated before `main`),
//! allocation in thread-local destructors and during thread exit, a
//! removed group released at once while its object lives (the object's
//! free, inside `dealloc`, uncharges the parent), the engine dropped while
//! charged objects live, `uninstall`.
//!
//! One test function, because the steps share the one global allocator
//! and must run in order.

mod common;

use std::alloc::System;
use std::sync::Mutex;

use common::alloc::{charged, current};
use rstat::alloc::Accounted;
use rstat::memory::Memory;
use rstat::{Group, Rstat};

#[global_allocator]
static ALLOC: Accounted<System> = Accounted::new(System);

/// Filled by a thread-local's destructor.
static FROM_TLS_DTOR: Mutex<Option<Vec<u8>>> = Mutex::new(None);

struct AllocOnExit(Group);

impl Drop for AllocOnExit {
    fn drop(&mut self) {
        // A thread-local destructor, on a thread that is exiting: enter a
        // group and allocate.
        let v = {
            let _in = self.0.enter();
            std::hint::black_box(vec![7u8; 3000])
        };
        *FROM_TLS_DTOR.lock().unwrap() = Some(v);
    }
}

thread_local! {
    static ON_EXIT: std::cell::RefCell<Option<AllocOnExit>> = const { std::cell::RefCell::new(None) };
}

#[test]
fn lifecycle() {
    // Before install: the test harness (and std before `main`) allocated
    // through us, uncharged and counted.
    let before = ALLOC.pass_through();
    assert!(before.allocs > 0, "{before:?}");
    assert!(ALLOC.memory().is_none());

    let rs = Rstat::new();
    let mem = Memory::register_with(&rs, rstat::alloc::heap_config()).unwrap();
    ALLOC.install(&rs, &mem).unwrap();
    assert_eq!(
        ALLOC.install(&rs, &mem),
        Err(rstat::alloc::InstallError::AlreadyInstalled)
    );

    let g = rs.root().create_child("g").unwrap();

    // A thread-local destructor allocates in `g` while its thread exits.
    {
        let g = g.clone();
        std::thread::spawn(move || {
            ON_EXIT.with(|s| *s.borrow_mut() = Some(AllocOnExit(g)));
        })
        .join()
        .unwrap();
    }
    let v = FROM_TLS_DTOR
        .lock()
        .unwrap()
        .take()
        .expect("the destructor ran");
    assert_eq!(current(&mem, &g), charged(3000));
    drop(v);
    assert_eq!(current(&mem, &g), 0);

    // A removed group is released at once while an object charged to it
    // lives: the object holds the group's owner handle, which removal
    // reparented to the root, not the group. Freeing the object (inside
    // `dealloc`) uncharges the root, counted as reparented there.
    let heap_local = |g: &Group, item: &str| mem.read_exact(g).unwrap().get_local(item).unwrap();
    let z = rs.root().create_child("zombie").unwrap();
    let obj: Box<[u8; 100]> = {
        let _in = z.enter();
        // Opaque to the optimizer, which may otherwise elide an allocation
        // whose contents are never read, or move it out of the guard.
        std::hint::black_box(Box::new([1; 100]))
    };
    // The thread's CPU segment in `z` holds a reference until the thread
    // reconciles (attach's "CPU time"): reconcile now.
    rstat::attach::charge_this_thread();
    z.remove().unwrap();
    drop(z);
    rs.release_deferred();
    assert_eq!(rs.zombie_count(), 0, "the object does not keep its group");
    let rep0 = heap_local(rs.root(), "heap_reparented");
    drop(obj);
    assert_eq!(
        heap_local(rs.root(), "heap_reparented") - rep0,
        charged(100) as i64
    );
    assert_eq!(rs.zombie_count(), 0);

    // The engine dropped while an object charged to `g` lives.
    let early: Vec<u8> = {
        let _in = g.enter();
        std::hint::black_box(vec![0; 5000])
    };
    let root = rs.root().clone();
    let with_early = current(&mem, &root);
    assert!(with_early >= charged(5000));
    // In no group (the root) as well: fill this thread's charge cache and
    // this CPU's stock slot for the root first.
    let in_root: Vec<Vec<u8>> = (0..8)
        .map(|_| std::hint::black_box(vec![1u8; 100]))
        .collect();
    drop(rs);
    // Allocations now pass through, counted, in the root as in a group.
    let p0 = ALLOC.pass_through();
    let mut after_root: Vec<Box<[u8; 48]>> = Vec::with_capacity(33);
    let p1 = ALLOC.pass_through();
    for _ in 0..33 {
        after_root.push(std::hint::black_box(Box::new([0u8; 48])));
    }
    let p2 = ALLOC.pass_through();
    assert!(p1.allocs > p0.allocs, "{p0:?} {p1:?}");
    assert_eq!(
        p2.allocs - p1.allocs,
        33,
        "the root still charged after its engine was dropped"
    );
    drop(after_root);
    // Objects charged to the root before the drop are uncharged from it
    // as its own, not as reparented (the root was not removed). Only the
    // free between the two usage reads (reading stats may resize buffers
    // of the crate charged to the root before the drop), and "at most":
    // the crate's own objects charged before the drop may be freed at any
    // time (a deferred release), nothing is charged after it.
    let rep_before = heap_local(&root, "heap_reparented");
    let cur_before = current(&mem, &root);
    drop(in_root);
    let cur_after = current(&mem, &root);
    assert!(cur_after <= cur_before - 8 * charged(100) - charged(8 * 24));
    assert_eq!(heap_local(&root, "heap_reparented"), rep_before);
    let p0 = ALLOC.pass_through();
    let after: Vec<u8> = {
        let _in = g.enter();
        std::hint::black_box(vec![0; 777])
    };
    let p1 = ALLOC.pass_through();
    assert!(p1.allocs > p0.allocs, "{p0:?} {p1:?}");
    assert!(p1.live_bytes >= p0.live_bytes + 777);
    // The early object is still uncharged exactly: its bytes leave the
    // root's counter, which kept them, counted as reparented there (`g`'s
    // handle was reparented to the root when the engine removed `g`;
    // `g`'s own stats stop at its removal and are in the root's
    // hierarchical ones).
    assert_eq!(heap_local(&g, "heap"), 5000);
    let rep0 = heap_local(&root, "heap_reparented");
    // As above: the root's usage right before and right after the free.
    let before_free = current(&mem, &root);
    drop(early);
    let after_free = current(&mem, &root);
    assert!(after_free <= before_free - charged(5000));
    assert_eq!(heap_local(&g, "heap"), 5000);
    assert_eq!(
        heap_local(&root, "heap_reparented") - rep0,
        charged(5000) as i64
    );
    drop(after);

    // Unbind: pass-through from now on.
    assert!(ALLOC.uninstall());
    assert!(!ALLOC.uninstall());
    let p2 = ALLOC.pass_through();
    let b = std::hint::black_box(Box::new([0u8; 64]));
    assert!(ALLOC.pass_through().allocs > p2.allocs);
    drop(b);
}
