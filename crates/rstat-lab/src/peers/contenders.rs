//! The four contenders of `rstat bench peers`, each built over one tree
//! shape ([`Shape`]: tenants x 4 services, one leaf per service), each
//! updated through the handle its users would cache per leaf, each read
//! per tenant as its users would read it, and each serving a group per
//! request ([`PerRequest`]) as well as it can.
//!
//! - [`RstatC`]: rstat on its default settings (`Rstat::builder().build()`),
//!   a byte counter declared in pages as the README shows, a `StatItem` per
//!   leaf; a tenant is read with the default policy's `read()` through
//!   a `StatHandle` held per tenant.
//! - [`PromC`]: the `prometheus` crate's `IntCounterVec` with labels
//!   (tenant, service), the child of each leaf resolved once; a tenant's
//!   total is the sum of its 4 series.
//! - [`MetricsC`]: a `metrics-util` `Registry` with `AtomicStorage` (the
//!   storage its recorders build on), a `metrics::Counter` per leaf made
//!   from the registry's atomic; read directly from the registry's atomics.
//! - [`EagerC`]: the tracker users hand-roll: one `AtomicU64` per group,
//!   each on its own cache line, and each add a `fetch_add` on the leaf and
//!   on every ancestor (service, tenant, root).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use metrics_util::registry::{AtomicStorage, Registry};
use rstat::{ControllerHandle, Group, Rstat, StatHandle, StatItem};

use super::costs::Membarrier;

/// Services per tenant: one leaf group under each.
pub const SERVICES: usize = 4;

/// A tree: `tenants` tenants x [`SERVICES`] services, one leaf per service
/// (root / tenant / service / leaf: leaves at depth 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Tenants.
    pub tenants: usize,
}

impl Shape {
    /// Leaves (one per service).
    pub fn leaves(self) -> usize {
        self.tenants * SERVICES
    }

    /// The tenant of `leaf`.
    pub fn tenant_of(self, leaf: usize) -> usize {
        leaf / SERVICES
    }
}

fn tenant_name(t: usize) -> String {
    format!("t{t:03}")
}

fn service_name(s: usize) -> String {
    format!("s{s}")
}

/// One contender of the spread and hot workloads.
pub trait Contender: Send + Sync + 'static {
    /// Add `bytes` to leaf `leaf` through its cached handle.
    fn add(&self, leaf: usize, bytes: u64);

    /// Tenant `t`'s total, read as its users read it while writers run.
    fn tenant_total(&self, t: usize) -> Result<u64, String>;

    /// Tenant `t`'s exact total, read after the writers joined. A peer
    /// without a consistent snapshot has no other read: its total, once the
    /// writers are done.
    fn tenant_exact(&self, t: usize) -> Result<u64, String> {
        self.tenant_total(t)
    }

    /// Called by the reader thread right after each timed sweep, off the
    /// sweep's clock: nothing, but for a contender that measures something
    /// in the reader's own state ([`ExactReads`]).
    fn after_sweep(&self) {}
}

/// One contender serving a group per request: create a group under a
/// tenant, update it 3 times, remove it.
pub trait PerRequest: Send + Sync + 'static {
    /// One request under tenant `t`, named `name` (unique), adding
    /// `deltas`. A contender that forgets a removed group reads the
    /// group's value back just before removing it and fails unless it is
    /// the sum of `deltas`.
    fn request(&self, t: usize, name: &str, deltas: [u64; 3]) -> Result<(), String>;

    /// Tenant `t`'s exact total after the requests, removed groups
    /// included; `None` for a contender that keeps no history of removed
    /// groups.
    fn tenant_history(&self, t: usize) -> Result<Option<u64>, String>;

    /// Request groups still present after every request finished (0
    /// unless removal failed).
    fn request_groups_left(&self) -> usize;
}

// ---------------------------------------------------------------- rstat

/// rstat on its default settings. Fields drop in order: the leaves' items
/// and the tenants before the engine.
pub struct RstatC {
    items: Vec<StatItem>,
    /// One handle per tenant for its reads, held as a `prometheus` user
    /// holds a metric's children ([`StatHandle::read`]).
    reads: Vec<StatHandle>,
    tenants: Vec<Group>,
    ctl: ControllerHandle,
    rs: Rstat,
}

impl RstatC {
    /// The engine as `Rstat::builder().build()` makes it, with a counter
    /// set `io` whose `bytes` item counts in pages (unit 4096, as the
    /// README declares byte counters), and the tree of `shape`.
    pub fn new(shape: Shape) -> Result<Self, String> {
        let rs = Rstat::builder()
            .build()
            .map_err(|e| format!("building a default engine: {e}"))?;
        let ctl = rs
            .register_counters_with_units("io", &[("bytes", 4096)])
            .map_err(|e| format!("registering the byte counter: {e}"))?;
        let mut items = Vec::with_capacity(shape.leaves());
        let mut tenants = Vec::with_capacity(shape.tenants);
        let mut reads = Vec::with_capacity(shape.tenants);
        let err = |e: rstat::Error| format!("building the tree: {e}");
        for t in 0..shape.tenants {
            let tg = rs.root().create_child(&tenant_name(t)).map_err(err)?;
            for s in 0..SERVICES {
                let leaf = tg
                    .create_child(&service_name(s))
                    .and_then(|sg| sg.create_child("leaf"))
                    .map_err(err)?;
                items.push(
                    ctl.stat_handle(&leaf)
                        .and_then(|h| h.item(0))
                        .map_err(err)?,
                );
            }
            reads.push(ctl.stat_handle(&tg).map_err(err)?);
            tenants.push(tg);
        }
        Ok(RstatC {
            items,
            reads,
            tenants,
            ctl,
            rs,
        })
    }

    /// The engine's update path (`UpdatePath::name`).
    pub fn update_path(&self) -> &'static str {
        self.rs.update_path().name()
    }

    /// The byte counter's flush policy.
    pub fn flush_policy(&self) -> String {
        format!("{:?}", self.ctl.flush_policy())
    }

    fn tenant(&self, t: usize) -> Result<&Group, String> {
        self.tenants
            .get(t)
            .ok_or_else(|| format!("rstat: no tenant {t}"))
    }

    fn read_handle(&self, t: usize) -> Result<&StatHandle, String> {
        self.reads
            .get(t)
            .ok_or_else(|| format!("rstat: no tenant {t}"))
    }

    fn hierarchical(stats: rstat::Result<rstat::GroupStats>, t: usize) -> Result<u64, String> {
        let s = stats.map_err(|e| format!("rstat: reading tenant {t}: {e}"))?;
        let v = s.hierarchical().first().copied().unwrap_or(0);
        u64::try_from(v).map_err(|_| format!("rstat: tenant {t}'s total is negative: {v}"))
    }
}

impl Contender for RstatC {
    #[inline(always)]
    fn add(&self, leaf: usize, bytes: u64) {
        self.items[leaf].add(bytes as i64);
    }

    fn tenant_total(&self, t: usize) -> Result<u64, String> {
        Self::hierarchical(Ok(self.read_handle(t)?.read()), t)
    }

    fn tenant_exact(&self, t: usize) -> Result<u64, String> {
        Self::hierarchical(Ok(self.read_handle(t)?.read_exact()), t)
    }
}

/// [`RstatC`] read with `read_exact` while writers run (the exact-read
/// phase), and the fence such a read pays, timed where it pays it: after
/// each sweep the reader thread itself calls `membarrier` a few times, in
/// the state its reads' own fences run in (the writers running, the
/// reader on a CPU). Timed from another thread between sweeps, the call
/// costs less: its barrier then interrupts fewer busy CPUs.
pub struct ExactReads {
    rstat: RstatC,
    fence: Option<Membarrier>,
    /// ns per call, every call of every sweep.
    fences: Mutex<Vec<f64>>,
}

/// `membarrier` calls timed after each sweep.
const FENCES_PER_SWEEP: usize = 4;

impl ExactReads {
    /// rstat on the default settings over `shape`, with `fence` timed by
    /// the reader (none: nothing timed).
    pub fn new(shape: Shape, fence: Option<Membarrier>) -> Result<Self, String> {
        Ok(ExactReads {
            rstat: RstatC::new(shape)?,
            fence,
            fences: Mutex::new(Vec::new()),
        })
    }

    /// The calls timed so far, ns each.
    pub fn fences(&self) -> Vec<f64> {
        self.fences
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Contender for ExactReads {
    #[inline(always)]
    fn add(&self, leaf: usize, bytes: u64) {
        self.rstat.add(leaf, bytes);
    }

    fn tenant_total(&self, t: usize) -> Result<u64, String> {
        self.rstat.tenant_exact(t)
    }

    fn tenant_exact(&self, t: usize) -> Result<u64, String> {
        self.rstat.tenant_exact(t)
    }

    fn after_sweep(&self) {
        let Some(m) = self.fence else { return };
        let timed: Vec<f64> = (0..FENCES_PER_SWEEP).filter_map(|_| m.call()).collect();
        self.fences
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(timed);
    }
}

impl PerRequest for RstatC {
    fn request(&self, t: usize, name: &str, deltas: [u64; 3]) -> Result<(), String> {
        let err = |e: rstat::Error| format!("rstat: request {name}: {e}");
        let g = self.tenant(t)?.create_child(name).map_err(err)?;
        let item = self
            .ctl
            .stat_handle(&g)
            .and_then(|h| h.item(0))
            .map_err(err)?;
        for d in deltas {
            item.add(d as i64);
        }
        drop(item);
        g.remove().map_err(err)
    }

    fn tenant_history(&self, t: usize) -> Result<Option<u64>, String> {
        self.tenant_exact(t).map(Some)
    }

    fn request_groups_left(&self) -> usize {
        self.tenants
            .iter()
            .map(|t| t.children().len().saturating_sub(SERVICES))
            .sum()
    }
}

// ------------------------------------------------------------ prometheus

/// `prometheus::IntCounterVec` with labels (tenant, service), a child per
/// leaf resolved once; a second vec (tenant, request) for requests.
pub struct PromC {
    children: Vec<prometheus::IntCounter>,
    requests: prometheus::IntCounterVec,
    tenant_names: Vec<String>,
    _registry: prometheus::Registry,
}

impl PromC {
    /// The vec, registered in a `prometheus::Registry`, and one child per
    /// leaf of `shape`.
    pub fn new(shape: Shape) -> Result<Self, String> {
        let err = |e: prometheus::Error| format!("prometheus: {e}");
        let bytes = prometheus::IntCounterVec::new(
            prometheus::Opts::new("bytes", "bytes by tenant and service"),
            &["tenant", "service"],
        )
        .map_err(err)?;
        let requests = prometheus::IntCounterVec::new(
            prometheus::Opts::new("request_bytes", "bytes by tenant and request"),
            &["tenant", "request"],
        )
        .map_err(err)?;
        let registry = prometheus::Registry::new();
        registry.register(Box::new(bytes.clone())).map_err(err)?;
        registry.register(Box::new(requests.clone())).map_err(err)?;
        let tenant_names: Vec<String> = (0..shape.tenants).map(tenant_name).collect();
        let mut children = Vec::with_capacity(shape.leaves());
        for t in &tenant_names {
            for s in 0..SERVICES {
                children.push(bytes.with_label_values(&[t.as_str(), &service_name(s)]));
            }
        }
        Ok(PromC {
            children,
            requests,
            tenant_names,
            _registry: registry,
        })
    }
}

impl Contender for PromC {
    #[inline(always)]
    fn add(&self, leaf: usize, bytes: u64) {
        self.children[leaf].inc_by(bytes);
    }

    fn tenant_total(&self, t: usize) -> Result<u64, String> {
        Ok(self.children[t * SERVICES..(t + 1) * SERVICES]
            .iter()
            .map(prometheus::IntCounter::get)
            .sum())
    }
}

impl PerRequest for PromC {
    fn request(&self, t: usize, name: &str, deltas: [u64; 3]) -> Result<(), String> {
        let labels = [self.tenant_names[t].as_str(), name];
        let c = self.requests.with_label_values(&labels);
        for d in deltas {
            c.inc_by(d);
        }
        let kept = c.get();
        drop(c);
        self.requests
            .remove_label_values(&labels)
            .map_err(|e| format!("prometheus: removing request {name}: {e}"))?;
        check_kept("prometheus", name, kept, deltas)
    }

    fn tenant_history(&self, _t: usize) -> Result<Option<u64>, String> {
        Ok(None)
    }

    fn request_groups_left(&self) -> usize {
        use prometheus::core::Collector;
        self.requests
            .collect()
            .iter()
            .map(|f| f.get_metric().len())
            .sum()
    }
}

fn check_kept(who: &str, name: &str, kept: u64, deltas: [u64; 3]) -> Result<(), String> {
    let want: u64 = deltas.iter().sum();
    if kept == want {
        Ok(())
    } else {
        Err(format!(
            "{who}: request {name} read back {kept} before its removal, but {want} was added to it"
        ))
    }
}

// --------------------------------------------------------------- metrics

/// A `metrics-util` registry with atomic storage, a `metrics::Counter` per
/// leaf made from the registry's atomic (what a recorder hands out), and
/// the same atomics read directly.
pub struct MetricsC {
    counters: Vec<metrics::Counter>,
    atomics: Vec<Arc<AtomicU64>>,
    registry: Registry<metrics::Key, AtomicStorage>,
    tenant_names: Vec<String>,
}

fn labelled(name: &'static str, labels: [(&'static str, String); 2]) -> metrics::Key {
    metrics::Key::from_parts(
        name,
        labels
            .into_iter()
            .map(|(k, v)| metrics::Label::new(k, v))
            .collect::<Vec<_>>(),
    )
}

impl MetricsC {
    /// The registry and one counter per leaf of `shape`, keyed `bytes`
    /// with labels (tenant, service).
    pub fn new(shape: Shape) -> Self {
        let registry = Registry::atomic();
        let tenant_names: Vec<String> = (0..shape.tenants).map(tenant_name).collect();
        let mut atomics = Vec::with_capacity(shape.leaves());
        for t in &tenant_names {
            for s in 0..SERVICES {
                let key = labelled(
                    "bytes",
                    [("tenant", t.clone()), ("service", service_name(s))],
                );
                atomics.push(registry.get_or_create_counter(&key, Arc::clone));
            }
        }
        let counters = atomics
            .iter()
            .map(|a| metrics::Counter::from_arc(Arc::clone(a)))
            .collect();
        MetricsC {
            counters,
            atomics,
            registry,
            tenant_names,
        }
    }
}

impl Contender for MetricsC {
    #[inline(always)]
    fn add(&self, leaf: usize, bytes: u64) {
        self.counters[leaf].increment(bytes);
    }

    fn tenant_total(&self, t: usize) -> Result<u64, String> {
        Ok(self.atomics[t * SERVICES..(t + 1) * SERVICES]
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .sum())
    }
}

impl PerRequest for MetricsC {
    fn request(&self, t: usize, name: &str, deltas: [u64; 3]) -> Result<(), String> {
        let key = labelled(
            "request_bytes",
            [
                ("tenant", self.tenant_names[t].clone()),
                ("request", name.to_owned()),
            ],
        );
        let atomic = self.registry.get_or_create_counter(&key, Arc::clone);
        let c = metrics::Counter::from_arc(Arc::clone(&atomic));
        for d in deltas {
            c.increment(d);
        }
        let kept = atomic.load(Ordering::Relaxed);
        if !self.registry.delete_counter(&key) {
            return Err(format!(
                "metrics: request {name}'s key was not in the registry"
            ));
        }
        check_kept("metrics", name, kept, deltas)
    }

    fn tenant_history(&self, _t: usize) -> Result<Option<u64>, String> {
        Ok(None)
    }

    fn request_groups_left(&self) -> usize {
        let mut n = 0;
        self.registry.visit_counters(|k, _| {
            n += usize::from(k.name() == "request_bytes");
        });
        n
    }
}

// ----------------------------------------------------------------- eager

type Padded = rstat::percpu::CachePadded<AtomicU64>;

/// A hand-rolled tracker's group: its own total, on its own cache line,
/// and its parent.
struct Node {
    bytes: Padded,
    parent: Option<Arc<Node>>,
}

impl Node {
    fn new(parent: Option<&Arc<Node>>) -> Arc<Node> {
        Arc::new(Node {
            bytes: Padded::new(AtomicU64::new(0)),
            parent: parent.map(Arc::clone),
        })
    }

    /// `fetch_add` on this group and every ancestor.
    #[inline(always)]
    fn add(&self, n: u64) {
        let mut at = self;
        loop {
            at.bytes.fetch_add(n, Ordering::Relaxed);
            match &at.parent {
                Some(p) => at = p,
                None => return,
            }
        }
    }

    fn get(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// The eager tracker: an atomic per group, leaf and every ancestor charged
/// on each add; request groups live in a map under one lock.
pub struct EagerC {
    leaves: Vec<Arc<Node>>,
    tenants: Vec<Arc<Node>>,
    requests: Mutex<HashMap<String, Arc<Node>>>,
    tenant_names: Vec<String>,
}

impl EagerC {
    /// The tree of `shape`.
    pub fn new(shape: Shape) -> Self {
        let root = Node::new(None);
        let mut leaves = Vec::with_capacity(shape.leaves());
        let mut tenants = Vec::with_capacity(shape.tenants);
        for _ in 0..shape.tenants {
            let t = Node::new(Some(&root));
            for _ in 0..SERVICES {
                let s = Node::new(Some(&t));
                leaves.push(Node::new(Some(&s)));
            }
            tenants.push(t);
        }
        EagerC {
            leaves,
            tenants,
            requests: Mutex::new(HashMap::new()),
            tenant_names: (0..shape.tenants).map(tenant_name).collect(),
        }
    }
}

impl Contender for EagerC {
    #[inline(always)]
    fn add(&self, leaf: usize, bytes: u64) {
        self.leaves[leaf].add(bytes);
    }

    fn tenant_total(&self, t: usize) -> Result<u64, String> {
        Ok(self.tenants[t].get())
    }
}

impl EagerC {
    fn map(&self) -> Result<std::sync::MutexGuard<'_, HashMap<String, Arc<Node>>>, String> {
        self.requests
            .lock()
            .map_err(|_| "eager: the request map's lock is poisoned".to_owned())
    }
}

impl PerRequest for EagerC {
    fn request(&self, t: usize, name: &str, deltas: [u64; 3]) -> Result<(), String> {
        let key = format!("{}/{name}", self.tenant_names[t]);
        let node = Node::new(Some(&self.tenants[t]));
        self.map()?.insert(key.clone(), Arc::clone(&node));
        for d in deltas {
            node.add(d);
        }
        self.map()?.remove(&key);
        Ok(())
    }

    fn tenant_history(&self, t: usize) -> Result<Option<u64>, String> {
        Ok(Some(self.tenants[t].get()))
    }

    fn request_groups_left(&self) -> usize {
        self.requests.lock().map_or(usize::MAX, |m| m.len())
    }
}
