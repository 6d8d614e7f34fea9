//! Property-based fuzzing of what a client or a group name controls: the
//! HTTP request parser, content negotiation, label escaping, the classic
//! text conversion, and the server over a socket.
//!
//! Bounded by case count: `RSTAT_FUZZ_CASES` (default 256; CI runs more,
//! within its time budget).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use proptest::prelude::*;
use rstat::Rstat;
use rstat_prometheus::{
    accepts_gzip, escape_label_value, negotiate, openmetrics_to_classic, parse_request, Exporter,
    Format, ServerConfig,
};

fn cases() -> u32 {
    std::env::var("RSTAT_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

/// Undo the label escaping; `None` on an escape the format does not have.
fn unescape(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next()? {
            '\\' => out.push('\\'),
            '"' => out.push('"'),
            'n' => out.push('\n'),
            _ => return None,
        }
    }
    Some(out)
}

const VALID: &[&[u8]] = &[
    b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: application/openmetrics-text;version=1.0.0;q=0.9,text/plain;q=0.5\r\n\r\n",
    b"HEAD / HTTP/1.0\r\n\r\n",
    b"GET /snapshot.json?x=y HTTP/1.1\r\nUser-Agent: t\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nAccept-Encoding: gzip;q=0.8, identity\r\nConnection: keep-alive\r\n\r\n",
];

fn mutated() -> impl Strategy<Value = Vec<u8>> {
    (
        0..VALID.len(),
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 0..8),
    )
        .prop_map(|(i, edits)| {
            let mut v = VALID[i].to_vec();
            for (at, b, op) in edits {
                if v.is_empty() {
                    v.push(b);
                    continue;
                }
                let k = at.index(v.len());
                match op {
                    0 => v[k] = b,
                    1 => v.insert(k, b),
                    _ => {
                        v.remove(k);
                    }
                }
            }
            v
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn the_request_parser_never_panics_and_answers_4xx(bytes in proptest::collection::vec(any::<u8>(), 0..12_000)) {
        match parse_request(&bytes) {
            Ok(Some(_)) => prop_assert!(bytes.windows(2).any(|w| w == b"\n\n" || w == b"\r\n")),
            Ok(None) => prop_assert!(bytes.len() < rstat_prometheus::http::MAX_REQUEST_HEAD),
            Err(r) => prop_assert!((400..500).contains(&r.status), "{r:?}"),
        }
    }

    #[test]
    fn mutated_requests_parse_or_get_4xx(bytes in mutated()) {
        if let Err(r) = parse_request(&bytes) {
            prop_assert!((400..500).contains(&r.status), "{r:?}");
        }
    }

    #[test]
    fn negotiation_never_panics(accept in ".{0,300}") {
        let _ = negotiate(&accept);
        let _ = accepts_gzip(&accept);
    }

    #[test]
    fn escaping_round_trips_and_keeps_a_label_on_one_line(s in any::<String>()) {
        let mut e = String::new();
        escape_label_value(&s, &mut e).unwrap();
        prop_assert!(!e.contains('\n'));
        // Every quote is escaped: an unescaped one would end the value.
        let mut backslashes = 0;
        for c in e.chars() {
            if c == '"' { prop_assert!(backslashes % 2 == 1); }
            backslashes = if c == '\\' { backslashes + 1 } else { 0 };
        }
        prop_assert_eq!(unescape(&e), Some(s));
    }

    #[test]
    fn any_group_name_is_exposed_as_one_parsable_line(name in "[^/\u{0}]{1,40}") {
        prop_assume!(name != "." && name != "..");
        let rs = Rstat::new();
        let c = rs.register_counters("c", &["n"]).unwrap();
        let g = rs.root().create_child(&name).unwrap();
        c.add(&g, 0, 7).unwrap();
        for f in [Format::Classic, Format::OpenMetrics] {
            let body = Exporter::new(&rs).render(f).unwrap().body;
            let line = body
                .lines()
                .find(|l| {
                    l.starts_with("rstat_c_n_total{path=\"/")
                        && !l.starts_with("rstat_c_n_total{path=\"/\"}")
                        && l.ends_with("} 7")
                })
                .expect("the group's line");
            let label = &line["rstat_c_n_total{path=\"".len()..line.len() - "\"} 7".len()];
            prop_assert_eq!(unescape(label), Some(format!("/{name}")));
        }
    }

    #[test]
    fn classic_conversion_never_panics(s in ".{0,400}") {
        let _ = openmetrics_to_classic(&s);
    }
}

#[test]
fn the_server_survives_random_and_mutated_requests() {
    let rs = Rstat::new();
    let srv = Exporter::new(&rs)
        .serve(ServerConfig {
            addr: "127.0.0.1:0".into(),
            read_timeout: Duration::from_millis(200),
            ..ServerConfig::default()
        })
        .unwrap();
    let mut runner =
        proptest::test_runner::TestRunner::new(ProptestConfig::with_cases((cases() / 4).max(16)));
    let strat = prop_oneof![mutated(), proptest::collection::vec(any::<u8>(), 0..20_000)];
    runner
        .run(&strat, |bytes| {
            let mut s = TcpStream::connect(srv.addr()).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let _ = s.write_all(&bytes);
            let _ = s.shutdown(std::net::Shutdown::Write);
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
            let text = String::from_utf8_lossy(&out);
            if let Some(code) = text.strip_prefix("HTTP/1.1 ").and_then(|t| t.get(..3)) {
                let code: u16 = code.parse().unwrap();
                prop_assert!(code == 200 || (400..500).contains(&code), "{text}");
            }
            Ok(())
        })
        .unwrap();
    let mut s = TcpStream::connect(srv.addr()).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
}
