//! `rstat bench alloc`: the accounting allocator against the allocator it
//! wraps and two trackers of the kind other projects use.
//!
//! Two threads, each pinned and entered in its own group under a common
//! parent, run the same workload: allocate an object of 16-4096 bytes (a
//! fixed pseudo-random sequence), keep up to [`LIVE`] objects, free the
//! oldest; one object in eight is handed to the other thread, which frees
//! it. Measured side by side, interleaved sample by sample, through the
//! same inner allocator, for two inner allocators:
//!
//! - **system**: the inner allocator alone;
//! - **accounted**: `Accounted<inner>`, bound to a memory controller
//!   with [`heap_config`] (a 256 KiB stock batch);
//! - **eager**: an owner word placed like ours (a header before objects
//!   aligned to 8 or less, a trailer after the others), but every
//!   ancestor's shared atomic charged on each allocation and free
//!   (tracking-allocator's shape);
//! - **group counter**: the cheapest flat per-tenant tracker: the same
//!   owner word and one shared atomic per group, nothing else (no
//!   hierarchy, no limits, no events): what a service hand-rolls to know
//!   each tenant's heap;
//! - **thread batch**: ClickHouse's `MemoryTracker` shape: a per-thread
//!   untracked amount, flushed to the thread's group and its ancestors
//!   when it passes ±4 MiB; no owner, so a free is charged to the freeing
//!   thread's group.
//!
//! **Two inner allocators.** The fields (`system_mops`,
//! `accounted_mops`, `eager_mops`, `thread_batch_mops`, `overhead_pct`,
//! `ratio_vs_eager`) are measured over `System` (glibc here), as the issue
//! describes the benchmark. With glibc the inner allocator dominates: an
//! allocation and free of 16-4096 bytes with cross-thread frees costs it
//! 100+ ns (arena locks, futex wakes), the eager tracker is within glibc's
//! own run-to-run variance of `System` alone, so neither target can be
//! told apart from noise there, and `ratio_vs_eager >= 2` cannot be
//! reached by any tracker over it. The same five variants are therefore
//! also measured over mimalloc (the `mimalloc_*` fields), where the
//! inner cost is a few tens of ns and the trackers' own cost shows; the
//! targets over mimalloc are `mimalloc_ratio_vs_alone` (accounted over
//! mimalloc alone) and `mimalloc_ratio_vs_group_counter` (accounted over
//! the group counter tracker). No
//! baseline is changed between the two: the same code, generic over the
//! inner allocator. Each ratio is the median of per-sample ratios (a
//! sample runs all ten variants back to back, in a rotating order).
//!
//! The allocators are driven through their [`GlobalAlloc`] methods, not
//! installed as the process's `#[global_allocator]`: one binary then
//! measures all five in one run, interleaved, with the benchmark's own
//! bookkeeping (the rings and hand-over queues) going through the same
//! process allocator in every variant. What this leaves out is the
//! allocations the rest of the program makes, which a real
//! `#[global_allocator]` would also charge.
//!
//! **Drift**: at quiescent points (both threads stopped between rounds)
//! each group's charged amount is compared with the bytes (plus overhead)
//! of the objects charged to it that are still live: for the accounted
//! allocator `memory.current` before draining the stocks (bounded by one
//! batch per CPU, [`drift_bound`]) and after (must be 0); for the thread
//! batch tracker its group counter (unbounded: cross-thread frees move
//! bytes from one group to the other for good).

pub mod experiment;
pub(crate) mod trackers;

pub use trackers::THREAD_BATCH;

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::Ordering;
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use mimalloc::MiMalloc;
use rstat::alloc::{drift_bound, heap_config, overhead};
use rstat::memory::Memory;
use rstat::{Group, Rstat};
use serde::Serialize;

use crate::machine::{median, pin_to_cpu, round, unpin, Machine};
use trackers::{Node, Set, ThreadBatch, NODE};

/// Objects each thread keeps live.
pub const LIVE: usize = 256;
/// One object in this many is freed by the other thread.
pub const HAND_OVER: usize = 8;

/// Settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Allocations per thread per round.
    pub ops: usize,
    /// Rounds per sample (a quiescent drift check after each).
    pub rounds: usize,
    /// Samples (the median is reported).
    pub samples: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ops: 500_000,
            rounds: 4,
            samples: 5,
        }
    }
}

/// Results.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// `System` alone: millions of allocations (each with its free) per
    /// second over both threads.
    pub system_mops: f64,
    /// `Accounted<System>`.
    pub accounted_mops: f64,
    /// The eager tracker (owner word, every ancestor's shared atomic).
    pub eager_mops: f64,
    /// The thread batch tracker (4 MiB per thread, no owner).
    pub thread_batch_mops: f64,
    /// The group counter tracker (owner word, one shared atomic per
    /// group, no hierarchy).
    pub group_counter_mops: f64,
    /// The accounted allocator's extra time per operation over the system
    /// allocator's, in percent (target: at most 15).
    pub overhead_pct: f64,
    /// accounted / eager (target: at least 2).
    pub ratio_vs_eager: f64,
    /// The same four over mimalloc instead of `System` (extra fields:
    /// under a fast inner allocator the tracking cost is visible; under
    /// glibc's it is mostly hidden). mimalloc alone.
    pub mimalloc_mops: f64,
    /// `Accounted<MiMalloc>`.
    pub mimalloc_accounted_mops: f64,
    /// The eager tracker over mimalloc.
    pub mimalloc_eager_mops: f64,
    /// The thread batch tracker over mimalloc.
    pub mimalloc_thread_batch_mops: f64,
    /// The group counter tracker over mimalloc.
    pub mimalloc_group_counter_mops: f64,
    /// `overhead_pct` over mimalloc.
    pub mimalloc_overhead_pct: f64,
    /// `ratio_vs_eager` over mimalloc.
    pub mimalloc_ratio_vs_eager: f64,
    /// Accounted over mimalloc alone: `Accounted<MiMalloc>`'s rate over
    /// `MiMalloc`'s (median of per-sample ratios; target: at least 0.8).
    pub mimalloc_ratio_vs_alone: f64,
    /// Accounted over the group counter tracker, both over mimalloc
    /// (median of per-sample ratios; target: at least 1.0).
    pub mimalloc_ratio_vs_group_counter: f64,
    /// Largest |charged − live| per group at quiescent points, accounted
    /// allocator, stocks not drained.
    pub drift_bytes_max: u64,
    /// The documented bound on it: batch × nr_cpus.
    pub drift_bound_bytes: u64,
    /// Largest |charged − live| per group after draining the stocks (must
    /// be 0).
    pub drift_after_drain_bytes_max: u64,
    /// Largest |charged − live| per group for the thread batch tracker.
    pub thread_batch_drift_bytes_max: u64,
    /// How parallel the accounted runs were (CPU time of the threads over
    /// wall time: 2 when each had a CPU to itself).
    pub parallel: f64,
    /// Allocations per thread per round.
    pub ops: usize,
    /// Rounds per sample.
    pub rounds: usize,
    /// Samples.
    pub samples: usize,
    /// What was measured.
    pub what: String,
    /// The machine.
    pub machine: Machine,
}

/// A live object of the workload.
#[derive(Clone, Copy)]
struct Obj {
    ptr: usize,
    layout: Layout,
    /// The thread (and group) that allocated it.
    owner: usize,
}

/// Which allocator a run drives.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    System,
    Accounted,
    Eager,
    ThreadBatch,
    GroupCounter,
}

/// Per-run context.
struct Ctx<'a> {
    mem: &'a Memory,
    groups: &'a [Group; 2],
    /// The eager tracker's leaves.
    nodes: [&'static Node; 2],
    /// The thread batch tracker's leaves (its own tree).
    tb_nodes: [&'static Node; 2],
    /// The group counter tracker's groups (parentless).
    flat_nodes: [&'static Node; 2],
}

/// One run: `rounds` rounds of `ops` allocations per thread. Returns the
/// threads' mean CPU time over the rounds, the drifts
/// seen (before and after draining; the tracker's for thread batch), and
/// the threads' parallelism.
fn run_kind<I: GlobalAlloc + Sync>(
    kind: Kind,
    set: &Set<I>,
    ctx: &Ctx<'_>,
    cfg: &Config,
) -> (Duration, u64, u64, f64) {
    match kind {
        Kind::System => run_one(&set.inner, kind, ctx, cfg),
        Kind::Accounted => run_one(&set.accounted, kind, ctx, cfg),
        Kind::Eager => run_one(&set.eager, kind, ctx, cfg),
        Kind::ThreadBatch => run_one(&set.thread_batch, kind, ctx, cfg),
        Kind::GroupCounter => run_one(&set.group_counter, kind, ctx, cfg),
    }
}

/// [`run_kind`] for one allocator (generic, so each is inlined as it
/// would be as the global allocator).
fn run_one<A: GlobalAlloc + Sync>(
    a: &A,
    kind: Kind,
    ctx: &Ctx<'_>,
    cfg: &Config,
) -> (Duration, u64, u64, f64) {
    let inbox: [Mutex<Vec<Obj>>; 2] = Default::default();
    let rings: [Mutex<Vec<Obj>>; 2] = Default::default();
    let start = Barrier::new(3);
    let done = Barrier::new(3);
    let times: Mutex<Vec<(Duration, Duration)>> = Mutex::new(Vec::new());
    let (mut drift, mut drift_drained) = (0u64, 0u64);
    let mut wall = Duration::ZERO;
    std::thread::scope(|s| {
        for t in 0..2 {
            let (inbox, rings, start, done, times) = (&inbox, &rings, &start, &done, &times);
            s.spawn(move || {
                pin_to_cpu(t);
                let _in = (kind == Kind::Accounted).then(|| ctx.groups[t].enter());
                let node = match kind {
                    Kind::ThreadBatch => ctx.tb_nodes[t],
                    Kind::GroupCounter => ctx.flat_nodes[t],
                    _ => ctx.nodes[t],
                };
                NODE.with(|c| c.set(Some(node)));
                let mut ring: Vec<Obj> = std::mem::take(&mut *rings[t].lock().expect("ring"));
                ring.reserve(LIVE);
                let mut out: Vec<Obj> = Vec::with_capacity(64);
                let mut seed = 0x2545_f491_4f6c_dd1du64 ^ t as u64;
                let mut head = 0usize;
                for _ in 0..cfg.rounds {
                    start.wait();
                    let (t0, c0) = (Instant::now(), cputime());
                    for i in 0..cfg.ops {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        let size = 16 + (seed % 4081) as usize;
                        let layout = Layout::from_size_align(size, 8).expect("layout");
                        // SAFETY: non-zero size.
                        let p = unsafe { a.alloc(layout) };
                        assert!(!p.is_null(), "allocation failed");
                        // SAFETY: `p` has at least one byte.
                        unsafe { p.write(i as u8) };
                        let o = Obj {
                            ptr: p as usize,
                            layout,
                            owner: t,
                        };
                        if i % HAND_OVER == 0 {
                            out.push(o);
                            if out.len() == out.capacity() {
                                inbox[1 - t].lock().expect("inbox").append(&mut out);
                            }
                        } else if ring.len() < LIVE {
                            ring.push(o);
                        } else {
                            let old = std::mem::replace(&mut ring[head], o);
                            head = (head + 1) % LIVE;
                            // SAFETY: allocated above with `old.layout`.
                            unsafe { a.dealloc(black_box(old.ptr as *mut u8), old.layout) };
                        }
                        if i % 256 == 0 {
                            let theirs = std::mem::take(&mut *inbox[t].lock().expect("inbox"));
                            for o in theirs {
                                // SAFETY: allocated by the other thread with
                                // `o.layout`, handed over.
                                unsafe { a.dealloc(o.ptr as *mut u8, o.layout) };
                            }
                        }
                    }
                    if kind == Kind::ThreadBatch {
                        ThreadBatch::<()>::flush();
                    }
                    inbox[1 - t].lock().expect("inbox").append(&mut out);
                    times
                        .lock()
                        .expect("times")
                        .push((t0.elapsed(), cputime().saturating_sub(c0)));
                    *rings[t].lock().expect("ring") = ring.clone();
                    done.wait();
                }
                // Free everything this thread still holds (its ring and
                // what was handed to it), after the last round.
                start.wait();
                for o in ring.drain(..) {
                    // SAFETY: live, allocated with `o.layout`.
                    unsafe { a.dealloc(o.ptr as *mut u8, o.layout) };
                }
                rings[t].lock().expect("ring").clear();
                done.wait();
                start.wait();
                for o in std::mem::take(&mut *inbox[t].lock().expect("inbox")) {
                    // SAFETY: as above.
                    unsafe { a.dealloc(o.ptr as *mut u8, o.layout) };
                }
                if kind == Kind::ThreadBatch {
                    ThreadBatch::<()>::flush();
                }
                NODE.with(|c| c.set(None));
                done.wait();
            });
        }
        for _ in 0..cfg.rounds {
            start.wait();
            done.wait();
            // Quiescent: both threads wait at `start`.
            let mut live = [0i64; 2];
            for o in rings.iter().chain(inbox.iter()) {
                for o in o.lock().expect("live").iter() {
                    live[o.owner] += (o.layout.size() + overhead(o.layout.size())) as i64;
                }
            }
            match kind {
                Kind::Accounted => {
                    for (g, l) in ctx.groups.iter().zip(live) {
                        let c = ctx.mem.current(g).unwrap_or(0) as i64;
                        drift = drift.max(c.abs_diff(l));
                    }
                    let _ = ctx.mem.drain_stocks(&ctx.groups[0]);
                    let _ = ctx.mem.drain_stocks(&ctx.groups[1]);
                    for (g, l) in ctx.groups.iter().zip(live) {
                        let c = ctx.mem.current(g).unwrap_or(0) as i64;
                        drift_drained = drift_drained.max(c.abs_diff(l));
                    }
                }
                Kind::ThreadBatch => {
                    // The tracker counts sizes, without overhead.
                    let mut live_sizes = [0i64; 2];
                    for o in rings.iter().chain(inbox.iter()) {
                        for o in o.lock().expect("live").iter() {
                            live_sizes[o.owner] += o.layout.size() as i64;
                        }
                    }
                    for (n, l) in ctx.tb_nodes.iter().zip(live_sizes) {
                        drift = drift.max(n.amount.load(Ordering::Relaxed).abs_diff(l));
                    }
                }
                _ => {}
            }
        }
        start.wait();
        done.wait();
        start.wait();
        done.wait();
    });
    let times = times.into_inner().expect("times");
    let mut cpu = Duration::ZERO;
    for pair in times.chunks(2) {
        wall += pair.iter().map(|p| p.0).max().unwrap_or_default();
        cpu += pair.iter().map(|p| p.1).sum::<Duration>();
    }
    let parallel = if wall.is_zero() {
        0.0
    } else {
        cpu.as_secs_f64() / wall.as_secs_f64()
    };
    // The rate is taken over the threads' CPU time (per thread, as if
    // each had its CPU throughout): on a machine shared with other work
    // the wall time mostly measures the scheduler.
    (cpu / 2, drift, drift_drained, parallel)
}

/// This thread's CPU time.
fn cputime() -> Duration {
    crate::machine::thread_cputime()
}

/// The medians over samples of one inner allocator's five variants, and
/// its four ratios (accounted over alone, eager and the group counter; the
/// overhead is alone over accounted), each the median of the per-sample
/// ratios (a sample runs the variants back to back, so a ratio compares
/// runs made under the same machine load).
struct Figures {
    mops: [f64; KINDS.len()],
    overhead_pct: f64,
    ratio_vs_eager: f64,
    ratio_vs_alone: f64,
    ratio_vs_group_counter: f64,
}

/// The variants, in the order of `Figures::mops`.
const KINDS: [Kind; 5] = [
    Kind::System,
    Kind::Accounted,
    Kind::Eager,
    Kind::ThreadBatch,
    Kind::GroupCounter,
];

fn figures(v: &[Vec<f64>; KINDS.len()]) -> Figures {
    let per_sample = |f: &dyn Fn(usize) -> f64| median((0..v[0].len()).map(f).collect());
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let overhead = per_sample(&|i| ratio(v[0][i], v[1][i]));
    let vs_eager = per_sample(&|i| ratio(v[1][i], v[2][i]));
    let vs_alone = per_sample(&|i| ratio(v[1][i], v[0][i]));
    let vs_group_counter = per_sample(&|i| ratio(v[1][i], v[4][i]));
    Figures {
        mops: v.clone().map(|x| round(median(x), 2)),
        ratio_vs_alone: round(vs_alone, 2),
        ratio_vs_group_counter: round(vs_group_counter, 2),
        overhead_pct: if overhead > 0.0 {
            round((overhead - 1.0) * 100.0, 1)
        } else {
            0.0
        },
        ratio_vs_eager: round(vs_eager, 2),
    }
}

/// Run the benchmark.
pub fn run(cfg: &Config) -> Report {
    let cfg = Config {
        ops: cfg.ops.max(LIVE * 2),
        rounds: cfg.rounds.max(1),
        samples: cfg.samples.max(1),
    };
    let rs = Rstat::builder()
        .periodic_flush(None)
        .build()
        .expect("engine");
    let mem = Memory::register_with(&rs, heap_config()).expect("memory controller");
    let sys_set = Set::new(|| System);
    let mi_set = Set::new(|| MiMalloc);
    sys_set.accounted.install(&rs, &mem).expect("bind");
    mi_set.accounted.install(&rs, &mem).expect("bind");
    let parent = rs.root().create_child("bench").expect("group");
    let groups = [
        parent.create_child("a").expect("group"),
        parent.create_child("b").expect("group"),
    ];
    let root = Node::leak(None);
    let mid = Node::leak(Some(root));
    let nodes = [Node::leak(Some(mid)), Node::leak(Some(mid))];
    let tb_mid = Node::leak(Some(root));
    let tb_nodes = [Node::leak(Some(tb_mid)), Node::leak(Some(tb_mid))];
    let flat_nodes = [Node::leak(None), Node::leak(None)];
    let ctx = Ctx {
        mem: &mem,
        groups: &groups,
        nodes,
        tb_nodes,
        flat_nodes,
    };
    let total = (2 * cfg.ops * cfg.rounds) as f64;
    let mops = |d: Duration| {
        if d.is_zero() {
            0.0
        } else {
            total / d.as_secs_f64() / 1e6
        }
    };
    // [inner][kind]: inner 0 is System, 1 mimalloc.
    let mut v: [[Vec<f64>; KINDS.len()]; 2] = Default::default();
    let (mut drift, mut drained, mut tb_drift) = (0u64, 0u64, 0u64);
    let mut parallel = Vec::new();
    let runs = 2 * KINDS.len();
    for sample in 0..cfg.samples {
        // Rotate the order each sample, so no variant always runs first
        // (fresh threads, cold allocator arenas) or after the same one.
        for r in 0..runs {
            let j = (r + sample) % runs;
            let (inner, i) = (j / KINDS.len(), j % KINDS.len());
            let kind = KINDS[i];
            let (wall, d, dd, par) = if inner == 0 {
                run_kind(kind, &sys_set, &ctx, &cfg)
            } else {
                run_kind(kind, &mi_set, &ctx, &cfg)
            };
            v[inner][i].push(mops(wall));
            match kind {
                Kind::Accounted => {
                    drift = drift.max(d);
                    drained = drained.max(dd);
                    parallel.push(par);
                }
                Kind::ThreadBatch => tb_drift = tb_drift.max(d),
                _ => {}
            }
        }
    }
    unpin();
    // Honesty checks: every byte charged came back.
    let _ = mem.drain_stocks(&parent);
    assert_eq!(mem.current(&parent).ok(), Some(0), "accounted bytes leaked");
    assert_eq!(mid.amount.load(Ordering::Relaxed), 0, "eager bytes leaked");
    assert_eq!(
        tb_mid.amount.load(Ordering::Relaxed),
        0,
        "thread batch bytes leaked"
    );
    for n in flat_nodes {
        assert_eq!(
            n.amount.load(Ordering::Relaxed),
            0,
            "group counter bytes leaked"
        );
    }
    let sys = figures(&v[0]);
    let mi = figures(&v[1]);
    Report {
        system_mops: sys.mops[0],
        accounted_mops: sys.mops[1],
        eager_mops: sys.mops[2],
        thread_batch_mops: sys.mops[3],
        group_counter_mops: sys.mops[4],
        overhead_pct: sys.overhead_pct,
        ratio_vs_eager: sys.ratio_vs_eager,
        mimalloc_mops: mi.mops[0],
        mimalloc_accounted_mops: mi.mops[1],
        mimalloc_eager_mops: mi.mops[2],
        mimalloc_thread_batch_mops: mi.mops[3],
        mimalloc_group_counter_mops: mi.mops[4],
        mimalloc_overhead_pct: mi.overhead_pct,
        mimalloc_ratio_vs_eager: mi.ratio_vs_eager,
        mimalloc_ratio_vs_alone: mi.ratio_vs_alone,
        mimalloc_ratio_vs_group_counter: mi.ratio_vs_group_counter,
        drift_bytes_max: drift,
        drift_bound_bytes: drift_bound(&mem),
        drift_after_drain_bytes_max: drained,
        thread_batch_drift_bytes_max: tb_drift,
        parallel: round(median(parallel), 2),
        ops: cfg.ops,
        rounds: cfg.rounds,
        samples: cfg.samples,
        what: format!(
            "Millions of allocations (16-4096 bytes, each freed later, 1 in {HAND_OVER} by the \
             other thread) per second of CPU time of each of 2 pinned threads, summed, each in its own group under a \
             common parent, {LIVE} objects live per thread; median of {} interleaved samples \
             of {} rounds x {} allocations per thread, for each variant over System (the issue's \
             fields) and over mimalloc (mimalloc_* fields); ratios are medians of per-sample \
             ratios. Drift checked after each round.",
            cfg.samples, cfg.rounds, cfg.ops
        ),
        machine: Machine::detect(),
    }
}

/// The human table.
pub fn table(r: &Report) -> String {
    let mut s = String::new();
    s.push_str(&format!("{}\n", r.machine.line()));
    s.push_str(&format!("{}\n\n", r.what));
    s.push_str(&format!(
        "{:<34}{:>14}{:>14}\n",
        "allocator", "System Mops/s", "mimalloc"
    ));
    for (n, v, m) in [
        ("inner alone", r.system_mops, r.mimalloc_mops),
        (
            "accounted (rstat::alloc)",
            r.accounted_mops,
            r.mimalloc_accounted_mops,
        ),
        (
            "eager tracker (all levels, shared)",
            r.eager_mops,
            r.mimalloc_eager_mops,
        ),
        (
            "thread batch tracker (4 MiB)",
            r.thread_batch_mops,
            r.mimalloc_thread_batch_mops,
        ),
        (
            "group counter tracker (flat)",
            r.group_counter_mops,
            r.mimalloc_group_counter_mops,
        ),
    ] {
        s.push_str(&format!("{n:<34}{v:>14.2}{m:>14.2}\n"));
    }
    s.push_str(&format!(
        "\nover mimalloc: accounted / mimalloc alone {:.2}x (target >= 0.8), accounted / group \
         counter {:.2}x (target >= 1.0); overhead {:.1}%, accounted / eager {:.2}x\n",
        r.mimalloc_ratio_vs_alone,
        r.mimalloc_ratio_vs_group_counter,
        r.mimalloc_overhead_pct,
        r.mimalloc_ratio_vs_eager
    ));
    s.push_str(&format!(
        "over System: overhead {:.1}% (target <= 15), accounted / eager: {:.2}x (target >= 2)\n\
         drift at quiescent points: {} bytes (bound {}), after draining: {} (must be 0)\n\
         thread batch tracker drift: {} bytes (no bound)\nparallelism of the accounted runs: {:.2} of 2\n",
        r.overhead_pct,
        r.ratio_vs_eager,
        r.drift_bytes_max,
        r.drift_bound_bytes,
        r.drift_after_drain_bytes_max,
        r.thread_batch_drift_bytes_max,
        r.parallel
    ));
    if r.parallel < 1.8 {
        s.push_str(
            "note: the threads did not run in parallel throughout (a busy machine): \
             contention on shared lines is under-measured.\n",
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ratios are medians of per-sample ratios, each over the variant
    /// the issue names: accounted / alone and accounted / group counter.
    #[test]
    fn the_ratios_compare_accounted_with_the_right_variants() {
        // Samples: [alone, accounted, eager, thread batch, group counter].
        let v: [Vec<f64>; KINDS.len()] = [
            vec![40.0, 50.0, 10.0],
            vec![20.0, 40.0, 9.0],
            vec![10.0, 20.0, 3.0],
            vec![80.0, 80.0, 80.0],
            vec![25.0, 10.0, 3.0],
        ];
        let f = figures(&v);
        // accounted / alone per sample: 0.5, 0.8, 0.9 -> 0.8.
        assert_eq!(f.ratio_vs_alone, 0.8);
        // accounted / group counter per sample: 0.8, 4.0, 3.0 -> 3.0.
        assert_eq!(f.ratio_vs_group_counter, 3.0);
        // accounted / eager: 2.0, 2.0, 3.0 -> 2.0.
        assert_eq!(f.ratio_vs_eager, 2.0);
        assert_eq!(f.mops, [40.0, 20.0, 10.0, 80.0, 10.0]);
    }
}
