//! The `cpu` controller's root is the process.
//!
//! CPU time is charged to groups by the threads inside them (`attach`);
//! time outside every group, and the time of threads that never touched
//! rstat, is charged nowhere. A read of the root's `cpu` totals fills that
//! in from the process's own clock. Each of the root's items is the
//! process's figure plus the time charged to that item by hand
//! ([`Rstat::account_cputime`](crate::Rstat::account_cputime), or adds to
//! the `cpu` controller's items: time that is not this process's): its
//! `usage_usec` is the process's CPU time (`CLOCK_PROCESS_CPUTIME_ID`,
//! all its threads, the exited ones too), split into `user_usec` and
//! `system_usec` in the proportion of `getrusage(RUSAGE_SELF)`. The time
//! charged by hand is the charged total less what the attach module's
//! feed charged (`EngineInner::attached_cpu_us`, thread time already in
//! the process's clock). So the root's totals only grow and are at least
//! their children's (clamped there should the two user/system estimates
//! disagree); the root's own (local) time is the total less its
//! children's, so the invariant of every group holds for the root too:
//! its totals are its own plus its children's.
//!
//! Cost, for a read of the root only: two system calls (the clock and
//! `getrusage`). Under Miri and loom (no process clock) the root reads as
//! charged.

/// Item indices of the `cpu` controller: usage, user, system.
const USAGE: usize = 0;
const USER: usize = 1;
const SYSTEM: usize = 2;

/// This process's CPU time in µs, and its `(user, system)` split in µs.
fn process_times_us() -> Option<(i64, i64, i64)> {
    if cfg!(any(miri, rstat_loom)) {
        return None;
    }
    let usage = crate::os::clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)? / 1000;
    let (user, system) = crate::os::rusage_us(libc::RUSAGE_SELF)?;
    let i = |v: u64| i64::try_from(v).ok();
    Some((i(usage)?, i(user)?, i(system)?))
}

/// The engine's feed-charged CPU time (`EngineInner::attached_cpu_us`),
/// loaded after the totals a root read copied.
pub(crate) fn attached_cpu_us(engine: &crate::group::EngineInner) -> [u64; 3] {
    engine
        .attached_cpu_us
        .each_ref()
        .map(|a| a.load(crate::sync::Ordering::Relaxed))
}

/// Make the root's `cpu` totals the process's (module docs), item by
/// item: each is the process's figure (its CPU clock for `usage_usec`,
/// that clock split into user and system time in `getrusage`'s
/// proportion) plus the time charged to that item by hand, and never
/// less than the children's. `local` and `hierarchical` are the root's as
/// read, `attached_us` the engine's feed-charged µs per item, loaded
/// after them; unchanged if the process clock cannot be read.
pub(crate) fn root_is_the_process(
    local: &mut [i64],
    hierarchical: &mut [i64],
    attached_us: [u64; 3],
) {
    if local.len() <= SYSTEM || hierarchical.len() <= SYSTEM {
        return;
    }
    let Some((process, p_user, p_system)) = process_times_us() else {
        return;
    };
    let user = if p_user + p_system == 0 {
        process
    } else {
        (i128::from(process) * i128::from(p_user) / i128::from(p_user + p_system)) as i64
    };
    let process_item = [process, user, process - user];
    for i in [USAGE, USER, SYSTEM] {
        let children = hierarchical[i].saturating_sub(local[i]);
        // Loaded after the totals, the count may include charges the
        // totals do not show yet: the time charged by hand is then
        // underestimated (at worst 0), never the process's time counted
        // twice.
        let attached = i64::try_from(attached_us[i]).unwrap_or(i64::MAX);
        let by_hand = hierarchical[i].saturating_sub(attached).max(0);
        let total = process_item[i].saturating_add(by_hand).max(children);
        hierarchical[i] = total;
        local[i] = total - children;
    }
}
