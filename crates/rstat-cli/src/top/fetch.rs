//! Fetch the exporter's `/snapshot.json` over plain HTTP/1.0: one request
//! per connection, read to the end (the exporter closes after each
//! answer). Enough for `rstat top` against an rstat exporter; no TLS, no
//! redirects, no chunked bodies.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use rstat::report::Snapshot;

/// Where to fetch from: `host:port` and the path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub host: String,
    pub path: String,
}

/// `http://HOST[:PORT][/PATH]`; the exporter's base URL or its `/metrics`
/// URL both mean its `/snapshot.json`.
pub fn parse_url(url: &str) -> Result<Target, String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        format!("unsupported URL {url:?}: give http://HOST:PORT of an rstat exporter (e.g. http://127.0.0.1:9756)")
    })?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if host.is_empty() {
        return Err(format!("URL {url:?} has no host"));
    }
    let host = if host.contains(':') && !host.ends_with(']') {
        host.to_owned()
    } else {
        format!("{host}:80")
    };
    let path = match path {
        "" | "/" => "/snapshot.json".to_owned(),
        p if p.ends_with("/metrics") => format!("{}snapshot.json", &p[..p.len() - "metrics".len()]),
        p => p.to_owned(),
    };
    Ok(Target { host, path })
}

/// GET the snapshot.
pub fn fetch(t: &Target, timeout: Duration) -> Result<Snapshot, String> {
    let addr = t
        .host
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {}: {e}", t.host))?
        .next()
        .ok_or_else(|| format!("{} resolves to nothing", t.host))?;
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| {
        format!(
            "cannot reach the exporter at {addr} ({e}); start one, e.g. `rstat demo --listen {addr} --duration 600`"
        )
    })?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {} HTTP/1.0\r\nHost: {}\r\nAccept: application/json\r\n\r\n",
        t.path, t.host
    )
    .map_err(|e| format!("sending the request to {addr}: {e}"))?;
    let mut raw = Vec::new();
    // At most 1 GiB: a snapshot of a few million groups.
    s.take(1 << 30)
        .read_to_end(&mut raw)
        .map_err(|e| format!("reading the answer from {addr}: {e}"))?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("{addr} did not answer with HTTP"))?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let status = head.split(' ').nth(1).unwrap_or("");
    if status != "200" {
        let first = head.lines().next().unwrap_or("");
        return Err(format!(
            "{addr}{} answered {first:?}; is it an rstat exporter?",
            t.path
        ));
    }
    serde_json::from_slice(&raw[split + 4..])
        .map_err(|e| format!("{addr}{} did not send an rstat snapshot: {e}", t.path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = parse_url("http://127.0.0.1:9756").unwrap();
        assert_eq!(
            (t.host.as_str(), t.path.as_str()),
            ("127.0.0.1:9756", "/snapshot.json")
        );
        let t = parse_url("http://h:1/metrics").unwrap();
        assert_eq!(t.path, "/snapshot.json");
        let t = parse_url("http://h/x/metrics").unwrap();
        assert_eq!(
            (t.host.as_str(), t.path.as_str()),
            ("h:80", "/x/snapshot.json")
        );
        assert!(parse_url("https://h")
            .unwrap_err()
            .contains("http://HOST:PORT"));
        assert!(parse_url("http:///x").is_err());
    }
}
