//! `rstat demo`: a small multi-tenant server on rstat.
//!
//! Worker threads serve "requests" for three tenants. Each request gets its
//! own group under `tenant/service/`; the worker enters it while serving
//! (`req.enter()`), so the CPU time the thread spends on it is charged to
//! it by rstat's attach feed (the thread's own CPU clock, split into user
//! and system time; no manual accounting), and counts its request
//! counters. It is removed when done: its history folds into the service and tenant,
//! so nothing is lost even though the request groups come and go. Each
//! request also charges its working buffer to the memory controller for as
//! long as it runs; tenants have `memory.max` limits, and a request whose
//! charge is refused is turned away (a `max`/`oom` event). Every interval
//! the live tree is printed with exact hierarchical totals; at the end the
//! totals are checked against what the workers counted, and every byte
//! charged must have been uncharged.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rstat::attach::thread_cpu_time;
use rstat::memory::{Memory, MemoryError, MemoryEvent};
use rstat::{Group, Rstat};

/// (name, request weight, memory.max in bytes)
const TENANTS: [(&str, u32, u64); 3] = [
    ("acme", 5, 4 << 20),
    ("globex", 3, 2 << 20),
    ("initech", 1, 64 << 10),
];
const SERVICES: [&str; 2] = ["api", "batch"];
const ITEMS: [&str; 3] = ["requests", "bytes_in", "bytes_out"];

/// Options.
pub struct Options {
    pub duration: Duration,
    pub threads: usize,
    pub interval: Duration,
    /// Serve the Prometheus exporter here while running.
    pub listen: Option<String>,
    /// Allow `listen` on a non-loopback address.
    pub allow_remote: bool,
}

/// Run the demo; returns whether the final totals were exact.
pub fn run(opts: &Options) -> Result<bool, Box<dyn std::error::Error>> {
    let rs = Arc::new(Rstat::new());
    let reqs = rs.register_counters("requests", &ITEMS)?;
    let mem = Memory::register(&rs)?;
    let mut services: Vec<(Group, u32)> = Vec::new();
    for (t, w, max) in TENANTS {
        let tg = rs.root().create_child(t)?;
        mem.set_limit(&tg, rstat::memory::Limit::Max, max)?;
        for s in SERVICES {
            services.push((tg.create_child(s)?, w));
        }
    }
    let _exporter = match &opts.listen {
        Some(addr) => Some(crate::serve::start(&rs, addr, opts.allow_remote)?),
        None => None,
    };
    let total_weight: u32 = services.iter().map(|(_, w)| w).sum();
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    // CPU time the workers spent from just before entering a request's
    // group to just after leaving it, in µs: what the groups can have been
    // charged at most.
    let around_usec = Arc::new(AtomicU64::new(0));
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
            let around_usec = Arc::clone(&around_usec);
            let (reqs, mem, services, stop, served, bytes, refused) = (
                reqs.clone(),
                mem.clone(),
                services.clone(),
                stop.clone(),
                served.clone(),
                bytes.clone(),
                refused.clone(),
            );
            std::thread::spawn(
                move || -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
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
                        // The request's working buffer, charged while it runs.
                        let size = 256 + (x >> 48) as usize % 4096;
                        let charge = match mem.try_charge(&req, size as u64 * 64) {
                            Ok(c) => c,
                            Err(MemoryError::OverLimit(_)) => {
                                refused.fetch_add(1, Ordering::Relaxed);
                                req.remove()?;
                                continue;
                            }
                            Err(e) => return Err(e.into()),
                        };
                        let t0 = thread_cpu_time();
                        {
                            // The request's group is this thread's current
                            // group while it is served: its CPU time is
                            // charged to it when the guard drops (and by
                            // the periodic charger meanwhile).
                            let _in = req.enter();
                            // The "work": hash the buffer.
                            let mut h = 0u64;
                            for i in 0..size * 8 {
                                h = h.rotate_left(5) ^ (i as u64).wrapping_mul(0x9e3779b97f4a7c15);
                            }
                            std::hint::black_box(h);
                            reqs.add(&req, 0, 1)?;
                            reqs.add(&req, 1, size as i64)?;
                            reqs.add(&req, 2, (size / 4) as i64)?;
                        }
                        // Rounded up: a request's charge is cut at µs
                        // boundaries of the same clock.
                        let around = (thread_cpu_time() - t0).as_nanos() as u64;
                        around_usec.fetch_add(around.div_ceil(1000) + 1, Ordering::Relaxed);
                        served.fetch_add(1, Ordering::Relaxed);
                        bytes.fetch_add(size as u64, Ordering::Relaxed);
                        drop(charge);
                        req.remove()?;
                    }
                    Ok(())
                },
            )
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
        print!("{}", render(&rs, &reqs, &mem, start.elapsed())?);
        if next >= opts.duration {
            break;
        }
        next = (next + opts.interval).min(opts.duration);
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        match w.join() {
            Ok(r) => r.map_err(|e| e.to_string())?,
            Err(_) => return Err("a worker thread panicked".into()),
        }
    }
    let root = reqs.read_exact(rs.root())?;
    let cpu_root = match rs.cpu() {
        Some(c) => c.read_exact(rs.root())?,
        None => return Err("the demo's engine has no cpu controller".into()),
    };
    // What the tenants were charged: the root's total less its own time
    // (the root is the process, whose own time includes this thread's
    // and everything outside the requests).
    let tenants = |item: &str| match (cpu_root.get(item), cpu_root.get_local(item)) {
        (Some(total), Some(own)) => total - own,
        _ => -1,
    };
    let (usage, user, system) = (
        tenants("usage_usec"),
        tenants("user_usec"),
        tenants("system_usec"),
    );
    let around = around_usec.load(Ordering::Relaxed) as i64;
    mem.drain_stocks(rs.root())?;
    let mem_left = mem.current(rs.root())?;
    let refused = refused.load(Ordering::Relaxed);
    let (want_r, want_b) = (
        served.load(Ordering::Relaxed) as i64,
        bytes.load(Ordering::Relaxed) as i64,
    );
    // Every request's CPU time went to its group through the enter guards:
    // some was charged, no more than the workers spent around the
    // requests, and user + system add up to usage.
    let cpu_ok = want_r == 0 || (usage > 0 && usage <= around && user + system == usage);
    let exact = root.get("requests") == Some(want_r)
        && root.get("bytes_in") == Some(want_b)
        && mem_left == 0
        && cpu_ok;
    println!(
        "\ncpu (charged to the tenants through enter guards): usage {usage} µs (user {user}, system {system}) of {around} µs the workers spent around requests -> {}",
        if cpu_ok { "consistent" } else { "MISMATCH" }
    );
    println!(
        "\nfinal: {} requests served, {} refused at memory.max, {} request groups created and removed;\n       root totals: requests {} bytes_in {}, memory left charged {} B -> {}",
        want_r,
        refused,
        want_r + refused as i64,
        root.get("requests").unwrap_or(-1),
        root.get("bytes_in").unwrap_or(-1),
        mem_left,
        if exact { "exact (nothing lost, nothing leaked)" } else { "MISMATCH" }
    );
    Ok(exact)
}

fn render(
    rs: &Rstat,
    reqs: &rstat::ControllerHandle,
    mem: &Memory,
    at: Duration,
) -> Result<String, Box<dyn std::error::Error>> {
    let mut out = String::new();
    let _ = writeln!(out, "\n[t={:.1}s]", at.as_secs_f64());
    let _ = writeln!(
        out,
        "{:<18} {:>11} {:>10} {:>13} {:>10} {:>10} {:>8} {:>5}",
        "group", "cpu usec", "requests", "bytes_in", "mem peak", "mem max", "max evt", "kids"
    );
    let mut stack = vec![rs.root().clone()];
    while let Some(g) = stack.pop() {
        // An exact read, as the kernel's `cpu.stat` flushes on every read:
        // a request's charge (tens of µs) is below the `Threshold` policy's
        // unit, so lock-free reads would wait for the periodic flush.
        let cpu = match rs.cpu() {
            Some(c) => c.read_exact(&g)?,
            None => return Err("the demo's engine has no cpu controller".into()),
        };
        let r = reqs.read(&g)?;
        let kids = g.children();
        let name = if g.depth() == 0 {
            "/".to_owned()
        } else {
            format!("{}{}", "  ".repeat(g.depth()), g.name())
        };
        if g.depth() <= 2 {
            let max = mem.limit(&g, rstat::memory::Limit::Max)?;
            let max = if max >= rstat::page_counter::PAGE_COUNTER_MAX {
                "max".to_owned()
            } else {
                format!("{}K", max >> 10)
            };
            let _ = writeln!(
                out,
                "{:<18} {:>11} {:>10} {:>13} {:>9}K {:>10} {:>8} {:>5}",
                name,
                cpu.hierarchical()[0],
                r.get("requests").unwrap_or(0),
                r.get("bytes_in").unwrap_or(0),
                mem.peak(&g)? >> 10,
                max,
                mem.events(&g)?.get(MemoryEvent::Max),
                kids.len()
            );
            stack.extend(kids.into_iter().rev().filter(|k| k.depth() <= 2));
        }
    }
    Ok(out)
}
