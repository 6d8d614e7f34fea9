//! The layer under the process-wide default subscriber (its own test
//! binary: the global default can be set once): a logger of unmatched
//! values that makes spans and events, which here come back into the same
//! subscriber, neither recurses without end nor deadlocks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rstat::Rstat;
use rstat_tracing::GroupLayer;
use tracing_subscriber::prelude::*;

#[test]
fn a_logger_that_makes_spans_under_the_global_subscriber_terminates() {
    let rs = Rstat::builder().periodic_flush(None).build().unwrap();
    let tenants = rs.root().create_child("tenants").unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let c2 = Arc::clone(&calls);
    let layer = GroupLayer::by_path("tenant", tenants).on_unmatched(move |u| {
        c2.fetch_add(1, Ordering::SeqCst);
        // The same value: counted again, not logged again.
        let _s = tracing::info_span!("log", tenant = u.value).entered();
        tracing::warn!(value = u.value, "unmatched");
    });
    let counts = layer.clone();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer)).unwrap();
    let _s = tracing::info_span!("req", tenant = "ghost").entered();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // The request's span and the logger's.
    assert_eq!(counts.unmatched_count(), 2);
}
