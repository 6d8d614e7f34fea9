//! The engine's shared state, held by every group and handle: the
//! mechanism's (the per-CPU arena, the domains, the registered
//! controllers) and the hierarchy's (group ids, zombies, removal
//! watchers, releases deferred from the allocator), with the attach step
//! that gives a group its tree nodes, css and extension states. The
//! facade ([`Rstat`](crate::Rstat)) owns one and builds it.

use std::sync::Arc;

use crate::error::Result;
use crate::group::ext::{ErasedExt, ExtList};
use crate::group::watch::RemovalQueue;
use crate::group::{Group, GroupInner};
use crate::percpu::arena::PcpuPtr;
use crate::percpu::cpu::CpuMask;
use crate::percpu::rwlock::PercpuRwLock;
use crate::percpu::shared_arena::SharedArena;
use crate::percpu::LineBox;
use crate::stat::backlog::{BacklogHead, PcpuLinks};
use crate::stat::css::{Css, StatSlot, EXTRA_SLOTS};
use crate::stat::ops::{CtlEntry, CtlRef, NodeOwner, MAX_CONTROLLERS};
use crate::stat::policy::FlushPolicy;
use crate::stat::tree::{Domain, Pace, TreeNode};
use crate::stat::update::UpdatePath;
use crate::sync::{AtomicPtr, AtomicU64, AtomicUsize, Mutex, Ordering, UnsafeCell};

/// What registration changes: the controllers and their domains. Behind
/// [`EngineInner::topo`], a reader-writer lock: registering takes it
/// exclusively, and so does dropping the engine; creating, removing and
/// releasing groups share it (they read which controllers and domains a
/// group gets, and must not miss one registered meanwhile).
pub(crate) struct Topology {
    pub(crate) controllers: Vec<Arc<CtlEntry>>,
    /// Boxed so their addresses stay put while the vector grows (css and
    /// nodes point at them); never removed before the engine.
    #[allow(clippy::vec_box)]
    pub(crate) domains: Vec<Box<Domain>>,
}

pub(crate) struct EngineInner {
    pub(crate) nr_cpus: usize,
    /// How updates reach their slot, and for [`UpdatePath::Rseq`] the
    /// section's CPU limit (slots `0..limit` are written only by
    /// restartable sections; `limit..nr_cpus` take the locked adds of
    /// threads the kernel gives no CPU id) and the rseq `cpu_id` offset.
    pub(crate) update_path: UpdatePath,
    pub(crate) section_limit: usize,
    pub(crate) rseq_off: isize,
    pub(crate) unified: bool,
    pub(crate) default_policy: FlushPolicy,
    /// The `Threshold` read pace, clock and background-flusher nudge every
    /// domain of the engine gets ([`Pace`]).
    pub(crate) pace: Pace,
    /// Every group's per-CPU state but its reference count's: written
    /// only on the CPUs a group uses (its links and stat slots start
    /// zeroed, unwritten), so a group's pages there are made resident by
    /// the CPUs it ran on. Taken through a CPU slot's cache of freed
    /// offsets ([`SharedArena`]), so that groups made and released on
    /// several CPUs do not share its lock and free lists.
    pub(crate) arena: SharedArena,
    /// The groups' reference counts' slots: 16 bytes per possible CPU per
    /// group, written on every CPU at creation and at removal (a switch
    /// freezes each slot). Kept apart so that those writes do not make
    /// the pages of [`arena`](Self::arena) resident on every CPU.
    pub(crate) ref_arena: SharedArena,
    /// Read by every group creation and removal on every CPU, written only
    /// by registrations: a lock per CPU slot, so that creations on
    /// different CPUs share no lock line.
    pub(crate) topo: PercpuRwLock<Topology>,
    /// The registered extensions, read without a lock ([`ExtList`]).
    pub(crate) exts: ExtList,
    /// Removed groups whose last reference has not been dropped yet.
    pub(crate) zombies: Zombies,
    /// Some group of this engine has had a `cpu.max` quota (module
    /// `bandwidth`): polls of groups not marked limited then also look for
    /// a quota up their chain (a group removed before the quota was set is
    /// not in the marked subtree).
    pub(crate) cpu_max_used: crate::sync::AtomicBool,
    /// The next group id ([`Group::id`]); ids are never reused.
    /// On a line of its own: every creation writes it, on any CPU, and
    /// the fields around it are read by every creation.
    pub(crate) next_group_id: crate::percpu::CachePadded<AtomicU64>,
    /// Queues told of every group removal ([`Rstat::watch_removals`](crate::Rstat::watch_removals)).
    pub(crate) removal_watchers: Mutex<Vec<std::sync::Weak<RemovalQueue>>>,
    /// The largest `max_depth` of any removal watch ever created (0: none;
    /// the root, depth 0, is never removed): removals deeper than this
    /// skip the watcher lock.
    pub(crate) removal_watch_depth: AtomicUsize,
    /// The built-in `cpu` controller's id, if the engine has it (it is
    /// registered first, so always 0): where the attach module's feed
    /// charges thread CPU time.
    pub(crate) cpu_ctl_id: Option<usize>,
    /// µs of thread CPU time the attach module's feed charged to this
    /// engine's groups (each part of the process's CPU clock), per `cpu`
    /// item (usage, user, system): what a read of the root's `cpu` stats
    /// subtracts from the charged totals to find the time charged by hand
    /// (`controller/process.rs`).
    pub(crate) attached_cpu_us: [AtomicU64; 3],
    /// Groups whose last reference was dropped where releasing them was
    /// not safe (by the accounting allocator, inside `dealloc`): a
    /// push-only stack through `GroupInner::deferred_next`, emptied whole
    /// by [`Rstat::release_deferred`](crate::Rstat::release_deferred).
    pub(crate) deferred: AtomicPtr<GroupInner>,
}

impl EngineInner {
    /// Flush every domain's root (the periodic flusher's period), taking
    /// any pending ask for a root flush of it (this flush answers it).
    #[cfg_attr(rstat_loom, allow(dead_code))]
    pub(crate) fn flush_all_roots(&self) {
        self.flush_roots(|_| true);
    }

    /// Run every extension's [`periodic`](crate::group::ext::GroupExt::periodic)
    /// housekeeping (the periodic flusher's, after a root flush), outside
    /// the topology lock.
    #[cfg_attr(rstat_loom, allow(dead_code))]
    pub(crate) fn run_ext_periodic(&self) {
        for (_, e) in self.exts.iter() {
            e.periodic_erased();
        }
    }

    /// Flush the root of every domain whose paced reads asked for it since
    /// the last take (the periodic flusher's answer to a nudge).
    #[cfg_attr(rstat_loom, allow(dead_code))]
    pub(crate) fn flush_asked_roots(&self) {
        self.flush_roots(|asked| asked);
    }

    /// Take each domain's root-flush ask, and flush its root if `flush`
    /// says so given the ask.
    #[cfg_attr(rstat_loom, allow(dead_code))]
    fn flush_roots(&self, flush: impl Fn(bool) -> bool) {
        let domains: Vec<*const Domain> = self
            .topo
            .read()
            .domains
            .iter()
            .map(|d| &**d as *const Domain)
            .collect();
        for d in domains {
            // SAFETY: domains live as long as the engine, which `self` is.
            let d = unsafe { &*d };
            if flush(d.take_root_flush_ask()) {
                d.flush_root();
            }
        }
    }

    pub(crate) fn new_domain(&self) -> Result<Box<Domain>> {
        let backlog = self
            .arena
            .arena()
            .alloc::<BacklogHead>(1, |_, _| BacklogHead::new())?;
        Ok(Box::new(Domain::new(
            self.nr_cpus,
            self.section_limit,
            self.rseq_off,
            backlog,
            self.pace.clone(),
        )))
    }

    /// Create `g`'s state of extension `id` (parent's first; caller holds
    /// the topology lock, either side).
    pub(crate) fn attach_ext(&self, g: &GroupInner, id: usize, e: &dyn ErasedExt) {
        if !g.tables().ext[id].load(Ordering::Relaxed).is_null() {
            return;
        }
        let parent = g.parent.as_ref().map_or(core::ptr::null_mut(), |p| {
            p.inner().tables().ext[id].load(Ordering::Acquire)
        });
        // SAFETY: the group is live (the caller is attaching it), and the
        // handle is never dropped (it holds no reference of its own).
        let handle = unsafe { Group::borrow_ptr(core::ptr::NonNull::from(g)) };
        // SAFETY: the parent's state is null (root) or live.
        let s = unsafe { e.create_erased(parent, &handle) };
        g.tables().ext[id].store(s, Ordering::Release);
    }

    /// Give `g` a node in every domain and a css for every controller (or
    /// only for `only`, when registering one). Caller holds the topology
    /// lock (the shared side to create a group, the exclusive side to
    /// register); `g`'s parent is already attached.
    pub(crate) fn attach(
        &self,
        topo: &Topology,
        g: &GroupInner,
        only: Option<&Arc<CtlEntry>>,
    ) -> Result<()> {
        let ctls: &[Arc<CtlEntry>] = match only {
            Some(c) => core::slice::from_ref(c),
            None => &topo.controllers,
        };
        // The domains that need a node, each with its node's allocation:
        // the per-CPU links point back at their node, so its address is
        // fixed (a raw allocation) before the links are built. Made before
        // the arena's cache is locked, so that lock is held only for the
        // arena's own work (another thread on this CPU slot would wait).
        let mut raw: [*mut core::mem::MaybeUninit<TreeNode>; MAX_CONTROLLERS] =
            [core::ptr::null_mut(); MAX_CONTROLLERS];
        for (i, r) in raw.iter_mut().enumerate().take(topo.domains.len()) {
            if g.tables().nodes[i].load(Ordering::Relaxed).is_null() {
                *r = Box::into_raw(Box::<TreeNode>::new_uninit());
            }
        }
        let free_raw = |raw: &[*mut core::mem::MaybeUninit<TreeNode>]| {
            for &r in raw.iter().filter(|r| !r.is_null()) {
                // SAFETY: from Box::into_raw above, uninitialised, not
                // installed anywhere: freeing it drops nothing.
                drop(unsafe { Box::from_raw(r) });
            }
        };
        // Every per-CPU unit, in one hold of this CPU slot's arena cache
        // (`SharedArena::local`; the arena's own lock only to refill it): each new
        // node's links, and each controller's stat slots (one per item,
        // plus the pending-update counters `COUNTED`, `UPDATES`,
        // `CONSUMED`). On a failure, what this call took goes back.
        let mut links: [Option<PcpuPtr<PcpuLinks>>; MAX_CONTROLLERS] = [None; MAX_CONTROLLERS];
        let mut stats: [Option<PcpuPtr<StatSlot>>; MAX_CONTROLLERS] = [None; MAX_CONTROLLERS];
        {
            let mut arena = self.arena.local();
            let mut taken = || -> core::result::Result<(), crate::percpu::arena::ArenaError> {
                for (i, &r) in raw.iter().enumerate() {
                    if !r.is_null() {
                        // Zeroed, unwritten, as the stat slots below.
                        links[i] = Some(PcpuLinks::alloc_in(&mut arena)?);
                    }
                }
                for (k, ctl) in ctls.iter().enumerate() {
                    // Zeroed, unwritten: a group's release zeroes only the
                    // units it wrote.
                    stats[k] = Some(StatSlot::alloc_in(&mut arena, ctl.nr_stats + EXTRA_SLOTS)?);
                }
                Ok(())
            };
            if let Err(e) = taken() {
                for l in links.iter_mut().filter_map(Option::take) {
                    // SAFETY: allocated just above; nothing points at it;
                    // never written.
                    unsafe { PcpuLinks::free_in(&mut arena, l, core::iter::empty()) };
                }
                for st in stats.iter_mut().filter_map(Option::take) {
                    // SAFETY: as above; never written.
                    unsafe { StatSlot::free_in(&mut arena, st, core::iter::empty()) };
                }
                drop(arena);
                free_raw(&raw);
                return Err(e.into());
            }
        }
        for (i, domain) in topo.domains.iter().enumerate() {
            let (r, Some(links)) = (raw[i], links[i]) else {
                continue;
            };
            let me = r.cast::<TreeNode>();
            let parent = g.parent.as_ref().map_or(core::ptr::null(), |p| {
                p.inner().tables().nodes[i]
                    .load(Ordering::Relaxed)
                    .cast_const()
            });
            // SAFETY: `r` is a live, exclusively owned allocation.
            unsafe {
                (*r).write(TreeNode {
                    parent,
                    css: &g.css,
                    owner: g as &dyn NodeOwner,
                    releasing: UnsafeCell::new(false),
                    flushed_at: AtomicU64::new(0),
                    touched: CpuMask::new(),
                    domain: &**domain,
                    links,
                })
            };
            // Ownership passes to the group; freed in its Drop.
            g.tables().nodes[i].store(me, Ordering::Release);
            if g.parent.is_none() {
                domain.root.store(me, Ordering::Release);
            }
        }
        for (k, ctl) in ctls.iter().enumerate() {
            let Some(stats) = stats[k] else { continue };
            let node = g.tables().nodes[ctl.domain_idx].load(Ordering::Relaxed);
            let parent = g.parent.as_ref().map_or(core::ptr::null(), |p| {
                p.inner().css[ctl.id].load(Ordering::Relaxed).cast_const()
            });
            // SAFETY: the node was installed above and lives with `g`.
            let css = Css::boxed(CtlRef::new(ctl), parent, stats, unsafe { &*node });
            g.css[ctl.id].store(LineBox::into_raw(css), Ordering::Release);
        }
        if only.is_none() {
            for (id, e) in self.exts.iter() {
                self.attach_ext(g, id, &**e);
            }
        }
        Ok(())
    }
}

/// The engine's count of zombies (removed groups still held), kept per
/// CPU slot: a removal adds one on its CPU's counter and the release subtracts
/// it on its own, so groups removed and released on several CPUs write no
/// line in common. The count is their sum: exact once no removal or
/// release is under way.
pub(crate) struct Zombies(Box<[crate::percpu::CachePadded<crate::sync::AtomicI64>]>);

impl Zombies {
    /// Counters for `nr_slots` CPU slots (at least one).
    pub(crate) fn new(nr_slots: usize) -> Zombies {
        Zombies(
            (0..nr_slots.max(1))
                .map(|_| crate::percpu::CachePadded::new(crate::sync::AtomicI64::new(0)))
                .collect(),
        )
    }

    /// CPU `cpu`'s counter (folded into the slots).
    fn on(&self, cpu: usize) -> &crate::sync::AtomicI64 {
        &self.0[crate::percpu::cpu::fold(cpu, self.0.len())]
    }

    /// A group was removed (or abandoned).
    pub(crate) fn add(&self) {
        self.add_on(crate::percpu::cpu::current());
    }

    /// A zombie was released.
    pub(crate) fn sub(&self) {
        self.sub_on(crate::percpu::cpu::current());
    }

    /// [`add`](Self::add) on CPU `cpu`'s counter.
    pub(crate) fn add_on(&self, cpu: usize) {
        // Relaxed: a count, read as a hint (see `count`).
        self.on(cpu).fetch_add(1, Ordering::Relaxed);
    }

    /// [`sub`](Self::sub) on CPU `cpu`'s counter.
    pub(crate) fn sub_on(&self, cpu: usize) {
        // Relaxed: as in `add_on`.
        self.on(cpu).fetch_sub(1, Ordering::Relaxed);
    }

    /// The zombies now: the counters' sum (never below zero, though one
    /// counter alone may be).
    pub(crate) fn count(&self) -> usize {
        let sum: i64 = self.0.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        usize::try_from(sum).unwrap_or(0)
    }
}
