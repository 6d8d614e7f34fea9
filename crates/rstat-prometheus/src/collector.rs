//! The exporter as a `prometheus-client` collector: rstat's series in the
//! registry a service already serves.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use crate::Exporter;

/// rstat's series for a service's own
/// [`Registry`](prometheus_client::registry::Registry): one port and one
/// scrape for the service's metrics and its groups'. Made by
/// [`Exporter::collector`].
///
/// ```
/// use rstat_prometheus::prometheus_client::{
///     encoding::text::encode, metrics::counter::Counter, registry::Registry,
/// };
///
/// let rs = rstat::Rstat::new();
/// let jobs = rs.register_counters("jobs", &["done"])?;
/// let tenant = rs.root().create_child("acme")?;
/// jobs.add(&tenant, 0, 3)?;
///
/// // The service's registry, with its own metrics...
/// let mut registry = Registry::default();
/// let requests = Counter::<u64>::default();
/// registry.register("http_requests", "Requests served", requests.clone());
/// // ...and rstat's, read from the tree at each encode.
/// let exporter = rstat_prometheus::Exporter::new(&rs);
/// registry.register_collector(Box::new(exporter.collector()?));
///
/// requests.inc();
/// // What the service's `/metrics` handler returns, with the content type
/// // `application/openmetrics-text; version=1.0.0; charset=utf-8`.
/// let mut body = String::new();
/// encode(&mut body, &registry)?;
/// assert!(body.contains("http_requests_total 1\n"));
/// assert!(body.contains("rstat_jobs_done_total{path=\"/acme\"} 3\n"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Each encode is one scrape, as [`Exporter::render`]: it reads the tree
/// (and the groups removed since the last scrape), counts in the
/// exporter's self-metrics, and is taken as **delivered** once encoded:
/// its removed groups are not repeated in the next one (the built-in
/// server waits until the body was written; a registry cannot tell). If
/// reading the tree fails, the registry's encode fails with
/// [`fmt::Error`]; [`Exporter::render`] says why.
///
/// At most one collector per exporter is alive: a registry must list
/// each family once, and each removed group is reported once. A second
/// [`Exporter::collector`] while this one lives is refused
/// ([`Error::CollectorInUse`](crate::Error::CollectorInUse)); for a
/// second registry, create a second [`Exporter`] (each has its own
/// removed groups). Likewise a collector and the built-in
/// [`serve`](Exporter::serve) of one exporter share its removed groups
/// (each goes to whichever scrapes first): give each its own exporter if
/// both are scraped. A registry's prefix and constant labels apply to
/// rstat's families as to any collector's.
#[derive(Debug)]
pub struct RstatCollector {
    exporter: Exporter,
}

impl RstatCollector {
    /// The exporter has marked its collector live.
    pub(crate) fn new(exporter: Exporter) -> Self {
        RstatCollector { exporter }
    }
}

impl Drop for RstatCollector {
    fn drop(&mut self) {
        // Relaxed: see `Exporter::collector`.
        self.exporter
            .inner
            .collector_live
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Collector for RstatCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        self.exporter.encode_into(encoder).map_err(|_| fmt::Error)
    }
}
