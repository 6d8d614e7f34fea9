//! `rstat bench scrape`: what one Prometheus scrape of the exporter costs
//! for trees of 1,000 / 10,000 / 100,000 groups: series and bytes per
//! scrape, and the time to read the tree and encode it (median of a few
//! scrapes), in both formats. The tree: 100 groups per tenant under the
//! root, each group with CPU time, three counters and a memory charge,
//! like the demo's tenants.

pub mod experiment;

use std::time::Instant;

use rstat::memory::Memory;
use rstat::report::Reporter;
use rstat::Rstat;
use rstat_prometheus::{Exporter, Format};

/// One scrape's figures: one tree size in one format.
#[derive(serde::Serialize)]
pub struct Row {
    /// Groups in the tree, root included.
    pub groups: usize,
    /// `classic` (Prometheus text) or `openmetrics`.
    pub format: &'static str,
    /// Series in one scrape.
    pub series: u64,
    /// Bytes of one scrape's body.
    pub bytes: usize,
    /// Median over the samples, milliseconds: the whole scrape.
    pub scrape_ms: f64,
    /// Of which reading the tree (the snapshot), milliseconds.
    pub snapshot_ms: f64,
}

/// Results.
#[derive(serde::Serialize)]
pub struct Report {
    /// Scrapes per row (the median is reported).
    pub samples: usize,
    /// One row per tree size and format.
    pub rows: Vec<Row>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Build a tree of each of `sizes` groups and scrape it `samples` times
/// in each format.
pub fn run(sizes: &[usize], samples: usize) -> Result<Report, Box<dyn std::error::Error>> {
    let mut rows = Vec::new();
    for &n in sizes {
        let rs = Rstat::new();
        let mem = Memory::register(&rs)?;
        let reqs = rs.register_counters("requests", &["requests", "bytes_in", "bytes_out"])?;
        let mut charges = Vec::new();
        let mut made = 1;
        let mut t = 0;
        while made < n {
            let tenant = rs.root().create_child(&format!("tenant-{t}"))?;
            t += 1;
            made += 1;
            let mut k = 0;
            while made < n && k < 99 {
                let g = tenant.create_child(&format!("group-{k}"))?;
                rs.account_cputime(&g, 1000 + k as u64, 10)?;
                reqs.add(&g, 0, 1)?;
                reqs.add(&g, 1, 512)?;
                charges.push(mem.try_charge(&g, 4096)?.into_owned());
                k += 1;
                made += 1;
            }
        }
        let exporter = Exporter::new(&rs);
        let reporter = Reporter::new(&rs);
        for format in [Format::Classic, Format::OpenMetrics] {
            let (mut times, mut snaps) = (Vec::new(), Vec::new());
            let mut last = None;
            for _ in 0..samples {
                let t0 = Instant::now();
                let s = exporter.render(format)?;
                times.push(t0.elapsed().as_secs_f64() * 1e3);
                let t0 = Instant::now();
                std::hint::black_box(reporter.snapshot_all()?);
                snaps.push(t0.elapsed().as_secs_f64() * 1e3);
                last = Some(s);
            }
            let s = last.ok_or("no samples")?;
            rows.push(Row {
                groups: s.groups,
                format: match format {
                    Format::Classic => "classic",
                    Format::OpenMetrics => "openmetrics",
                },
                series: s.series,
                bytes: s.body.len(),
                scrape_ms: median(times),
                snapshot_ms: median(snaps),
            });
        }
        drop(charges);
    }
    Ok(Report { samples, rows })
}

/// Human-readable table.
pub fn table(r: &Report) -> String {
    let mut out = format!(
        "scrape cost (median of {} scrapes; time = read the tree + encode; the machine may be busy)\n{:>8} {:>12} {:>10} {:>12} {:>11} {:>13}\n",
        r.samples, "groups", "format", "series", "bytes", "scrape ms", "snapshot ms"
    );
    for row in &r.rows {
        out.push_str(&format!(
            "{:>8} {:>12} {:>10} {:>12} {:>11.1} {:>13.1}\n",
            row.groups, row.format, row.series, row.bytes, row.scrape_ms, row.snapshot_ms
        ));
    }
    out
}
