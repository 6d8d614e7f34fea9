//! Thread CPU clocks and the user/system split.
//!
//! - A thread's own CPU time: `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`,
//!   the scheduler's exact runtime of the thread, in nanoseconds,
//!   including the slice running now. Linux serves it with a system call
//!   (the vDSO covers wall clocks only), so the feed reads it only at
//!   reconciliations; changes of group read the segment clock (`tick`:
//!   the TSC where the kernel keeps time with it, else the vDSO's
//!   monotonic clock).
//! - Another thread's: the same clock through the id
//!   `pthread_getcpuclockid` gives for it, valid while the thread lives
//!   (the periodic charger reads it; `feed` stops reading before the
//!   thread dies).
//! - User vs system. The kernel samples that split at ticks and scales it
//!   to the exact runtime, so it is a proportion, not a measurement. Two
//!   readers of the same figures:
//!   - the thread itself: `getrusage(RUSAGE_THREAD)`, in µs, read at its
//!     group changes at most once per [`SPLIT_RESAMPLE_NS`] of its CPU
//!     time;
//!   - the periodic charger, for a thread that may be running elsewhere
//!     and cannot be asked: `/proc/self/task/TID/stat`, whose `utime` and
//!     `stime` are the same figures cut down to whole clock ticks
//!     (`sysconf(_SC_CLK_TCK)`, 100 Hz on Linux), so each is short by
//!     less than one tick. The charger samples only once
//!     [`COARSE_SAMPLE_TICKS`] ticks of the thread's CPU time passed since
//!     the last sample, which keeps that error under a tenth of the
//!     interval's time.
//!
//!   Both write one sample per thread ([`SplitSample`], in the thread's
//!   feed), and each charge is split in the proportion seen between the
//!   last two samples (a [`split`] of the charge, so user + system is
//!   always the charge).
//!
//! Under Miri, which has no CPU clocks, the thread clock is the monotonic
//! clock and the other readings are unavailable (no periodic charging, all
//! time counted as user time).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as StdOrdering};
use std::time::Duration;

/// The thread re-samples its user/system split at most once per this much
/// of its CPU time (10 ms, a few scheduler ticks: finer samples would only
/// see the same tick-based split).
pub(crate) const SPLIT_RESAMPLE_NS: u64 = 10_000_000;

/// The charger takes a sample from /proc (whole clock ticks) only once
/// the thread ran this many ticks of CPU time since the last sample: the
/// thread's own samples are exact, and a figure read from /proc is short
/// by less than one tick, which against the thread's whole time since its
/// start (the split is cumulative: `Feed::reconcile`) is a small share.
pub(crate) const COARSE_SAMPLE_TICKS: u64 = 10;

/// One in the fixed-point user fraction (`user_frac / SPLIT_ONE`).
pub(crate) const SPLIT_ONE: u32 = 1 << 16;

std::thread_local! {
    /// How many times this thread read its own CPU clock through
    /// [`thread_cpu_ns`] (for tests: `testing::thread_clock_reads`).
    static OWN_CLOCK_READS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many times the calling thread read its own CPU clock.
pub(crate) fn own_clock_reads() -> u64 {
    OWN_CLOCK_READS.try_with(|c| c.get()).unwrap_or(0)
}

/// The calling thread's CPU time in nanoseconds. `None` only if the
/// system refuses the clock (not seen on Linux).
#[inline]
pub(crate) fn thread_cpu_ns() -> Option<u64> {
    let _ = OWN_CLOCK_READS.try_with(|c| c.set(c.get().wrapping_add(1)));
    if cfg!(miri) {
        crate::os::clock_ns(libc::CLOCK_MONOTONIC)
    } else {
        crate::os::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
    }
}

/// The monotonic clock in nanoseconds (served by the vDSO on Linux: no
/// system call); 0 if the system refuses it (not seen on Linux).
#[inline]
pub(crate) fn mono_ns() -> u64 {
    crate::os::mono_ns()
}

/// The id of the calling thread's CPU clock, readable from other threads
/// of the process while this one lives.
fn own_clock_id() -> Option<libc::clockid_t> {
    if cfg!(miri) {
        return None;
    }
    let mut id: libc::clockid_t = 0;
    // SAFETY: `pthread_self` is this live thread; `id` is a valid
    // out-pointer.
    let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut id) };
    (rc == 0).then_some(id)
}

/// Read a thread CPU clock obtained from [`own_clock_id`] (of a thread
/// that is still alive).
pub(crate) fn read_clock(id: libc::clockid_t) -> Option<u64> {
    crate::os::clock_ns(id)
}

/// What the periodic charger needs to read a thread from outside: its CPU
/// clock id and its kernel thread id (for /proc). Both name the thread
/// only while it lives (a later thread may reuse them).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ThreadIds {
    pub(crate) clock: libc::clockid_t,
    pub(crate) tid: libc::pid_t,
}

/// The calling thread's [`ThreadIds`]; `None` under Miri or if the system
/// refuses the clock id.
pub(crate) fn own_ids() -> Option<ThreadIds> {
    let clock = own_clock_id()?;
    // SAFETY: `gettid` has no preconditions and cannot fail.
    let tid = unsafe { libc::gettid() };
    Some(ThreadIds { clock, tid })
}

/// Whether /proc served a thread's times so far (cleared at the first
/// failure: no /proc mounted, or a kernel without the file; the charger
/// then leaves the split to the threads' own samples).
static PROC_SPLIT: AtomicBool = AtomicBool::new(true);

/// The clock tick of /proc's times, in µs (`sysconf(_SC_CLK_TCK)`).
pub(crate) fn tick_us() -> Option<u64> {
    if cfg!(miri) {
        return None;
    }
    static TICK_US: AtomicU64 = AtomicU64::new(0);
    let t = TICK_US.load(StdOrdering::Relaxed);
    if t != 0 {
        return Some(t);
    }
    // SAFETY: `sysconf` has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz)
        .ok()
        .filter(|&h| (1..=1_000_000).contains(&h))?;
    let t = 1_000_000 / hz;
    // Relaxed: every thread computes the same value; the store only saves
    // the next caller a system call.
    TICK_US.store(t, StdOrdering::Relaxed);
    Some(t)
}

/// `(user, system)` CPU time of thread `tid` of this process in µs, from
/// `/proc/self/task/TID/stat` (whole clock ticks). The caller makes sure
/// the thread is alive. `None` under Miri or where /proc cannot serve it.
pub(crate) fn proc_thread_times_us(tid: libc::pid_t) -> Option<(u64, u64)> {
    use std::io::{ErrorKind, Read};
    if cfg!(miri) || !PROC_SPLIT.load(StdOrdering::Relaxed) {
        return None;
    }
    let tick = tick_us()?;
    // Relaxed: a hint that stops futile reads; nothing depends on when
    // other threads see it.
    let give_up = || PROC_SPLIT.store(false, StdOrdering::Relaxed);
    let mut f = match std::fs::File::open(format!("/proc/self/task/{tid}/stat")) {
        Ok(f) => f,
        // The thread is alive (the caller's contract), so its entry is
        // missing only where /proc is (not mounted, or hidden from us).
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::PermissionDenied) => {
            give_up();
            return None;
        }
        // Out of descriptors or memory: try again at the next sample.
        Err(_) => return None,
    };
    // The line is a few hundred bytes; the fields read here come early.
    let mut buf = [0u8; 1024];
    let mut len = 0;
    while len < buf.len() {
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    let times = parse_stat_times(&buf[..len])
        .and_then(|(u, s)| Some((u.checked_mul(tick)?, s.checked_mul(tick)?)));
    if times.is_none() {
        // A format this code does not know: it will not change.
        give_up();
    }
    times
}

/// `utime` and `stime` (clock ticks) from a /proc `stat` line.
pub(crate) fn parse_stat_times(line: &[u8]) -> Option<(u64, u64)> {
    // "tid (comm) state ppid ...": the name may hold anything, spaces and
    // parentheses too, so the fields start after its last ')' (the fields
    // after it are numbers and a state letter). `utime` and `stime` are
    // fields 14 and 15, the 12th and 13th after the name.
    let after = line.iter().rposition(|&b| b == b')')? + 1;
    let mut fields = std::str::from_utf8(&line[after..])
        .ok()?
        .split_ascii_whitespace();
    let utime = fields.nth(11)?.parse().ok()?;
    let stime = fields.next()?.parse().ok()?;
    Some((utime, stime))
}

/// The calling thread's `(user, system)` CPU time in microseconds, from
/// `getrusage(RUSAGE_THREAD)`.
pub(crate) fn thread_rusage_us() -> Option<(u64, u64)> {
    if cfg!(miri) {
        return None;
    }
    crate::os::rusage_us(libc::RUSAGE_THREAD)
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`): the clock
/// the attach feed charges from. Cost: one `clock_gettime` system call.
/// Zero if the system refuses the clock.
pub fn thread_cpu_time() -> Duration {
    Duration::from_nanos(thread_cpu_ns().unwrap_or(0))
}

/// Where a thread's user/system split was last sampled (by the thread or
/// by the charger), and where it was when its record started: the split
/// the thread's charges follow is the one between the two.
#[derive(Clone, Copy, Default)]
pub(crate) struct SplitSample {
    /// The thread's CPU time at the sample, ns.
    pub(crate) at_ns: u64,
    pub(crate) user_us: u64,
    pub(crate) sys_us: u64,
    /// The thread's user and system time at its record's start.
    base_user_us: u64,
    base_sys_us: u64,
}

impl SplitSample {
    /// No sample (a record never started).
    pub(crate) const EMPTY: SplitSample = SplitSample {
        at_ns: 0,
        user_us: 0,
        sys_us: 0,
        base_user_us: 0,
        base_sys_us: 0,
    };

    /// A first sample, by the thread itself: its totals so far, the base
    /// of the later samples' proportion, and the user fraction they show
    /// (all user time for a thread with no time yet): the prior, until a
    /// sample shows time since the start.
    pub(crate) fn first(now_ns: u64) -> (SplitSample, u32) {
        let Some((user_us, sys_us)) = thread_rusage_us() else {
            return (
                SplitSample {
                    at_ns: now_ns,
                    ..SplitSample::default()
                },
                SPLIT_ONE,
            );
        };
        let s = SplitSample {
            at_ns: now_ns,
            user_us,
            sys_us,
            base_user_us: user_us,
            base_sys_us: sys_us,
        };
        (s, fraction(user_us, sys_us).unwrap_or(SPLIT_ONE))
    }

    /// The thread's own sample (`getrusage`), at `now_ns` of its CPU clock,
    /// taken if at least [`SPLIT_RESAMPLE_NS`] of CPU time passed since the
    /// last sample (by the thread or the charger). Only the thread itself
    /// may call this.
    #[inline]
    pub(crate) fn resample_own(&mut self, now_ns: u64) {
        if now_ns.saturating_sub(self.at_ns) >= SPLIT_RESAMPLE_NS {
            self.resample_now(now_ns, thread_rusage_us());
        }
    }

    /// The charger's sample of thread `tid` (alive: the caller holds its
    /// feed's lock with the ids still set), at `now_ns` of the thread's CPU
    /// clock: as [`resample_own`](Self::resample_own), once at least
    /// [`COARSE_SAMPLE_TICKS`] ticks of CPU time passed since the last
    /// sample.
    pub(crate) fn resample_proc(&mut self, now_ns: u64, tid: libc::pid_t) {
        let Some(min) = coarse_interval_ns() else {
            return;
        };
        if now_ns.saturating_sub(self.at_ns) >= min {
            self.resample_now(now_ns, proc_thread_times_us(tid));
        }
    }

    /// A sample of `now` (user, system µs) for a record that started at
    /// `base`, for tests of the split.
    #[cfg(all(test, not(rstat_loom)))]
    pub(crate) fn for_test(base: (u64, u64), now: (u64, u64)) -> SplitSample {
        SplitSample {
            at_ns: 0,
            user_us: now.0,
            sys_us: now.1,
            base_user_us: base.0,
            base_sys_us: base.1,
        }
    }

    /// The thread's user and system µs between its record's start and
    /// this sample; `None` if it shows none (no sample since the start).
    pub(crate) fn since_start(&self) -> Option<(u64, u64)> {
        let user = self.user_us.saturating_sub(self.base_user_us);
        let system = self.sys_us.saturating_sub(self.base_sys_us);
        (user + system != 0).then_some((user, system))
    }

    /// Record the figures `times` (none: the read failed, keep the last
    /// sample). A /proc figure may be up to a tick below the `getrusage`
    /// one at the start (both are the kernel's monotonic figures, cut
    /// differently): [`since_start`](Self::since_start) counts such a
    /// component as having gained nothing.
    #[cold]
    fn resample_now(&mut self, now_ns: u64, times: Option<(u64, u64)>) {
        if let Some((u, s)) = times {
            self.at_ns = now_ns;
            self.user_us = u;
            self.sys_us = s;
        }
    }
}

/// [`COARSE_SAMPLE_TICKS`] clock ticks, in ns; `None` if the tick is
/// unknown.
fn coarse_interval_ns() -> Option<u64> {
    Some(tick_us()? * 1000 * COARSE_SAMPLE_TICKS)
}

/// `user / (user + system)` in 1/[`SPLIT_ONE`]; `None` if both are 0.
fn fraction(user: u64, system: u64) -> Option<u32> {
    let total = u128::from(user) + u128::from(system);
    if total == 0 {
        return None;
    }
    u32::try_from((u128::from(user) << 16) / total).ok()
}

/// Split `usec` in the proportion `user_frac / SPLIT_ONE`: `(user,
/// system)`, summing to `usec`.
#[inline]
pub(crate) fn split(usec: i64, user_frac: u32) -> (i64, i64) {
    let frac = i128::from(user_frac.min(SPLIT_ONE));
    let user = ((i128::from(usec) * frac) >> 16) as i64;
    (user, usec - user)
}
