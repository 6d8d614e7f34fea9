//! CPU time for the attach tests: burning a measured amount of this
//! thread's CPU time, and reading what the `cpu` controller charged.

use std::time::Duration;

use rstat::attach::thread_cpu_time;
use rstat::{Group, Rstat};

/// Burn `d` of this thread's CPU time, reading the thread's clock every
/// `step` rounds of a multiply-add; returns the clock delta seen (at least
/// `d`, more by up to one step and one clock read).
pub fn burn_in_steps(d: Duration, step: u64) -> Duration {
    let start = thread_cpu_time();
    let mut x = 0u64;
    while thread_cpu_time() - start < d {
        for i in 0..step {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
    }
    thread_cpu_time() - start
}

/// [`burn_in_steps`] with steps of 1000 rounds.
pub fn burn(d: Duration) -> Duration {
    burn_in_steps(d, 1000)
}

/// `g`'s hierarchical `usage_usec`, read exactly.
pub fn usage(rs: &Rstat, g: &Group) -> i64 {
    rs.cpu()
        .unwrap()
        .read_exact(g)
        .unwrap()
        .get("usage_usec")
        .unwrap()
}

/// `g`'s hierarchical `(usage_usec, user_usec, system_usec)`, from one
/// exact read.
pub fn usage_user_system(rs: &Rstat, g: &Group) -> (i64, i64, i64) {
    let s = rs.cpu().unwrap().read_exact(g).unwrap();
    (
        s.get("usage_usec").unwrap(),
        s.get("user_usec").unwrap(),
        s.get("system_usec").unwrap(),
    )
}

/// `g`'s own (local) `usage_usec`, read exactly.
pub fn local_usage(rs: &Rstat, g: &Group) -> i64 {
    rs.cpu()
        .unwrap()
        .read_exact(g)
        .unwrap()
        .get_local("usage_usec")
        .unwrap()
}

/// `d` in whole µs, the `cpu` controller's unit.
pub fn us(d: Duration) -> i64 {
    d.as_micros() as i64
}

/// What the apportioning can get wrong on this thread since a start: the
/// `cpu` controller shares a thread's CPU time among the groups it was in
/// by their wall time (`attach::apportion`), so a stretch off the CPU
/// (the thread preempted or blocked) inside a short segment is charged as
/// run time there and taken from the longest segment. With no context
/// switch since the start, nothing was off the CPU and charges must be
/// exact; with one, they may be off by the time the thread did not run.
#[allow(dead_code)] // not every test binary uses it
pub struct OffCpu {
    wall: std::time::Instant,
    cpu: Duration,
    switches: i64,
}

#[allow(dead_code)]
impl OffCpu {
    /// Start counting, on the calling thread.
    pub fn start() -> Self {
        OffCpu {
            wall: std::time::Instant::now(),
            cpu: thread_cpu_time(),
            switches: context_switches(),
        }
    }

    /// 0 if this thread was never switched out since the start; otherwise
    /// the µs it was off the CPU (wall time less CPU time), plus the µs of
    /// rounding. Call it on the thread that started. (Under Miri, which
    /// has no `getrusage`, the thread counts as switched out.)
    pub fn slack_us(&self) -> i64 {
        if self.switches >= 0 && context_switches() == self.switches {
            return 0;
        }
        let off = self
            .wall
            .elapsed()
            .saturating_sub(thread_cpu_time() - self.cpu);
        us(off) + 1
    }
}

/// The calling thread's voluntary plus involuntary context switches; -1
/// under Miri, which cannot ask.
#[cfg(miri)]
fn context_switches() -> i64 {
    -1
}

/// The calling thread's voluntary plus involuntary context switches; -1
/// under Miri, which cannot ask.
#[cfg(not(miri))]
fn context_switches() -> i64 {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) }, 0);
    (ru.ru_nvcsw + ru.ru_nivcsw) as i64
}
