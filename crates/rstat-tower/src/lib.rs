//! Per-tenant accounting for an HTTP service built on tower (axum, or
//! hyper through a tower adapter): add one [`GroupLayer`].
//!
//! The layer maps each request to an [`rstat::Group`] with a rule you give
//! (a header, a path segment, an extension, any closure over the
//! request), runs the request's whole handling inside that group, and
//! counts requests, errors and response bytes per group:
//!
//! 1. **The call.** The rule picks the request's group ([`MapRequest`]);
//!    the group's `requests` is counted; the inner service is called with
//!    the group current ([`Group::enter`]), so work done in `call`
//!    itself (routing, a handler's synchronous start) is charged to it.
//! 2. **The response future.** Every poll of the inner service's future
//!    runs with the group current, on whichever worker thread polls it
//!    ([`Group::scope`]): its CPU time is charged to the group's `cpu`
//!    stats, and with [`rstat::alloc::Accounted`] as the global allocator
//!    what it allocates is charged to the group's memory. A failed call
//!    (the future resolves to `Err`) or a 5xx response counts in `errors`.
//! 3. **The response body.** The body is wrapped ([`GroupBody`]): each of
//!    its polls runs with the group current too, so a streaming body's CPU
//!    time and allocations are the tenant's, and each data frame's size is
//!    added to `response_bytes` as it is yielded; a body that ends in an
//!    error counts in `errors` (once per request).
//!
//! The counts are an rstat counter set ([`HttpStats`], `http.stat` with
//! the items of [`HTTP_STAT_NAMES`]): hierarchical and exact like every
//! rstat stat, and exported with the rest by `rstat-prometheus`.
//!
//! ```
//! use axum::{routing::get, Router};
//! use http::{header::HeaderName, Request};
//! use http_body_util::BodyExt;
//! use rstat_tower::{Children, GroupLayer, HttpStats};
//! use tower_service::Service;
//!
//! let rs = rstat::Rstat::new();
//! let tenants = rs.root().create_child("tenants")?;
//! let stats = HttpStats::register(&rs)?;
//! // `x-tenant: acme` -> /tenants/acme, created on first sight; at most
//! // 1000 tenants are ever created from what clients send.
//! let layer = GroupLayer::by_header(
//!     stats.clone(),
//!     HeaderName::from_static("x-tenant"),
//!     Children::create(tenants.clone(), 1000),
//! );
//! let mut app = Router::new()
//!     .route("/", get(|| async { rstat::current_group().unwrap().path() }))
//!     .layer(layer);
//! // Serve it with `axum::serve(listener, app)`; here, one request by hand.
//! let rt = tokio::runtime::Builder::new_current_thread().build()?;
//! let body = rt.block_on(async {
//!     let req = Request::get("/").header("x-tenant", "acme").body(axum::body::Body::empty())?;
//!     let resp = app.call(req).await?;
//!     Ok::<_, Box<dyn std::error::Error>>(resp.into_body().collect().await?.to_bytes())
//! })?;
//! assert_eq!(body, "/tenants/acme");
//! let acme = tenants.child("acme").unwrap();
//! let counts = stats.read_exact(&acme)?.local;
//! assert_eq!((counts.requests, counts.errors, counts.response_bytes), (1, 0, 13));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Requests with no group
//!
//! A request the rule maps to no group (no header, a value that is not a
//! tenant name, an unknown tenant under [`Children::lookup`], a cap
//! reached under [`Children::create`], a group of another engine) is
//! handled as [`Unmatched`] says, the engine's root by default: it runs
//! with the root current and is counted in the root's own (local) counts.
//! See [`map`] for which header and path values make a tenant name: a
//! huge, non-UTF-8 or otherwise odd value never creates a group and never
//! panics.
//!
//! # What is not charged to the group
//!
//! The work the server does outside the service: accepting the
//! connection, reading and parsing the request head and body up to the
//! call (hyper parses the head before calling the service), encoding and
//! writing the response, and [`poll_ready`](tower_service::Service::poll_ready)
//! (it belongs to no request). Tasks a handler spawns run outside the
//! group unless given it (`tokio::spawn(fut.in_current_group())`, see
//! [`rstat::attach`]). A request body the handler reads is polled inside
//! the response future, so reading it is charged to the group.
//!
//! # Cost
//!
//! | step | cost |
//! |---|---|
//! | the rule | [`ByHeader`]: a header lookup, a bounded name check, [`Children::group_for`] (a lock of the parent's children map, a lookup, a group reference taken); a closure: what it does |
//! | the call | one counter add (per-CPU, no lock: [`rstat::ControllerHandle::add`]); [`Group::enter`] and its drop around the inner `call`; one group reference for the future |
//! | each poll of the response future | two changes of the thread's current group ([`rstat::attach`]: a monotonic clock read each, a reconciliation now and then) |
//! | each poll of the response body | [`Group::enter`] and its drop (a reference taken and put, the same two changes); a counter add per non-empty data frame |
//! | cloning the service (axum clones it per request) | the inner service's clone and one reference count |
//!
//! No allocation of its own per request, except the creation of a group
//! on a name's first sight ([`Children::create`]). Reads: [`HttpStats::read`] and
//! [`HttpStats::read_exact`], as any rstat controller's.
//!
//! [`Group::enter`]: rstat::Group::enter
//! [`Group::scope`]: rstat::Group::scope
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]
#![forbid(unsafe_code)]

mod body;
mod future;
pub mod map;
mod stats;

use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::HeaderName;
use http::{Request, Response};
use rstat::Group;
use tower_layer::Layer;
use tower_service::Service;

pub use body::GroupBody;
pub use future::ResponseFuture;
pub use map::{ByHeader, ByPathSegment, Children, FromExtension, MapRequest};
pub use stats::{Counts, HttpCounts, HttpStats, DEFAULT_CONTROLLER_NAME, HTTP_STAT_NAMES};

use stats::REQUESTS;

/// What happens to a request the rule maps to no group.
#[derive(Clone, Debug, Default)]
pub enum Unmatched {
    /// It runs with the engine's root current and is counted in the
    /// root's own counts (the default): the root is where time outside
    /// every group goes anyway.
    #[default]
    Root,
    /// It runs in this group and is counted there (say, a
    /// `/tenants/unknown` you created).
    Group(Group),
    /// It runs in whatever group the polling thread is in and is counted
    /// nowhere: the layer is a pass-through for it (its body is wrapped
    /// but never enters a group or counts).
    Untracked,
}

/// A tower [`Layer`] that runs each request inside its group and counts it
/// there; see the [crate docs](crate).
pub struct GroupLayer<M> {
    shared: Arc<Shared<M>>,
}

impl<M> Clone for GroupLayer<M> {
    fn clone(&self) -> Self {
        GroupLayer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<M> std::fmt::Debug for GroupLayer<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupLayer")
            .field("stats", &self.shared.stats)
            .field("fallback", &self.shared.fallback)
            .finish_non_exhaustive()
    }
}

/// What the layer and its services share.
struct Shared<M> {
    map: M,
    stats: HttpStats,
    /// `None`: untracked.
    fallback: Option<Group>,
}

impl<M> GroupLayer<M> {
    /// A layer mapping requests to groups with `map`, counting in `stats`.
    /// Requests mapped to no group go to the root ([`Unmatched::Root`];
    /// change it with [`unmatched`](Self::unmatched)).
    ///
    /// ```
    /// use rstat_tower::{GroupLayer, HttpStats};
    /// let rs = rstat::Rstat::new();
    /// let tenants = rs.root().create_child("tenants")?;
    /// let stats = HttpStats::register(&rs)?;
    /// // Any closure over the request: here, a query parameter.
    /// let layer = GroupLayer::new(stats, move |req: &http::Request<axum::body::Body>| {
    ///     let q = req.uri().query()?;
    ///     let name = q.split('&').find_map(|kv| kv.strip_prefix("tenant="))?;
    ///     rstat_tower::map::is_tenant_name(name).then(|| tenants.child(name)).flatten()
    /// });
    /// # drop(layer);
    /// # Ok::<(), rstat::Error>(())
    /// ```
    pub fn new(stats: HttpStats, map: M) -> Self {
        let fallback = Some(stats.root().clone());
        GroupLayer {
            shared: Arc::new(Shared {
                map,
                stats,
                fallback,
            }),
        }
    }

    /// Set what happens to requests mapped to no group.
    ///
    /// Errors: [`rstat::Error::ForeignGroup`] for an [`Unmatched::Group`]
    /// of another engine than the counter set's (the layer is consumed:
    /// build it again). Cost: a lookup of the group's state, and a clone
    /// of the rule (set this before cloning the layer).
    pub fn unmatched(self, unmatched: Unmatched) -> rstat::Result<Self>
    where
        M: Clone,
    {
        let stats = self.shared.stats.clone();
        let fallback = match unmatched {
            Unmatched::Root => Some(stats.root().clone()),
            Unmatched::Group(g) => {
                if !stats.owns(&g) {
                    return Err(rstat::Error::ForeignGroup);
                }
                Some(g)
            }
            Unmatched::Untracked => None,
        };
        Ok(GroupLayer {
            shared: Arc::new(Shared {
                map: self.shared.map.clone(),
                stats,
                fallback,
            }),
        })
    }

    /// The counter set.
    pub fn stats(&self) -> &HttpStats {
        &self.shared.stats
    }
}

impl GroupLayer<ByHeader> {
    /// A layer mapping each request by the value of header `name` under
    /// `children` ([`ByHeader`]).
    pub fn by_header(stats: HttpStats, name: HeaderName, children: Children) -> Self {
        Self::new(stats, ByHeader::new(name, children))
    }
}

impl GroupLayer<ByPathSegment> {
    /// A layer mapping each request by its path's non-empty segment
    /// `index` under `children` ([`ByPathSegment`]).
    pub fn by_path_segment(stats: HttpStats, index: usize, children: Children) -> Self {
        Self::new(stats, ByPathSegment::new(index, children))
    }
}

impl<S, M> Layer<S> for GroupLayer<M> {
    type Service = GroupService<S, M>;

    fn layer(&self, inner: S) -> Self::Service {
        GroupService {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service [`GroupLayer`] wraps around another: see the [crate
/// docs](crate).
pub struct GroupService<S, M> {
    inner: S,
    shared: Arc<Shared<M>>,
}

impl<S: Clone, M> Clone for GroupService<S, M> {
    fn clone(&self) -> Self {
        GroupService {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: std::fmt::Debug, M> std::fmt::Debug for GroupService<S, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, M> GroupService<S, M> {
    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, by value.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, M, ReqB, ResB> Service<Request<ReqB>> for GroupService<S, M>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    M: MapRequest<ReqB>,
{
    type Response = Response<GroupBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    /// The inner service's, outside any group (it belongs to no request).
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    /// Map the request, count it, and call the inner service inside its
    /// group. Cost: the crate docs' table.
    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let shared = &*self.shared;
        let stats = &shared.stats;
        // A group of another engine cannot be counted here: treated as no
        // group (the add refuses it and changes nothing).
        let group = shared
            .map
            .group_for(&req)
            .map(live)
            .filter(|g| stats.add(g, REQUESTS, 1).is_ok())
            .or_else(|| {
                let g = live(shared.fallback.clone()?);
                // Of the counter set's engine: checked when the layer was
                // configured.
                let _ = stats.add(&g, REQUESTS, 1);
                Some(g)
            });
        match group {
            Some(group) => {
                let fut = {
                    let _in = group.enter();
                    self.inner.call(req)
                };
                ResponseFuture::tracked(group.scope(fut), stats.clone())
            }
            None => ResponseFuture::untracked(self.inner.call(req)),
        }
    }
}

/// `g`, or if it was removed its nearest live ancestor: the group
/// [`Group::enter`] and [`Group::scope`] would run in, so that the request
/// is counted where it runs. Cost: one load when `g` is live.
fn live(mut g: Group) -> Group {
    while !g.is_online() {
        match g.parent() {
            Some(p) => g = p,
            // A root taken offline (its engine was dropped): counted there,
            // as any removed group's late updates are.
            None => break,
        }
    }
    g
}
