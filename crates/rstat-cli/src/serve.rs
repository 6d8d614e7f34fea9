//! Starting the Prometheus exporter for `rstat demo --listen`.

use rstat::Rstat;
use rstat_prometheus::{Config, Exporter, Server, ServerConfig};

/// Serve `rs`'s metrics at `addr` until the returned server is dropped.
/// Groups down to depth 2 (tenant/service) are exported: the demo's
/// per-request groups live for microseconds, and their history is in the
/// services' values (exporting each one once after removal would add a
/// series per request).
pub fn start(rs: &Rstat, addr: &str, allow_remote: bool) -> Result<Server, std::io::Error> {
    let exporter = Exporter::with_config(
        rs,
        Config {
            max_depth: 2,
            ..Config::default()
        },
    );
    let server = exporter.serve(ServerConfig {
        addr: addr.to_owned(),
        allow_non_loopback: allow_remote,
        ..ServerConfig::default()
    })?;
    println!(
        "serving metrics at http://{0}/metrics (Prometheus target {0}; `rstat top --url http://{0}`)",
        server.addr()
    );
    Ok(server)
}
