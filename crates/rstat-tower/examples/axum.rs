//! An axum service with per-tenant accounting: each request's tenant comes
//! from its `x-tenant` header; its CPU time, heap and HTTP counts land on
//! `/tenants/<name>`; `/stats` shows every tenant's.
//!
//! ```text
//! cargo run -p rstat-tower --example axum
//! curl -H 'x-tenant: acme' localhost:3000/work/20
//! curl localhost:3000/stats
//! ```

use std::alloc::System;
use std::sync::Arc;

use axum::extract::Path;
use axum::routing::get;
use axum::Router;
use http::header::HeaderName;
use rstat::alloc::{heap_config, Accounted};
use rstat::memory::Memory;
use rstat::{Group, Rstat};
use rstat_tower::{Children, GroupLayer, HttpStats};

// Every heap allocation is charged to the current group: the request's
// tenant while the layer runs it.
#[global_allocator]
static ALLOC: Accounted<System> = Accounted::new(System);

/// Burn about `ms` milliseconds of CPU and allocate a little per step.
async fn work(Path(ms): Path<u64>) -> String {
    let ms = ms.min(1000);
    let start = rstat::attach::thread_cpu_time();
    let mut steps = 0u64;
    while (rstat::attach::thread_cpu_time() - start).as_millis() < u128::from(ms) {
        let v: Vec<u64> = (0..1000).collect();
        steps += std::hint::black_box(v).iter().sum::<u64>() % 7;
    }
    let tenant = rstat::current_group().map(|g| g.path()).unwrap_or_default();
    format!("{tenant}: worked {ms} ms ({steps})\n")
}

/// One line per tenant: its HTTP counts, CPU time (charged within the
/// charger's period, 1 s by default) and live heap.
fn stats_text(rs: &Rstat, mem: &Memory, stats: &HttpStats, tenants: &Group) -> String {
    let mut out = String::new();
    for t in tenants.children() {
        // Exact reads: a stats page is read rarely.
        let c = stats
            .read_exact(&t)
            .map(|c| c.hierarchical)
            .unwrap_or_default();
        let cpu = rs
            .cpu()
            .and_then(|c| c.read_exact(&t).ok())
            .and_then(|s| s.get("usage_usec"))
            .unwrap_or(0);
        // Live heap bytes (memory.stat's `heap`); memory.current also
        // counts what is pre-charged in the per-CPU stocks.
        let heap = mem.read(&t).ok().and_then(|s| s.get("heap")).unwrap_or(0);
        out += &format!(
            "{}: requests {} errors {} response_bytes {} cpu_usec {cpu} heap {heap}\n",
            t.path(),
            c.requests,
            c.errors,
            c.response_bytes
        );
    }
    out
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rs = Rstat::new();
    let mem = Memory::register_with(&rs, heap_config())?;
    ALLOC.install(&rs, &mem)?;
    let tenants = rs.root().create_child("tenants")?;
    let stats = HttpStats::register(&rs)?;

    let layer = GroupLayer::by_header(
        stats.clone(),
        HeaderName::from_static("x-tenant"),
        // Tenants are created on first sight, at most 100 of them; other
        // requests (no header, a bad name, past the cap) go to the root.
        Children::create(tenants.clone(), 100),
    );
    let state = Arc::new((rs, mem, stats, tenants));
    let app = Router::new()
        .route("/work/{ms}", get(work))
        .layer(layer)
        // Outside the layer: reading the stats is not a tenant's request.
        .route(
            "/stats",
            get(move || {
                let (rs, mem, stats, tenants) = &*state;
                let text = stats_text(rs, mem, stats, tenants);
                async move { text }
            }),
        );

    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
