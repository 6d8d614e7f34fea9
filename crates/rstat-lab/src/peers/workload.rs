//! One sample of one contender: writer threads adding byte counts to
//! leaves for a fixed time while a reader reads every tenant's total
//! periodically, then the checks.
//!
//! Each writer draws from its own xorshift generator: one step per add
//! gives the leaf (the low bits; leaf counts are powers of two, so no
//! division) and the byte count (1 B to 16 KiB, from the high bits). The
//! sequence is a function of the seed, so after its timed run a writer
//! replays it, off the clock, into per-tenant sums: what the contender
//! must read once every writer has joined (the exact check), with nothing
//! added to the measured loop. Every contender of a sample gets the same
//! seeds, so the same leaves and counts in the same order.
//!
//! While the writers run, the reader checks that no tenant's total ever
//! goes down between its reads; after the join, that none it read exceeds
//! the tenant's final total. Each sample has at least one sweep of the
//! reader over every tenant while the writers run: the writers are
//! stopped only after it, however late the reader got a CPU.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use super::contenders::{Contender, Shape};
use crate::machine::{pin_to_cpu, thread_cputime};

/// Adds between two looks at the stop flag.
const CHUNK: u64 = 256;

/// The largest byte count of one add.
pub const MAX_BYTES: u64 = 16 << 10;

/// One step of the 64-bit xorshift generator.
#[inline(always)]
pub fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

/// A nonzero generator state for `(sample, thread)`.
pub fn seed(sample: u64, thread: u64) -> u64 {
    // splitmix64's finaliser over the pair; `| 1` keeps it nonzero.
    let mut z = sample
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(thread.wrapping_mul(0xbf58_476d_1ce4_e5b9))
        .wrapping_add(0x94d0_49bb_1331_11eb);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) | 1
}

/// The leaf and byte count of generator state `x`.
#[inline(always)]
pub fn draw(x: u64, leaf_mask: usize, hot: bool) -> (usize, u64) {
    let leaf = if hot { 0 } else { x as usize & leaf_mask };
    (leaf, ((x >> 40) & (MAX_BYTES - 1)) + 1)
}

/// What a sample runs.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    /// The tree.
    pub shape: Shape,
    /// Writer threads (thread `i` pinned to CPU `i`).
    pub threads: usize,
    /// Every writer on leaf 0 instead of leaves drawn at random.
    pub hot: bool,
    /// How long the writers run.
    pub duration: Duration,
    /// The reader's period: it reads every tenant once per period.
    pub period: Duration,
}

/// One sample's figures.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Million adds per second, all writers (each writer's adds over its
    /// own time, summed).
    pub mops: f64,
    /// The writers' CPU time over the longest writer's wall time: the
    /// writers that really ran at once.
    pub parallel: f64,
    /// ns per tenant read, one figure per sweep over every tenant (a
    /// sweep's time over the tenants).
    pub read_ns: Vec<f64>,
    /// Totals compared exactly after the join (one per tenant).
    pub exact_checks: u64,
}

struct Writer {
    adds: u64,
    wall: Duration,
    cpu: Duration,
    sums: Vec<u64>,
}

struct Reader {
    read_ns: Vec<f64>,
    last: Vec<u64>,
    error: Option<String>,
}

/// Run one sample of `c` under `load` with generator seeds of
/// `sample_no`, the main thread calling `tick` once per reader period
/// while the writers run. `expected` holds each tenant's exact total
/// before the sample and is advanced by what the writers added; the
/// contender must then read exactly that.
///
/// Errors: a total that went down between two reads, a read that failed,
/// a total read under load above the final one, or a final total that is
/// not exactly what the writers added, naming the tenant and both numbers.
pub fn sample<C: Contender>(
    c: &Arc<C>,
    name: &str,
    load: &Load,
    sample_no: u64,
    expected: &mut [u64],
    mut tick: impl FnMut(),
) -> Result<Sample, String> {
    let shape = load.shape;
    if expected.len() != shape.tenants || !shape.leaves().is_power_of_two() {
        return Err(format!(
            "{name}: {} expected totals for {} tenants ({} leaves; a power of two is needed)",
            expected.len(),
            shape.tenants,
            shape.leaves()
        ));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(load.threads + 1));
    let writers: Vec<_> = (0..load.threads)
        .map(|t| {
            let (c, stop, start) = (Arc::clone(c), Arc::clone(&stop), Arc::clone(&start));
            let (x0, mask, hot) = (seed(sample_no, t as u64), shape.leaves() - 1, load.hot);
            std::thread::spawn(move || {
                pin_to_cpu(t);
                start.wait();
                let (t0, c0) = (Instant::now(), thread_cputime());
                let mut x = x0;
                let mut adds = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..CHUNK {
                        x = xorshift(x);
                        let (leaf, bytes) = draw(x, mask, hot);
                        c.add(leaf, bytes);
                    }
                    adds += CHUNK;
                }
                let (wall, cpu) = (t0.elapsed(), thread_cputime().saturating_sub(c0));
                // Off the clock: the same sequence again, into sums.
                let mut sums = vec![0u64; shape.tenants];
                let mut x = x0;
                for _ in 0..adds {
                    x = xorshift(x);
                    let (leaf, bytes) = draw(x, mask, hot);
                    sums[shape.tenant_of(leaf)] += bytes;
                }
                Writer {
                    adds,
                    wall,
                    cpu,
                    sums,
                }
            })
        })
        .collect();
    let sweeps = Arc::new(AtomicU64::new(0));
    let reader = {
        let (c, stop, period) = (Arc::clone(c), Arc::clone(&stop), load.period);
        let sweeps = Arc::clone(&sweeps);
        let mut last = expected.to_vec();
        let name = name.to_owned();
        std::thread::spawn(move || {
            let mut read_ns = Vec::new();
            let mut next = Instant::now() + period;
            loop {
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                }
                next += period;
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let t0 = Instant::now();
                for (t, seen) in last.iter_mut().enumerate() {
                    match c.tenant_total(t) {
                        Ok(v) if v >= *seen => *seen = v,
                        Ok(v) => {
                            let error = Some(format!(
                                "{name}: tenant {t}'s total went down while writers ran: {v} \
                                 after {seen}"
                            ));
                            return Reader {
                                read_ns,
                                last,
                                error,
                            };
                        }
                        Err(e) => {
                            return Reader {
                                read_ns,
                                last,
                                error: Some(e),
                            }
                        }
                    }
                }
                read_ns.push(t0.elapsed().as_nanos() as f64 / last.len().max(1) as f64);
                c.after_sweep();
                sweeps.fetch_add(1, Ordering::Release);
            }
            Reader {
                read_ns,
                last,
                error: None,
            }
        })
    };
    start.wait();
    let t0 = Instant::now();
    while t0.elapsed() < load.duration {
        std::thread::sleep(load.period.min(load.duration.saturating_sub(t0.elapsed())));
        tick();
    }
    // Every sample reads each tenant at least once while the writers run,
    // however late the reader got a CPU (or until it failed).
    while sweeps.load(Ordering::Acquire) == 0 && !reader.is_finished() {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Relaxed);
    let mut ws = Vec::with_capacity(load.threads);
    for w in writers {
        ws.push(
            w.join()
                .map_err(|_| format!("{name}: a writer thread panicked"))?,
        );
    }
    let r = reader
        .join()
        .map_err(|_| format!("{name}: the reader thread panicked"))?;
    if let Some(e) = r.error {
        return Err(e);
    }
    for w in &ws {
        for (e, s) in expected.iter_mut().zip(&w.sums) {
            *e += s;
        }
    }
    for (t, &want) in expected.iter().enumerate() {
        let got = c.tenant_exact(t)?;
        if got != want {
            return Err(format!(
                "{name}: tenant {t}'s total is {got} after the writers joined, but they added \
                 {want} to it in all (off by {})",
                got as i128 - want as i128
            ));
        }
        if r.last[t] > want {
            return Err(format!(
                "{name}: the reader saw tenant {t} at {} while writers ran, above its final \
                 total {want}",
                r.last[t]
            ));
        }
    }
    let slowest = ws.iter().map(|w| w.wall).max().unwrap_or_default();
    let mops = ws
        .iter()
        .filter(|w| !w.wall.is_zero())
        .map(|w| w.adds as f64 / w.wall.as_secs_f64() / 1e6)
        .sum();
    let cpu: Duration = ws.iter().map(|w| w.cpu).sum();
    Ok(Sample {
        mops,
        parallel: if slowest.is_zero() {
            0.0
        } else {
            cpu.as_secs_f64() / slowest.as_secs_f64()
        },
        read_ns: r.read_ns,
        exact_checks: shape.tenants as u64,
    })
}
