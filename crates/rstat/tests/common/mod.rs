//! Helpers shared by the attach test binaries (each includes this module
//! with `mod common;` and uses a subset of it).
#![allow(dead_code)]

use std::time::Duration;

use rstat::attach::thread_cpu_time;

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
