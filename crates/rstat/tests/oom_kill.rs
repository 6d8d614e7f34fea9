//! OOM kills the group's work, not the process: a tokio multi-thread
//! server with three tenants under the accounting allocator, one of which
//! (in `HeapLimitMode::Kill`) allocates past its `memory.max` with
//! ordinary, infallible allocations. The process survives; every request
//! of the other tenants succeeds; the offender's requests end `Killed`;
//! its memory returns to zero once they are dropped; `memory.events` says
//! `oom` and `oom_kill`; later fallible charges to it fail.
//!
//! Its own binary: the accounting allocator is this binary's
//! `#[global_allocator]`.

use std::alloc::System;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use rstat::alloc::{heap_config, Accounted};
use rstat::memory::{HeapLimitMode, Limit, Memory, MemoryError};
use rstat::{Group, Killed, Rstat};

#[global_allocator]
static ALLOC: Accounted<System> = Accounted::new(System);

/// One request: a few allocations that live across awaits (so other
/// requests interleave), `chunk` bytes each, `rounds` times; returns the
/// bytes it held at its peak.
async fn request(chunk: usize, rounds: usize) -> usize {
    let mut held: Vec<Vec<u8>> = Vec::new();
    for _ in 0..rounds {
        held.push(vec![1u8; chunk]); // infallible: aborts if refused
        tokio::task::yield_now().await;
    }
    held.iter().map(Vec::len).sum()
}

#[test]
fn an_oom_kill_cancels_the_offenders_requests_and_the_process_survives() {
    let rs = Rstat::builder().periodic_flush(None).build().unwrap();
    let mem = Memory::register_with(&rs, heap_config()).unwrap();
    ALLOC.install(&rs, &mem).unwrap();
    let tenants: Vec<Group> = ["good-a", "good-b", "offender"]
        .iter()
        .map(|n| rs.root().create_child(n).unwrap())
        .collect();
    let offender = tenants[2].clone();
    // Room for the good tenants' requests many times over; the offender's
    // requests need far more than its limit together.
    for t in &tenants[..2] {
        mem.write_limit(t, Limit::Max, "64M").unwrap();
    }
    mem.write_limit(&offender, Limit::Max, "4M").unwrap();
    mem.set_heap_limit_mode(&offender, HeapLimitMode::Kill)
        .unwrap();
    let hook_ran = Arc::new(AtomicUsize::new(0));
    {
        let h = Arc::clone(&hook_ran);
        offender.on_kill(move |_| {
            h.fetch_add(1, Ordering::Relaxed);
        });
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    // The guarantee while it runs: a good tenant is never killed.
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (stop, good) = (Arc::clone(&stop), tenants[..2].to_vec());
        std::thread::spawn(move || {
            let mut checks = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for g in &good {
                    assert!(!g.is_killed(), "{} was killed", g.path());
                }
                checks += 1;
                std::thread::yield_now();
            }
            checks
        })
    };
    let (good_ok, offender_killed, offender_ok) = rt.block_on(async {
        let mut handles = Vec::new();
        for i in 0..60 {
            let t = &tenants[i % 3];
            // Each request in a group of its own under its tenant, as a
            // server would; the offender's asks for 1 MiB x 8 each.
            let req = t.create_child(&format!("req-{i}")).unwrap();
            let (chunk, rounds) = if i % 3 == 2 {
                (1 << 20, 8)
            } else {
                (16 << 10, 8)
            };
            let fut = req.killable(request(chunk, rounds));
            handles.push((i % 3, req, tokio::spawn(fut)));
        }
        let (mut good_ok, mut offender_killed, mut offender_ok) = (0, 0, 0);
        for (t, req, h) in handles {
            match h.await.expect("no request panicked") {
                Ok(bytes) => {
                    if t == 2 {
                        offender_ok += 1;
                    } else {
                        assert_eq!(bytes, 8 * (16 << 10));
                        good_ok += 1;
                    }
                }
                Err(Killed { path }) => {
                    assert_eq!(t, 2, "a good tenant's request was killed: {path}");
                    assert_eq!(path, req.path());
                    offender_killed += 1;
                }
            }
            req.remove().unwrap();
        }
        (good_ok, offender_killed, offender_ok)
    });
    stop.store(true, Ordering::Relaxed);
    let checks = watcher.join().unwrap();
    assert!(checks > 0);
    drop(rt);

    assert_eq!(good_ok, 40, "every good request succeeded");
    assert!(
        offender_killed >= 1,
        "killed {offender_killed}, completed {offender_ok}"
    );
    assert_eq!(offender_killed + offender_ok, 20);
    // A request group was killed, not the tenant: its hook is the
    // tenant's, which was not killed.
    assert!(!offender.is_killed());
    assert_eq!(hook_ran.load(Ordering::Relaxed), 0);
    // Everything the killed requests held was dropped with them.
    mem.drain_stocks(rs.root()).unwrap();
    for t in &tenants {
        assert_eq!(
            mem.read_exact(t).unwrap().get("heap"),
            Some(0),
            "{}",
            t.path()
        );
    }
    assert_eq!(mem.current(&offender).unwrap(), 0);
    let ev = mem.events(&offender).unwrap();
    assert!(ev.oom >= 1 && ev.oom_kill >= 1, "{ev:?}");
    assert_eq!(
        ev.oom_kill, offender_killed as u64,
        "one kill per killed request: {ev:?}"
    );
    for t in &tenants[..2] {
        let ev = mem.events(t).unwrap();
        assert_eq!((ev.oom, ev.oom_kill), (0, 0), "{}: {ev:?}", t.path());
    }

    // Killing the tenant itself: its hook runs once, a later request group
    // is born killed, fallible charges fail, and nothing is charged.
    assert_eq!(offender.kill(), 1);
    assert_eq!(offender.kill(), 0, "already killed");
    assert_eq!(hook_ran.load(Ordering::Relaxed), 1);
    let late = offender.create_child("late").unwrap();
    assert!(late.is_killed());
    match mem.try_charge(&late, 100) {
        Err(MemoryError::Killed { path }) => assert_eq!(path, "/offender/late"),
        other => panic!(
            "a killed group took a charge: {:?}",
            other.map(|c| c.amount())
        ),
    }
    late.remove().unwrap();
    ALLOC.uninstall();
}
