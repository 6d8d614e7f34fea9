//! A small tree with every kind of family and awkward group names.
//! `dump classic` / `dump openmetrics` print one scrape (CI feeds them to
//! `promtool check metrics` and to Python's OpenMetrics parser);
//! `dump serve ADDR` serves it until stdin closes (CI's end-to-end check
//! with a real Prometheus server). Known values: `rstat_io_ops_total` is 2
//! for the odd-named group, 5 for `/tenant-a/removed-before-scrape`
//! (removed before the first scrape, so reported once), and 7 for
//! `/tenant-a`.

use rstat::memory::{Limit, Memory, OnOom};
use rstat::Rstat;
use rstat_prometheus::{Exporter, Format};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let format = match args.first().map(String::as_str) {
        Some("classic") => Some(Format::Classic),
        Some("openmetrics") => Some(Format::OpenMetrics),
        Some("serve") if args.len() == 2 => None,
        _ => return Err("usage: dump classic|openmetrics|serve ADDR".into()),
    };
    let rs = Rstat::new();
    let mem = Memory::register(&rs)?;
    let io = rs.register_counters_with_units("io", &[("read_bytes", 4096), ("ops", 1)])?;
    let lat = rs.register_counters("latency", &["wait_usec"])?;
    let a = rs.root().create_child("tenant-a")?;
    let odd = a.create_child("quote\" back\\slash\nnewline é")?;
    mem.write_limit(&a, Limit::Max, "1M")?;
    mem.write_limit(&a, Limit::Low, "64K")?;
    let _held = mem.try_charge(&odd, 300_000)?;
    let _forced = mem.try_charge_with(&odd, 900_000, OnOom::Force)?;
    io.add(&odd, 0, 8192)?;
    io.add(&odd, 1, 2)?;
    lat.add(&a, 0, 1_250_000)?;
    rs.account_cputime(&odd, 1500, 500)?;
    let exporter = Exporter::new(&rs);
    let gone = a.create_child("removed-before-scrape")?;
    io.add(&gone, 1, 5)?;
    gone.remove()?;
    drop(gone);
    if let Some(format) = format {
        print!("{}", exporter.render(format)?.body);
        return Ok(());
    }
    let server = exporter.serve(rstat_prometheus::ServerConfig {
        addr: args[1].clone(),
        ..Default::default()
    })?;
    println!("listening on http://{}/metrics", server.addr());
    // Until stdin closes.
    let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
    Ok(())
}
