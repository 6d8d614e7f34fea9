//! Many threads at once: updaters on random groups, readers, and threads
//! creating and removing leaves. Afterwards every total must equal the sum of
//! what was added (violations = 0), and no reader may ever have seen a
//! hierarchical total go backwards or fall below the local one.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread;

use common::xorshift;
use rstat::{Group, Rstat};

const TENANTS: usize = 4;
/// Threads creating and removing leaves.
const CREATORS: usize = 2;

#[test]
fn concurrent_updates_reads_creates_and_removes_lose_nothing() {
    for unified in [false, true] {
        run(unified);
    }
}

fn run(unified: bool) {
    let rs = Arc::new(Rstat::builder().unified(unified).build().unwrap());
    let ctl = rs.register_counters("s", &["n"]).unwrap();
    let tenants: Vec<Group> = (0..TENANTS)
        .map(|i| rs.root().create_child(&format!("t{i}")).unwrap())
        .collect();
    // Leaves currently usable by updaters, per tenant (some already removed:
    // updating a zombie is allowed and must still reach the tenant).
    let leaves: Arc<RwLock<Vec<Vec<Group>>>> = Arc::new(RwLock::new(vec![Vec::new(); TENANTS]));
    // What each tenant's subtree received, and what each tenant itself did.
    let subtree_added: Arc<Vec<AtomicU64>> =
        Arc::new((0..TENANTS).map(|_| AtomicU64::new(0)).collect());
    let own_added: Arc<Vec<AtomicU64>> =
        Arc::new((0..TENANTS).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let violations = Arc::new(AtomicU64::new(0));
    let iters = if cfg!(miri) { 200 } else { 200_000 };
    // Leaves made so far. The updaters start once the creators made
    // `CREATORS` of them, so creation and removal overlap the updates
    // however the threads are scheduled (before, on a loaded 2-CPU machine
    // the updaters could finish before a creator ran at all).
    let created = Arc::new(Mutex::new(0u64));
    let mut hs = Vec::new();

    for w in 0..4u64 {
        let (ctl, tenants, leaves, sub, own, created) = (
            ctl.clone(),
            tenants.clone(),
            leaves.clone(),
            subtree_added.clone(),
            own_added.clone(),
            created.clone(),
        );
        hs.push(thread::spawn(move || {
            while *created.lock().unwrap() < CREATORS as u64 {
                thread::yield_now();
            }
            let mut x = 0x9e3779b97f4a7c15u64 ^ w;
            for _ in 0..iters {
                xorshift(&mut x);
                let t = (x as usize) % TENANTS;
                let v = 1 + (x >> 40) % 7;
                let leaf = {
                    let l = leaves.read().unwrap();
                    let l = &l[t];
                    if l.is_empty() || x & 8 == 0 {
                        None
                    } else {
                        Some(l[(x >> 20) as usize % l.len()].clone())
                    }
                };
                match leaf {
                    Some(g) => ctl.add(&g, 0, v as i64).unwrap(),
                    None => {
                        ctl.add(&tenants[t], 0, v as i64).unwrap();
                        own[t].fetch_add(v, Ordering::Relaxed);
                    }
                }
                sub[t].fetch_add(v, Ordering::Relaxed);
            }
        }));
    }
    let mut others = Vec::new();
    for r in 0..2usize {
        let (ctl, tenants, stop, violations) = (
            ctl.clone(),
            tenants.clone(),
            stop.clone(),
            violations.clone(),
        );
        others.push(thread::spawn(move || {
            let mut last = [0i64; TENANTS];
            let mut i = r;
            while !stop.load(Ordering::Relaxed) {
                let t = i % TENANTS;
                let s = ctl.read(&tenants[t]).unwrap();
                let (h, l) = (s.hierarchical()[0], s.local()[0]);
                if h < last[t] || h < l || l < 0 {
                    violations.fetch_add(1, Ordering::Relaxed);
                }
                last[t] = h;
                i += 1;
            }
        }));
    }
    for c in 0..CREATORS {
        let (tenants, leaves, stop, created) = (
            tenants.clone(),
            leaves.clone(),
            stop.clone(),
            created.clone(),
        );
        others.push(thread::spawn(move || {
            let mut n = 0usize;
            // At least one leaf each, whatever `stop` says (see `created`).
            loop {
                let t = (n + c) % TENANTS;
                let g = tenants[t].create_child(&format!("l{c}-{n}")).unwrap();
                *created.lock().unwrap() += 1;
                // Two of three leaves are removed at once: updaters then
                // charge zombies, whose stats must still reach the tenant.
                if !n.is_multiple_of(3) {
                    g.remove().unwrap();
                }
                leaves.write().unwrap()[t].push(g.clone());
                // Forget old leaves (the zombies' final release happens here
                // or when the last updater's clone drops).
                let mut l = leaves.write().unwrap();
                if l[t].len() > 16 {
                    let old = l[t].remove(0);
                    drop(l);
                    // The other creator may remove it first: Removed is fine.
                    match old.remove() {
                        Ok(()) | Err(rstat::Error::Removed { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                n += 1;
                if stop.load(Ordering::Relaxed) {
                    break;
                }
            }
        }));
    }
    for h in hs {
        h.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for h in others {
        h.join().unwrap();
    }
    assert!(*created.lock().unwrap() >= CREATORS as u64);
    drop(leaves);
    let mut total = 0;
    for t in 0..TENANTS {
        let s = ctl.read_exact(&tenants[t]).unwrap();
        let want_h = subtree_added[t].load(Ordering::Relaxed) as i64;
        let want_l = own_added[t].load(Ordering::Relaxed) as i64;
        if s.hierarchical()[0] != want_h || s.local()[0] != want_l {
            violations.fetch_add(1, Ordering::Relaxed);
            eprintln!(
                "tenant {t}: got {:?}/{:?}, want {want_h}/{want_l}",
                s.hierarchical(),
                s.local()
            );
        }
        total += want_h;
    }
    assert_eq!(ctl.read_exact(rs.root()).unwrap().hierarchical()[0], total);
    assert_eq!(
        violations.load(Ordering::Relaxed),
        0,
        "violations (unified = {unified})"
    );
}
