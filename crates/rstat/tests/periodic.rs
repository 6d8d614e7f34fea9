//! The periodic flusher: it folds what thresholds skip, and its thread stops
//! with the engine. Alone in its test binary so the thread count is ours.

use std::time::Duration;

use rstat::Rstat;

#[test]
fn the_periodic_flusher_folds_what_thresholds_skip_and_stops_with_the_engine() {
    let threads_before = thread_count();
    let rs = Rstat::builder()
        .nr_cpus(2)
        .periodic_flush(Some(Duration::from_millis(5)))
        .build()
        .unwrap();
    let c = rs.register_counters("c", &["n"]).unwrap();
    let g = rs.root().create_child("g").unwrap();
    c.add(&g, 0, 3).unwrap(); // far below the threshold
    let mut seen = 0;
    for _ in 0..400 {
        seen = c.read(&g).unwrap().hierarchical()[0];
        if seen == 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(seen, 3, "the periodic flusher never folded the update");
    if let Some(before) = threads_before {
        assert_eq!(
            thread_count(),
            Some(before + 1),
            "one flusher thread while the engine lives"
        );
        drop(rs);
        assert_eq!(
            thread_count(),
            Some(before),
            "the flusher thread must stop with the engine"
        );
    }
}

/// Threads of this process (Linux), if /proc is readable.
fn thread_count() -> Option<usize> {
    if cfg!(miri) {
        return None;
    }
    std::fs::read_dir("/proc/self/task").ok().map(|d| d.count())
}
