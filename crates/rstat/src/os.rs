//! The operating system's clocks and usage counters, read the same way
//! wherever the crate needs them: `clock_gettime` in nanoseconds and
//! `getrusage` in microseconds, `None` when the call fails or a value does
//! not fit (never a panic). The attach feed reads thread clocks and
//! `RUSAGE_THREAD`; the `cpu` controller's root reads the process clock and
//! `RUSAGE_SELF`.

/// A clock's reading in nanoseconds: one `clock_gettime` (a vDSO call for
/// the wall clocks, a system call for the CPU-time clocks).
pub(crate) fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
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

/// The monotonic clock in nanoseconds (the vDSO on Linux: no system
/// call); 0 if the system refuses it (not seen on Linux).
#[inline]
pub(crate) fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0)
}

/// `(user, system)` CPU time in microseconds of `who` (`RUSAGE_SELF`:
/// the process, exited threads included; `RUSAGE_THREAD`: the calling
/// thread): one `getrusage` system call.
pub(crate) fn rusage_us(who: libc::c_int) -> Option<(u64, u64)> {
    // SAFETY: an all-zero `rusage` is a valid value of this plain C
    // struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid out-pointer; an invalid `who` is an error
    // return, not UB.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
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
