//! Thread CPU clocks and the user/system split.
//!
//! - A thread's own CPU time: `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`,
//!   the scheduler's exact runtime of the thread, in nanoseconds,
//!   including the slice running now. Linux serves it with a system call
//!   (the vDSO covers wall clocks only): this is the floor under the cost
//!   of an enter/exit pair, which reads it twice.
//! - Another thread's: the same clock through the id
//!   `pthread_getcpuclockid` gives for it, valid while the thread lives
//!   (the periodic charger reads it; `feed` stops reading before the
//!   thread dies).
//! - User vs system: `getrusage(RUSAGE_THREAD)`. The kernel itself samples
//!   that split at ticks and scales it to the exact runtime, so it is a
//!   proportion, not a measurement; we read it at most once per
//!   [`SPLIT_RESAMPLE_NS`] of the thread's CPU time and split each charge
//!   in the proportion seen over the last such interval.
//!
//! Under Miri, which has no CPU clocks, the thread clock is the monotonic
//! clock and the other two are unavailable (no periodic charging, all
//! time counted as user time).

use std::time::Duration;

/// The thread's CPU time is re-split into user and system time at most
/// once per this much of it (10 ms, a few scheduler ticks: finer samples
/// would only see the same tick-based split).
pub(crate) const SPLIT_RESAMPLE_NS: u64 = 10_000_000;

/// One in the fixed-point user fraction (`user_frac / SPLIT_ONE`).
pub(crate) const SPLIT_ONE: u32 = 1 << 16;

fn read(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; an invalid clock id is an error
    // return, not UB.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u64::try_from(ts.tv_nsec).ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// The calling thread's CPU time in nanoseconds. `None` only if the
/// system refuses the clock (not seen on Linux).
#[inline]
pub(crate) fn thread_cpu_ns() -> Option<u64> {
    if cfg!(miri) {
        read(libc::CLOCK_MONOTONIC)
    } else {
        read(libc::CLOCK_THREAD_CPUTIME_ID)
    }
}

/// The id of the calling thread's CPU clock, readable from other threads
/// of the process while this one lives.
pub(crate) fn own_clock_id() -> Option<libc::clockid_t> {
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
    read(id)
}

/// The calling thread's `(user, system)` CPU time in microseconds, from
/// `getrusage(RUSAGE_THREAD)`.
pub(crate) fn thread_rusage_us() -> Option<(u64, u64)> {
    if cfg!(miri) {
        return None;
    }
    // SAFETY: an all-zero `rusage` is a valid value of this plain C
    // struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid out-pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return None;
    }
    let us = |tv: libc::timeval| {
        u64::try_from(tv.tv_sec)
            .ok()?
            .checked_mul(1_000_000)?
            .checked_add(u64::try_from(tv.tv_usec).ok()?)
    };
    Some((us(ru.ru_utime)?, us(ru.ru_stime)?))
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`): the clock
/// the attach feed charges from. Cost: one `clock_gettime` system call.
/// Zero if the system refuses the clock.
pub fn thread_cpu_time() -> Duration {
    Duration::from_nanos(thread_cpu_ns().unwrap_or(0))
}

/// Where a thread's user/system split was last sampled.
#[derive(Clone, Copy, Default)]
pub(crate) struct SplitSample {
    /// The thread's CPU time at the sample, ns.
    pub(crate) at_ns: u64,
    pub(crate) user_us: u64,
    pub(crate) sys_us: u64,
}

impl SplitSample {
    /// A first sample: the thread's totals so far, and the user fraction
    /// they show (all user time for a thread with no time yet).
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
        };
        (s, fraction(user_us, sys_us).unwrap_or(SPLIT_ONE))
    }

    /// A new user fraction if at least [`SPLIT_RESAMPLE_NS`] of CPU time
    /// passed since the last sample and the thread gained any user or
    /// system time since.
    #[inline]
    pub(crate) fn resample(&mut self, now_ns: u64) -> Option<u32> {
        if now_ns.saturating_sub(self.at_ns) < SPLIT_RESAMPLE_NS {
            return None;
        }
        self.resample_now(now_ns)
    }

    #[cold]
    fn resample_now(&mut self, now_ns: u64) -> Option<u32> {
        let (u, s) = thread_rusage_us()?;
        let (du, ds) = (
            u.saturating_sub(self.user_us),
            s.saturating_sub(self.sys_us),
        );
        *self = SplitSample {
            at_ns: now_ns,
            user_us: u,
            sys_us: s,
        };
        fraction(du, ds)
    }
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
