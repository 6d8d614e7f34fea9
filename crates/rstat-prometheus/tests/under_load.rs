//! Scrapes while writers run: no scrape loses a sample. Every live group
//! has a sample of every family in every scrape (levels read while they
//! move between CPUs may be briefly negative: they are gauges, exported
//! as they are), `rstat_exporter_skipped_samples_total` stays 0, and a
//! counter's sample lies between what completed before the scrape and
//! what started before it ended.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use rstat::memory::Memory;
use rstat::{CounterSetController, Rstat, StatKind};
use rstat_prometheus::{Exporter, Format};

/// The value of the sample `name{path="<path>"}`, if present.
fn value(body: &str, name: &str, path: &str) -> Option<f64> {
    let prefix = format!("{name}{{path=\"{path}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map(|v| v.parse().unwrap())
}

#[test]
fn no_scrape_loses_a_sample_while_levels_move_between_cpus() {
    let rs = Arc::new(Rstat::new());
    let mem = Memory::register(&rs).unwrap();
    let pool = rs
        .register(
            CounterSetController::new("pool", &["in_use", "served"])
                .with_kinds(&[StatKind::Gauge, StatKind::Counter]),
        )
        .unwrap();
    let heap = mem.stat_controller().index_of("heap").unwrap();
    let overhead = mem.stat_controller().index_of("heap_overhead").unwrap();
    let workers = 3;
    let groups: Vec<_> = (0..workers)
        .map(|w| rs.root().create_child(&format!("w{w}")).unwrap())
        .collect();
    let exporter = Exporter::new(&rs);
    let stop = Arc::new(AtomicBool::new(false));
    // Updates of `served` started and completed, in all.
    let started = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = groups
        .iter()
        .cloned()
        .map(|g| {
            let (mem, pool, stop) = (mem.clone(), pool.clone(), stop.clone());
            let (started, done) = (started.clone(), done.clone());
            std::thread::spawn(move || {
                let stat = mem.stat_controller();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // Levels up, then down: as an object allocated here
                    // and freed after the thread moved to another CPU.
                    stat.add(&g, heap, 64).unwrap();
                    stat.add(&g, overhead, 16).unwrap();
                    pool.add(&g, 0, 1).unwrap();
                    std::thread::yield_now();
                    stat.add(&g, heap, -64).unwrap();
                    stat.add(&g, overhead, -16).unwrap();
                    pool.add(&g, 0, -1).unwrap();
                    started.fetch_add(1, Ordering::SeqCst);
                    pool.add(&g, 1, 1).unwrap();
                    done.fetch_add(1, Ordering::SeqCst);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let rounds = if cfg!(miri) { 3 } else { 300 };
    let families = [
        "rstat_memory_heap_bytes",
        "rstat_memory_heap_overhead_bytes",
        "rstat_pool_in_use",
        "rstat_pool_served_total",
        "rstat_memory_heap_allocs_total",
    ];
    let mut paths = vec!["/".to_owned()];
    paths.extend(groups.iter().map(|g| g.path()));
    for k in 0..rounds {
        let before = done.load(Ordering::SeqCst);
        let body = exporter.render(Format::OpenMetrics).unwrap().body;
        let after = started.load(Ordering::SeqCst);
        for f in families {
            for p in &paths {
                assert!(
                    value(&body, f, p).is_some(),
                    "scrape {k}: no sample {f}{{path={p:?}}} in\n{body}"
                );
            }
        }
        let served = value(&body, "rstat_pool_served_total", "/").unwrap() as u64;
        assert!(
            before <= served && served <= after,
            "scrape {k}: served {served} outside [{before}, {after}]"
        );
        let skipped = body
            .lines()
            .find_map(|l| l.strip_prefix("rstat_exporter_skipped_samples_total "));
        assert_eq!(skipped, Some("0"), "scrape {k}:\n{body}");
    }
    stop.store(true, Ordering::Relaxed);
    let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    // Every level back at 0 once the writers stopped.
    let body = exporter.render(Format::OpenMetrics).unwrap().body;
    assert_eq!(value(&body, "rstat_memory_heap_bytes", "/"), Some(0.0));
    assert_eq!(value(&body, "rstat_pool_in_use", "/"), Some(0.0));
    assert_eq!(
        value(&body, "rstat_pool_served_total", "/"),
        Some(total as f64)
    );
}
