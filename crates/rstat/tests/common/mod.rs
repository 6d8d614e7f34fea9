//! Helpers shared by the integration tests of `rstat`: each test binary
//! that needs them declares `mod common;` and uses a subset (hence the
//! `dead_code` allowance: an item one binary leaves unused is another's).
//!
//! Here: the engines most tests build, a pseudo-random step and a bounded
//! wait. [`cpu`] holds the CPU-time helpers of the attach tests, [`alloc`]
//! those of the accounting-allocator tests.
#![allow(dead_code)]

pub mod alloc;
pub mod cpu;

use std::time::{Duration, Instant};

use rstat::{FlushPolicy, Rstat};

/// An engine with the default slots and flush policy and no periodic
/// flusher: nothing folds behind the test's back, and no thread outlives
/// the engine's users.
pub fn engine() -> Rstat {
    Rstat::builder().periodic_flush(None).build().unwrap()
}

/// An engine of `nr_cpus` slots reading under `policy`, with no periodic
/// flusher and no read pace (so a read is stale or exact as `policy`'s
/// unit threshold alone decides, never by the time since a flush).
pub fn engine_with(nr_cpus: usize, policy: FlushPolicy) -> Rstat {
    Rstat::builder()
        .nr_cpus(nr_cpus)
        .flush_policy(policy)
        .periodic_flush(None)
        .read_pace(None)
        .build()
        .unwrap()
}

/// One step of Marsaglia's xorshift (13, 7, 17): `x` is the state and,
/// after the step, the next value. A cheap deterministic sequence per seed
/// for stress threads (a seed must be nonzero).
pub fn xorshift(x: &mut u64) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
}

/// Check `cond` every `every` until it holds (true) or `limit` has passed
/// since the call (false; `cond` is checked once more after the limit).
/// For conditions that only a broken mechanism keeps false: the limit is
/// a guard against hanging, not a timing assertion.
pub fn wait_until(limit: Duration, every: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(every);
    }
}
