//! The trackers `rstat bench alloc` measures `Accounted` against, and the
//! set of five allocators over one inner allocator: [`Eager`] (an owner
//! word placed as ours, every ancestor's shared atomic charged on each call; over
//! parentless nodes, the group counter tracker: one shared atomic per
//! group) and [`ThreadBatch`] (a per-thread untracked amount flushed past
//! [`THREAD_BATCH`], no owner), both charging [`Node`]s, the trackers'
//! groups; [`NODE`] is a thread's current group. The workload that drives
//! them is in [`super`]; `rstat bench server` uses [`Eager`] with one
//! parentless [`Node`] per tenant as its peers' counting allocator.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, Ordering};

use rstat::alloc::{overhead, Accounted};
use rstat::percpu::CachePadded;

/// The thread batch tracker's per-thread untracked limit.
pub const THREAD_BATCH: i64 = 4 << 20;

/// A group of the trackers: a shared counter, chained to its parent.
pub(crate) struct Node {
    pub(crate) amount: CachePadded<AtomicI64>,
    parent: Option<&'static Node>,
}

impl Node {
    pub(crate) fn leak(parent: Option<&'static Node>) -> &'static Node {
        Box::leak(Box::new(Node {
            amount: CachePadded::new(AtomicI64::new(0)),
            parent,
        }))
    }

    #[inline]
    fn add(&self, n: i64) {
        let mut c = Some(self);
        while let Some(x) = c {
            x.amount.fetch_add(n, Ordering::Relaxed);
            c = x.parent;
        }
    }
}

thread_local! {
    /// The trackers' "current group" of this thread.
    pub(crate) static NODE: Cell<Option<&'static Node>> = const { Cell::new(None) };
    /// The thread batch tracker's untracked amount.
    static UNTRACKED: Cell<i64> = const { Cell::new(0) };
}

/// The eager tracker: an owner word, every level charged per call.
pub(crate) struct Eager<I>(I);

impl<I> Eager<I> {
    /// The eager tracker over `inner`.
    pub(crate) const fn new(inner: I) -> Self {
        Eager(inner)
    }
}

/// The inner layout of an object of `l`, and the offsets of the object
/// and of its owner word in the inner block: placed as `Accounted` places
/// them (a header before objects aligned to 8 or less, a trailer after the
/// others), so the trackers and ours touch the same lines.
fn owned_layout(l: Layout) -> (Layout, usize, usize) {
    let body = l.size().next_multiple_of(8);
    let il = Layout::from_size_align(body + 8, l.align().max(8)).expect("layout");
    if l.align() <= 8 {
        (il, 8, 0)
    } else {
        (il, 0, body)
    }
}

// SAFETY: blocks come from the inner allocator with a layout at least as
// large and aligned, the object at an offset that keeps it aligned;
// `dealloc` recomputes the same layout and offsets.
unsafe impl<I: GlobalAlloc> GlobalAlloc for Eager<I> {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let (il, object, owner_at) = owned_layout(l);
        let node = NODE.with(Cell::get);
        if let Some(n) = node {
            n.add((l.size() + overhead(l.size())) as i64);
        }
        // SAFETY: non-zero size.
        let p = unsafe { self.0.alloc(il) };
        if p.is_null() {
            return p;
        }
        let owner = node.map_or(core::ptr::null(), |n| n as *const Node);
        // SAFETY: the owner word is 8 bytes of the block, aligned; the
        // object lies inside it.
        unsafe {
            p.add(owner_at).cast::<*const Node>().write(owner);
            p.add(object)
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        let (il, object, owner_at) = owned_layout(l);
        // SAFETY: `p` is `object` bytes into a block of `il`.
        let block = unsafe { p.sub(object) };
        // SAFETY: written by `alloc`.
        let owner = unsafe { block.add(owner_at).cast::<*const Node>().read() };
        // SAFETY: nodes are leaked (never freed).
        if let Some(n) = unsafe { owner.as_ref() } {
            n.add(-((l.size() + overhead(l.size())) as i64));
        }
        // SAFETY: from `alloc` with `il`.
        unsafe { self.0.dealloc(block, il) }
    }
}

/// The thread batch tracker: no owner; the calling thread's group pays.
pub(super) struct ThreadBatch<I>(I);

impl<I> ThreadBatch<I> {
    #[inline]
    fn track(n: i64) {
        let u = UNTRACKED.with(|c| {
            let u = c.get() + n;
            c.set(u);
            u
        });
        if !(-THREAD_BATCH..=THREAD_BATCH).contains(&u) {
            if let Some(node) = NODE.with(Cell::get) {
                node.add(u);
            }
            UNTRACKED.with(|c| c.set(0));
        }
    }

    /// Flush this thread's untracked amount (at the end of a round).
    pub(super) fn flush() {
        let u = UNTRACKED.with(|c| c.replace(0));
        if let Some(node) = NODE.with(Cell::get) {
            node.add(u);
        }
    }
}

// SAFETY: forwards to the inner allocator unchanged.
unsafe impl<I: GlobalAlloc> GlobalAlloc for ThreadBatch<I> {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        Self::track(l.size() as i64);
        // SAFETY: forwarded.
        unsafe { self.0.alloc(l) }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        Self::track(-(l.size() as i64));
        // SAFETY: forwarded.
        unsafe { self.0.dealloc(p, l) }
    }
}

/// The five variants over one inner allocator. The group counter tracker
/// is [`Eager`] whose threads charge parentless nodes: its own instance,
/// so its calls and the eager tracker's are told apart in a profile.
pub(super) struct Set<I: 'static> {
    pub(super) inner: I,
    pub(super) accounted: Accounted<I>,
    pub(super) eager: Eager<I>,
    pub(super) thread_batch: ThreadBatch<I>,
    pub(super) group_counter: Eager<I>,
}

impl<I: GlobalAlloc + 'static> Set<I> {
    /// `make` makes an inner allocator (a unit struct for both used here).
    pub(super) fn new(make: impl Fn() -> I) -> Self {
        Set {
            inner: make(),
            accounted: Accounted::new(make()),
            eager: Eager(make()),
            thread_batch: ThreadBatch(make()),
            group_counter: Eager(make()),
        }
    }
}
