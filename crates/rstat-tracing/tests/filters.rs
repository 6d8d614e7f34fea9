//! Accounting whatever the filters of the user's other layers: the fmt
//! layer filtered to `warn` per layer (by a `LevelFilter` or an
//! `EnvFilter`) leaves the layer seeing every span; a global filter
//! disables spans for every layer, as the crate docs say.

use std::io::Write;
use std::sync::{Arc, Mutex};

use rstat::{current_group, Rstat};
use rstat_tracing::GroupLayer;
use tracing::{info_span, warn_span};
use tracing_subscriber::filter::{EnvFilter, LevelFilter};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::prelude::*;

fn engine() -> Rstat {
    Rstat::builder().periodic_flush(None).build().unwrap()
}

/// What the fmt layer wrote.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// An info span with a tenant sets the group, a warn event is logged and
/// an info event is not: the fmt layer's filter works, and does not reach
/// the accounting.
fn check(d: tracing::Dispatch, out: &Captured, rs: &Rstat) {
    let acme = rs.lookup("/tenants/acme");
    tracing::dispatcher::with_default(&d, || {
        let span = info_span!("request", tenant = "acme");
        {
            let _in = span.enter();
            assert_eq!(
                current_group().map(|g| g.path()).as_deref(),
                Some("/tenants/acme"),
                "an info span is not accounted when the fmt layer is filtered to warn"
            );
            tracing::info!("hidden by the fmt layer's filter");
            tracing::warn!("shown by the fmt layer");
        }
        // A warn span too, and a child span with no tenant of its own.
        let w = warn_span!("slow", tenant = "acme");
        w.in_scope(|| {
            let inner = tracing::debug_span!("db");
            inner.in_scope(|| {
                assert_eq!(
                    current_group().map(|g| g.path()).as_deref(),
                    Some("/tenants/acme")
                );
            });
        });
        assert_eq!(current_group(), None);
    });
    assert!(acme.is_err(), "the group is created by the span");
    let text = out.text();
    assert!(text.contains("shown by the fmt layer"), "{text}");
    assert!(!text.contains("hidden by"), "{text}");
}

#[test]
fn a_fmt_layer_filtered_to_warn_by_a_level_filter_leaves_accounting_on() {
    let rs = engine();
    let tenants = rs.root().create_child("tenants").unwrap();
    let out = Captured::default();
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(out.clone())
        .with_ansi(false)
        .with_filter(LevelFilter::WARN);
    let d = tracing::Dispatch::new(
        tracing_subscriber::registry()
            .with(fmt)
            .with(GroupLayer::children_of("tenant", tenants)),
    );
    check(d, &out, &rs);
}

#[test]
fn a_fmt_layer_filtered_to_warn_by_an_env_filter_leaves_accounting_on() {
    let rs = engine();
    let tenants = rs.root().create_child("tenants").unwrap();
    let out = Captured::default();
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(out.clone())
        .with_ansi(false)
        .with_filter(EnvFilter::new("warn"));
    // The accounting layer first this time: the order does not matter.
    let d = tracing::Dispatch::new(
        tracing_subscriber::registry()
            .with(GroupLayer::children_of("tenant", tenants))
            .with(fmt),
    );
    check(d, &out, &rs);
}

/// Between two layers filtered per layer (to warn and to error), the
/// layer still sees info spans.
#[test]
fn between_two_filtered_layers_accounting_stays_on() {
    let rs = engine();
    let tenants = rs.root().create_child("tenants").unwrap();
    let out = Captured::default();
    let errors = Captured::default();
    let d = tracing::Dispatch::new(
        tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(errors.clone())
                    .with_filter(LevelFilter::ERROR),
            )
            .with(GroupLayer::children_of("tenant", tenants))
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(out.clone())
                    .with_ansi(false)
                    .with_filter(EnvFilter::new("warn")),
            ),
    );
    check(d, &out, &rs);
    assert!(!errors.text().contains("shown by"), "{}", errors.text());
}

/// A global filter (a filter added as a layer of its own, not with
/// `with_filter`) tells the registry not to create info spans at all, for
/// every layer: nothing can account them. This pins what the crate docs
/// say happens.
#[test]
fn a_global_filter_disables_spans_for_every_layer() {
    let rs = engine();
    let tenants = rs.root().create_child("tenants").unwrap();
    let d = tracing::Dispatch::new(
        tracing_subscriber::registry()
            .with(LevelFilter::WARN)
            .with(GroupLayer::children_of("tenant", tenants.clone())),
    );
    tracing::dispatcher::with_default(&d, || {
        let _info = info_span!("request", tenant = "acme").entered();
        assert_eq!(current_group(), None);
        let _warn = warn_span!("request", tenant = "beta").entered();
        assert_eq!(current_group(), tenants.child("beta"));
    });
}
