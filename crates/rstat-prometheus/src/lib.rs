//! A Prometheus exporter for an [`rstat`] engine: every group's stats, read
//! at scrape time, one series per (group path, stat).
//!
//! ```no_run
//! let rs = rstat::Rstat::new();
//! let exporter = rstat_prometheus::Exporter::new(&rs);
//! let server = exporter.serve(Default::default())?; // 127.0.0.1:9756
//! println!("metrics at http://{}/metrics", server.addr());
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! Or, to serve rstat's series from the service's own
//! `prometheus-client` registry, beside its own metrics, register a
//! [`RstatCollector`] ([`Exporter::collector`]; example there).
//!
//! # What is exposed
//!
//! Each family has one series per group, labelled `path` (`/` for the
//! root, `/tenant/service` below it; escaped as both formats require, see
//! [`Escaped`]). Values are **hierarchical** (the group and its
//! descendants, removed ones included), as in cgroupfs: a removed child's
//! history stays in its parent's series, so counters never go backwards
//! when groups come and go. Names follow Prometheus conventions:
//!
//! | source | family | type |
//! |---|---|---|
//! | `cpu.stat` `usage_usec`, `user_usec`, `system_usec` | `rstat_cpu_usage_seconds_total`, `rstat_cpu_user_seconds_total`, `rstat_cpu_system_seconds_total` | counter |
//! | `cpu.stat` `nr_periods`, `nr_throttled`, `throttled_usec` (groups with a `cpu.max` quota only) | `rstat_cpu_nr_periods_total`, `rstat_cpu_nr_throttled_total`, `rstat_cpu_throttled_seconds_total` | counter |
//! | `cpu.max` (groups with a quota only) | `rstat_cpu_max_quota_seconds`, `rstat_cpu_max_period_seconds` | gauge |
//! | `cpu.pressure`, `memory.pressure` totals (groups that ever stalled) | `rstat_cpu_pressure_waiting_seconds_total` (some), `..._stalled_seconds_total` (full), and `rstat_memory_pressure_...` | counter |
//! | killed ([`rstat::Group::kill`]; killed groups only) | `rstat_killed` (1) | gauge |
//! | `memory.current`, `memory.peak` | `rstat_memory_current_bytes`, `rstat_memory_peak_bytes` | gauge |
//! | `memory.max`/`high`/`low`/`min` | `rstat_memory_max_bytes`, ... (no sample when unlimited: the file's `max`) | gauge |
//! | `memory.events` | `rstat_memory_events_total{event="low\|high\|max\|oom\|oom_kill"}` | counter |
//! | `memory.stat` `charged`, `uncharged`, `reclaimed`, `forced` | `rstat_memory_charged_bytes_total`, ... | counter |
//! | `memory.stat` `heap`, `heap_overhead` (live heap bytes: levels) | `rstat_memory_heap_bytes`, `rstat_memory_heap_overhead_bytes` | gauge |
//! | `memory.stat` `heap_reparented` / `failcnt`, `heap_allocs`, `heap_frees` | `rstat_memory_heap_reparented_bytes_total` / `rstat_memory_failcnt_total`, `rstat_memory_heap_allocs_total`, ... | counter |
//! | any controller `C`, item `I` | counter: `rstat_C_I_total`; gauge: `rstat_C_I` (`I` ending in `_usec`: `rstat_C_<stem>_seconds[_total]`; in `_bytes`: `rstat_C_<stem>_bytes[_total]`) | as the item declares ([`rstat::StatKind`], counter by default), or gauge if listed in [`Config::gauges`] |
//! | the exporter itself | `rstat_exporter_*`: groups, scrapes, removed groups reported / lost, skipped samples, last scrape duration | |
//!
//! A count that only grows is a counter, a level that goes up and down a
//! gauge: a counter set declares which of its items are levels with
//! [`CounterSetController::with_kinds`](rstat::CounterSetController::with_kinds)
//! (or a [`Controller`](rstat::Controller) with
//! [`stat_kinds`](rstat::Controller::stat_kinds)); [`Config::gauges`]
//! makes more items gauges without touching the controller. Unit suffixes
//! follow OpenMetrics: the unit (`_seconds`, `_bytes`) ends the family
//! name, and a counter's samples add `_total` after it.
//!
//! Names are made of `[a-zA-Z0-9_]` (anything else in a controller or item
//! name becomes `_`); a family whose name is already taken is skipped and
//! counted (`rstat_exporter_skipped_families`). Memory values are in the
//! application's charge units times [`Config::memory_unit_bytes`] (1: the
//! application charges bytes); the accounting allocator's heap items are
//! in bytes already.
//!
//! # No sample is lost without a reason
//!
//! Every live group (up to [`Config::max_depth`]) has a sample of every
//! family in every scrape, with one exception, counted in
//! `rstat_exporter_skipped_samples_total`: a **counter** item whose value
//! is negative, which no counter can be. Only an item that was given
//! negative deltas can be negative (a fold only adds the deltas), so a
//! count that only grows is never skipped; a level declared a counter can
//! be. That is why the counter rose under load before `heap` and
//! `heap_overhead` were gauges: a scrape reads a level CPU by CPU (each
//! CPU's stock of allocator deltas, then each CPU's slot), not at one
//! instant, so an object allocated on a CPU already read and freed on one
//! not read yet is counted freed and not allocated (and the other way
//! round), so the level read is off by the objects in flight, possibly
//! below zero. As gauges such values are exported as read (a later
//! scrape has them right); declare your own levels gauges and nothing is
//! skipped.

//! # Formats
//!
//! The exposition is encoded by the official `prometheus-client` crate
//! from a [collector](prometheus_client::collector::Collector) that reads
//! the tree at scrape time (nothing is registered per group, nothing is
//! kept between scrapes): the built-in server's, or the
//! [`RstatCollector`] in a registry of the service's. A request whose `Accept` prefers
//! `application/openmetrics-text` (Prometheus's does) gets OpenMetrics
//! 1.0; any other gets the classic text format 0.0.4, derived from the
//! OpenMetrics text by [`openmetrics_to_classic`] (the two differ only in
//! counter family names, `# UNIT` and `# EOF`). A request whose
//! `Accept-Encoding` accepts gzip ([`accepts_gzip`]; Prometheus's does)
//! gets the body gzip-compressed (`Content-Encoding: gzip`, by `flate2`),
//! `/metrics` and `/snapshot.json` alike: exposition text of a large tree
//! compresses to a small fraction of its size.
//!
//! # Removed groups
//!
//! A group created and removed between two scrapes is still reported:
//! the exporter holds a [`rstat::group::watch::RemovalWatch`]
//! (the library's removal hook), and each scrape first takes the groups
//! removed since the last one into a pending list, reads their final
//! values and reports them under their path, beside the live tree. They
//! leave the pending list only when a scrape holding them is
//! **delivered**: the HTTP server [commits](PendingScrape::commit) a
//! scrape after its body was written; a scrape that failed, or whose
//! client went away, leaves them for the next one, and `HEAD /metrics`
//! ([`Exporter::peek`]) neither takes nor commits any. Each is counted
//! once, as reported or lost. (With [`Config::removed_retention`] > 0 a
//! delivered group is repeated in every scrape for that long, for several
//! Prometheus servers scraping one exporter.) At most
//! [`Config::removed_capacity`] groups wait in the watch's queue, and at
//! most as many in the pending list (each keeps its per-CPU state
//! allocated until then); more are counted in
//! `rstat_exporter_removed_groups_lost_total`, as is a removed group whose
//! path a live group (or a later removed one) has in the same scrape: one
//! series per path and scrape.
//!
//! # Cost, and who pays it
//!
//! A scrape takes the removed groups, then snapshots the tree
//! ([`Reporter::snapshot_depth`](rstat::report::Reporter::snapshot_depth):
//! one flush per controller at the root and a copy of every group's totals
//! under that controller's flush lock, so a parent's hierarchical series
//! are its own plus its children's in every scrape), then encodes. It runs on the exporter's own connection
//! thread, which never enters a group, so none of its CPU time or memory
//! is charged to a tenant; reading stats changes no stat. Scrapes are
//! serialized. Measured figures (1k / 10k / 100k groups) are in the README.

mod collect;
mod collector;
pub mod http;

use std::io;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rstat::group::watch::RemovalWatch;
use rstat::report::{GroupSnapshot, Reporter};
use rstat::Rstat;

pub use collect::{escape_label_value, openmetrics_to_classic, sanitize_name, Escaped};
pub use collector::RstatCollector;
pub use http::{accepts_gzip, negotiate, parse_request, Server, ServerConfig, DEFAULT_ADDR};
/// The `prometheus-client` this crate encodes with: register a
/// [`RstatCollector`] in a [`Registry`](prometheus_client::registry::Registry)
/// of this version.
pub use prometheus_client;

/// The exposition format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The classic Prometheus text format, version 0.0.4.
    Classic,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

impl Format {
    /// The `Content-Type` to answer with.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Classic => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// Settings of an [`Exporter`].
#[derive(Clone, Debug)]
pub struct Config {
    /// Export groups at most this deep (the root is 0): the long-lived
    /// levels of a tree whose leaves are per-request groups. Their history
    /// is in their ancestors' values. Default: all.
    pub max_depth: usize,
    /// Removed groups held between two scrapes, at most. Default 10,000.
    pub removed_capacity: usize,
    /// How long a removed group keeps being reported. Zero (the default):
    /// in exactly one scrape.
    pub removed_retention: Duration,
    /// Bytes per memory charge unit. Default 1.
    pub memory_unit_bytes: u64,
    /// Items exported as gauges, as `controller.item` or `controller.*`,
    /// besides those their controller declares gauges
    /// ([`rstat::StatKind`]; the better place, as every reader then knows).
    /// Default: none.
    pub gauges: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_depth: usize::MAX,
            removed_capacity: 10_000,
            removed_retention: Duration::ZERO,
            memory_unit_bytes: 1,
            gauges: Vec::new(),
        }
    }
}

/// Why a scrape failed.
#[derive(Debug)]
pub enum Error {
    /// Reading the tree failed.
    Read(rstat::Error),
    /// The encoder failed.
    Encode(std::fmt::Error),
    /// JSON serialization failed.
    Json(serde_json::Error),
    /// [`Exporter::collector`] was called while a collector of this
    /// exporter is alive.
    CollectorInUse,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Read(e) => write!(f, "reading the group tree failed: {e}"),
            Error::Encode(e) => write!(f, "encoding the exposition failed: {e}"),
            Error::Json(e) => write!(f, "encoding the snapshot as JSON failed: {e}"),
            Error::CollectorInUse => f.write_str(
                "this exporter's collector is already registered: register it once (a registry \
                 lists each family once, and each removed group is reported once); for another \
                 registry, create another Exporter",
            ),
        }
    }
}

impl std::error::Error for Error {}

impl From<rstat::Error> for Error {
    fn from(e: rstat::Error) -> Self {
        Error::Read(e)
    }
}

/// One scrape's exposition and its size.
#[derive(Clone, Debug)]
pub struct Scrape {
    /// The exposition.
    pub body: String,
    /// Its format.
    pub format: Format,
    /// Live groups in it.
    pub groups: usize,
    /// Removed groups reported in it.
    pub removed: usize,
    /// Metric families.
    pub families: usize,
    /// Samples of the groups' families (the exporter's own not counted).
    pub series: u64,
}

#[derive(Default)]
struct State {
    /// Removed groups taken from the watch whose scrape was not yet
    /// delivered, oldest first, each with its sequence number. They are
    /// in every scrape until one is delivered (see [`PendingScrape`]).
    pending: Vec<(u64, rstat::Group)>,
    /// The next sequence number for `pending`.
    next_seq: u64,
    /// Removed groups already delivered and still reported (with
    /// `removed_retention`), and when they were first delivered.
    recent: Vec<(Instant, GroupSnapshot)>,
    removed_reported: u64,
    /// Removed groups given up on: colliding paths, or dropped because
    /// more than `removed_capacity` were pending (scrapes kept failing).
    removed_lost: u64,
    scrapes: u64,
    last_secs: f64,
    skipped_samples: u64,
}

struct Inner {
    reporter: Reporter,
    watch: RemovalWatch,
    cfg: Config,
    state: Mutex<State>,
    /// A [`RstatCollector`] of this exporter is alive (at most one is).
    collector_live: AtomicBool,
    /// Test hook: fail the next scrape after its removed groups were taken.
    #[cfg(test)]
    fail_next: std::sync::atomic::AtomicBool,
}

/// Reads an engine's tree at each scrape; cheap to clone (shared). See the
/// [crate docs](crate).
#[derive(Clone)]
pub struct Exporter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("config", &self.inner.cfg)
            .finish()
    }
}

/// A rendered scrape whose removed groups are not yet marked reported.
///
/// [`commit`](Self::commit) it once its body was delivered (the HTTP
/// server does after the body's `write_all` succeeded); dropping it
/// uncommitted leaves its removed groups pending, so the next scrape
/// reports them again. A removed group is thus reported at least once to
/// someone who received it, and counted reported (or lost) exactly once.
/// (A scrape rendered between the last write of an answer and its commit,
/// on another connection, reports them again: at least once, never lost.
/// The built-in server commits before it closes a connection or reads
/// the next request on a kept-alive one, so a client that reads to the
/// close, or scrapes again on the same connection, never sees a repeat.)
#[derive(Debug)]
#[must_use = "an uncommitted scrape's removed groups are reported again by the next one"]
pub struct PendingScrape {
    scrape: Scrape,
    exporter: Exporter,
    /// Sequence numbers of the pending groups reported in this scrape.
    reported: Vec<u64>,
    /// Sequence numbers of the pending groups whose path was taken.
    collided: Vec<u64>,
}

impl PendingScrape {
    /// The scrape (body and sizes).
    pub fn scrape(&self) -> &Scrape {
        &self.scrape
    }

    /// Mark this scrape's removed groups reported (or lost, for colliding
    /// paths) and return the scrape. Groups another scrape committed in
    /// the meantime are not counted twice.
    pub fn commit(self) -> Scrape {
        self.exporter.commit_removed(&self.reported, &self.collided);
        self.scrape
    }
}

impl Exporter {
    /// Mark the pending removed groups `reported` (sorted sequence
    /// numbers) reported and `collided` lost; others stay pending.
    fn commit_removed(&self, reported: &[u64], collided: &[u64]) {
        let inner = &*self.inner;
        let mut st = inner.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let keep = inner.cfg.removed_retention;
        let mut delivered = Vec::new();
        let mut lost = 0u64;
        st.pending.retain(|(seq, g)| {
            if reported.binary_search(seq).is_ok() {
                delivered.push(g.clone());
                false
            } else if collided.binary_search(seq).is_ok() {
                lost += 1;
                false
            } else {
                true
            }
        });
        st.removed_reported += delivered.len() as u64;
        st.removed_lost += lost;
        if !keep.is_zero() && !delivered.is_empty() {
            if let Ok(snap) = inner.reporter.snapshot_groups(&delivered) {
                st.recent.extend(snap.groups.into_iter().map(|g| (now, g)));
            }
        }
    }
}

/// What a scrape read, besides its encoding: sizes, and the sequence
/// numbers of the pending removed groups it reported and gave up on.
struct ScrapeParts {
    groups: usize,
    removed: usize,
    families: usize,
    series: u64,
    reported: Vec<u64>,
    collided: Vec<u64>,
}

/// Whether a render takes removed groups from the watch.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A scrape to be delivered: take the watch's queue into `pending`.
    Scrape,
    /// HEAD: read what is pending, change nothing.
    Peek,
}

impl Exporter {
    /// An exporter of `rs` with the default [`Config`].
    pub fn new(rs: &Rstat) -> Self {
        Self::with_config(rs, Config::default())
    }

    /// An exporter of `rs`. From now on, removed groups (up to
    /// `cfg.max_depth`) are held for the next scrape.
    pub fn with_config(rs: &Rstat, cfg: Config) -> Self {
        let watch = rs.watch_removals(cfg.removed_capacity, cfg.max_depth);
        Exporter {
            inner: Arc::new(Inner {
                reporter: Reporter::new(rs),
                watch,
                cfg,
                state: Mutex::new(State::default()),
                collector_live: AtomicBool::new(false),
                #[cfg(test)]
                fail_next: Default::default(),
            }),
        }
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.inner.cfg
    }

    /// One scrape, taken as delivered: read the tree (and the groups
    /// removed since the last delivered scrape), encode it, and mark its
    /// removed groups reported. For a caller that hands the body on
    /// itself; the HTTP server uses [`render_pending`](Self::render_pending).
    pub fn render(&self, format: Format) -> Result<Scrape, Error> {
        Ok(self.render_pending(format)?.commit())
    }

    /// One scrape whose removed groups stay pending until
    /// [`PendingScrape::commit`]: what `GET /metrics` answers with. On an
    /// error, no removed group is dropped: they stay for the next scrape.
    pub fn render_pending(&self, format: Format) -> Result<PendingScrape, Error> {
        self.render_mode(format, Mode::Scrape)
    }

    /// A scrape that changes nothing: the removed groups pending are in it
    /// but stay pending, the watch's queue is not taken, no scrape is
    /// counted. What `HEAD /metrics` measures its `Content-Length` with.
    pub fn peek(&self, format: Format) -> Result<Scrape, Error> {
        Ok(self.render_mode(format, Mode::Peek)?.scrape)
    }

    fn render_mode(&self, format: Format, mode: Mode) -> Result<PendingScrape, Error> {
        let (body, parts) = self.scrape_with(mode, |collector| {
            let mut registry = prometheus_client::registry::Registry::default();
            registry.register_collector(Box::new(collector));
            let mut body = String::new();
            prometheus_client::encoding::text::encode(&mut body, &registry)
                .map_err(Error::Encode)?;
            if format == Format::Classic {
                body = openmetrics_to_classic(&body);
            }
            Ok(body)
        })?;
        Ok(PendingScrape {
            scrape: Scrape {
                body,
                format,
                groups: parts.groups,
                removed: parts.removed,
                families: parts.families,
                series: parts.series,
            },
            exporter: self.clone(),
            reported: parts.reported,
            collided: parts.collided,
        })
    }

    /// Read the tree (taking the removed groups in `Scrape` mode) and
    /// hand the scrape's collector to `encode`, under the state lock (so
    /// scrapes are serialized and the self-metrics count this one).
    fn scrape_with<R>(
        &self,
        mode: Mode,
        encode: impl FnOnce(Arc<collect::ScrapeCollector>) -> Result<R, Error>,
    ) -> Result<(R, ScrapeParts), Error> {
        let t0 = Instant::now();
        let inner = &*self.inner;
        let mut st = inner.state.lock().unwrap_or_else(|p| p.into_inner());
        if mode == Mode::Scrape {
            // Removed groups first: one removed after this point is in the
            // queue for the next scrape, so none falls between the two
            // reads. They move to `pending`, and leave it only when a
            // scrape holding them is committed.
            for g in inner.watch.take() {
                let seq = st.next_seq;
                st.next_seq += 1;
                st.pending.push((seq, g));
            }
            // Scrapes that keep failing must not hold removed groups
            // (and their per-CPU state) without bound.
            let cap = inner.cfg.removed_capacity;
            if st.pending.len() > cap {
                let over = st.pending.len() - cap;
                st.pending.drain(..over);
                st.removed_lost += over as u64;
            }
        }
        #[cfg(test)]
        if inner
            .fail_next
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            return Err(Error::Encode(std::fmt::Error));
        }
        let pending: Vec<rstat::Group> = st.pending.iter().map(|(_, g)| g.clone()).collect();
        let gone_snap = inner.reporter.snapshot_groups(&pending)?;
        drop(pending);
        let live = inner
            .reporter
            .snapshot_depth(inner.reporter.root(), inner.cfg.max_depth)?;
        let now = Instant::now();
        let keep = inner.cfg.removed_retention;
        if mode == Mode::Scrape {
            st.recent.retain(|(t, _)| now.duration_since(*t) < keep);
        }
        // One series per path: live groups win, then the latest removal
        // (pending ones are newer than the retained ones).
        let mut removed: Vec<GroupSnapshot> = Vec::new();
        let (mut reported, mut collided) = (Vec::new(), Vec::new());
        {
            let mut seen: std::collections::HashSet<&str> =
                live.groups.iter().map(|g| g.path.as_str()).collect();
            for ((seq, _), g) in st.pending.iter().zip(&gone_snap.groups).rev() {
                if seen.insert(g.path.as_str()) {
                    removed.push(g.clone());
                    reported.push(*seq);
                } else {
                    collided.push(*seq);
                }
            }
            for (t, g) in st.recent.iter().rev() {
                if now.duration_since(*t) < keep && seen.insert(g.path.as_str()) {
                    removed.push(g.clone());
                }
            }
            removed.reverse();
        }
        reported.sort_unstable();
        collided.sort_unstable();
        if mode == Mode::Scrape {
            st.scrapes += 1;
        }
        let naming = collect::Naming {
            memory_unit_bytes: inner.cfg.memory_unit_bytes,
            gauges: inner.cfg.gauges.clone(),
            kinds: inner
                .reporter
                .controllers()
                .iter()
                .map(|c| (c.name().to_owned(), c.stat_kinds()))
                .collect(),
        };
        let (families, skipped_families) = collect::families(&live, &naming, &collect::SELF_NAMES);
        // The totals as they stand once this scrape is delivered.
        let stats = collect::SelfStats {
            groups: live.groups.len() as u64,
            removed_reported_total: st.removed_reported + reported.len() as u64,
            removed_lost_total: st.removed_lost + collided.len() as u64 + inner.watch.lost(),
            scrapes_total: st.scrapes,
            last_scrape_seconds: st.last_secs,
            skipped_samples_total: st.skipped_samples,
            skipped_families: skipped_families as u64,
        };
        let (groups, nremoved, nfam) = (live.groups.len(), removed.len(), families.len());
        let collector = collect::ScrapeCollector {
            data: collect::ScrapeData {
                families,
                live: live.groups,
                removed,
                stats,
            },
            skipped: Default::default(),
            series: Default::default(),
        };
        let collector = Arc::new(collector);
        let out = encode(Arc::clone(&collector))?;
        use std::sync::atomic::Ordering::Relaxed;
        if mode == Mode::Scrape {
            st.skipped_samples += collector.skipped.load(Relaxed);
            st.last_secs = t0.elapsed().as_secs_f64();
        }
        Ok((
            out,
            ScrapeParts {
                groups,
                removed: nremoved,
                families: nfam,
                series: collector.series.load(Relaxed),
                reported,
                collided,
            },
        ))
    }

    /// The live tree (up to [`Config::max_depth`]) as JSON: a
    /// [`Snapshot`](rstat::report::Snapshot). Takes no removed groups
    /// (they stay for the next `/metrics` scrape).
    pub fn snapshot_json(&self) -> Result<String, Error> {
        let r = &self.inner.reporter;
        let snap = r.snapshot_depth(r.root(), self.inner.cfg.max_depth)?;
        serde_json::to_string(&snap).map_err(Error::Json)
    }

    /// A [`prometheus_client::collector::Collector`] that reads this
    /// exporter's tree each time its registry is encoded: register it in
    /// the service's own registry to serve rstat's series beside the
    /// service's (see [`RstatCollector`]). At most one is alive per
    /// exporter; another call while it lives is
    /// [`Error::CollectorInUse`].
    pub fn collector(&self) -> Result<RstatCollector, Error> {
        use std::sync::atomic::Ordering::Relaxed;
        // Relaxed: the flag guards no data (scrapes are serialized by the
        // state lock); only one caller can turn it from false to true.
        self.inner
            .collector_live
            .compare_exchange(false, true, Relaxed, Relaxed)
            .map_err(|_| Error::CollectorInUse)?;
        Ok(RstatCollector::new(self.clone()))
    }

    /// A scrape encoded by a registry: taken as delivered once `encode`
    /// succeeded (the registry's caller sends it on).
    fn encode_into(
        &self,
        enc: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), Error> {
        use prometheus_client::collector::Collector;
        let ((), parts) =
            self.scrape_with(Mode::Scrape, |c| c.encode(enc).map_err(Error::Encode))?;
        self.commit_removed(&parts.reported, &parts.collided);
        Ok(())
    }

    /// Serve `/metrics` (and `/snapshot.json`) over HTTP on its own
    /// threads, until the returned [`Server`] is dropped. Errors: the
    /// address does not resolve, is not loopback without
    /// [`ServerConfig::allow_non_loopback`], or cannot be bound.
    #[must_use = "the server stops when the returned Server is dropped: keep it"]
    pub fn serve(&self, cfg: ServerConfig) -> io::Result<Server> {
        http::start(self.clone(), cfg)
    }
}

#[cfg(test)]
mod tests;
