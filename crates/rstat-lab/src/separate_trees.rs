//! `rstat bench separate-trees` (seed 000): what per-controller trees and
//! locks buy a `cpu.stat` reader while a heavy controller is busy.
//!
//! A parent with 2 x nr_cpus children. Writer threads (one per CPU but the
//! reader's) update all 48 items of a heavy controller in the children,
//! continuously, and charge a little CPU time now and then (as ticks do). A
//! reader reads the parent's cpu stats 200,000 times, each an exact read (a
//! flush every time, as the kernel's `cpu.stat` does). The same run measures
//! separate trees (default) and unified mode (one tree and lock for all, as
//! before kernel v6.16).

pub mod experiment;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::machine::{pin_to_cpu, round, unpin, Machine};

/// Stat items of the heavy controller (memcg has ~50).
pub const HEAVY_ITEMS: usize = 48;

/// Settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Reads of the parent's cpu stats per mode.
    pub reads: usize,
    /// CPUs to use: the reader's and `cpus - 1` writers' (`None`: every
    /// online CPU).
    pub cpus: Option<usize>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            reads: 200_000,
            cpus: None,
        }
    }
}

/// Results.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// ns per exact cpu-stat read, unified tree.
    pub unified_read_ns: f64,
    /// ns per exact cpu-stat read, separate trees.
    pub separate_read_ns: f64,
    /// unified / separate (target >= 3; the seed measured 3.0).
    pub speedup: f64,
    /// Reads per mode.
    pub reads: usize,
    /// Children of the parent.
    pub children: usize,
    /// Stat items in the heavy controller.
    pub heavy_items: usize,
    /// Writer threads.
    pub writers: usize,
    /// Heavy-controller folds done during the reads, unified mode.
    pub heavy_folds_unified: u64,
    /// Heavy-controller folds done during the reads, separate mode (0: the
    /// cpu reads never touched it).
    pub heavy_folds_separate: u64,
    /// The machine.
    pub machine: Machine,
}

fn must<T>(r: rstat::Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("separate-trees setup: {e}"),
    }
}

fn measure(unified: bool, reads: usize, cpus: usize) -> (f64, u64, usize) {
    // The locked update path: an exact read on the rseq path also pays one
    // `membarrier`, the same system call in both layouts, which would hide
    // the flush work that separate trees remove (what seed 000 measured;
    // the kernel's flush has no such fence).
    let rs = Arc::new(must(
        rstat::Rstat::builder()
            .unified(unified)
            .update_path(rstat::UpdatePath::Locked)
            .build(),
    ));
    let names: Vec<String> = (0..HEAVY_ITEMS).map(|i| format!("stat{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let heavy = must(rs.register_counters("heavy", &refs));
    let parent = must(rs.root().create_child("parent"));
    let nr = rs.nr_cpus();
    let children: Vec<_> = (0..2 * nr)
        .map(|i| must(parent.create_child(&format!("child{i}"))))
        .collect();
    let writers = cpus.saturating_sub(1).max(1);
    let stop = Arc::new(AtomicBool::new(false));
    let hs: Vec<_> = (0..writers)
        .map(|w| {
            let hs: Vec<_> = children
                .iter()
                .map(|c| must(heavy.stat_handle(c)))
                .collect();
            let (rs, stop, children) = (Arc::clone(&rs), Arc::clone(&stop), children.clone());
            std::thread::spawn(move || {
                pin_to_cpu(w + 1);
                let items: Vec<(usize, i64)> = (0..HEAVY_ITEMS).map(|i| (i, 1)).collect();
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for (h, c) in hs.iter().zip(&children) {
                        let applied = h.add_many(&items);
                        assert_eq!(applied, items.len(), "every heavy item is in range");
                        if round.is_multiple_of(64) {
                            let _ = rs.account_cputime(c, 1, 1);
                        }
                    }
                    round += 1;
                }
            })
        })
        .collect();
    pin_to_cpu(0);
    let cpu = match rs.cpu() {
        Some(c) => c.clone(),
        None => panic!("the cpu controller is built in"),
    };
    // Let the writers get going.
    std::thread::sleep(std::time::Duration::from_millis(50));
    let before = heavy.flush_counts().1;
    let t0 = Instant::now();
    for _ in 0..reads {
        let s = must(cpu.read_exact(&parent));
        std::hint::black_box(s.hierarchical()[0]);
    }
    let el = t0.elapsed();
    let folds = heavy.flush_counts().1 - before;
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        let _ = h.join();
    }
    unpin();
    (el.as_nanos() as f64 / reads as f64, folds, writers)
}

/// Run the benchmark.
pub fn run(cfg: &Config) -> Report {
    let cpus = cfg.cpus.unwrap_or_else(crate::machine::online_cpus);
    let (u, fu, writers) = measure(true, cfg.reads, cpus);
    let (s, fs, _) = measure(false, cfg.reads, cpus);
    let nr = rstat::percpu::cpu::possible_cpus();
    Report {
        unified_read_ns: round(u, 1),
        separate_read_ns: round(s, 1),
        speedup: round(u / s, 2),
        reads: cfg.reads,
        children: 2 * nr,
        heavy_items: HEAVY_ITEMS,
        writers,
        heavy_folds_unified: fu,
        heavy_folds_separate: fs,
        machine: Machine::detect(),
    }
}

/// Human-readable table.
pub fn table(r: &Report) -> String {
    format!(
        "rstat bench separate-trees: {} exact cpu-stat reads of a parent with {} children, locked update path; {} writer thread(s) busy on a {}-item controller\n{}\n\n\
         {:<16} {:>14} {:>22}\n{:<16} {:>14.1} {:>22}\n{:<16} {:>14.1} {:>22}\n\n\
         speedup: {:.2}x (target >= 3; seed 000 measured 3.0x)\n",
        r.reads,
        r.children,
        r.writers,
        r.heavy_items,
        r.machine.line(),
        "trees",
        "ns per read",
        "heavy folds by reads",
        "unified",
        r.unified_read_ns,
        r.heavy_folds_unified,
        "separate",
        r.separate_read_ns,
        r.heavy_folds_separate,
        r.speedup
    )
}
