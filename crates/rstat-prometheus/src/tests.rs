use super::*;
use rstat::memory::{Limit, Memory};

fn tree() -> (Rstat, Memory, rstat::ControllerHandle, rstat::Group) {
    let rs = Rstat::new();
    let mem = Memory::register(&rs).unwrap();
    let reqs = rs
        .register_counters("requests", &["requests", "cpu_usec", "in_bytes"])
        .unwrap();
    let t = rs.root().create_child("tenant").unwrap();
    reqs.add(&t, 0, 3).unwrap();
    reqs.add(&t, 1, 1_500_000).unwrap();
    reqs.add(&t, 2, 4096).unwrap();
    rs.account_cputime(&t, 300_000, 200_000).unwrap();
    mem.write_limit(&t, Limit::Max, "1M").unwrap();
    (rs, mem, reqs, t)
}

fn has(body: &str, line: &str) -> bool {
    body.lines().any(|l| l == line)
}

#[test]
fn openmetrics_has_conventional_names_units_and_values() {
    let (rs, mem, _reqs, t) = tree();
    let _c = mem.try_charge(&t, 1000).unwrap();
    let ex = Exporter::new(&rs);
    let s = ex.render(Format::OpenMetrics).unwrap();
    let b = &s.body;
    for line in [
        "# TYPE rstat_cpu_usage_seconds counter",
        "# UNIT rstat_cpu_usage_seconds seconds",
        "rstat_cpu_usage_seconds_total{path=\"/tenant\"} 0.5",
        "rstat_cpu_user_seconds_total{path=\"/tenant\"} 0.3",
        "rstat_requests_requests_total{path=\"/tenant\"} 3",
        "rstat_requests_cpu_seconds_total{path=\"/tenant\"} 1.5",
        "rstat_requests_in_bytes_total{path=\"/tenant\"} 4096",
        "rstat_requests_requests_total{path=\"/\"} 3",
        "rstat_memory_max_bytes{path=\"/tenant\"} 1048576",
        "rstat_memory_events_total{path=\"/tenant\",event=\"oom\"} 0",
        "rstat_exporter_groups 2",
        "# EOF",
    ] {
        assert!(has(b, line), "missing {line:?} in\n{b}");
    }
    let cur = mem.current(&t).unwrap();
    assert!(
        has(
            b,
            &format!("rstat_memory_current_bytes{{path=\"/tenant\"}} {cur}")
        ),
        "{b}"
    );
    // Unlimited: no sample.
    assert!(!b.contains("rstat_memory_max_bytes{path=\"/\"}"), "{b}");
    assert!(s.series > 20 && s.groups == 2 && s.removed == 0, "{s:?}");
}

#[test]
fn classic_text_names_counters_with_total_and_has_no_openmetrics_lines() {
    let (rs, _mem, _reqs, _t) = tree();
    let b = Exporter::new(&rs).render(Format::Classic).unwrap().body;
    assert!(
        has(&b, "# TYPE rstat_cpu_usage_seconds_total counter"),
        "{b}"
    );
    assert!(b
        .lines()
        .any(|l| l.starts_with("# HELP rstat_cpu_usage_seconds_total ")));
    assert!(has(&b, "# TYPE rstat_memory_current_bytes gauge"), "{b}");
    assert!(
        has(&b, "rstat_cpu_usage_seconds_total{path=\"/tenant\"} 0.5"),
        "{b}"
    );
    assert!(!b.contains("# EOF") && !b.contains("# UNIT"), "{b}");
}

#[test]
fn label_values_are_escaped() {
    let rs = Rstat::new();
    let c = rs.register_counters("c", &["n"]).unwrap();
    let g = rs.root().create_child("a\"b\\c\nd é").unwrap();
    c.add(&g, 0, 1).unwrap();
    for f in [Format::Classic, Format::OpenMetrics] {
        let b = Exporter::new(&rs).render(f).unwrap().body;
        assert!(
            has(&b, "rstat_c_n_total{path=\"/a\\\"b\\\\c\\nd é\"} 1"),
            "{b}"
        );
    }
}

/// The `path` label is what [`rstat::Group::path`] gives and what errors
/// print: one absolute form, `/` for the root.
#[test]
fn path_labels_are_group_paths_as_errors_print_them() {
    let rs = Rstat::new();
    let c = rs.register_counters("c", &["n"]).unwrap();
    let a = rs.root().create_child("a").unwrap();
    let b = a.create_child("b").unwrap();
    b.create_child("x").unwrap();
    c.add(&b, 0, 1).unwrap();
    // Errors naming the root, /a and /a/b.
    let errors = [
        rs.root().create_child("a").unwrap_err(),
        a.remove().unwrap_err(),
        b.create_child("x").unwrap_err(),
    ];
    let error_paths: Vec<String> = errors
        .into_iter()
        .map(|e| match e {
            rstat::Error::NameExists { parent, .. } => parent,
            rstat::Error::HasChildren { path, .. } => path,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(error_paths, ["/", "/a", "/a/b"]);
    for f in [Format::Classic, Format::OpenMetrics] {
        let body = Exporter::new(&rs).render(f).unwrap().body;
        for (g, want) in [(rs.root(), "/"), (&a, "/a"), (&b, "/a/b")] {
            assert_eq!(g.path(), want);
            let line = format!("rstat_c_n_total{{path=\"{}\"}} 1", g.path());
            assert!(has(&body, &line), "missing {line:?} in\n{body}");
        }
    }
}

#[test]
fn a_removed_group_is_reported_once_with_its_final_values() {
    let (rs, _mem, reqs, t) = tree();
    let ex = Exporter::new(&rs);
    let _ = ex.render(Format::Classic).unwrap();
    let short = t.create_child("short-lived").unwrap();
    reqs.add(&short, 0, 7).unwrap();
    short.remove().unwrap();
    drop(short);
    let line = "rstat_requests_requests_total{path=\"/tenant/short-lived\"} 7";
    let s = ex.render(Format::Classic).unwrap();
    assert!(has(&s.body, line), "{}", s.body);
    assert_eq!(s.removed, 1);
    assert!(
        has(&s.body, "rstat_exporter_removed_groups_reported_total 1"),
        "{}",
        s.body
    );
    // The parent kept the history; the next scrape does not repeat it.
    assert!(has(
        &s.body,
        "rstat_requests_requests_total{path=\"/tenant\"} 10"
    ));
    let s = ex.render(Format::Classic).unwrap();
    assert!(!s.body.contains("short-lived"), "{}", s.body);
    assert_eq!(
        rs.zombie_count(),
        0,
        "the exporter let go of the removed group"
    );
}

#[test]
fn removed_groups_beyond_capacity_or_colliding_are_counted_lost() {
    let rs = Rstat::new();
    let c = rs.register_counters("c", &["n"]).unwrap();
    let cfg = Config {
        removed_capacity: 2,
        ..Config::default()
    };
    let ex = Exporter::with_config(&rs, cfg);
    for i in 0..4 {
        let g = rs.root().create_child(&format!("g{i}")).unwrap();
        c.add(&g, 0, 1).unwrap();
        g.remove().unwrap();
    }
    // Same path as a live group by the scrape.
    let again = rs.root().create_child("g0").unwrap();
    let b = ex.render(Format::Classic).unwrap().body;
    assert!(has(&b, "rstat_exporter_removed_groups_lost_total 3"), "{b}");
    assert!(
        has(&b, "rstat_exporter_removed_groups_reported_total 1"),
        "{b}"
    );
    assert!(has(&b, "rstat_c_n_total{path=\"/g1\"} 1"), "{b}");
    assert!(has(&b, "rstat_c_n_total{path=\"/g0\"} 0"), "{b}");
    drop(again);
}

#[test]
fn negative_counters_are_skipped_and_gauges_can_be_declared() {
    let rs = Rstat::new();
    let q = rs.register_counters("queue", &["depth", "done"]).unwrap();
    let g = rs.root().create_child("g").unwrap();
    q.add(&g, 0, -5).unwrap();
    q.add(&g, 1, -1).unwrap();
    let b = Exporter::new(&rs).render(Format::OpenMetrics).unwrap().body;
    assert!(!b.contains("rstat_queue_depth_total{path=\"/g\"}"), "{b}");
    assert!(has(&b, "rstat_exporter_skipped_samples_total 4"), "{b}"); // 2 items x (/, /g)
    let cfg = Config {
        gauges: vec!["queue.depth".into()],
        ..Config::default()
    };
    let b = Exporter::with_config(&rs, cfg)
        .render(Format::OpenMetrics)
        .unwrap()
        .body;
    assert!(has(&b, "# TYPE rstat_queue_depth gauge"), "{b}");
    assert!(has(&b, "rstat_queue_depth{path=\"/g\"} -5"), "{b}");
}

#[test]
fn odd_controller_names_are_sanitized_and_collisions_skipped() {
    let rs = Rstat::new();
    let a = rs.register_counters("my-ctl", &["a.b"]).unwrap();
    let _b = rs.register_counters("my_ctl", &["a_b"]).unwrap();
    a.add(rs.root(), 0, 2).unwrap();
    let b = Exporter::new(&rs).render(Format::Classic).unwrap().body;
    assert!(has(&b, "rstat_my_ctl_a_b_total{path=\"/\"} 2"), "{b}");
    assert!(has(&b, "rstat_exporter_skipped_families 1"), "{b}");
}

#[test]
fn scraping_changes_no_stat_of_any_group() {
    let (rs, mem, _reqs, t) = tree();
    let _c = mem.try_charge(&t, 5000).unwrap();
    let rep = rstat::report::Reporter::new(&rs);
    let before = rep.snapshot_all().unwrap();
    let ex = Exporter::new(&rs);
    for f in [Format::Classic, Format::OpenMetrics, Format::Classic] {
        let _ = ex.render(f).unwrap();
        let _ = ex.snapshot_json().unwrap();
    }
    // Except the root's cpu stats: the root is the process, whose CPU
    // clock the scrapes themselves advance.
    let root_cpu_masked = |mut s: rstat::report::Snapshot| {
        assert_eq!(s.controllers[0].name, "cpu");
        let cpu = &mut s.groups[0].stats[0];
        cpu.local.fill(0);
        cpu.hierarchical.fill(0);
        s
    };
    assert_eq!(
        root_cpu_masked(rep.snapshot_all().unwrap()),
        root_cpu_masked(before)
    );
}

#[test]
fn depth_limit_hides_deep_groups_and_ignores_their_removal() {
    let (rs, _mem, reqs, t) = tree();
    let cfg = Config {
        max_depth: 1,
        ..Config::default()
    };
    let ex = Exporter::with_config(&rs, cfg);
    let deep = t.create_child("req-1").unwrap();
    reqs.add(&deep, 0, 1).unwrap();
    let b = ex.render(Format::Classic).unwrap().body;
    assert!(!b.contains("req-1"), "{b}");
    deep.remove().unwrap();
    drop(deep);
    let b = ex.render(Format::Classic).unwrap().body;
    assert!(!b.contains("req-1"), "{b}");
    assert!(
        has(&b, "rstat_requests_requests_total{path=\"/tenant\"} 4"),
        "{b}"
    );
    assert_eq!(rs.zombie_count(), 0);
}

#[test]
fn snapshot_json_parses_back() {
    let (rs, _mem, _reqs, _t) = tree();
    let j = Exporter::new(&rs).snapshot_json().unwrap();
    let s: rstat::report::Snapshot = serde_json::from_str(&j).unwrap();
    assert_eq!(s.get("/tenant", "requests", "requests"), Some((3, 3)));
}

#[test]
fn an_undelivered_or_failed_scrape_keeps_its_removed_groups_for_the_next() {
    let (rs, _mem, reqs, t) = tree();
    let ex = Exporter::new(&rs);
    let short = t.create_child("short-lived").unwrap();
    reqs.add(&short, 0, 7).unwrap();
    short.remove().unwrap();
    drop(short);
    let line = "rstat_requests_requests_total{path=\"/tenant/short-lived\"} 7";
    // A scrape rendered but never delivered (dropped uncommitted).
    let p = ex.render_pending(Format::Classic).unwrap();
    assert!(has(&p.scrape().body, line));
    drop(p);
    // A HEAD-style peek changes nothing either.
    assert!(has(&ex.peek(Format::Classic).unwrap().body, line));
    // A scrape failing after the removed groups were taken.
    ex.inner
        .fail_next
        .store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(ex.render(Format::Classic).is_err());
    let s = ex.render(Format::Classic).unwrap();
    assert!(has(&s.body, line), "{}", s.body);
    assert!(
        has(&s.body, "rstat_exporter_removed_groups_reported_total 1"),
        "{}",
        s.body
    );
    assert!(has(&s.body, "rstat_exporter_removed_groups_lost_total 0"));
    // Two scrapes holding it, both committed: counted once.
    let g2 = t.create_child("other").unwrap();
    g2.remove().unwrap();
    drop(g2);
    let (a, b) = (
        ex.render_pending(Format::Classic).unwrap(),
        ex.render_pending(Format::Classic).unwrap(),
    );
    assert_eq!((a.scrape().removed, b.scrape().removed), (1, 1));
    let _ = (a.commit(), b.commit());
    let s = ex.render(Format::Classic).unwrap();
    assert_eq!(s.removed, 0);
    assert!(has(
        &s.body,
        "rstat_exporter_removed_groups_reported_total 2"
    ));
    assert_eq!(rs.zombie_count(), 0);
}

#[test]
fn pending_removed_groups_are_bounded_when_scrapes_keep_failing() {
    let rs = Rstat::new();
    let ex = Exporter::with_config(
        &rs,
        Config {
            removed_capacity: 2,
            ..Config::default()
        },
    );
    for round in 0..3 {
        for i in 0..2 {
            let g = rs.root().create_child(&format!("g{round}-{i}")).unwrap();
            g.remove().unwrap();
        }
        // Never delivered.
        drop(ex.render_pending(Format::Classic).unwrap());
    }
    assert!(rs.zombie_count() <= 2, "{}", rs.zombie_count());
    let s = ex.render(Format::Classic).unwrap();
    assert_eq!(s.removed, 2);
    assert!(s.body.contains("g2-0") && s.body.contains("g2-1"));
    assert!(
        has(&s.body, "rstat_exporter_removed_groups_lost_total 4"),
        "{}",
        s.body
    );
}

/// Levels are gauges (a counter that goes down breaks `rate()`, and a
/// negative one was dropped from the scrape), byte series end in
/// `_bytes`, counts are counters whose samples end in `_total`.
#[test]
fn memory_levels_are_gauges_and_byte_series_end_in_bytes() {
    let rs = Rstat::new();
    let mem = Memory::register(&rs).unwrap();
    let g = rs.root().create_child("g").unwrap();
    let stat = mem.stat_controller();
    let at = |n: &str| stat.index_of(n).unwrap();
    // A level read while objects move between CPUs can be briefly
    // negative (see the crate docs); it must be exported all the same.
    stat.add(&g, at("heap"), -10).unwrap();
    stat.add(&g, at("heap_overhead"), 3).unwrap();
    stat.add(&g, at("heap_allocs"), 2).unwrap();
    stat.add(&g, at("heap_reparented"), 100).unwrap();
    let ex = Exporter::with_config(
        &rs,
        Config {
            memory_unit_bytes: 4096,
            ..Config::default()
        },
    );
    let _c = mem.try_charge(&g, 2).unwrap();
    let b = ex.render(Format::OpenMetrics).unwrap().body;
    for line in [
        "# TYPE rstat_memory_heap_bytes gauge",
        "# UNIT rstat_memory_heap_bytes bytes",
        "rstat_memory_heap_bytes{path=\"/g\"} -10",
        "# TYPE rstat_memory_heap_overhead_bytes gauge",
        "rstat_memory_heap_overhead_bytes{path=\"/g\"} 3",
        "# TYPE rstat_memory_heap_allocs counter",
        "rstat_memory_heap_allocs_total{path=\"/g\"} 2",
        "# TYPE rstat_memory_heap_reparented_bytes counter",
        "rstat_memory_heap_reparented_bytes_total{path=\"/g\"} 100",
        // Charge units times memory_unit_bytes; heap bytes are bytes.
        "rstat_memory_charged_bytes_total{path=\"/g\"} 8192",
        "rstat_memory_failcnt_total{path=\"/g\"} 0",
        "rstat_exporter_skipped_samples_total 0",
    ] {
        assert!(has(&b, line), "missing {line:?} in\n{b}");
    }
    // Stocks included: the batch the charge took.
    let cur = mem.current(&g).unwrap() * 4096;
    let line = format!("rstat_memory_current_bytes{{path=\"/g\"}} {cur}");
    assert!(has(&b, &line), "missing {line:?} in\n{b}");
    let b = ex.render(Format::Classic).unwrap().body;
    assert!(has(&b, "# TYPE rstat_memory_heap_bytes gauge"), "{b}");
    assert!(has(&b, "rstat_memory_heap_bytes{path=\"/g\"} -10"), "{b}");
    assert!(
        has(&b, "# TYPE rstat_memory_heap_allocs_total counter"),
        "{b}"
    );
}

/// A counter set's items declared gauges are gauges, without listing
/// them in `Config::gauges`; undeclared items stay counters.
#[test]
fn a_counter_set_declares_its_levels_gauges() {
    use rstat::{CounterSetController, StatKind};
    let rs = Rstat::new();
    let pool = rs
        .register(
            CounterSetController::new("pool", &["in_use_bytes", "wait_usec", "served"])
                .with_kinds(&[StatKind::Gauge, StatKind::Gauge, StatKind::Counter]),
        )
        .unwrap();
    let g = rs.root().create_child("g").unwrap();
    pool.add(&g, 0, -2).unwrap();
    pool.add(&g, 1, 1_500_000).unwrap();
    pool.add(&g, 2, 5).unwrap();
    let b = Exporter::new(&rs).render(Format::OpenMetrics).unwrap().body;
    for line in [
        "# TYPE rstat_pool_in_use_bytes gauge",
        "# UNIT rstat_pool_in_use_bytes bytes",
        "rstat_pool_in_use_bytes{path=\"/g\"} -2",
        "# TYPE rstat_pool_wait_seconds gauge",
        "rstat_pool_wait_seconds{path=\"/g\"} 1.5",
        "# TYPE rstat_pool_served counter",
        "rstat_pool_served_total{path=\"/g\"} 5",
        "rstat_exporter_skipped_samples_total 0",
    ] {
        assert!(has(&b, line), "missing {line:?} in\n{b}");
    }
}

/// `cpu.max`'s counts are exported for the groups with a quota only (the
/// kernel's cpu.stat bandwidth lines), as counters; no family at all while
/// no group has a quota.
#[test]
fn cpu_max_counts_are_exported_for_groups_with_a_quota() {
    let (rs, _mem, _reqs, t) = tree();
    let b = Exporter::new(&rs).render(Format::OpenMetrics).unwrap().body;
    assert!(!b.contains("rstat_cpu_nr_periods"), "{b}");
    t.write_cpu_max("20000 100000").unwrap();
    let b = Exporter::new(&rs).render(Format::OpenMetrics).unwrap().body;
    for line in [
        "# TYPE rstat_cpu_nr_periods counter",
        "rstat_cpu_nr_periods_total{path=\"/tenant\"} 0",
        "rstat_cpu_nr_throttled_total{path=\"/tenant\"} 0",
        "# UNIT rstat_cpu_throttled_seconds seconds",
        "rstat_cpu_throttled_seconds_total{path=\"/tenant\"} 0.0",
    ] {
        assert!(has(&b, line), "missing {line:?} in\n{b}");
    }
    assert!(!b.contains("rstat_cpu_nr_periods_total{path=\"/\"}"), "{b}");
    assert!(
        has(&b, "rstat_cpu_max_quota_seconds{path=\"/tenant\"} 0.02"),
        "{b}"
    );
    assert!(
        has(&b, "rstat_cpu_max_period_seconds{path=\"/tenant\"} 0.1"),
        "{b}"
    );
    // The kill state: a sample for killed groups only.
    assert!(!b.contains("rstat_killed"), "{b}");
    t.kill();
    let b = Exporter::new(&rs).render(Format::OpenMetrics).unwrap().body;
    assert!(has(&b, "rstat_killed{path=\"/tenant\"} 1"), "{b}");
    assert!(!b.contains("rstat_killed{path=\"/\"}"), "{b}");
}

/// Pressure totals are exported for the groups that ever stalled.
#[test]
fn pressure_is_exported_for_groups_that_stalled() {
    let (rs, _mem, _reqs, t) = tree();
    let b = Exporter::new(&rs).render(Format::OpenMetrics).unwrap().body;
    assert!(!b.contains("pressure"), "{b}");
    t.write_cpu_max("1000 1000000").unwrap();
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    {
        let mut fut = std::pin::pin!(t.scope(std::future::poll_fn(
            |_cx: &mut std::task::Context<'_>| {
                let s = rstat::attach::thread_cpu_time();
                while rstat::attach::thread_cpu_time() - s < std::time::Duration::from_millis(3) {}
                std::task::Poll::<()>::Pending
            }
        )));
        let _ = std::future::Future::poll(fut.as_mut(), &mut cx);
        let _ = std::future::Future::poll(fut.as_mut(), &mut cx);
    }
    let b = Exporter::new(&rs).render(Format::OpenMetrics).unwrap().body;
    for fam in [
        "# TYPE rstat_cpu_pressure_waiting_seconds counter",
        "# TYPE rstat_memory_pressure_stalled_seconds counter",
    ] {
        assert!(has(&b, fam), "missing {fam:?} in\n{b}");
    }
    let line = b
        .lines()
        .find(|l| l.starts_with("rstat_cpu_pressure_waiting_seconds_total{path=\"/tenant\"}"))
        .unwrap_or_else(|| panic!("no cpu pressure of /tenant in\n{b}"));
    let v: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(v > 0.0, "{line}");
    assert!(
        has(
            &b,
            "rstat_memory_pressure_stalled_seconds_total{path=\"/tenant\"} 0.0"
        ),
        "{b}"
    );
}
