//! rstat's series in a service's own `prometheus-client` registry, beside
//! its own metrics: one exposition, one port.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use rstat::Rstat;
use rstat_prometheus::Exporter;

fn has(body: &str, line: &str) -> bool {
    body.lines().any(|l| l == line)
}

#[test]
fn rstat_series_are_served_from_the_services_own_registry() {
    let rs = Rstat::new();
    let jobs = rs.register_counters("jobs", &["done"]).unwrap();
    let t = rs.root().create_child("tenant").unwrap();
    jobs.add(&t, 0, 4).unwrap();
    let exporter = Exporter::new(&rs);

    let mut registry = Registry::default();
    let requests = Counter::<u64>::default();
    registry.register("http_requests", "Requests served", requests.clone());
    registry.register_collector(Box::new(exporter.collector().unwrap()));
    requests.inc();

    let brief = t.create_child("brief").unwrap();
    jobs.add(&brief, 0, 3).unwrap();
    brief.remove().unwrap();
    drop(brief);

    let mut body = String::new();
    encode(&mut body, &registry).unwrap();
    for line in [
        "# TYPE http_requests counter",
        "http_requests_total 1",
        "# TYPE rstat_jobs_done counter",
        "rstat_jobs_done_total{path=\"/tenant\"} 7",
        "rstat_jobs_done_total{path=\"/tenant/brief\"} 3",
        "rstat_exporter_removed_groups_reported_total 1",
        "rstat_exporter_scrapes_total 1",
        "# EOF",
    ] {
        assert!(has(&body, line), "missing {line:?} in\n{body}");
    }
    assert_eq!(body.matches("# EOF").count(), 1, "{body}");
    // An encoded scrape counts as delivered: the removed group is not
    // repeated in the next one.
    let mut body = String::new();
    encode(&mut body, &registry).unwrap();
    assert!(!body.contains("/tenant/brief"), "{body}");
    assert!(has(&body, "rstat_exporter_scrapes_total 2"), "{body}");
    assert_eq!(rs.zombie_count(), 0);
}

/// A registry lists each family once: a second collector of the same
/// exporter is refused while the first lives, with a message that says
/// what to do; once it is dropped, a new one can be had.
#[test]
fn a_second_collector_of_one_exporter_is_refused_while_the_first_lives() {
    let rs = Rstat::new();
    let exporter = Exporter::new(&rs);
    let mut registry = Registry::default();
    registry.register_collector(Box::new(exporter.collector().unwrap()));
    let e = exporter.collector().unwrap_err();
    assert!(e.to_string().contains("once"), "{e}");
    // The clone is the same exporter.
    assert!(exporter.clone().collector().is_err());
    // The one registered lists each family once.
    let mut body = String::new();
    encode(&mut body, &registry).unwrap();
    assert_eq!(
        body.matches("# TYPE rstat_exporter_groups gauge").count(),
        1
    );
    drop(registry);
    let again = exporter.collector().unwrap();
    drop(again);
}

/// The built-in server and the collector read the same tree.
#[test]
fn the_collector_and_the_renderer_agree() {
    let rs = Rstat::new();
    let c = rs.register_counters("c", &["n"]).unwrap();
    c.add(rs.root(), 0, 9).unwrap();
    let exporter = Exporter::new(&rs);
    let mut registry = Registry::default();
    registry.register_collector(Box::new(exporter.collector().unwrap()));
    let mut body = String::new();
    encode(&mut body, &registry).unwrap();
    let rendered = exporter
        .render(rstat_prometheus::Format::OpenMetrics)
        .unwrap()
        .body;
    let series = |b: &str| -> Vec<String> {
        b.lines()
            .filter(|l| l.starts_with("rstat_c_n"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(series(&body), series(&rendered));
    assert_eq!(series(&body), ["rstat_c_n_total{path=\"/\"} 9"]);
}
