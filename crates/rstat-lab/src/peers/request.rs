//! One sample of a group per request: writer threads each serving
//! requests for a fixed time (a tenant drawn at random, a group created
//! under it with a unique name, 3 adds of 1 B to 16 KiB, the group
//! removed), then the checks: every contender that keeps the history of
//! removed groups must read each tenant's total exactly (what its
//! requests added), and every contender must have no request group left.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use super::contenders::PerRequest;
use super::workload::{seed, xorshift, MAX_BYTES};
use crate::machine::pin_to_cpu;

/// Run `threads` threads of requests on `c` for `duration`; returns
/// requests per second (each thread's requests over its own time,
/// summed) and the tenant totals compared exactly (none for a contender
/// without history: it checked each request instead). `expected` holds each tenant's total before the sample and is
/// advanced by what the requests added.
///
/// Errors: a request that failed (a contender without history also fails
/// one whose group read back other than its adds just before removal), a
/// tenant total other than what was added, a request group left behind.
pub fn sample<C: PerRequest>(
    c: &Arc<C>,
    name: &str,
    threads: usize,
    duration: Duration,
    sample_no: u64,
    expected: &mut [u64],
) -> Result<(f64, u64), String> {
    let tenants = expected.len();
    if tenants == 0 {
        return Err(format!("{name}: no tenants to serve requests for"));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (c, stop, start) = (Arc::clone(c), Arc::clone(&stop), Arc::clone(&start));
            let mut x = seed(sample_no, 1000 + t as u64);
            std::thread::spawn(move || -> Result<(u64, Duration, Vec<u64>), String> {
                pin_to_cpu(t);
                let mut sums = vec![0u64; tenants];
                let mut req = String::with_capacity(32);
                start.wait();
                let t0 = Instant::now();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = xorshift(x);
                    let tenant = (x % tenants as u64) as usize;
                    let mut deltas = [0u64; 3];
                    for d in &mut deltas {
                        x = xorshift(x);
                        *d = (x >> 40) % MAX_BYTES + 1;
                    }
                    req.clear();
                    let _ = write!(req, "req-{sample_no}-{t}-{n}");
                    c.request(tenant, &req, deltas)?;
                    sums[tenant] += deltas.iter().sum::<u64>();
                    n += 1;
                }
                Ok((n, t0.elapsed(), sums))
            })
        })
        .collect();
    start.wait();
    std::thread::sleep(duration);
    stop.store(true, Ordering::Relaxed);
    let mut rps = 0.0;
    let mut first_err = None;
    for w in workers {
        match w.join() {
            Ok(Ok((n, wall, sums))) => {
                if !wall.is_zero() {
                    rps += n as f64 / wall.as_secs_f64();
                }
                for (e, s) in expected.iter_mut().zip(sums) {
                    *e += s;
                }
            }
            Ok(Err(e)) => first_err = first_err.or(Some(e)),
            Err(_) => first_err = first_err.or(Some(format!("{name}: a request thread panicked"))),
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    let mut checks = 0;
    for (t, &want) in expected.iter().enumerate() {
        if let Some(got) = c.tenant_history(t)? {
            checks += 1;
            if got != want {
                return Err(format!(
                    "{name}: tenant {t}'s total is {got} after its requests, but they added \
                     {want} (off by {})",
                    got as i128 - want as i128
                ));
            }
        }
    }
    let left = c.request_groups_left();
    if left != 0 {
        return Err(format!(
            "{name}: {left} request groups are left after every request removed its own"
        ));
    }
    Ok((rps, checks))
}
