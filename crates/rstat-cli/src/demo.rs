//! `rstat demo`: a small multi-tenant server on rstat.
//!
//! Worker threads serve "requests" for three tenants. Each request gets its
//! own group under `tenant/service/`, is charged the CPU time the thread
//! really spent on it (`getrusage(RUSAGE_THREAD)`) and request counters,
//! and is removed when done: its history folds into the service and tenant,
//! so nothing is lost even though the request groups come and go. Every
//! interval the live tree is printed with exact hierarchical totals; at the
//! end the totals are checked against what the workers counted.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rstat::{Group, Rstat};

const TENANTS: [(&str, u32); 3] = [("acme", 5), ("globex", 3), ("initech", 1)];
const SERVICES: [&str; 2] = ["api", "batch"];
const ITEMS: [&str; 3] = ["requests", "bytes_in", "bytes_out"];

/// Options.
pub struct Options {
    pub duration: Duration,
    pub threads: usize,
    pub interval: Duration,
}

fn thread_cputime_usec() -> (u64, u64) {
    // SAFETY: a zeroed rusage is a valid output buffer.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer; RUSAGE_THREAD is the calling thread.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return (0, 0);
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (us(ru.ru_utime), us(ru.ru_stime))
}

/// Run the demo; returns whether the final totals were exact.
pub fn run(opts: &Options) -> Result<bool, rstat::Error> {
    let rs = Arc::new(Rstat::new());
    let reqs = rs.register_counters("requests", &ITEMS)?;
    let mut services: Vec<(Group, u32)> = Vec::new();
    for (t, w) in TENANTS {
        let tg = rs.root().create_child(t)?;
        for s in SERVICES {
            services.push((tg.create_child(s)?, w));
        }
    }
    let total_weight: u32 = services.iter().map(|(_, w)| w).sum();
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    println!(
        "rstat demo: {} worker threads, {} tenants x {} services, one group per request; {} CPU slots, cpu id from {}",
        opts.threads,
        TENANTS.len(),
        SERVICES.len(),
        rs.nr_cpus(),
        rs.cpu_id_source()
    );
    let workers: Vec<_> = (0..opts.threads)
        .map(|w| {
            let (rs, reqs, services, stop, served, bytes) = (
                Arc::clone(&rs),
                reqs.clone(),
                services.clone(),
                stop.clone(),
                served.clone(),
                bytes.clone(),
            );
            std::thread::spawn(move || -> Result<(), rstat::Error> {
                let mut x = 0x2545f4914f6cdd1du64 ^ (w as u64 + 1);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let mut pick = (x % total_weight as u64) as u32;
                    let svc = services
                        .iter()
                        .find(|(_, wt)| {
                            if pick < *wt {
                                true
                            } else {
                                pick -= wt;
                                false
                            }
                        })
                        .map(|(g, _)| g.clone())
                        .unwrap_or_else(|| services[0].0.clone());
                    let req = svc.create_child(&format!("req-{w}-{n}"))?;
                    n += 1;
                    let (u0, s0) = thread_cputime_usec();
                    // The "work": hash a buffer whose size depends on the tenant.
                    let size = 256 + (x >> 48) as usize % 4096;
                    let mut h = 0u64;
                    for i in 0..size * 8 {
                        h = h.rotate_left(5) ^ (i as u64).wrapping_mul(0x9e3779b97f4a7c15);
                    }
                    std::hint::black_box(h);
                    let (u1, s1) = thread_cputime_usec();
                    rs.account_cputime(&req, u1.saturating_sub(u0), s1.saturating_sub(s0))?;
                    reqs.add(&req, 0, 1)?;
                    reqs.add(&req, 1, size as i64)?;
                    reqs.add(&req, 2, (size / 4) as i64)?;
                    served.fetch_add(1, Ordering::Relaxed);
                    bytes.fetch_add(size as u64, Ordering::Relaxed);
                    req.remove()?;
                }
                Ok(())
            })
        })
        .collect();
    let start = Instant::now();
    let mut next = opts.interval.min(opts.duration);
    loop {
        let now = start.elapsed();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(50)));
            continue;
        }
        print!("{}", render(&rs, &reqs, start.elapsed())?);
        if next >= opts.duration {
            break;
        }
        next = (next + opts.interval).min(opts.duration);
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        match w.join() {
            Ok(r) => r?,
            Err(_) => eprintln!("a worker thread panicked"),
        }
    }
    let root = reqs.read_exact(rs.root())?;
    let (want_r, want_b) = (
        served.load(Ordering::Relaxed) as i64,
        bytes.load(Ordering::Relaxed) as i64,
    );
    let exact = root.get("requests") == Some(want_r) && root.get("bytes_in") == Some(want_b);
    println!(
        "\nfinal: {} requests served, {} request groups created and removed; root totals: requests {} bytes_in {} -> {}",
        want_r,
        want_r,
        root.get("requests").unwrap_or(-1),
        root.get("bytes_in").unwrap_or(-1),
        if exact { "exact (nothing lost)" } else { "MISMATCH" }
    );
    Ok(exact)
}

fn render(
    rs: &Rstat,
    reqs: &rstat::ControllerHandle,
    at: Duration,
) -> Result<String, rstat::Error> {
    let mut out = String::new();
    let _ = writeln!(out, "\n[t={:.1}s]", at.as_secs_f64());
    let _ = writeln!(
        out,
        "{:<22} {:>12} {:>12} {:>12} {:>14} {:>10}",
        "group", "cpu usec", "user usec", "requests", "bytes_in", "live kids"
    );
    let mut stack = vec![rs.root().clone()];
    while let Some(g) = stack.pop() {
        let cpu = rs.cpu_stat(&g)?;
        let r = reqs.read(&g)?;
        let kids = g.children();
        let name = if g.depth() == 0 {
            "/".to_owned()
        } else {
            format!("{}{}", "  ".repeat(g.depth()), g.name())
        };
        if g.depth() <= 2 {
            let _ = writeln!(
                out,
                "{:<22} {:>12} {:>12} {:>12} {:>14} {:>10}",
                name,
                cpu.hierarchical()[0],
                cpu.hierarchical()[1],
                r.get("requests").unwrap_or(0),
                r.get("bytes_in").unwrap_or(0),
                kids.len()
            );
            stack.extend(kids.into_iter().rev().filter(|k| k.depth() <= 2));
        }
    }
    Ok(out)
}
