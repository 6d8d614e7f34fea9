//! [`Builder`]: an engine's settings, checked once at
//! [`build`](Builder::build), and the choice of update path (restartable
//! sections where the kernel offers them and asked for, the locked add
//! otherwise).

use std::sync::Arc;

use super::{
    Rstat, CPU_CTL_ID, CPU_STAT_NAMES, DEFAULT_FLUSH_PERIOD, DEFAULT_READ_PACE, ROOT_GROUP_ID,
};
use crate::controller::CounterSetController;
use crate::error::{Error, Result};
use crate::group::ext::ExtList;
use crate::group::state::{Topology, Zombies};
use crate::group::{EngineInner, Group};
use crate::percpu::cpu;
use crate::percpu::rwlock::PercpuRwLock;
use crate::percpu::shared_arena::SharedArena;
use crate::stat::pace::Clock;
use crate::stat::policy::{check_pace, check_period, FlushPolicy};
use crate::stat::tree::Pace;
use crate::stat::update::UpdatePath;
use crate::sync::{AtomicPtr, AtomicU64, AtomicUsize, Mutex};

/// Configures an [`Rstat`].
#[derive(Clone, Debug)]
pub struct Builder {
    nr_cpus: Option<usize>,
    update_path: UpdatePath,
    unified: bool,
    cpu_controller: bool,
    policy: FlushPolicy,
    periodic: Option<std::time::Duration>,
    read_pace: Option<std::time::Duration>,
    /// The clock flush stamps are read from: the monotonic clock unless a
    /// test gave its own ([`testing`](crate::testing)).
    clock: Option<Clock>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            nr_cpus: None,
            update_path: UpdatePath::Rseq,
            unified: false,
            cpu_controller: true,
            policy: FlushPolicy::default(),
            periodic: if cfg!(rstat_loom) {
                None
            } else {
                Some(DEFAULT_FLUSH_PERIOD)
            },
            read_pace: Some(DEFAULT_READ_PACE),
            clock: None,
        }
    }
}

impl Builder {
    /// Number of per-CPU slots (default: possible CPUs, plus one for
    /// threads without a CPU id when updates use rseq). CPU ids beyond it
    /// are folded in. Values below 1 are raised to 1; above
    /// [`MAX_NR_CPUS`](crate::MAX_NR_CPUS), [`build`](Self::build) fails
    /// with [`Error::TooManyCpus`]. Fewer slots than
    /// possible CPUs share slots between CPUs, which needs the locked
    /// update path.
    pub fn nr_cpus(mut self, n: usize) -> Self {
        self.nr_cpus = Some(n.max(1));
        self
    }

    /// The update path to use (default [`UpdatePath::Rseq`]).
    /// [`UpdatePath::Rseq`] falls back to the locked path where restartable
    /// sequences or `membarrier`'s rseq command are not available, or where
    /// slots are shared between CPUs ([`Rstat::update_path`] tells which one
    /// the engine got).
    ///
    /// The trade-off: the rseq path makes each update cheaper by what a
    /// locked add costs on the core (a locked add also orders every later
    /// load of the thread behind it), and costs every flush that reads
    /// slots one `membarrier` system call, which interrupts the CPUs
    /// running the process's threads: exact reads, `Threshold` reads that
    /// flush, the periodic flusher. A group's removal and final release
    /// pay none, so a group per request costs the same on both paths.
    /// Choose [`UpdatePath::Locked`] where exact reads are frequent and
    /// their latency matters more than the updates' cost, or where
    /// interrupting the process's other CPUs is not acceptable.
    /// `rstat bench update`, `rstat bench peers` and `rstat demo` measure
    /// the two on your machine; BENCHMARKS.md has the latest figures and
    /// the machine they ran on.
    pub fn update_path(mut self, p: UpdatePath) -> Self {
        self.update_path = p;
        self
    }

    /// One updated tree and one flush lock shared by every controller, as
    /// before kernel v6.16. Only for measuring what separate trees buy.
    pub fn unified(mut self, on: bool) -> Self {
        self.unified = on;
        self
    }

    /// The flush policy controllers start with (default
    /// [`FlushPolicy::Threshold`]); each can be changed at run time.
    pub fn flush_policy(mut self, p: FlushPolicy) -> Self {
        self.policy = p;
        self
    }

    /// The periodic root flusher's period (default [`DEFAULT_FLUSH_PERIOD`],
    /// 2 s); `None` turns it off. Checked by [`build`](Self::build): 1 ms
    /// to 24 h.
    pub fn periodic_flush(mut self, period: Option<std::time::Duration>) -> Self {
        self.periodic = period;
        self
    }

    /// The [`Threshold`](FlushPolicy::Threshold) policy's read pace P
    /// (default [`DEFAULT_READ_PACE`], 100 ms): a read whose subtree is
    /// past its unit threshold copies the published totals without
    /// flushing when a flush of its group's subtree, or of the root's,
    /// started less than P ago, and asks the periodic flusher for a root
    /// flush; otherwise it flushes as before. Such a read includes every
    /// update that completed P before it began (the bound's time part; see
    /// [`policy`](crate::policy)'s "The bound"). `None`: reads past the
    /// threshold always flush, and the bound is in units only. Checked by
    /// [`build`](Self::build): 1 ms to 24 h
    /// ([`PACE_RANGE`](crate::policy::PACE_RANGE)).
    pub fn read_pace(mut self, pace: Option<std::time::Duration>) -> Self {
        self.read_pace = pace;
        self
    }

    /// Read flush stamps from `clock` instead of the monotonic clock (for
    /// tests; see [`testing`](crate::testing)).
    pub(crate) fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Leave out the built-in `cpu` controller (for minimal models; see
    /// [`testing`](crate::testing)).
    pub(crate) fn with_cpu_controller(mut self, on: bool) -> Self {
        self.cpu_controller = on;
        self
    }

    /// Build the engine with its root group.
    pub fn build(self) -> Result<Rstat> {
        if let Some(p) = self.periodic {
            check_period(p)?;
        }
        if let Some(p) = self.read_pace {
            check_pace(p)?;
        }
        if let Some(n) = self.nr_cpus.filter(|&n| n > super::MAX_NR_CPUS) {
            return Err(Error::TooManyCpus {
                nr_cpus: n,
                max: super::MAX_NR_CPUS,
            });
        }
        let (nr_cpus, update_path, section_limit, rseq_off) = self.choose_update_path();
        let inner = Arc::new(EngineInner {
            nr_cpus,
            update_path,
            section_limit,
            rseq_off,
            unified: self.unified,
            default_policy: self.policy,
            pace: Pace {
                pace: self.read_pace,
                clock: self.clock.unwrap_or_else(|| Clock::real(self.read_pace)),
                nudge: Arc::default(),
            },
            zombies: Zombies::new(nr_cpus),
            cpu_max_used: crate::sync::AtomicBool::new(false),
            next_group_id: crate::percpu::CachePadded::new(AtomicU64::new(ROOT_GROUP_ID)),
            removal_watchers: Mutex::new(Vec::new()),
            removal_watch_depth: AtomicUsize::new(0),
            cpu_ctl_id: self.cpu_controller.then_some(CPU_CTL_ID),
            attached_cpu_us: core::array::from_fn(|_| AtomicU64::new(0)),
            deferred: AtomicPtr::new(core::ptr::null_mut()),
            arena: SharedArena::new(nr_cpus),
            ref_arena: SharedArena::new(nr_cpus),
            topo: PercpuRwLock::new(
                nr_cpus,
                Topology {
                    controllers: Vec::new(),
                    domains: Vec::new(),
                },
            ),
            exts: ExtList::default(),
        });
        if self.unified {
            let d = inner.new_domain()?;
            inner.topo.write().domains.push(d);
        }
        let root = Group::new_group(&inner, None, "")?;
        let mut rs = Rstat {
            inner,
            root,
            cpu: None,
            #[cfg(not(rstat_loom))]
            periodic: std::sync::Mutex::new(None),
        };
        if self.cpu_controller {
            let cpu = rs.register(CounterSetController::new("cpu", &CPU_STAT_NAMES))?;
            debug_assert_eq!(
                cpu.ctl.id, CPU_CTL_ID,
                "the cpu controller is registered first"
            );
            rs.cpu = Some(cpu);
        }
        if let Some(p) = self.periodic {
            rs.set_periodic_flush(Some(p))?;
        }
        Ok(rs)
    }
}

impl Builder {
    /// `(nr_cpus, path, section limit, rseq offset)`. Restartable sections
    /// need a slot of their own for every CPU id (`0..possible`), and, for a
    /// thread the kernel gives no CPU id (one whose rseq registration
    /// failed), at least one more slot that no section writes: a section's
    /// add is not atomic against another CPU's. Under loom and Miri the
    /// sections are simulated (a per-slot lock around a plain load and
    /// store) on every slot.
    fn choose_update_path(&self) -> (usize, UpdatePath, usize, isize) {
        #[cfg(any(rstat_loom, miri))]
        {
            let nr = self.nr_cpus.unwrap_or_else(cpu::possible_cpus);
            match self.update_path {
                UpdatePath::Rseq if u32::try_from(nr).is_ok() => (nr, UpdatePath::Rseq, nr, 0),
                _ => (nr, UpdatePath::Locked, 0, 0),
            }
        }
        #[cfg(not(any(rstat_loom, miri)))]
        {
            let possible = cpu::possible_cpus();
            let off = match self.update_path {
                UpdatePath::Rseq => crate::percpu::rseq::available(),
                UpdatePath::Locked => None,
            };
            let nr = self
                .nr_cpus
                .unwrap_or(possible + usize::from(off.is_some()));
            match off {
                // Css keeps both in 32 bits.
                Some(off)
                    if nr > possible
                        && u32::try_from(possible).is_ok()
                        && i32::try_from(off).is_ok() =>
                {
                    (nr, UpdatePath::Rseq, possible, off)
                }
                _ => (nr, UpdatePath::Locked, 0, 0),
            }
        }
    }
}
