//! Fetch the exporter's `/snapshot.json` with `ureq` (a small blocking
//! HTTP client; plain `http://` only, no TLS: the exporter serves on
//! loopback by default). URLs are parsed as `http::Uri`s (what `ureq`
//! itself uses); the exporter's base URL and its `/metrics` URL both mean
//! its `/snapshot.json`.

use std::time::Duration;

use rstat::report::Snapshot;
use ureq::http::Uri;

/// The largest snapshot read: 1 GiB (a few million groups).
const MAX_SNAPSHOT_BYTES: u64 = 1 << 30;

/// Where to fetch from: the snapshot's URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// `http://HOST:PORT/.../snapshot.json`.
    pub url: String,
    /// `HOST:PORT`, for messages.
    pub authority: String,
}

/// `http://HOST[:PORT][/PATH]` of an rstat exporter.
pub fn parse_url(url: &str) -> Result<Target, String> {
    let uri: Uri = url.parse().map_err(|e| {
        format!("bad URL {url:?} ({e}): give http://HOST:PORT of an rstat exporter (e.g. http://127.0.0.1:9756)")
    })?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(s) => {
            return Err(format!(
                "unsupported URL scheme {s:?} in {url:?}: rstat top speaks plain http (the exporter has no TLS); give http://HOST:PORT"
            ))
        }
        None => {
            return Err(format!(
                "URL {url:?} has no scheme: give http://HOST:PORT of an rstat exporter (e.g. http://127.0.0.1:9756)"
            ))
        }
    }
    let Some(auth) = uri.authority().filter(|a| !a.host().is_empty()) else {
        return Err(format!("URL {url:?} has no host"));
    };
    // `HOST[:PORT]` without any `user:password@` (the exporter has no
    // authentication; credentials are neither sent nor shown).
    let hostport = auth.as_str().rsplit('@').next().unwrap_or_default();
    // The port, if the URL has one: a `:` after the host (past an IPv6
    // address's brackets). `http` parses a port it cannot read as no
    // port at all, and the client would then go to port 80.
    let after_host = match hostport.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or("", |(_, rest)| rest),
        None => hostport,
    };
    if let Some((_, port)) = after_host.rsplit_once(':') {
        if !matches!(port.parse::<u16>(), Ok(1..)) {
            return Err(format!(
                "bad port {port:?} in {url:?}: give a port from 1 to 65535 (e.g. http://127.0.0.1:9756)"
            ));
        }
    }
    let path = match uri.path() {
        "" | "/" => "/snapshot.json".to_owned(),
        p if p.ends_with("/metrics") => {
            format!("{}snapshot.json", &p[..p.len() - "metrics".len()])
        }
        p => p.to_owned(),
    };
    Ok(Target {
        url: format!("http://{hostport}{path}"),
        authority: hostport.to_owned(),
    })
}

/// GET the snapshot, within `timeout` in all.
pub fn fetch(t: &Target, timeout: Duration) -> Result<Snapshot, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        // Statuses are ours to explain; loopback needs no proxy (and an
        // `http_proxy` in the environment must not reroute it).
        .http_status_as_error(false)
        .proxy(None)
        .max_redirects(0)
        .build()
        .into();
    let mut resp = agent
        .get(&t.url)
        .header("Accept", "application/json")
        .call()
        .map_err(|e| match e {
            // Nothing answered there.
            ureq::Error::Io(_) | ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => {
                format!(
                    "cannot reach the exporter at {} ({e}); start one, e.g. `rstat demo --listen {} --duration 600`",
                    t.url, t.authority
                )
            }
            // Something is there, but it did not answer as an exporter.
            ureq::Error::Timeout(_) => format!(
                "{} accepted the connection but sent no answer within {timeout:?} ({e}): not an rstat exporter, or a stalled one",
                t.authority
            ),
            _ => format!(
                "{} answered, but not in HTTP ({e}): not an rstat exporter (give the address `rstat demo --listen` or `rstat_serve` was given)",
                t.authority
            ),
        })?;
    let status = resp.status();
    if status != ureq::http::StatusCode::OK {
        return Err(format!(
            "{} answered {status}; is it an rstat exporter?",
            t.url
        ));
    }
    let body = resp
        .body_mut()
        .with_config()
        .limit(MAX_SNAPSHOT_BYTES)
        .read_to_vec()
        .map_err(|e| format!("reading the answer from {}: {e}", t.url))?;
    serde_json::from_slice(&body)
        .map_err(|e| format!("{} did not send an rstat snapshot: {e}", t.url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = parse_url("http://127.0.0.1:9756").unwrap();
        assert_eq!(t.url, "http://127.0.0.1:9756/snapshot.json");
        assert_eq!(t.authority, "127.0.0.1:9756");
        let t = parse_url("http://h:1/metrics").unwrap();
        assert_eq!(t.url, "http://h:1/snapshot.json");
        let t = parse_url("http://h/x/metrics").unwrap();
        assert_eq!(t.url, "http://h/x/snapshot.json");
        let t = parse_url("http://[::1]:9/").unwrap();
        assert_eq!(t.url, "http://[::1]:9/snapshot.json");
        assert!(parse_url("https://h").unwrap_err().contains("plain http"));
        assert!(parse_url("127.0.0.1:9756")
            .unwrap_err()
            .contains("http://HOST:PORT"));
        assert!(parse_url("http:///x").is_err());
        assert!(parse_url("not a url").is_err());
    }

    /// A port that is not a number from 1 to 65535 is an error naming it,
    /// not a silent fall back to port 80; credentials in a URL are not
    /// repeated in messages.
    #[test]
    fn bad_ports_and_credentials() {
        for url in [
            "http://127.0.0.1:abc",
            "http://127.0.0.1:99999",
            "http://127.0.0.1:65536",
            "http://127.0.0.1:",
            "http://127.0.0.1:0",
        ] {
            let e = parse_url(url).unwrap_err();
            assert!(e.contains("port") && e.contains("1 to 65535"), "{url}: {e}");
        }
        let t = parse_url("http://user:pw@127.0.0.1:9/").unwrap();
        assert_eq!(t.authority, "127.0.0.1:9");
        assert_eq!(t.url, "http://127.0.0.1:9/snapshot.json");
    }

    /// Something listening that does not speak HTTP is told apart from
    /// nothing listening.
    #[test]
    fn a_server_that_is_not_http_is_named_as_such() {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            if let Ok((mut c, _)) = l.accept() {
                let _ = c.write_all(b"SSH-2.0-OpenSSH_9.6\r\n");
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let e = fetch(
            &parse_url(&format!("http://{addr}")).unwrap(),
            Duration::from_secs(5),
        )
        .unwrap_err();
        h.join().unwrap();
        assert!(!e.contains("cannot reach"), "{e}");
        assert!(e.contains("not an rstat exporter"), "{e}");
    }

    #[test]
    fn fetches_from_a_live_exporter_and_explains_failures() {
        let rs = rstat::Rstat::new();
        rs.root().create_child("a").unwrap();
        let srv = rstat_prometheus::Exporter::new(&rs)
            .serve(rstat_prometheus::ServerConfig {
                addr: "127.0.0.1:0".into(),
                ..Default::default()
            })
            .unwrap();
        let t = parse_url(&format!("http://{}/metrics", srv.addr())).unwrap();
        let s = fetch(&t, Duration::from_secs(20)).unwrap();
        assert!(s.groups.iter().any(|g| g.path == "/a"));
        let t = parse_url(&format!("http://{}/nope", srv.addr())).unwrap();
        let e = fetch(&t, Duration::from_secs(20)).unwrap_err();
        assert!(e.contains("404") && e.contains("rstat exporter"), "{e}");
        let addr = srv.addr();
        drop(srv);
        let e = fetch(
            &parse_url(&format!("http://{addr}")).unwrap(),
            Duration::from_secs(20),
        )
        .unwrap_err();
        assert!(
            e.contains("cannot reach") && e.contains("rstat demo --listen"),
            "{e}"
        );
    }
}
