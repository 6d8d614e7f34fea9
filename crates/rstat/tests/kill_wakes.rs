//! A kill wakes the killable futures of the killed groups: a request
//! waiting for an event that never comes (a peer that never answers)
//! ends `Err(Killed)` once its tenant is killed, without anything else
//! waking its task; the other tenants' waiting requests stay pending.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use rstat::{Killed, Rstat};

/// A waker that counts its wakes.
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_kill_wakes_a_pending_killable_future_and_it_ends_killed() {
    let rs = Rstat::new();
    let tenant = rs.root().create_child("tenant").unwrap();
    let req = tenant.create_child("req").unwrap();
    let count = Arc::new(Count(AtomicUsize::new(0)));
    let waker = Waker::from(Arc::clone(&count));
    let mut cx = Context::from_waker(&waker);
    let mut fut = Box::pin(req.killable(std::future::pending::<()>()));
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    // Polled again with the same waker: still one registration.
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    assert_eq!(count.0.load(Ordering::SeqCst), 0);
    // Killing an ancestor reaches the request's group.
    assert_eq!(tenant.kill(), 2);
    assert_eq!(count.0.load(Ordering::SeqCst), 1, "the kill woke the task");
    assert_eq!(
        fut.as_mut().poll(&mut cx),
        Poll::Ready(Err(Killed {
            path: "/tenant/req".into()
        }))
    );
}

#[test]
fn a_kill_wakes_the_last_waker_and_a_dropped_future_is_forgotten() {
    let rs = Rstat::new();
    let g = rs.root().create_child("g").unwrap();
    let first = Arc::new(Count(AtomicUsize::new(0)));
    let second = Arc::new(Count(AtomicUsize::new(0)));
    let gone = Arc::new(Count(AtomicUsize::new(0)));
    let mut fut = Box::pin(g.killable(std::future::pending::<()>()));
    let w1 = Waker::from(Arc::clone(&first));
    assert!(fut
        .as_mut()
        .poll(&mut Context::from_waker(&w1))
        .is_pending());
    // The task moved (another waker): the kill wakes the new one only.
    let w2 = Waker::from(Arc::clone(&second));
    assert!(fut
        .as_mut()
        .poll(&mut Context::from_waker(&w2))
        .is_pending());
    // A future dropped while pending leaves nothing to wake.
    let mut dropped = Box::pin(g.killable(std::future::pending::<()>()));
    let w3 = Waker::from(Arc::clone(&gone));
    assert!(dropped
        .as_mut()
        .poll(&mut Context::from_waker(&w3))
        .is_pending());
    drop(dropped);
    g.kill();
    assert_eq!(first.0.load(Ordering::SeqCst), 0);
    assert_eq!(second.0.load(Ordering::SeqCst), 1);
    assert_eq!(gone.0.load(Ordering::SeqCst), 0);
    assert!(fut.as_mut().poll(&mut Context::from_waker(&w2)).is_ready());
}

/// A server: three tenants, each with requests waiting for an answer that
/// never comes. Killing one tenant ends exactly its requests, `Killed`,
/// while the runtime runs; the others' stay pending (they can only end by
/// a kill, and theirs never comes), and end `Killed` when their own
/// tenants are killed in turn.
#[test]
fn a_tenant_kill_ends_its_waiting_requests_on_a_running_server() {
    let rs = Rstat::new();
    let tenants: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|n| rs.root().create_child(n).unwrap())
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let mut handles: Vec<Vec<tokio::task::JoinHandle<Result<(), Killed>>>> = Vec::new();
    for t in &tenants {
        let mut hs = Vec::new();
        for i in 0..20 {
            let req = t.create_child(&format!("r{i}")).unwrap();
            hs.push(rt.spawn(async move {
                // Waits for an answer that never comes.
                let (_tx, rx) = tokio::sync::oneshot::channel::<()>();
                let _keep = _tx;
                req.killable(async move {
                    let _ = rx.await;
                })
                .await
            }));
        }
        handles.push(hs);
    }
    for (k, t) in tenants.iter().enumerate() {
        t.kill();
        for h in handles[k].drain(..) {
            let r = rt.block_on(h).unwrap();
            assert!(
                matches!(&r, Err(Killed { path }) if path.starts_with(&t.path())),
                "{r:?}"
            );
        }
        // The tenants not killed yet: every request still waiting.
        for later in &handles[k + 1..] {
            assert!(later.iter().all(|h| !h.is_finished()));
        }
    }
}

/// The kill and the future's registration race: whichever comes first,
/// the future ends `Killed` (woken by the kill, or seeing the mark when
/// it registers).
#[test]
fn a_kill_racing_a_first_poll_never_leaves_the_future_asleep() {
    let rounds = if cfg!(miri) { 5 } else { 300 };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    for _ in 0..rounds {
        let rs = Rstat::new();
        let g = rs.root().create_child("g").unwrap();
        let g2 = g.clone();
        let h = rt.spawn(async move { g2.killable(std::future::pending::<()>()).await });
        let k = std::thread::spawn(move || g.kill());
        k.join().unwrap();
        assert!(rt.block_on(h).unwrap().is_err());
    }
}

/// `into_inner` after a pending poll gives the future back and takes its
/// waker off the group: a later kill wakes nothing.
#[test]
fn into_inner_unregisters_the_waker() {
    let rs = Rstat::new();
    let g = rs.root().create_child("g").unwrap();
    let count = Arc::new(Count(AtomicUsize::new(0)));
    let waker = Waker::from(Arc::clone(&count));
    let mut k = g.killable(std::future::pending::<u8>());
    assert!(std::pin::Pin::new(&mut k)
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    let inner = k.into_inner();
    g.kill();
    assert_eq!(count.0.load(Ordering::SeqCst), 0);
    drop(inner);
}
