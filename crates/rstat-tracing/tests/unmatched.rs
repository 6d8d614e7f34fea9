//! Values that match no group: counted by the layer, in the engine (a
//! series the exporter shows), and logged once per distinct value, with
//! a bounded memory of values.

use std::sync::{Arc, Mutex};

use rstat::{current_group, Rstat};
use rstat_prometheus::{Exporter, Format};
use rstat_tracing::{GroupLayer, MAX_LOGGED_VALUES};
use tracing::info_span;
use tracing_subscriber::prelude::*;

fn engine() -> Rstat {
    Rstat::builder().periodic_flush(None).build().unwrap()
}

/// What a logger was given: (value, last) per call.
type Logged = Arc<Mutex<Vec<(String, bool)>>>;

/// A logger that keeps what it was given.
fn collecting(layer: GroupLayer) -> (GroupLayer, Logged) {
    let logged = Arc::new(Mutex::new(Vec::new()));
    let l2 = Arc::clone(&logged);
    let layer = layer.on_unmatched(move |u| {
        assert_eq!(u.field, "tenant");
        l2.lock().unwrap().push((u.value.to_owned(), u.last));
    });
    (layer, logged)
}

fn unmatched_stat(rs: &Rstat, path: &str) -> (i64, i64) {
    let tracing_ctl = rs
        .controllers()
        .into_iter()
        .find(|c| c.name() == "tracing")
        .expect("the layer registered its counter set");
    let s = tracing_ctl.read_exact(&rs.lookup(path).unwrap()).unwrap();
    (
        s.get_local("unmatched").unwrap(),
        s.get("unmatched").unwrap(),
    )
}

#[test]
fn unmatched_values_are_counted_exported_and_logged_once() {
    let rs = engine();
    let tenants = rs.root().create_child("tenants").unwrap();
    tenants.create_child("known").unwrap();
    let layer = GroupLayer::by_path("tenant", tenants.clone())
        .count_unmatched(&rs)
        .unwrap();
    let (layer, logged) = collecting(layer);
    let reader = layer.clone();
    let d = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    tracing::dispatcher::with_default(&d, || {
        for v in ["ghost", "known", "ghost", "ghost2", "known", "ghost"] {
            let _s = info_span!("req", tenant = v).entered();
        }
        // Debug-formatted: the same value once unquoted.
        let name = String::from("ghost2");
        let _s = info_span!("req", tenant = ?name).entered();
        // Recorded later.
        let late = info_span!("req", tenant = tracing::field::Empty);
        late.record("tenant", "ghost3");
        late.in_scope(|| assert_eq!(current_group(), None));
    });
    assert_eq!(reader.unmatched_count(), 6);
    assert_eq!(
        *logged.lock().unwrap(),
        [
            ("ghost".to_owned(), false),
            ("ghost2".to_owned(), false),
            ("ghost3".to_owned(), false),
        ]
    );
    // In the engine, on the layer's base group.
    assert_eq!(unmatched_stat(&rs, "/tenants"), (6, 6));
    assert_eq!(unmatched_stat(&rs, "/"), (0, 6));
    // And a series of the exporter (what `rstat top` reads too).
    let body = Exporter::new(&rs).render(Format::Classic).unwrap().body;
    let line = body
        .lines()
        .find(|l| l.starts_with("rstat_tracing_unmatched") && l.contains("\"/tenants\""))
        .unwrap_or_else(|| panic!("no unmatched series for /tenants in\n{body}"));
    assert!(line.ends_with(" 6"), "{line}");
}

#[test]
fn a_rule_of_its_own_counts_in_the_root_and_layers_share_the_counter_set() {
    let rs = engine();
    let a = GroupLayer::new("tenant", |_| None)
        .count_unmatched(&rs)
        .unwrap();
    // A second layer on the same engine reuses the counter set.
    let tenants = rs.root().create_child("tenants").unwrap();
    let b = GroupLayer::by_path("user", tenants)
        .count_unmatched(&rs)
        .unwrap()
        .on_unmatched(|_| {});
    let (a, _) = collecting(a);
    let d = tracing::Dispatch::new(tracing_subscriber::registry().with(a).with(b));
    tracing::dispatcher::with_default(&d, || {
        let _s = info_span!("req", tenant = "x", user = "y").entered();
    });
    assert_eq!(unmatched_stat(&rs, "/"), (1, 2));
    assert_eq!(unmatched_stat(&rs, "/tenants"), (1, 1));
}

#[test]
fn a_counter_set_of_another_engine_is_refused() {
    let rs = engine();
    let other = engine();
    let g = other.root().create_child("t").unwrap();
    let e = GroupLayer::children_of("tenant", g)
        .count_unmatched(&rs)
        .unwrap_err();
    assert!(matches!(e, rstat::Error::ForeignGroup), "{e}");
}

#[test]
fn the_remembered_values_are_bounded() {
    let rs = engine();
    let tenants = rs.root().create_child("tenants").unwrap();
    let (layer, logged) = collecting(GroupLayer::by_path("tenant", tenants));
    let reader = layer.clone();
    let d = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    let n = MAX_LOGGED_VALUES + 10;
    tracing::dispatcher::with_default(&d, || {
        for round in 0..2 {
            for i in 0..n {
                let _s = info_span!("req", tenant = i).entered();
            }
            let _ = round;
        }
    });
    assert_eq!(reader.unmatched_count(), 2 * n as u64);
    let logged = logged.lock().unwrap();
    assert_eq!(logged.len(), MAX_LOGGED_VALUES);
    // Each value logged once, in order; the last says it is the last.
    for (i, (v, last)) in logged.iter().enumerate() {
        assert_eq!(v, &i.to_string());
        assert_eq!(*last, i + 1 == MAX_LOGGED_VALUES);
    }
}

#[test]
fn a_long_value_is_logged_and_remembered_by_its_prefix() {
    let rs = engine();
    let tenants = rs.root().create_child("tenants").unwrap();
    let (layer, logged) = collecting(GroupLayer::by_path("tenant", tenants));
    let d = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    let long_a = format!("{}a", "é".repeat(1000));
    let long_b = format!("{}b", "é".repeat(1000));
    tracing::dispatcher::with_default(&d, || {
        let _a = info_span!("req", tenant = long_a.as_str()).entered();
        let _b = info_span!("req", tenant = long_b.as_str()).entered();
    });
    let logged = logged.lock().unwrap();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(logged[0].0.len() <= rstat_tracing::MAX_LOGGED_VALUE_BYTES);
    assert!(long_a.starts_with(&logged[0].0));
}

/// A logger that creates spans of its own (here, one with an unmatched
/// value) neither deadlocks nor recurses without end.
#[test]
fn a_logger_that_makes_spans_does_not_recurse() {
    let rs = engine();
    let tenants = rs.root().create_child("tenants").unwrap();
    let calls = Arc::new(Mutex::new(0));
    let c2 = Arc::clone(&calls);
    let layer = GroupLayer::by_path("tenant", tenants).on_unmatched(move |u| {
        *c2.lock().unwrap() += 1;
        let _s = info_span!("log", tenant = u.value).entered();
        tracing::warn!(value = u.value, "unmatched");
    });
    let reader = layer.clone();
    let d = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    tracing::dispatcher::with_default(&d, || {
        let _s = info_span!("req", tenant = "ghost").entered();
    });
    assert_eq!(*calls.lock().unwrap(), 1);
    assert!(reader.unmatched_count() >= 1);
}
