//! Scrapes racing group creation and removal: every scrape succeeds, and
//! every removed group is accounted for: reported in exactly one scrape,
//! or counted lost (queue full), never silently missed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use rstat::Rstat;
use rstat_prometheus::{Config, Exporter, Format};

#[test]
fn scrapes_racing_removals_account_for_every_removed_group() {
    let rs = Arc::new(Rstat::new());
    let c = rs.register_counters("c", &["n"]).unwrap();
    let exporter = Exporter::with_config(
        &rs,
        Config {
            removed_capacity: 64,
            ..Config::default()
        },
    );
    let stop = Arc::new(AtomicBool::new(false));
    let removed = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..3)
        .map(|w| {
            let (rs, c, stop, removed) = (rs.clone(), c.clone(), stop.clone(), removed.clone());
            std::thread::spawn(move || {
                let parent = rs.root().create_child(&format!("w{w}")).unwrap();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let g = parent.create_child(&format!("g{i}")).unwrap();
                    c.add(&g, 0, 1).unwrap();
                    g.remove().unwrap();
                    removed.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
                parent
            })
        })
        .collect();
    let rounds = if cfg!(miri) { 3 } else { 200 };
    let mut reported = 0u64;
    for k in 0..rounds {
        let f = if k % 2 == 0 {
            Format::Classic
        } else {
            Format::OpenMetrics
        };
        reported += exporter.render(f).unwrap().removed as u64;
    }
    // The workers may not have run yet on a loaded machine: let them
    // remove a few groups before they stop (waiting, not timing).
    while removed.load(Ordering::Relaxed) < 3 {
        std::thread::yield_now();
    }
    stop.store(true, Ordering::Relaxed);
    let parents: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let last = exporter.render(Format::Classic).unwrap();
    reported += last.removed as u64;
    let lost: u64 = last
        .body
        .lines()
        .find_map(|l| l.strip_prefix("rstat_exporter_removed_groups_lost_total "))
        .unwrap()
        .parse()
        .unwrap();
    let removed = removed.load(Ordering::Relaxed);
    assert!(removed > 0);
    assert_eq!(
        reported + lost,
        removed,
        "reported {reported} + lost {lost}"
    );
    assert!(reported > 0, "some removed groups were reported");
    // The parents kept every removed group's count.
    let total: u64 = parents
        .iter()
        .map(|p| c.read_exact(p).unwrap().get("n").unwrap() as u64)
        .sum();
    assert_eq!(total, removed);
    drop(parents);
    assert_eq!(rs.zombie_count(), 0);
}
