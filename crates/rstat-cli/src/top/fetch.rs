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
    let path = match uri.path() {
        "" | "/" => "/snapshot.json".to_owned(),
        p if p.ends_with("/metrics") => {
            format!("{}snapshot.json", &p[..p.len() - "metrics".len()])
        }
        p => p.to_owned(),
    };
    Ok(Target {
        url: format!("http://{auth}{path}"),
        authority: auth.to_string(),
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
        .map_err(|e| {
            format!(
                "cannot reach the exporter at {} ({e}); start one, e.g. `rstat demo --listen {} --duration 600`",
                t.url, t.authority
            )
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
