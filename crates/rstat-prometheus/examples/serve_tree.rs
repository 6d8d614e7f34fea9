//! Serve a tree of GROUPS groups (100 per tenant, each with CPU time,
//! three counters and a memory charge, as `rstat bench scrape` builds)
//! until stdin closes: `serve_tree 127.0.0.1:0 10000`. For measuring what
//! a real Prometheus server pays to scrape a large exporter.

use rstat::memory::Memory;
use rstat::Rstat;
use rstat_prometheus::{Exporter, ServerConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(addr), Some(n)) = (
        args.first(),
        args.get(1).and_then(|n| n.parse::<usize>().ok()),
    ) else {
        return Err("usage: serve_tree ADDR GROUPS".into());
    };
    let rs = Rstat::new();
    let mem = Memory::register(&rs)?;
    let reqs = rs.register_counters("requests", &["requests", "bytes_in", "bytes_out"])?;
    let mut charges = Vec::new();
    let (mut made, mut t) = (1, 0);
    while made < n {
        let tenant = rs.root().create_child(&format!("tenant-{t}"))?;
        t += 1;
        made += 1;
        let mut k = 0;
        while made < n && k < 99 {
            let g = tenant.create_child(&format!("group-{k}"))?;
            rs.account_cputime(&g, 1000, 10)?;
            reqs.add(&g, 0, 1)?;
            charges.push(mem.try_charge(&g, 4096)?.into_owned());
            k += 1;
            made += 1;
        }
    }
    let server = Exporter::new(&rs).serve(ServerConfig {
        addr: addr.clone(),
        ..Default::default()
    })?;
    println!("listening on http://{}/metrics", server.addr());
    let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
    drop(charges);
    Ok(())
}
