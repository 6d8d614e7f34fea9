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
