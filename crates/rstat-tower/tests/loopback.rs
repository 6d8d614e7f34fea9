//! The layer on an axum router behind a real HTTP/1 server on loopback,
//! with a real client: per-tenant counts (exact at the end, and bounded by
//! what the clients started and finished while requests run), bad tenant
//! headers over the wire, and CPU time landing on the tenant that burned
//! it.

mod common;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Path;
use axum::routing::get;
use axum::Router;
use common::{runtime, Conn, Server};
use http::header::HeaderName;
use http::StatusCode;
use rstat::attach::{charge_all_threads, thread_cpu_time, LONG_SEGMENT, RECONCILE_PERIOD};
use rstat::{Group, Rstat};
use rstat_tower::{Children, Counts, GroupLayer, HttpStats};

/// The CPU time each `/burn` request spins for, on its thread's clock.
const BURN: Duration = Duration::from_millis(20);

/// Spin for [`BURN`] of this thread's CPU time, in one poll; answer the
/// CPU time the spin took (ns), as the thread's clock saw it.
async fn burn() -> String {
    let start = thread_cpu_time();
    let mut x = 0u64;
    while thread_cpu_time() - start < BURN {
        for i in 0..1000 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
    }
    (thread_cpu_time() - start).as_nanos().to_string()
}

/// The body of `/fail`'s 500 response.
const FAIL_BODY: &str = "boom";

fn app(stats: &HttpStats, tenants: &Group) -> Router {
    Router::new()
        .route(
            "/bytes/{n}",
            get(|Path(n): Path<usize>| async move { vec![b'x'; n] }),
        )
        .route(
            "/fail",
            get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, FAIL_BODY) }),
        )
        .route(
            "/whoami",
            get(|| async { rstat::current_group().map(|g| g.path()).unwrap_or_default() }),
        )
        .route("/burn", get(burn))
        .layer(GroupLayer::by_header(
            stats.clone(),
            HeaderName::from_static("x-tenant"),
            Children::create(tenants.clone(), 16),
        ))
}

fn engine() -> (Rstat, Group, HttpStats) {
    let rs = Rstat::builder().periodic_flush(None).build().unwrap();
    let tenants = rs.root().create_child("tenants").unwrap();
    let stats = HttpStats::register(&rs).unwrap();
    (rs, tenants, stats)
}

/// A tenant's traffic: `ok` requests for `size` bytes each and `fail`
/// failing ones, interleaved.
struct Plan {
    name: &'static str,
    ok: i64,
    fail: i64,
    size: i64,
}

/// What a tenant's client started (before sending) and finished (after
/// the whole response), per count.
#[derive(Default)]
struct Progress {
    started: [AtomicI64; 3],
    done: [AtomicI64; 3],
}

impl Progress {
    fn add(arr: &[AtomicI64; 3], c: Counts) {
        arr[0].fetch_add(c.requests, Ordering::Release);
        arr[1].fetch_add(c.errors, Ordering::Release);
        arr[2].fetch_add(c.response_bytes, Ordering::Release);
    }
    fn load(arr: &[AtomicI64; 3]) -> [i64; 3] {
        arr.each_ref().map(|a| a.load(Ordering::Acquire))
    }
}

#[test]
fn per_tenant_counts_are_exact_and_bounded_while_requests_run() {
    let plans = [
        Plan {
            name: "acme",
            ok: 5,
            fail: 1,
            size: 100,
        },
        Plan {
            name: "globex",
            ok: 8,
            fail: 2,
            size: 1000,
        },
        Plan {
            name: "initech",
            ok: 13,
            fail: 3,
            size: 70_000,
        },
    ];
    let (rs, tenants, stats) = engine();
    let progress: Arc<Vec<Progress>> =
        Arc::new(plans.iter().map(|_| Progress::default()).collect());
    let stop = Arc::new(AtomicBool::new(false));

    // A reader checking each tenant's counts while the clients run: what
    // the clients finished before the read <= what the read sees <= what
    // they started before it ended.
    let reader = {
        let (stats, tenants, progress, stop) = (
            stats.clone(),
            tenants.clone(),
            progress.clone(),
            stop.clone(),
        );
        let names: Vec<&str> = plans.iter().map(|p| p.name).collect();
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(Ordering::Acquire) {
                for (name, p) in names.iter().zip(progress.iter()) {
                    let done = Progress::load(&p.done);
                    let Some(g) = tenants.child(name) else {
                        assert_eq!(done, [0; 3], "{name}: finished requests but no group");
                        continue;
                    };
                    let c = stats.read_exact(&g).unwrap().local;
                    let started = Progress::load(&p.started);
                    let seen = [c.requests, c.errors, c.response_bytes];
                    for i in 0..3 {
                        assert!(
                            done[i] <= seen[i] && seen[i] <= started[i],
                            "{name} item {i}: finished {done:?}, read {seen:?}, started {started:?}"
                        );
                    }
                    reads += 1;
                }
            }
            reads
        })
    };

    let rt = runtime();
    let bad_paths = rt.block_on(async {
        let mut server = Server::start(app(&stats, &tenants)).await;
        let addr = server.addr;
        let mut clients = Vec::new();
        for (plan, i) in plans.iter().zip(0..) {
            let (name, ok, fail, size) = (plan.name, plan.ok, plan.fail, plan.size);
            let progress = progress.clone();
            clients.push(tokio::spawn(async move {
                let p = &progress[i];
                let mut conn = Conn::open(addr).await;
                let (mut oks, mut fails) = (0, 0);
                while oks < ok || fails < fail {
                    // Fail every third request while fails are left.
                    let failing = fails < fail && (oks % 3 == 2 || oks == ok);
                    let c = if failing {
                        fails += 1;
                        Counts {
                            requests: 1,
                            errors: 1,
                            response_bytes: FAIL_BODY.len() as i64,
                        }
                    } else {
                        oks += 1;
                        Counts {
                            requests: 1,
                            errors: 0,
                            response_bytes: size,
                        }
                    };
                    Progress::add(&p.started, c);
                    let path = if failing {
                        "/fail".to_string()
                    } else {
                        format!("/bytes/{size}")
                    };
                    let (status, body) = conn.get(&path, Some(name.as_bytes())).await;
                    assert_eq!(status.is_server_error(), failing);
                    assert_eq!(body.len() as i64, c.response_bytes);
                    Progress::add(&p.done, c);
                }
                conn.close().await;
            }));
        }

        // Meanwhile, requests with no tenant or a bad one: each runs in the
        // root and says so.
        let huge = vec![b'a'; 100_000];
        let too_long = vec![b'b'; rstat_tower::map::MAX_TENANT_NAME_LEN + 1];
        let bad: Vec<Option<&[u8]>> = vec![
            None,
            Some(b"a/b"),
            Some(b".."),
            Some(b"%41cme"),
            Some(b"\xff\xfe\x80"),
            Some(b"caf\xc3\xa9"),
            Some(&too_long),
            Some(&huge),
        ];
        let mut conn = Conn::open(addr).await;
        for t in &bad {
            let (status, body) = conn.get("/whoami", *t).await;
            assert_eq!((status, &body[..]), (StatusCode::OK, &b"/"[..]));
        }
        conn.close().await;

        for c in clients {
            c.await.expect("a client failed");
        }
        // Every connection closed on the server's side: no poll of any
        // request's future or body runs after this.
        server.closed(plans.len() + 1).await;
        bad.len() as i64
    });
    stop.store(true, Ordering::Release);
    let reads = reader.join().expect("the reader's checks failed");
    eprintln!("reads while requests ran: {reads}");

    let mut total = Counts::default();
    for plan in &plans {
        let g = tenants.child(plan.name).expect("created on first sight");
        let want = Counts {
            requests: plan.ok + plan.fail,
            errors: plan.fail,
            response_bytes: plan.ok * plan.size + plan.fail * FAIL_BODY.len() as i64,
        };
        let got = stats.read_exact(&g).unwrap();
        assert_eq!(got.local, want, "{}", plan.name);
        assert_eq!(got.hierarchical, want, "{}", plan.name);
        total.requests += want.requests;
        total.errors += want.errors;
        total.response_bytes += want.response_bytes;
    }
    assert_eq!(stats.read_exact(&tenants).unwrap().hierarchical, total);
    // The bad requests went to the root ("/" is one byte each) and made
    // no group.
    let root = stats.read_exact(rs.root()).unwrap().local;
    assert_eq!(
        root,
        Counts {
            requests: bad_paths,
            errors: 0,
            response_bytes: bad_paths,
        }
    );
    let names: Vec<String> = tenants
        .children()
        .iter()
        .map(|g| g.name().to_owned())
        .collect();
    assert_eq!(names, ["acme", "globex", "initech"]);
}

/// `g`'s hierarchical `usage_usec`, read exactly.
fn usage(rs: &Rstat, g: &Group) -> i64 {
    rs.cpu()
        .unwrap()
        .read_exact(g)
        .unwrap()
        .get("usage_usec")
        .unwrap()
}

/// How much of a burning request's CPU time the attach module's
/// apportioning may give to other segments of its thread
/// (`rstat::attach`, "Error model"): the time the thread did not run in
/// the segments that share a reconciliation interval with the burn. Those
/// are the segments since the last reconciliation before the burn's poll
/// began, less than [`RECONCILE_PERIOD`] of wall time (else the change into
/// the group reconciles), and those after it only if the burn's last piece
/// (after a reconciliation by the periodic charger) is shorter than
/// [`LONG_SEGMENT`] (else leaving the group reconciles), which can then
/// lose no more than that piece; plus 1 µs of rounding in each of the two
/// intervals. A property of the library's constants, not of the machine's
/// load.
fn tolerance_per_burn() -> Duration {
    RECONCILE_PERIOD + LONG_SEGMENT + Duration::from_micros(2)
}

#[test]
fn cpu_time_lands_on_the_tenant_that_burned_it() {
    let (rs, tenants, stats) = engine();
    let rt = runtime();
    const BURNS: usize = 4;
    let (before, after, burned) = rt.block_on(async {
        let mut server = Server::start(app(&stats, &tenants)).await;
        let addr = server.addr;

        // Two tenants' traffic first, concurrently.
        let mut clients = Vec::new();
        for name in ["acme", "globex"] {
            clients.push(tokio::spawn(async move {
                let mut conn = Conn::open(addr).await;
                for _ in 0..10 {
                    let (status, _) = conn.get("/bytes/5000", Some(name.as_bytes())).await;
                    assert_eq!(status, StatusCode::OK);
                }
                conn.close().await;
            }));
        }
        for c in clients {
            c.await.unwrap();
        }
        // Their connections are closed, so nothing will run in their
        // groups again; charge every thread's time up to now.
        server.closed(2).await;
        charge_all_threads();
        let others = ["acme", "globex"].map(|n| tenants.child(n).unwrap());
        let before = others.each_ref().map(|g| usage(&rs, g));

        // Then the burner alone.
        let mut conn = Conn::open(addr).await;
        let mut burned = Duration::ZERO;
        for _ in 0..BURNS {
            let (status, body) = conn.get("/burn", Some(b"burner")).await;
            assert_eq!(status, StatusCode::OK);
            let ns: u64 = std::str::from_utf8(&body).unwrap().parse().unwrap();
            burned += Duration::from_nanos(ns);
        }
        conn.close().await;
        server.closed(1).await;
        charge_all_threads();
        let after = others.each_ref().map(|g| usage(&rs, g));
        (before, after, burned)
    });

    // No thread ran in the other tenants' groups after they were charged.
    assert_eq!(
        before, after,
        "acme and globex were charged while only the burner ran"
    );
    let burner = tenants.child("burner").unwrap();
    let got = usage(&rs, &burner);
    let floor = burned.saturating_sub(tolerance_per_burn() * BURNS as u32);
    eprintln!(
        "burner: charged {got} µs, its spins took {} µs, floor {} µs",
        burned.as_micros(),
        floor.as_micros()
    );
    assert!(
        got >= floor.as_micros() as i64,
        "burner charged {got} µs, its spins took {burned:?} (floor {floor:?})"
    );
    assert_eq!(
        stats.read_exact(&burner).unwrap().local.requests,
        BURNS as i64
    );
}
