//! The `http` counter set: requests, errors and response bytes per group.

use std::sync::Arc;

use rstat::{ControllerHandle, Group, Rstat};

/// The counter set's items, in index order: what `http.stat` lists.
pub const HTTP_STAT_NAMES: [&str; 3] = ["requests", "errors", "response_bytes"];

pub(crate) const REQUESTS: usize = 0;
pub(crate) const ERRORS: usize = 1;
pub(crate) const RESPONSE_BYTES: usize = 2;

/// The name [`HttpStats::register`] gives the counter set.
pub const DEFAULT_CONTROLLER_NAME: &str = "http";

/// Per-group HTTP counts: a counter set registered on an engine
/// ([`Rstat::register_counters_with_units`]) with the items of
/// [`HTTP_STAT_NAMES`], so they appear in each group's `http.stat`, in
/// report snapshots and in the Prometheus exporter like any other
/// controller's.
///
/// - `requests`: requests the layer's service was called with, counted
///   at the call (so a request in flight is already counted, and one
///   whose response future is dropped unfinished stays counted);
/// - `errors`: requests whose service call failed (the inner service's
///   future resolved to `Err`), whose response has a 5xx status, or whose
///   response body yielded an error; each request at most once;
/// - `response_bytes`: the bytes of the data frames the response body
///   yielded, counted frame by frame as the server polls them (before
///   any transfer or content encoding that wraps the layer). A body
///   dropped early (the client went away) counts what it yielded.
///
/// Cheap to clone (one reference count).
#[derive(Clone)]
pub struct HttpStats {
    inner: Arc<Inner>,
}

struct Inner {
    counters: ControllerHandle,
    /// The engine's root: where unmatched requests go by default.
    root: Group,
}

impl std::fmt::Debug for HttpStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpStats")
            .field("controller", &self.inner.counters.name())
            .finish()
    }
}

/// One group's counts, as [`HttpStats::read`] found them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Requests counted (see [`HttpStats`]).
    pub requests: i64,
    /// Requests that failed (see [`HttpStats`]).
    pub errors: i64,
    /// Response body bytes yielded.
    pub response_bytes: i64,
}

/// A group's [`Counts`]: its own, and with its descendants'.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HttpCounts {
    /// Requests mapped to the group itself.
    pub local: Counts,
    /// The group's and all its descendants' (removed ones included).
    pub hierarchical: Counts,
}

impl HttpStats {
    /// Register the counter set on `rs` as `http`.
    ///
    /// Errors: [`rstat::Error::ControllerExists`] if `rs` already has a
    /// controller called `http` (register one [`HttpStats`] per engine and
    /// clone it into every layer, or pick another name with
    /// [`register_as`](Self::register_as)).
    ///
    /// Cost: as [`Rstat::register`]: the topology lock and one per-CPU
    /// allocation per live group.
    pub fn register(rs: &Rstat) -> rstat::Result<Self> {
        Self::register_as(rs, DEFAULT_CONTROLLER_NAME)
    }

    /// Register the counter set on `rs` under `name` (its stat file is
    /// `<name>.stat`). Errors and cost as [`register`](Self::register);
    /// an invalid name is [`rstat::Error::InvalidController`].
    pub fn register_as(rs: &Rstat, name: &str) -> rstat::Result<Self> {
        // Bytes in pages for the `Threshold` policy's counting, as rstat's
        // own byte counters; plain counts in unit 1.
        let counters = rs.register_counters_with_units(
            name,
            &[
                (HTTP_STAT_NAMES[REQUESTS], 1),
                (HTTP_STAT_NAMES[ERRORS], 1),
                (HTTP_STAT_NAMES[RESPONSE_BYTES], 4096),
            ],
        )?;
        Ok(HttpStats {
            inner: Arc::new(Inner {
                counters,
                root: rs.root().clone(),
            }),
        })
    }

    /// The counter set's controller handle (reads, flush policy).
    pub fn controller(&self) -> &ControllerHandle {
        &self.inner.counters
    }

    /// `group`'s counts, as fresh as the controller's flush policy makes
    /// them ([`ControllerHandle::read`]: under the default policy, no lock
    /// unless many updates are pending). Errors:
    /// [`rstat::Error::ForeignGroup`] for a group of another engine.
    pub fn read(&self, group: &Group) -> rstat::Result<HttpCounts> {
        let s = self.inner.counters.read(group)?;
        Ok(counts(s.local(), s.hierarchical()))
    }

    /// `group`'s counts including every update that completed before the
    /// call ([`ControllerHandle::read_exact`]: the controller's flush lock
    /// and a flush of `group`'s subtree). Errors as [`read`](Self::read).
    pub fn read_exact(&self, group: &Group) -> rstat::Result<HttpCounts> {
        let s = self.inner.counters.read_exact(group)?;
        Ok(counts(s.local(), s.hierarchical()))
    }

    /// The engine's root group.
    pub(crate) fn root(&self) -> &Group {
        &self.inner.root
    }

    /// Whether `group` belongs to this counter set's engine. Cost: a
    /// lookup of the group's state, one reference taken and dropped.
    pub(crate) fn owns(&self, group: &Group) -> bool {
        self.inner.counters.stat_handle(group).is_ok()
    }

    /// Add `delta` to `item` of `group`: per-CPU cost, no lock. Fails only
    /// for a group of another engine (nothing is counted).
    #[inline]
    pub(crate) fn add(&self, group: &Group, item: usize, delta: i64) -> rstat::Result<()> {
        self.inner.counters.add(group, item, delta)
    }
}

fn counts(local: &[i64], hierarchical: &[i64]) -> HttpCounts {
    let c = |v: &[i64]| Counts {
        requests: v.get(REQUESTS).copied().unwrap_or(0),
        errors: v.get(ERRORS).copied().unwrap_or(0),
        response_bytes: v.get(RESPONSE_BYTES).copied().unwrap_or(0),
    };
    HttpCounts {
        local: c(local),
        hierarchical: c(hierarchical),
    }
}
