//! Heap charged through the layer, with rstat's accounting allocator as
//! this binary's global allocator: what a handler keeps alive, and what a
//! streaming response body allocates in its polls, is charged to the
//! request's tenant and to no other, over a real server and client on
//! loopback. One test function: the allocator is installed once per
//! process.

mod common;

use std::alloc::System;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::Body as AxumBody;
use axum::extract::Path;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use common::{runtime, Conn, Server};
use http::header::HeaderName;
use http::StatusCode;
use http_body::{Body, Frame};
use rstat::alloc::{heap_config, overhead, Accounted};
use rstat::memory::Memory;
use rstat::{Group, Rstat};
use rstat_tower::{Children, GroupLayer, HttpStats};

#[global_allocator]
static ALLOC: Accounted<System> = Accounted::new(System);

/// What a `/hoard` request keeps alive.
const HOARD: usize = 1 << 20;
/// What each frame of a `/stream` response keeps alive, and its frames.
const FRAME_KEEP: usize = 256 << 10;
const FRAMES: usize = 4;

/// Objects kept alive across requests.
type Store = Arc<Mutex<Vec<Vec<u8>>>>;

/// A streaming body: each poll keeps [`FRAME_KEEP`] bytes in the store
/// (allocated inside the poll) and yields a small frame.
struct KeepingBody {
    left: usize,
    store: Store,
}

impl Body for KeepingBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        self.left -= 1;
        let kept = std::hint::black_box(vec![3u8; FRAME_KEEP]);
        self.store.lock().unwrap().push(kept);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"frame")))))
    }
}

/// What an object of `bytes` charges.
fn charged(bytes: usize) -> u64 {
    (bytes + overhead(bytes)) as u64
}

/// `g`'s `memory.current` with nothing left pre-charged in the stocks:
/// exactly what its live objects charge.
fn current(mem: &Memory, g: &Group) -> u64 {
    mem.drain_stocks(g).unwrap();
    mem.current(g).unwrap()
}

#[test]
fn heap_lands_on_the_tenant_that_keeps_it() {
    let rs = Rstat::builder().periodic_flush(None).build().unwrap();
    let mem = Memory::register_with(&rs, heap_config()).unwrap();
    ALLOC.install(&rs, &mem).unwrap();
    let tenants = rs.root().create_child("tenants").unwrap();
    let stats = HttpStats::register(&rs).unwrap();
    // Room for every kept object, so pushes never grow the store's buffer
    // (which the test thread allocates, in no group).
    let store: Store = Arc::new(Mutex::new(Vec::with_capacity(64)));
    const HOARDS: usize = 4;

    let app = {
        let (hoard, stream) = (store.clone(), store.clone());
        Router::new()
            .route(
                "/bytes/{n}",
                get(|Path(n): Path<usize>| async move { vec![b'x'; n] }),
            )
            .route(
                "/hoard",
                get(move || async move {
                    let kept = std::hint::black_box(vec![7u8; HOARD]);
                    hoard.lock().unwrap().push(kept);
                    "kept"
                }),
            )
            .route(
                "/stream",
                get(move || async move {
                    AxumBody::new(KeepingBody {
                        left: FRAMES,
                        store: stream,
                    })
                }),
            )
            .layer(GroupLayer::by_header(
                stats.clone(),
                HeaderName::from_static("x-tenant"),
                Children::create(tenants.clone(), 16),
            ))
    };

    let rt = runtime();
    rt.block_on(async {
        let mut server = Server::start(app).await;
        let addr = server.addr;
        let plans: [(&str, &str, usize); 4] = [
            ("acme", "/bytes/5000", 10),
            ("globex", "/bytes/100000", 6),
            ("hoarder", "/hoard", HOARDS),
            ("streamer", "/stream", 1),
        ];
        let mut clients = Vec::new();
        for (name, path, n) in plans {
            clients.push(tokio::spawn(async move {
                let mut conn = Conn::open(addr).await;
                for _ in 0..n {
                    let (status, _) = conn.get(path, Some(name.as_bytes())).await;
                    assert_eq!(status, StatusCode::OK);
                }
                conn.close().await;
            }));
        }
        for c in clients {
            c.await.unwrap();
        }
        server.closed(plans.len()).await;
    });
    drop(rt);

    let g = |n: &str| tenants.child(n).unwrap();
    let (hoarder, streamer) = (g("hoarder"), g("streamer"));
    let others = [g("acme"), g("globex")];
    let kept_hoard = charged(HOARD) * HOARDS as u64;
    let kept_stream = charged(FRAME_KEEP) * FRAMES as u64;
    let got_hoard = current(&mem, &hoarder);
    let got_stream = current(&mem, &streamer);
    let got_others = others.each_ref().map(|o| current(&mem, o));
    eprintln!(
        "hoarder {got_hoard} (keeps {kept_hoard}), streamer {got_stream} (keeps {kept_stream}), acme and globex {got_others:?}"
    );
    // What each keeps is charged to it (plus whatever else of its requests
    // is still alive).
    assert!(got_hoard >= kept_hoard, "{got_hoard} < {kept_hoard}");
    assert!(got_stream >= kept_stream, "{got_stream} < {kept_stream}");
    // And to no one else: a tenant that kept nothing is charged less than
    // one kept object (it may hold a little, e.g. a buffer a runtime
    // allocated lazily inside one of its polls).
    let smallest = charged(FRAME_KEEP);
    for (o, got) in others.iter().zip(got_others) {
        assert!(got < smallest, "{} charged {got}", o.path());
    }
    assert!(
        got_hoard < kept_hoard + smallest,
        "the hoarder got another's objects"
    );
    assert!(
        got_stream < kept_stream + smallest,
        "the streamer got another's objects"
    );

    // Freed on this thread, in no group: uncharged from the tenants that
    // were charged.
    store.lock().unwrap().clear();
    assert!(current(&mem, &hoarder) < smallest);
    assert!(current(&mem, &streamer) < smallest);
    assert!(ALLOC.uninstall());
}
