//! Facts about the machine a benchmark ran on, and small measuring helpers.

use serde::Serialize;
use std::time::{Duration, Instant};

/// The machine line every benchmark prints.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// CPU model name from /proc/cpuinfo.
    pub cpu_model: String,
    /// Online CPUs.
    pub online_cpus: usize,
    /// Possible CPUs (per-CPU slot count).
    pub possible_cpus: usize,
    /// Where CPU ids come from.
    pub cpu_id_source: String,
    /// Kernel release.
    pub kernel: String,
}

impl Machine {
    /// Read the facts of this machine.
    pub fn detect() -> Self {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".into());
        let online_cpus = online_cpus();
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or_else(|_| "unknown".into(), |s| s.trim().to_owned());
        Machine {
            cpu_model,
            online_cpus,
            possible_cpus: rstat::percpu::cpu::possible_cpus(),
            cpu_id_source: rstat::percpu::cpu::source().to_string(),
            kernel,
        }
    }

    /// One line for human output.
    pub fn line(&self) -> String {
        format!(
            "machine: {} | {} online / {} possible CPUs | cpu id: {} | linux {}",
            self.cpu_model, self.online_cpus, self.possible_cpus, self.cpu_id_source, self.kernel
        )
    }
}

/// Online CPUs (`sysconf(_SC_NPROCESSORS_ONLN)`), whatever this thread's
/// affinity.
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n < 1 {
        1
    } else {
        n as usize
    }
}

/// Pin the calling thread to `cpu` (modulo the online CPUs). Returns whether
/// it worked; benchmarks still run unpinned if not.
pub fn pin_to_cpu(cpu: usize) -> bool {
    let n = online_cpus();
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: cpu % n < CPU_SETSIZE for any machine we run on.
    unsafe { libc::CPU_SET(cpu % n, &mut set) };
    // SAFETY: valid pointer and size; 0 means the calling thread.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) == 0 }
}

/// Undo pinning: allow every CPU again.
pub fn unpin() {
    // SAFETY: as in `pin_to_cpu`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for c in 0..online_cpus() {
        // SAFETY: c < CPU_SETSIZE.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: as above.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
}

/// Median of a set of samples.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Run `f` and return how long it took.
pub fn timed(f: impl FnOnce()) -> Duration {
    let t = Instant::now();
    f();
    t.elapsed()
}

/// Round to `d` decimals (for readable JSON).
pub fn round(x: f64, d: i32) -> f64 {
    let m = 10f64.powi(d);
    (x * m).round() / m
}

/// Run `make(t)` on `threads` pinned threads, each doing `iters`
/// operations, and return Mops/s over all threads. Each thread times itself
/// from the common start (a barrier) to its end and the slowest sets the
/// figure, so the main thread's scheduling (the machine is shared) cannot
/// shrink or stretch the interval.
pub fn per_thread<F>(threads: usize, iters: u64, make: impl Fn(usize) -> F) -> f64
where
    F: FnOnce() + Send + 'static,
{
    per_thread_sample(threads, iters, make).mops
}

/// One run of [`per_thread_sample`].
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Mops/s over all threads, as [`per_thread`].
    pub mops: f64,
    /// How many threads ran at once, on average: the threads' CPU time
    /// (`CLOCK_THREAD_CPUTIME_ID`) summed over the slowest one's wall time.
    /// `threads` when each had its CPU to itself throughout; near 1 when
    /// they took turns with other work on a busy machine, so that a line
    /// they share stopped bouncing and contention went unmeasured.
    pub parallel: f64,
}

/// [`per_thread`], also measuring how parallel the run really was.
pub fn per_thread_sample<F>(threads: usize, iters: u64, make: impl Fn(usize) -> F) -> Sample
where
    F: FnOnce() + Send + 'static,
{
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(threads));
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let b = std::sync::Arc::clone(&barrier);
            let f = make(t);
            std::thread::spawn(move || {
                pin_to_cpu(t);
                b.wait();
                let (t0, c0) = (Instant::now(), thread_cputime());
                f();
                (t0.elapsed(), thread_cputime().saturating_sub(c0))
            })
        })
        .collect();
    let (mut slowest, mut cpu) = (Duration::ZERO, Duration::ZERO);
    for h in hs {
        let (wall, c) = h.join().unwrap_or_default();
        slowest = slowest.max(wall);
        cpu += c;
    }
    if slowest.is_zero() {
        return Sample {
            mops: 0.0,
            parallel: 0.0,
        };
    }
    Sample {
        mops: (threads as u64 * iters) as f64 / slowest.as_secs_f64() / 1e6,
        parallel: cpu.as_secs_f64() / slowest.as_secs_f64(),
    }
}

/// This thread's CPU time (zero if the clock cannot be read).
pub(crate) fn thread_cputime() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer to a timespec; the clock id is a constant.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A thread pinned to CPU 1 doing random read-modify-writes over a 32 KiB
/// buffer (the size of an L1 data cache) until stopped: the *memory-bound
/// neighbour* some benchmarks run one-thread cases beside. Where CPUs 0
/// and 1 are hyperthreads of one core (this VM's two vCPUs behave so at
/// times) it competes with a thread on CPU 0 for the core's load/store
/// queues and L1, as a busy thread of another VM on a sibling does.
pub struct Neighbour {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: std::thread::JoinHandle<u64>,
}

impl Neighbour {
    /// Start it; returns once it runs (pinned, one batch of updates done),
    /// so whatever the caller measures next has it beside it throughout.
    pub fn start() -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let running = std::sync::Arc::new(AtomicBool::new(false));
        let (flag, up) = (
            std::sync::Arc::clone(&stop),
            std::sync::Arc::clone(&running),
        );
        let handle = std::thread::spawn(move || {
            pin_to_cpu(1);
            let mut buf = vec![0u64; 4096];
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            let mut rounds = 0u64;
            loop {
                for _ in 0..4096 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let i = (x as usize) & 4095;
                    buf[i] = buf[i].wrapping_add(x);
                }
                std::hint::black_box(&buf);
                rounds += 1;
                up.store(true, Ordering::Release);
                if flag.load(Ordering::Relaxed) {
                    return rounds;
                }
            }
        });
        while !running.load(Ordering::Acquire) && !handle.is_finished() {
            std::thread::yield_now();
        }
        Neighbour { stop, handle }
    }

    /// Stop it; the rounds of 4096 updates it made (at least one unless
    /// its thread died, which `stop` reports by panicking in turn).
    pub fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        match self.handle.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}
