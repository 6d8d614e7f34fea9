//! The `cpu` controller's root is the process.
//!
//! CPU time is charged to groups by the threads inside them (`attach`);
//! time outside every group, and the time of threads that never touched
//! rstat, is charged nowhere. A read of the root's `cpu` totals fills that
//! in from the process's own clock: the root's `usage_usec` is the
//! process's CPU time (`CLOCK_PROCESS_CPUTIME_ID`, all its threads, the
//! exited ones too) plus the time charged by hand
//! ([`Rstat::account_cputime`](crate::Rstat::account_cputime), or adds to
//! the `cpu` controller's items: time that is not this process's), which
//! is the charged total less what the attach module's feed charged
//! (`EngineInner::attached_cpu_us`, thread time already in the process's
//! clock). So the root's total only grows, and is at least the sum of its
//! children's; the root's own (local) time is that total less its
//! children's, so the invariant of every group holds for the root too:
//! its totals are its own plus its children's. The own time is split into
//! user and system time in the proportion of the process's
//! `getrusage(RUSAGE_SELF)` less the children's figures.
//!
//! Cost, for a read of the root only: two system calls (the clock and
//! `getrusage`). Under Miri and loom (no process clock) the root reads as
//! charged.

/// Item indices of the `cpu` controller: usage, user, system.
const USAGE: usize = 0;
const USER: usize = 1;
const SYSTEM: usize = 2;

/// This process's CPU time in µs, and its `(user, system)` split in µs.
// `time_t` and `suseconds_t` are `i64` here, not on every target.
#[allow(clippy::useless_conversion)]
fn process_times_us() -> Option<(i64, i64, i64)> {
    if cfg!(any(miri, rstat_loom)) {
        return None;
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } != 0 {
        return None;
    }
    let usage = i64::try_from(ts.tv_sec)
        .ok()?
        .checked_mul(1_000_000)?
        .checked_add(i64::try_from(ts.tv_nsec).ok()? / 1000)?;
    // SAFETY: an all-zero `rusage` is a valid value of this plain C
    // struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid out-pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return None;
    }
    let us = |tv: libc::timeval| {
        i64::try_from(tv.tv_sec)
            .ok()?
            .checked_mul(1_000_000)?
            .checked_add(i64::try_from(tv.tv_usec).ok()?)
    };
    Some((usage, us(ru.ru_utime)?, us(ru.ru_stime)?))
}

/// Make the root's `cpu` totals the process's (module docs). `local` and
/// `hierarchical` are the root's as read, `attached_us` the engine's
/// feed-charged count loaded after them; unchanged if the process clock
/// cannot be read.
pub(crate) fn root_is_the_process(local: &mut [i64], hierarchical: &mut [i64], attached_us: u64) {
    if local.len() <= SYSTEM || hierarchical.len() <= SYSTEM {
        return;
    }
    let Some((process, p_user, p_system)) = process_times_us() else {
        return;
    };
    let children = |i: usize| hierarchical[i].saturating_sub(local[i]);
    let (c_usage, c_user, c_system) = (children(USAGE), children(USER), children(SYSTEM));
    // Loaded after the totals, the count may include charges the totals
    // do not show yet: the time charged by hand is then underestimated
    // (at worst 0), never the process's time counted twice.
    let attached = i64::try_from(attached_us).unwrap_or(i64::MAX);
    let by_hand = hierarchical[USAGE].saturating_sub(attached).max(0);
    let total = process.saturating_add(by_hand);
    let own = total.saturating_sub(c_usage).max(0);
    let (du, ds) = (
        p_user.saturating_sub(c_user).max(0),
        p_system.saturating_sub(c_system).max(0),
    );
    let own_user = if du + ds == 0 {
        own
    } else {
        (i128::from(own) * i128::from(du) / i128::from(du + ds)) as i64
    };
    local[USAGE] = own;
    local[USER] = own_user;
    local[SYSTEM] = own - own_user;
    hierarchical[USAGE] = c_usage.saturating_add(own);
    hierarchical[USER] = c_user.saturating_add(own_user);
    hierarchical[SYSTEM] = c_system.saturating_add(own - own_user);
}
