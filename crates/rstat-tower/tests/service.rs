//! The layer's service driven by hand, without a server: what is counted
//! where, in which group each poll runs, and what requests with no tenant
//! or a bad one get.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::header::HeaderName;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame};
use rstat::{Group, Rstat};
use rstat_tower::{Children, Counts, GroupLayer, HttpStats, MapRequest, Unmatched};
use tower_layer::Layer;
use tower_service::Service;

/// Which group each poll of a body or a handler ran in.
type Seen = Arc<Mutex<Vec<Option<String>>>>;

fn here() -> Option<String> {
    rstat::current_group().map(|g| g.path())
}

/// A body that yields its frames one per poll (an error frame ends it)
/// and records the current group at each poll.
struct TestBody {
    frames: VecDeque<Result<Bytes, &'static str>>,
    seen: Seen,
}

impl Body for TestBody {
    type Data = Bytes;
    type Error = &'static str;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, &'static str>>> {
        self.seen.lock().unwrap().push(here());
        Poll::Ready(self.frames.pop_front().map(|f| f.map(Frame::data)))
    }
}

/// The inner service. By path: `/ok` 200 with two frames ("hello", "
/// world"), `/500` a 500 with "x", `/err` a failed call, `/bodyerr` a 200
/// whose body yields "ab" then fails, `/empty` a 200 with an empty frame.
/// Its future is pending once before it answers (two polls), and records
/// the current group at each poll, as does `call`.
#[derive(Clone)]
struct Inner {
    seen: Seen,
}

type Fut = Pin<Box<dyn Future<Output = Result<Response<TestBody>, &'static str>> + Send>>;

impl Service<Request<()>> for Inner {
    type Response = Response<TestBody>;
    type Error = &'static str;
    type Future = Fut;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), &'static str>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<()>) -> Fut {
        self.seen.lock().unwrap().push(here());
        let seen = self.seen.clone();
        let path = req.uri().path().to_owned();
        Box::pin(async move {
            seen.lock().unwrap().push(here());
            YieldOnce(false).await;
            seen.lock().unwrap().push(here());
            let body = |frames: Vec<Result<&'static str, &'static str>>| TestBody {
                frames: frames
                    .into_iter()
                    .map(|f| f.map(|s| Bytes::from_static(s.as_bytes())))
                    .collect(),
                seen: seen.clone(),
            };
            let resp = |status: StatusCode, b| {
                let mut r = Response::new(b);
                *r.status_mut() = status;
                Ok(r)
            };
            match path.as_str() {
                "/ok" => resp(StatusCode::OK, body(vec![Ok("hello"), Ok(" world")])),
                "/500" => resp(StatusCode::INTERNAL_SERVER_ERROR, body(vec![Ok("x")])),
                "/err" => Err("the call failed"),
                "/bodyerr" => resp(StatusCode::OK, body(vec![Ok("ab"), Err("cut")])),
                "/500bodyerr" => resp(StatusCode::BAD_GATEWAY, body(vec![Err("cut")])),
                "/empty" => resp(StatusCode::OK, body(vec![Ok("")])),
                _ => resp(StatusCode::NOT_FOUND, body(vec![])),
            }
        })
    }
}

/// Pending on its first poll (waking itself), ready on the second.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// Poll `fut` to completion on this thread.
fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// A response's status and its body's bytes, or the body's error.
type Sent<E> = (StatusCode, Result<Vec<u8>, E>);

/// Send `req` through `svc` and drain the response body: the status (or
/// the call's error) and the body's bytes (or its error).
fn send<S, B>(svc: &mut S, req: Request<()>) -> Result<Sent<B::Error>, S::Error>
where
    S: Service<Request<()>, Response = Response<B>>,
    B: Body<Data = Bytes>,
{
    let resp = block_on(svc.call(req))?;
    let status = resp.status();
    let mut body = pin!(resp.into_body());
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    loop {
        match body.as_mut().poll_frame(&mut cx) {
            Poll::Ready(None) => return Ok((status, Ok(out))),
            Poll::Ready(Some(Ok(f))) => out.extend_from_slice(f.data_ref().unwrap()),
            Poll::Ready(Some(Err(e))) => return Ok((status, Err(e))),
            Poll::Pending => {}
        }
    }
}

/// [`send`], for a request that must get a whole response body.
fn drive<S, B>(svc: &mut S, req: Request<()>) -> StatusCode
where
    S: Service<Request<()>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let (status, body) = send(svc, req).expect("the call succeeds");
    body.expect("the body ends without error");
    status
}

fn get(path: &str, tenant: Option<&[u8]>) -> Request<()> {
    let mut r = Request::get(path).body(()).unwrap();
    if let Some(t) = tenant {
        r.headers_mut().insert(
            "x-tenant",
            HeaderValue::from_bytes(t).expect("a valid header value"),
        );
    }
    r
}

struct Setup {
    rs: Rstat,
    tenants: Group,
    stats: HttpStats,
    seen: Seen,
}

fn setup() -> Setup {
    let rs = Rstat::builder().periodic_flush(None).build().unwrap();
    let tenants = rs.root().create_child("tenants").unwrap();
    let stats = HttpStats::register(&rs).unwrap();
    Setup {
        rs,
        tenants,
        stats,
        seen: Seen::default(),
    }
}

fn header_layer(s: &Setup, max_created: usize) -> GroupLayer<rstat_tower::ByHeader> {
    GroupLayer::by_header(
        s.stats.clone(),
        HeaderName::from_static("x-tenant"),
        Children::create(s.tenants.clone(), max_created),
    )
}

fn counts(requests: i64, errors: i64, response_bytes: i64) -> Counts {
    Counts {
        requests,
        errors,
        response_bytes,
    }
}

fn local(s: &Setup, g: &Group) -> Counts {
    s.stats.read_exact(g).unwrap().local
}

#[test]
fn each_outcome_is_counted_in_the_requests_group() {
    let s = setup();
    let mut svc = header_layer(&s, 10).layer(Inner {
        seen: s.seen.clone(),
    });
    let t = Some(b"acme".as_slice());

    let (st, body) = send(&mut svc, get("/ok", t)).unwrap();
    assert_eq!(
        (st, body.unwrap()),
        (StatusCode::OK, b"hello world".to_vec())
    );
    let acme = s.tenants.child("acme").expect("created on first sight");
    assert_eq!(local(&s, &acme), counts(1, 0, 11));

    let (st, body) = send(&mut svc, get("/500", t)).unwrap();
    assert_eq!(
        (st, body.unwrap()),
        (StatusCode::INTERNAL_SERVER_ERROR, b"x".to_vec())
    );
    assert_eq!(local(&s, &acme), counts(2, 1, 12));

    assert_eq!(
        send(&mut svc, get("/err", t)).err(),
        Some("the call failed")
    );
    assert_eq!(local(&s, &acme), counts(3, 2, 12));

    let (st, body) = send(&mut svc, get("/bodyerr", t)).unwrap();
    assert_eq!((st, body), (StatusCode::OK, Err("cut")));
    assert_eq!(local(&s, &acme), counts(4, 3, 14));

    // A 5xx whose body fails too is one failed request.
    let (st, body) = send(&mut svc, get("/500bodyerr", t)).unwrap();
    assert_eq!((st, body), (StatusCode::BAD_GATEWAY, Err("cut")));
    assert_eq!(local(&s, &acme), counts(5, 4, 14));

    // Empty frames count no bytes; a 404 is no error.
    drive(&mut svc, get("/empty", t));
    drive(&mut svc, get("/nope", t));
    assert_eq!(local(&s, &acme), counts(7, 4, 14));

    // Another tenant's counts are its own; the parent's hierarchical
    // counts are the sum, and nothing went to the root.
    drive(&mut svc, get("/ok", Some(b"globex")));
    let globex = s.tenants.child("globex").unwrap();
    assert_eq!(local(&s, &globex), counts(1, 0, 11));
    assert_eq!(
        s.stats.read_exact(&s.tenants).unwrap().hierarchical,
        counts(8, 4, 25)
    );
    assert_eq!(local(&s, s.rs.root()), counts(0, 0, 0));
}

#[test]
fn the_call_every_poll_of_the_future_and_of_the_body_run_in_the_group() {
    let s = setup();
    let mut svc = header_layer(&s, 10).layer(Inner {
        seen: s.seen.clone(),
    });
    drive(&mut svc, get("/ok", Some(b"acme")));
    let seen = std::mem::take(&mut *s.seen.lock().unwrap());
    // call, two polls of the future (before and after its pending point),
    // and three body polls (two frames and the end).
    assert_eq!(seen.len(), 1 + 2 + 3, "{seen:?}");
    for p in &seen {
        assert_eq!(p.as_deref(), Some("/tenants/acme"), "{seen:?}");
    }
    // And nothing stays current between polls.
    assert_eq!(rstat::current_group(), None);
}

#[test]
fn a_request_with_no_tenant_goes_where_unmatched_says() {
    let s = setup();
    let inner = Inner {
        seen: s.seen.clone(),
    };

    // Default: the root, run and counted there.
    let mut svc = header_layer(&s, 10).layer(inner.clone());
    drive(&mut svc, get("/ok", None));
    assert_eq!(local(&s, s.rs.root()), counts(1, 0, 11));
    let seen = std::mem::take(&mut *s.seen.lock().unwrap());
    assert!(seen.iter().all(|p| p.as_deref() == Some("/")), "{seen:?}");

    // A group of the same engine.
    let unknown = s.tenants.create_child("unknown").unwrap();
    let mut svc = header_layer(&s, 10)
        .unmatched(Unmatched::Group(unknown.clone()))
        .unwrap()
        .layer(inner.clone());
    drive(&mut svc, get("/500", None));
    assert_eq!(local(&s, &unknown), counts(1, 1, 1));
    let seen = std::mem::take(&mut *s.seen.lock().unwrap());
    assert!(
        seen.iter()
            .all(|p| p.as_deref() == Some("/tenants/unknown")),
        "{seen:?}"
    );

    // Untracked: counted nowhere, run in no group.
    let mut svc = header_layer(&s, 10)
        .unmatched(Unmatched::Untracked)
        .unwrap()
        .layer(inner.clone());
    drive(&mut svc, get("/ok", None));
    assert_eq!(
        s.stats.read_exact(s.rs.root()).unwrap().hierarchical,
        counts(2, 1, 12)
    );
    let seen = std::mem::take(&mut *s.seen.lock().unwrap());
    assert!(seen.iter().all(Option::is_none), "{seen:?}");
    // A tenant still goes to its group.
    drive(&mut svc, get("/ok", Some(b"acme")));
    assert_eq!(
        local(&s, &s.tenants.child("acme").unwrap()),
        counts(1, 0, 11)
    );

    // A fallback of another engine is refused when configured.
    let other = Rstat::new();
    let foreign = other.root().create_child("x").unwrap();
    assert_eq!(
        header_layer(&s, 10)
            .unmatched(Unmatched::Group(foreign))
            .err(),
        Some(rstat::Error::ForeignGroup)
    );
}

#[test]
fn bad_header_values_map_to_no_group_and_create_none() {
    let s = setup();
    let mut svc = header_layer(&s, 1000).layer(Inner {
        seen: s.seen.clone(),
    });
    let huge = vec![b'a'; 1 << 20];
    let just_too_long = vec![b'b'; rstat_tower::map::MAX_TENANT_NAME_LEN + 1];
    let bad: Vec<&[u8]> = vec![
        b"",
        b"a/b",
        b"/",
        b"..",
        b".",
        b"a b",
        b"%41cme",
        b"acme\t",
        b"caf\xc3\xa9",     // UTF-8, but not ASCII
        b"\xff\xfe\x80abc", // not UTF-8 (obs-text)
        b"a\"b",
        b"a\\b",
        &just_too_long,
        &huge,
    ];
    for v in &bad {
        let (st, _) = send(&mut svc, get("/ok", Some(v))).unwrap();
        assert_eq!(st, StatusCode::OK);
    }
    assert!(
        s.tenants.children().is_empty(),
        "{:?}",
        s.tenants.children()
    );
    assert_eq!(local(&s, s.rs.root()).requests, bad.len() as i64);

    // The longest accepted name, and the punctuation allowed.
    let longest = [b'c'; rstat_tower::map::MAX_TENANT_NAME_LEN];
    for v in [&longest[..], b"a-b_c.d", b"..."] {
        drive(&mut svc, get("/ok", Some(v)));
    }
    assert_eq!(s.tenants.children().len(), 3);
    // Only the first of repeated headers counts.
    let mut r = get("/ok", None);
    r.headers_mut()
        .append("x-tenant", HeaderValue::from_static("first"));
    r.headers_mut()
        .append("x-tenant", HeaderValue::from_static("second"));
    drive(&mut svc, r);
    assert!(s.tenants.child("first").is_some());
    assert!(s.tenants.child("second").is_none());
}

#[test]
fn creation_stops_at_the_cap_and_lookup_only_creates_nothing() {
    let s = setup();
    let rule = Children::create(s.tenants.clone(), 2);
    let layer = GroupLayer::by_header(
        s.stats.clone(),
        HeaderName::from_static("x-tenant"),
        rule.clone(),
    );
    let mut svc = layer.layer(Inner {
        seen: s.seen.clone(),
    });
    for t in ["a", "b", "c", "a", "d", "b"] {
        drive(&mut svc, get("/ok", Some(t.as_bytes())));
    }
    assert_eq!(rule.created(), 2);
    let names: Vec<_> = s
        .tenants
        .children()
        .iter()
        .map(|g| g.name().to_owned())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(local(&s, &s.tenants.child("a").unwrap()).requests, 2);
    assert_eq!(local(&s, s.rs.root()).requests, 2, "c and d");
    // Removing a created group gives no slot back.
    s.tenants.child("b").unwrap().remove().unwrap();
    drive(&mut svc, get("/ok", Some(b"e")));
    assert!(s.tenants.child("e").is_none());

    // Lookup only: known names map, unknown ones go to the root.
    let known = s.tenants.create_child("known").unwrap();
    let mut svc = GroupLayer::by_header(
        s.stats.clone(),
        HeaderName::from_static("x-tenant"),
        Children::lookup(s.tenants.clone()),
    )
    .layer(Inner {
        seen: s.seen.clone(),
    });
    drive(&mut svc, get("/ok", Some(b"known")));
    drive(&mut svc, get("/ok", Some(b"stranger")));
    assert_eq!(local(&s, &known).requests, 1);
    assert!(s.tenants.child("stranger").is_none());
}

#[test]
fn concurrent_first_sights_never_pass_the_cap() {
    let s = setup();
    const CAP: usize = 10;
    let rule = Children::create(s.tenants.clone(), CAP);
    std::thread::scope(|sc| {
        for t in 0..8 {
            let rule = rule.clone();
            let tenants = s.tenants.clone();
            sc.spawn(move || {
                for i in 0..50 {
                    // Shared names (i % 20) race on creation; all distinct
                    // names are many more than the cap.
                    let name = if i % 2 == 0 {
                        format!("shared-{}", i % 20)
                    } else {
                        format!("own-{t}-{i}")
                    };
                    if let Some(g) = rule.group_for(&name) {
                        assert_eq!(g.name(), name);
                    }
                    // While the threads run.
                    assert!(rule.created() <= CAP);
                    assert!(tenants.children().len() <= CAP);
                }
            });
        }
    });
    assert_eq!(rule.created(), CAP);
    assert_eq!(s.tenants.children().len(), CAP);
}

#[test]
fn path_segments_extensions_and_closures() {
    let s = setup();
    let inner = Inner {
        seen: s.seen.clone(),
    };
    let rule = rstat_tower::ByPathSegment::new(1, Children::create(s.tenants.clone(), 10));
    let at = |path: &str| {
        MapRequest::<()>::group_for(&rule, &Request::get(path).body(()).unwrap()).map(|g| g.path())
    };
    assert_eq!(at("/t/acme/orders").as_deref(), Some("/tenants/acme"));
    assert_eq!(at("//t//acme").as_deref(), Some("/tenants/acme"));
    assert_eq!(at("/t"), None);
    assert_eq!(at("/"), None);
    assert_eq!(at("/t/%2e%2e/x"), None);
    assert_eq!(at("/t/caf%C3%A9"), None);
    assert_eq!(at(&format!("/t/{}", "z".repeat(60_000))), None);
    assert_eq!(s.tenants.children().len(), 1);

    // From an extension an earlier layer set.
    let acme = s.tenants.child("acme").unwrap();
    let mut svc = GroupLayer::new(s.stats.clone(), rstat_tower::FromExtension).layer(inner.clone());
    let mut req = get("/ok", None);
    req.extensions_mut().insert(acme.clone());
    drive(&mut svc, req);
    drive(&mut svc, get("/ok", None));
    assert_eq!(local(&s, &acme).requests, 1);
    assert_eq!(local(&s, s.rs.root()).requests, 1);

    // A closure answering a group of another engine: treated as no tenant,
    // nothing counted in the other engine.
    let other = Rstat::new();
    let other_stats = HttpStats::register(&other).unwrap();
    let foreign = other.root().create_child("f").unwrap();
    let f2 = foreign.clone();
    let mut svc = GroupLayer::new(s.stats.clone(), move |_: &Request<()>| Some(f2.clone()))
        .layer(inner.clone());
    drive(&mut svc, get("/ok", None));
    assert_eq!(local(&s, s.rs.root()).requests, 2);
    assert_eq!(other_stats.read_exact(&foreign).unwrap().local.requests, 0);

    // A closure answering a removed group: run and counted in its nearest
    // live ancestor.
    let gone = s.tenants.create_child("gone").unwrap();
    gone.remove().unwrap();
    let g2 = gone.clone();
    let mut svc =
        GroupLayer::new(s.stats.clone(), move |_: &Request<()>| Some(g2.clone())).layer(inner);
    s.seen.lock().unwrap().clear();
    drive(&mut svc, get("/ok", None));
    assert_eq!(local(&s, &s.tenants).requests, 1);
    let seen = std::mem::take(&mut *s.seen.lock().unwrap());
    assert!(
        seen.iter().all(|p| p.as_deref() == Some("/tenants")),
        "{seen:?}"
    );
}
