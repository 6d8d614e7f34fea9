//! The server's requests: what one request does ([`serve`]), how each
//! variant wraps it ([`connection`]), and the shared state they use
//! ([`Ctx`]). The measurement around them is in [`super`].
//!
//! A request of tenant `t` does, in two polls:
//!
//! 1. allocate [`OBJECTS`] objects of 32-2048 bytes (a fixed pseudo-random
//!    sequence) through the variant's allocator and write into them;
//! 2. yield to the scheduler (`yield_now`): the second poll may run on the
//!    other worker;
//! 3. burn its CPU work (a calibrated number of iterations, the same in
//!    every variant), count (three counter updates in the variants that
//!    count), free all its objects but one, hand that one to the
//!    variant's shared queue and, once the queue holds more than
//!    [`HANDED`], free the oldest object there: allocated by an earlier
//!    request, of any tenant, often on the other worker.
//!
//! The allocators are driven through their `GlobalAlloc` methods, as
//! `rstat bench alloc` does, not installed as the process's
//! `#[global_allocator]`: the four variants then run interleaved in one
//! process. Only the request's own objects go through the variant's
//! allocator; the runtime's, tracing's and rstat's own allocations go
//! through the process allocator in every variant (a real
//! `#[global_allocator]` would charge those too).

use std::alloc::{GlobalAlloc, Layout};
use std::collections::VecDeque;
use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use mimalloc::MiMalloc;
use rstat::alloc::Accounted;
use rstat::attach::thread_cpu_time;
use rstat::{ControllerHandle, Group, StatItem};
use tracing::Instrument;

use crate::alloc_bench::trackers::{Eager, Node, NODE};

/// Tenants.
pub const TENANTS: usize = 16;
/// Objects a request allocates.
pub const OBJECTS: usize = 4;
/// Objects the shared queue of handed objects keeps before a request
/// frees the oldest.
pub const HANDED: usize = 256;
/// The tenants' names (span field values and group names).
pub const TENANT_NAMES: [&str; TENANTS] = [
    "t00", "t01", "t02", "t03", "t04", "t05", "t06", "t07", "t08", "t09", "t10", "t11", "t12",
    "t13", "t14", "t15",
];
/// The counters each counting variant updates per request.
pub const COUNTERS: [&str; 3] = ["requests", "bytes", "objects"];

/// What the requests of one run are wrapped in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// No accounting: the bare request over mimalloc.
    Bare,
    /// rstat: a `tracing` span per request carrying its tenant, turned
    /// into the tenant's group by `GroupLayer`; `Accounted<mimalloc>`; the
    /// tenant's counters through cached `StatItem`s.
    Tenant,
    /// rstat: a group per request under its tenant (`create_child`,
    /// `scope`, `remove`); `Accounted<mimalloc>`; counters on the
    /// request's group.
    Request,
    /// What services run today: a `tokio-metrics` `TaskMonitor` per
    /// tenant, `prometheus` counters (children cached per tenant) and a
    /// counting allocator (owner word, one atomic per tenant).
    Peers,
}

/// The variants, in the order a sample's rotation starts from.
pub const VARIANTS: [Variant; 4] = [
    Variant::Bare,
    Variant::Tenant,
    Variant::Request,
    Variant::Peers,
];

/// A live object of the workload.
#[derive(Clone, Copy, Debug)]
pub struct Obj {
    ptr: usize,
    layout: Layout,
    /// The tenant whose request allocated it.
    pub tenant: u8,
}

impl Obj {
    /// Its size in bytes.
    pub fn size(&self) -> usize {
        self.layout.size()
    }
}

/// The handed objects of one variant, freed by later requests.
pub type Queue = Mutex<VecDeque<Obj>>;

/// The truth of a check phase: per tenant, the thread CPU time its
/// requests' bodies took (ns) and its requests.
pub struct Ledger {
    /// CPU time by the worker's thread clock, read inside each stretch of
    /// the body (see [`Stretch`]).
    pub cpu_ns: [AtomicU64; TENANTS],
    /// Requests served.
    pub requests: [AtomicU64; TENANTS],
    /// CPU time by the worker's thread clock around each whole poll of
    /// the wrapped request (the span's or the scope's entering and
    /// leaving included) and around dropping it (see [`Bracket`]).
    pub outer_ns: [AtomicU64; TENANTS],
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Self {
        Ledger {
            cpu_ns: std::array::from_fn(|_| AtomicU64::new(0)),
            requests: std::array::from_fn(|_| AtomicU64::new(0)),
            outer_ns: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Default for Ledger {
    fn default() -> Self {
        Self::new()
    }
}

/// One synchronous stretch of a request's body, timed by the thread's CPU
/// clock when there is a ledger. Two reads back to back at the start: the
/// second less the first is one read's cost, added to the stretch. The
/// group is current from before the first read's sample to after the last
/// read's sample, so a stretch's difference misses about one read (the
/// first read's part after its sample and the last read's part before
/// its); the back-to-back pair measures exactly that much.
struct Stretch {
    start: std::time::Duration,
    read: std::time::Duration,
}

impl Stretch {
    #[inline]
    fn start(on: bool) -> Option<Stretch> {
        on.then(|| {
            let start = thread_cpu_time();
            let read = thread_cpu_time() - start;
            Stretch { start, read }
        })
    }

    #[inline]
    fn end(s: Option<Stretch>, ledger: Option<&Ledger>, t: usize) {
        if let (Some(s), Some(l)) = (s, ledger) {
            let ns = (thread_cpu_time() - s.start + s.read).as_nanos() as u64;
            l.cpu_ns[t].fetch_add(ns, Ordering::Relaxed);
        }
    }
}

/// The next value of a xorshift sequence.
#[inline]
pub fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

/// The CPU work: `iters` rounds of a multiply-add chain (no memory
/// traffic), its result kept.
#[inline(never)]
pub fn spin(iters: u64, seed: u64) -> u64 {
    let mut x = seed | 1;
    for i in 0..iters {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i);
        x ^= x >> 29;
    }
    black_box(x)
}

/// Free `o` through `a`.
///
/// # Safety
/// `o` was allocated by `a` with `o.layout` and is not freed yet.
#[inline]
unsafe fn free<A: GlobalAlloc>(a: &A, o: Obj) {
    // SAFETY: the caller's guarantee.
    unsafe { a.dealloc(o.ptr as *mut u8, o.layout) };
}

/// Free every object left in `q` through `a` (after the last request:
/// nothing allocates through `a` any more).
///
/// # Safety
/// Every object in `q` was allocated by `a`.
pub unsafe fn drain_queue<A: GlobalAlloc>(a: &A, q: &Queue) {
    let objs: Vec<Obj> = q
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .drain(..)
        .collect();
    for o in objs {
        // SAFETY: the caller's guarantee; each object is in the queue
        // once, and taken out of it here.
        unsafe { free(a, o) };
    }
}

/// One request of tenant `t` (see the [module docs](self)); `count(bytes)`
/// is the variant's counting, run in the second stretch.
#[allow(clippy::too_many_arguments)]
async fn serve<A: GlobalAlloc>(
    a: &A,
    queue: &Queue,
    t: usize,
    mut x: u64,
    iters: u64,
    ledger: Option<&Ledger>,
    errors: &AtomicU64,
    count: impl FnOnce(u64),
) {
    let clock = Stretch::start(ledger.is_some());
    let mut objs: [Option<Obj>; OBJECTS] = [None; OBJECTS];
    let mut bytes = 0u64;
    for o in objs.iter_mut() {
        x = xorshift(x);
        let size = 32 + (x % 2017) as usize;
        let Ok(layout) = Layout::from_size_align(size, 8) else {
            errors.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        // SAFETY: the size is not zero.
        let p = unsafe { a.alloc(layout) };
        if p.is_null() {
            errors.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        // SAFETY: `p` holds `size` >= 32 bytes.
        unsafe { p.write_bytes(t as u8, 32) };
        bytes += size as u64;
        *o = Some(Obj {
            ptr: p as usize,
            layout,
            tenant: t as u8,
        });
    }
    Stretch::end(clock, ledger, t);
    tokio::task::yield_now().await;
    let clock = Stretch::start(ledger.is_some());
    black_box(spin(iters, x));
    count(bytes);
    let [keep @ .., hand] = objs;
    for o in keep.into_iter().flatten() {
        // SAFETY: allocated above by `a` with `o.layout`, freed once.
        unsafe { free(a, o) };
    }
    let old = hand.and_then(|o| {
        let mut q = queue.lock().unwrap_or_else(PoisonError::into_inner);
        q.push_back(o);
        if q.len() > HANDED {
            q.pop_front()
        } else {
            None
        }
    });
    if let Some(o) = old {
        // SAFETY: every object in this variant's queue was allocated by
        // this variant's allocator `a`; popped once.
        unsafe { free(a, o) };
    }
    Stretch::end(clock, ledger, t);
    if let Some(l) = ledger {
        l.requests[t].fetch_add(1, Ordering::Relaxed);
    }
}

/// Sets the counting allocator's tenant ([`NODE`]) around each poll of
/// the wrapped future, as allocation trackers' future wrappers do.
struct Tagged<F> {
    node: &'static Node,
    fut: F,
}

impl<F: Future> Future for Tagged<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: `fut` is structurally pinned: it is never moved out of
        // a pinned `Tagged` (no method hands it out), and `Tagged` has no
        // `Drop`.
        let this = unsafe { self.get_unchecked_mut() };
        let prev = NODE.with(|c| c.replace(Some(this.node)));
        // SAFETY: as above.
        let r = unsafe { Pin::new_unchecked(&mut this.fut) }.poll(cx);
        NODE.with(|c| c.set(prev));
        r
    }
}

/// The check phases' upper bound: the thread's CPU clock around each poll
/// of the wrapped request (outside the span or scope, so everything the
/// group can have been current for is inside) and around dropping it (a
/// span's `Instrumented` enters the span again to drop its future). Boxed,
/// so it can drop the request inside a measured stretch: used only in the
/// check phases, never in a timed sample.
struct Bracket<'a, F> {
    fut: Option<Pin<Box<F>>>,
    ledger: &'a Ledger,
    t: usize,
}

impl<F: Future> Future for Bracket<'_, F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let start = thread_cpu_time();
        let ready = match self.fut.as_mut() {
            Some(f) => f.as_mut().poll(cx).is_ready(),
            None => true,
        };
        if ready {
            self.fut = None;
        }
        let ns = (thread_cpu_time() - start).as_nanos() as u64;
        self.ledger.outer_ns[self.t].fetch_add(ns, Ordering::Relaxed);
        if ready {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// Await `fut`, inside a [`Bracket`] when there is a ledger.
async fn bracketed<F: Future>(fut: F, ledger: Option<&Ledger>, t: usize) {
    match ledger {
        Some(ledger) => {
            Bracket {
                fut: Some(Box::pin(fut)),
                ledger,
                t,
            }
            .await
        }
        None => {
            fut.await;
        }
    }
}

/// What every request of a run shares.
pub struct Ctx {
    /// The bare variant's allocator.
    pub bare: &'static MiMalloc,
    /// Both rstat variants' allocator, bound to the run's memory
    /// controller.
    pub accounted: &'static Accounted<MiMalloc>,
    /// The peers' counting allocator.
    pub eager: &'static Eager<MiMalloc>,
    /// Each variant's queue of handed objects, in [`VARIANTS`] order.
    pub queues: [Queue; 4],
    /// The tenant variant's counters, per tenant (cached, as the peers'
    /// prometheus children are).
    pub tenant_items: Vec<[StatItem; 3]>,
    /// The group-per-request variant's tenants (requests are made under
    /// them).
    pub request_tenants: Vec<Group>,
    /// The counter set (the request variant updates it by group).
    pub counters: ControllerHandle,
    /// The peers' `TaskMonitor`s, per tenant.
    pub monitors: Vec<tokio_metrics::TaskMonitor>,
    /// The peers' prometheus counters, per tenant.
    pub prom: Vec<[prometheus::IntCounter; 3]>,
    /// The peers' counting allocator's tenants.
    pub nodes: Vec<&'static Node>,
    /// Failed allocations, group creations or removals (must stay 0).
    pub errors: AtomicU64,
}

impl Ctx {
    /// The queue of `v`.
    pub fn queue(&self, v: Variant) -> &Queue {
        &self.queues[VARIANTS.iter().position(|x| *x == v).unwrap_or(0)]
    }
}

/// Write `r` and `n` in decimal into `buf`: a request group's name,
/// made without allocating.
fn request_name(buf: &mut [u8; 24], mut n: u64) -> &str {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 || i == 1 {
            break;
        }
    }
    i -= 1;
    buf[i] = b'r';
    // Only ASCII digits and `r` were written.
    std::str::from_utf8(&buf[i..]).unwrap_or("r")
}

/// One connection: `n` requests one after another (a closed loop), each
/// of a tenant drawn from `seed`'s sequence, wrapped as variant `v` does.
/// The request variant names its groups `r<first_id + i>`.
#[allow(clippy::too_many_arguments)]
pub async fn connection(
    ctx: Arc<Ctx>,
    v: Variant,
    n: usize,
    iters: u64,
    seed: u64,
    first_id: u64,
    ledger: Option<Arc<Ledger>>,
) {
    let mut x = seed | 1;
    let ledger = ledger.as_deref();
    let errors = &ctx.errors;
    for i in 0..n {
        x = xorshift(x);
        let t = (x % TENANTS as u64) as usize;
        match v {
            Variant::Bare => {
                serve(ctx.bare, ctx.queue(v), t, x, iters, ledger, errors, |_| {}).await;
            }
            Variant::Tenant => {
                let items = &ctx.tenant_items[t];
                let span = tracing::info_span!("request", tenant = TENANT_NAMES[t]);
                let fut = serve(
                    ctx.accounted,
                    ctx.queue(v),
                    t,
                    x,
                    iters,
                    ledger,
                    errors,
                    |b| {
                        items[0].add(1);
                        items[1].add(b as i64);
                        items[2].add(OBJECTS as i64);
                    },
                )
                .instrument(span);
                bracketed(fut, ledger, t).await;
            }
            Variant::Request => {
                let mut buf = [0u8; 24];
                let name = request_name(&mut buf, first_id + i as u64);
                let g = match ctx.request_tenants[t].create_child(name) {
                    Ok(g) => g,
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                };
                let counters = &ctx.counters;
                let req = &g;
                let count = |b: u64| {
                    let ok = counters.add(req, 0, 1).is_ok()
                        && counters.add(req, 1, b as i64).is_ok()
                        && counters.add(req, 2, OBJECTS as i64).is_ok();
                    if !ok {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                };
                let fut = g.scope(serve(
                    ctx.accounted,
                    ctx.queue(v),
                    t,
                    x,
                    iters,
                    ledger,
                    errors,
                    count,
                ));
                bracketed(fut, ledger, t).await;
                if g.remove().is_err() {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            Variant::Peers => {
                let c = &ctx.prom[t];
                let fut = serve(ctx.eager, ctx.queue(v), t, x, iters, ledger, errors, |b| {
                    c[0].inc();
                    c[1].inc_by(b);
                    c[2].inc_by(OBJECTS as u64);
                });
                let tagged = Tagged {
                    node: ctx.nodes[t],
                    fut,
                };
                tokio_metrics::TaskMonitor::instrument(&ctx.monitors[t], tagged).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_names_are_decimal() {
        let mut b = [0u8; 24];
        assert_eq!(request_name(&mut b, 0), "r0");
        assert_eq!(request_name(&mut b, 1207), "r1207");
        assert_eq!(request_name(&mut b, u64::MAX), "r18446744073709551615");
    }
}
