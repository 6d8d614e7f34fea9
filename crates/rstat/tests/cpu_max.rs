//! `cpu.max` for scoped futures: the format, bad input, and a poll
//! deferred once its group's quota for the period is spent (checked by
//! whether the inner future ran, not by timing), with the kernel's
//! `cpu.stat` lines.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use rstat::report::Reporter;
use rstat::{CpuMax, Error, Rstat};

fn engine() -> Rstat {
    Rstat::builder().periodic_flush(None).build().unwrap()
}

#[test]
fn cpu_max_reads_and_writes_the_kernels_format() {
    let rs = engine();
    let g = rs.root().create_child("g").unwrap();
    let rep = Reporter::new(&rs);
    assert_eq!(rep.read(&g, "cpu.max").unwrap(), "max 100000\n");
    g.write_cpu_max("20000 100000").unwrap();
    assert_eq!(
        g.cpu_max(),
        CpuMax {
            quota_us: Some(20_000),
            period_us: 100_000
        }
    );
    assert_eq!(rep.read(&g, "cpu.max").unwrap(), "20000 100000\n");
    assert!(rep
        .read(&g, "cpu.stat")
        .unwrap()
        .ends_with("nr_periods 0\nnr_throttled 0\nthrottled_usec 0\n"));
    g.write_cpu_max("max").unwrap();
    assert_eq!(rep.read(&g, "cpu.max").unwrap(), "max 100000\n");
    assert!(!rep.read(&g, "cpu.stat").unwrap().contains("nr_periods"));
    for bad in [
        "",
        "x 100000",
        "20000 y",
        "1 2 3",
        "20000 10",
        "20000 5000000",
        "10 100000",
        "-5 100000",
    ] {
        match g.write_cpu_max(bad) {
            Err(Error::InvalidCpuMax { reason, .. }) => {
                assert!(reason.contains("QUOTA PERIOD"), "{bad:?}: {reason}")
            }
            other => panic!("{bad:?} was accepted: {other:?}"),
        }
    }
    assert_eq!(
        g.cpu_max().quota_us,
        None,
        "a refused write changes nothing"
    );
}

/// Burn `d` of the thread's CPU time (what `cpu.max` charges a poll).
fn spin(d: Duration) {
    let t = rstat::attach::thread_cpu_time();
    while rstat::attach::thread_cpu_time() - t < d {
        std::hint::spin_loop();
    }
}

#[test]
fn a_poll_past_the_quota_is_deferred_to_the_next_period() {
    let rs = engine();
    let tenant = rs.root().create_child("tenant").unwrap();
    let req = tenant.create_child("req").unwrap();
    // 1 ms per 1 s period, on the tenant: its child's polls count.
    tenant.write_cpu_max("1000 1000000").unwrap();
    let mut polls = 0u32;
    let fut = req.scope(std::future::poll_fn(|cx: &mut Context<'_>| {
        polls += 1;
        spin(Duration::from_millis(3)); // three quotas: a debt of two
        cx.waker().wake_by_ref();
        Poll::<()>::Pending
    }));
    let mut cx = Context::from_waker(Waker::noop());
    {
        let mut fut = pin!(fut);
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        // Whatever period the clock is in now, the debt is not paid before
        // the period after next: the inner future must not run.
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        assert!(fut.as_mut().poll(&mut cx).is_pending());
    }
    assert_eq!(polls, 1, "a poll ran past the spent quota");
    let st = tenant.cpu_max_stat();
    assert_eq!(st.nr_throttled, 1, "{st:?}");
    assert!(st.nr_periods >= 1 && st.throttled_usec > 0, "{st:?}");
    // The wait is the request's cpu pressure, full (all its scoped polls
    // wait) up to the tenant whose quota is spent.
    for g in [&req, &tenant] {
        let p = g.pressure_totals(rstat::PressureKind::Cpu);
        assert!(
            p.some_usec > 0 && p.full_usec == p.some_usec,
            "{}: {p:?}",
            g.path()
        );
    }
    // Above the group whose quota is spent, other work runs: some only.
    let p = rs.root().pressure_totals(rstat::PressureKind::Cpu);
    assert!(p.some_usec > 0 && p.full_usec == 0, "/: {p:?}");
    let text = Reporter::new(&rs).read(&tenant, "cpu.pressure").unwrap();
    assert!(
        text.starts_with("some avg10=") && text.contains("\nfull avg10="),
        "{text}"
    );
    // An unlimited sibling is not held.
    let other = rs.root().create_child("other").unwrap();
    let mut ran = 0u32;
    {
        let mut fut = pin!(other.scope(std::future::poll_fn(|_cx: &mut Context<'_>| {
            ran += 1;
            spin(Duration::from_millis(3));
            Poll::<()>::Pending
        })));
        for _ in 0..3 {
            assert!(fut.as_mut().poll(&mut cx).is_pending());
        }
    }
    assert_eq!(ran, 3);
}

#[test]
fn a_child_created_under_a_limited_group_is_limited() {
    let rs = engine();
    let tenant = rs.root().create_child("tenant").unwrap();
    tenant.write_cpu_max("1000 1000000").unwrap();
    let late = tenant.create_child("late").unwrap();
    let mut polls = 0u32;
    let mut cx = Context::from_waker(Waker::noop());
    {
        let mut fut = pin!(late.scope(std::future::poll_fn(|_cx: &mut Context<'_>| {
            polls += 1;
            spin(Duration::from_millis(3));
            Poll::<()>::Pending
        })));
        let _ = fut.as_mut().poll(&mut cx);
        let _ = fut.as_mut().poll(&mut cx);
    }
    assert_eq!(polls, 1);
}

/// Bad input around kills: a killed group re-entered (`try_enter` says
/// why; `enter` still enters, for work that must unwind there; a killable
/// future made afterwards ends at once), and kills racing removals of
/// the subtree (no panic, every group either killed or gone, nothing
/// charged lost).
#[test]
fn killed_groups_refuse_new_work_and_kills_race_removals_safely() {
    use rstat::Killed;
    let rs = engine();
    let t = rs.root().create_child("t").unwrap();
    t.kill();
    match t.try_enter() {
        Err(Error::Killed { path }) => assert_eq!(path, "/t"),
        other => panic!("a killed group took new work: {:?}", other.map(|_| ())),
    }
    {
        let _in = t.enter();
        assert!(rstat::attach::current_killed());
    }
    let mut cx = Context::from_waker(Waker::noop());
    let mut fut = pin!(t.killable(async { 1 }));
    assert_eq!(
        fut.as_mut().poll(&mut cx),
        Poll::Ready(Err(Killed { path: "/t".into() }))
    );

    let counts = rs.register_counters("c", &["n"]).unwrap();
    for round in 0..50 {
        let p = rs.root().create_child(&format!("p{round}")).unwrap();
        let kids: Vec<_> = (0..8)
            .map(|i| p.create_child(&format!("k{i}")).unwrap())
            .collect();
        for k in &kids {
            counts.add(k, 0, 1).unwrap();
        }
        std::thread::scope(|s| {
            let killer = s.spawn(|| p.kill());
            for k in &kids {
                k.remove().unwrap();
            }
            let killed = killer.join().unwrap();
            assert!((1..=9).contains(&killed), "{killed}");
        });
        assert!(p.is_killed());
        for k in &kids {
            // Removed before or after the kill reached it: either way
            // gone, and a later kill changes nothing.
            assert!(!k.is_online());
            assert!(k.kill() <= 1);
        }
        assert_eq!(
            counts.read_exact(&p).unwrap().get("n"),
            Some(8),
            "nothing lost"
        );
        p.remove().unwrap();
    }
}

/// Found in review: a longer period after a spent quota left the account
/// in the old numbering and deferred every poll for good; and a limited
/// poll was charged the nested scoped polls of other groups it ran.
#[test]
fn a_new_cpu_max_starts_a_new_account_and_nested_scopes_charge_their_own_groups() {
    let rs = engine();
    let t = rs.root().create_child("t").unwrap();
    t.write_cpu_max("5000 10000").unwrap();
    let polls = std::cell::Cell::new(0u32);
    let mut cx = Context::from_waker(Waker::noop());
    {
        let mut fut = pin!(t.scope(std::future::poll_fn(|_cx: &mut Context<'_>| {
            polls.set(polls.get() + 1);
            spin(Duration::from_millis(if polls.get() == 1 { 20 } else { 0 }));
            Poll::<()>::Pending
        })));
        let _ = fut.as_mut().poll(&mut cx); // 20 ms against 5 ms: spent
        let _ = fut.as_mut().poll(&mut cx); // deferred
        assert_eq!(polls.get(), 1);
        t.write_cpu_max("20000 100000").unwrap(); // a longer period
                                                  // The deferral already made holds to its old period's end (10 ms);
                                                  // past it, the new account decides.
        std::thread::sleep(Duration::from_millis(15));
        let _ = fut.as_mut().poll(&mut cx);
        assert_eq!(polls.get(), 2, "the new setting's account started empty");
    }

    // Nested: the limited tenant's poll runs an unlimited group's scoped
    // future that burns 3 ms; the tenant's own time is next to nothing.
    let tenant = rs.root().create_child("tenant").unwrap();
    let other = rs.root().create_child("other").unwrap();
    tenant.write_cpu_max("1000 1000000").unwrap();
    let outer_polls = std::cell::Cell::new(0u32);
    {
        let inner = other.scope(std::future::poll_fn(|_cx: &mut Context<'_>| {
            spin(Duration::from_millis(3));
            Poll::<()>::Pending
        }));
        let mut inner = Box::pin(inner);
        let mut fut = pin!(tenant.scope(std::future::poll_fn(|cx: &mut Context<'_>| {
            outer_polls.set(outer_polls.get() + 1);
            let _ = inner.as_mut().poll(cx);
            Poll::<()>::Pending
        })));
        for _ in 0..3 {
            let _ = fut.as_mut().poll(&mut cx);
        }
    }
    assert_eq!(
        outer_polls.get(),
        3,
        "the nested group's time was charged to the tenant's quota"
    );
}

/// Found in review: a group removed from its parent before the parent was
/// killed is killed too (its work, still running, is the parent's).
#[test]
fn a_removed_group_is_killed_with_its_parent() {
    let rs = engine();
    let t = rs.root().create_child("t").unwrap();
    let req = t.create_child("req").unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    let mut fut = pin!(req.killable(std::future::pending::<()>()));
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    req.remove().unwrap();
    t.kill();
    assert!(req.is_killed());
    assert!(fut.as_mut().poll(&mut cx).is_ready());
}
