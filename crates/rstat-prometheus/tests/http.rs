//! The embedded server over real sockets: the good requests, and the bad
//! ones getting 4xx without taking the server down.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use rstat::Rstat;
use rstat_prometheus::{Exporter, ServerConfig};

fn start(rs: &Rstat, read_timeout: Duration) -> rstat_prometheus::Server {
    start_limited(rs, ServerConfig::default().max_connections, read_timeout)
}

/// [`start`] serving at most `max_connections` at once.
fn start_limited(
    rs: &Rstat,
    max_connections: usize,
    read_timeout: Duration,
) -> rstat_prometheus::Server {
    Exporter::new(rs)
        .serve(ServerConfig {
            addr: "127.0.0.1:0".into(),
            max_connections,
            read_timeout,
            ..ServerConfig::default()
        })
        .unwrap()
}

/// Send `raw`, read one answer: (status, head, body). On a connection
/// the server keeps alive, the body is what `Content-Length` says (none
/// for a HEAD), so it does not hold the test; otherwise up to the close
/// (after which the server has committed a scrape's removed groups).
fn exchange(addr: SocketAddr, raw: &[u8]) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // The server may answer (and stop reading) before all is sent.
    let _ = s.write_all(raw);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let mut want = None;
    loop {
        if want.is_none() {
            if let Some(at) = out.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&out[..at]).into_owned();
                let len = header(&head, "Content-Length").and_then(|v| v.parse::<usize>().ok());
                let len = if raw.starts_with(b"HEAD") {
                    Some(0)
                } else {
                    len
                };
                let kept = header(&head, "Connection") == Some("keep-alive");
                want = len.filter(|_| kept).map(|n| at + 4 + n);
            }
        }
        if want.is_some_and(|w| out.len() >= w) {
            break;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head.to_owned(), body.to_owned())
}

/// Send `raw` every `pause` until it is answered `200` or `within` has
/// passed: the `200`'s (head, body), or the number of refusals and the
/// last answer's head. Each refusal's status and head go to `refused`
/// first, for the caller's checks of what a refusal must be.
fn until_served(
    addr: SocketAddr,
    raw: &[u8],
    within: Duration,
    pause: Duration,
    mut refused: impl FnMut(u16, &str),
) -> Result<(String, String), (usize, String)> {
    let give_up = std::time::Instant::now() + within;
    let mut refusals = 0;
    loop {
        let (st, head, body) = exchange(addr, raw);
        if st == 200 {
            return Ok((head, body));
        }
        refused(st, &head);
        refusals += 1;
        if std::time::Instant::now() >= give_up {
            return Err((refusals, head));
        }
        std::thread::sleep(pause);
    }
}

#[test]
fn serves_classic_text_and_openmetrics_by_negotiation() {
    let rs = Rstat::new();
    let c = rs.register_counters("jobs", &["done"]).unwrap();
    let g = rs.root().create_child("t").unwrap();
    c.add(&g, 0, 42).unwrap();
    let srv = start(&rs, Duration::from_secs(5));
    let a = srv.addr();
    assert!(a.ip().is_loopback());

    let (st, head, body) = exchange(a, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(st, 200, "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert!(
        body.contains("rstat_jobs_done_total{path=\"/t\"} 42\n"),
        "{body}"
    );
    assert!(!body.contains("# EOF"));

    let prom = "Accept: application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (st, head, body) = exchange(
        a,
        format!("GET /metrics HTTP/1.1\r\n{prom}\r\n\r\n").as_bytes(),
    );
    assert_eq!(st, 200);
    assert!(
        head.contains("Content-Type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");

    let (st, head, body) = exchange(a, b"HEAD /metrics HTTP/1.0\r\n\r\n");
    assert_eq!(st, 200);
    assert!(head.contains("Content-Length: "), "{head}");
    assert!(body.is_empty());

    let (st, _, body) = exchange(a, b"GET /snapshot.json?x=1 HTTP/1.1\r\n\r\n");
    assert_eq!(st, 200);
    assert!(body.starts_with("{\"controllers\""), "{body}");
}

#[test]
fn bad_requests_get_4xx_and_the_server_keeps_serving() {
    let rs = Rstat::new();
    let srv = start(&rs, Duration::from_millis(300));
    let a = srv.addr();
    let huge_header = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    let many_headers = format!("GET /metrics HTTP/1.1\r\n{}\r\n", "X: y\r\n".repeat(100));
    let long_path = format!("GET /{} HTTP/1.1\r\n\r\n", "p".repeat(9000));
    let cases: Vec<(&[u8], u16)> = vec![
        (b"POST /metrics HTTP/1.1\r\n\r\n", 405),
        (b"GET /nope HTTP/1.1\r\n\r\n", 404),
        (b"GET /metricsx HTTP/1.1\r\n\r\n", 404),
        (b"\x00\x01\x02garbage\r\n\r\n", 400),
        (b"GET /metrics HTTP/9.9\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nBad Header\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nAccept: \xff\xfe\r\n\r\n", 400),
        (huge_header.as_bytes(), 431),
        (many_headers.as_bytes(), 431),
        (long_path.as_bytes(), 431),
        // Never finishes its head: timed out.
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\n", 408),
    ];
    for (raw, want) in cases {
        let (st, head, _) = exchange(a, raw);
        assert_eq!(
            st,
            want,
            "{:?} -> {head}",
            String::from_utf8_lossy(&raw[..raw.len().min(60)])
        );
    }
    // Trickling a byte at a time does not extend the deadline: the answer
    // comes while the client is still sending.
    let mut s = TcpStream::connect(a).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
    let t0 = std::time::Instant::now();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    for b in b"GET /metrics HTTP/1.1\r\nX: "
        .iter()
        .chain([b'a'; 200].iter())
    {
        if s.write_all(&[*b]).is_err() {
            break;
        }
        if let Ok(n) = s.read(&mut buf) {
            answer.extend_from_slice(&buf[..n]);
            break;
        }
        std::thread::sleep(Duration::from_millis(40));
    }
    let answered_after = t0.elapsed();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answered_after < Duration::from_secs(3),
        "{answered_after:?}"
    );
    // Still serving.
    let (st, _, body) = exchange(a, b"GET /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(st, 200);
    assert!(body.contains("rstat_exporter_scrapes_total 1\n"), "{body}");
}

#[test]
fn non_loopback_needs_an_explicit_choice() {
    let rs = Rstat::new();
    let e = Exporter::new(&rs)
        .serve(ServerConfig {
            addr: "0.0.0.0:0".into(),
            ..ServerConfig::default()
        })
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
    assert!(e.to_string().contains("allow_non_loopback"), "{e}");
    let srv = Exporter::new(&rs)
        .serve(ServerConfig {
            addr: "0.0.0.0:0".into(),
            allow_non_loopback: true,
            ..ServerConfig::default()
        })
        .unwrap();
    assert!(srv.addr().ip().is_unspecified());
    let bad = Exporter::new(&rs).serve(ServerConfig {
        addr: "not an address".into(),
        ..ServerConfig::default()
    });
    assert!(bad.unwrap_err().to_string().contains("HOST:PORT"));
}

#[test]
fn head_takes_no_removed_group_from_the_next_get() {
    let rs = Rstat::new();
    let c = rs.register_counters("jobs", &["done"]).unwrap();
    let srv = start(&rs, Duration::from_secs(5));
    let g = rs.root().create_child("brief").unwrap();
    c.add(&g, 0, 3).unwrap();
    g.remove().unwrap();
    drop(g);
    let line = "rstat_jobs_done_total{path=\"/brief\"} 3\n";
    let (st, head, body) = exchange(srv.addr(), b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(st, 200, "{head}");
    assert!(body.is_empty(), "HEAD sent a body: {body}");
    // Closed after the answer: the server commits the scrape before the
    // close, so a client that reads to the end finds it committed.
    let close = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let (st, head, body) = exchange(srv.addr(), close);
    assert_eq!(st, 200, "{head}");
    assert!(
        body.contains(line),
        "the GET after a HEAD lost the removed group:\n{body}"
    );
    assert!(
        body.contains("rstat_exporter_removed_groups_reported_total 1\n"),
        "{body}"
    );
    // Delivered once: the next scrape no longer has it.
    let (_, _, body) = exchange(srv.addr(), close);
    assert!(!body.contains("/brief"), "{body}");
    // On a kept-alive connection, the next request is read only after
    // the previous answer was committed.
    let g = rs.root().create_child("brief2").unwrap();
    g.remove().unwrap();
    drop(g);
    let mut s = TcpStream::connect(srv.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    for n in 0..2 {
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let (_, body) = read_one(&mut s, false).expect("an answer");
        let body = String::from_utf8(body).unwrap();
        assert_eq!(body.contains("/brief2"), n == 0, "{body}");
    }
}

#[test]
fn absolute_form_request_targets_are_served() {
    let rs = Rstat::new();
    let c = rs.register_counters("jobs", &["done"]).unwrap();
    c.add(rs.root(), 0, 5).unwrap();
    let srv = start(&rs, Duration::from_secs(5));
    let a = srv.addr();
    let req = format!("GET http://{a}/metrics?x=1 HTTP/1.1\r\nHost: {a}\r\n\r\n");
    let (st, head, body) = exchange(a, req.as_bytes());
    assert_eq!(st, 200, "{head}");
    assert!(
        body.contains("rstat_jobs_done_total{path=\"/\"} 5\n"),
        "{body}"
    );
    let (st, head, _) = exchange(a, b"GET HTTP://LOCALHOST HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(st, 200, "an empty absolute path is /: {head}");
    let req = format!("GET http://{a}/nope HTTP/1.1\r\nHost: {a}\r\n\r\n");
    let (st, head, _) = exchange(a, req.as_bytes());
    assert_eq!(st, 404, "{head}");
}

#[test]
fn idle_connections_do_not_keep_a_scrape_out() {
    let rs = Rstat::new();
    // A long head timeout, so the idle connections outlive the test.
    let srv = start(&rs, Duration::from_secs(60));
    let a = srv.addr();
    // Twice the connection limit, connected and silent.
    let idle: Vec<TcpStream> = (0..2 * ServerConfig::default().max_connections)
        .map(|_| TcpStream::connect(a).unwrap())
        .collect();
    // A scraper retrying on refusal is served once the silent ones have
    // idled a while (IDLE_BEFORE_EVICTION); the bound is generous, for a
    // busy machine (they used to hold the server for the whole head
    // timeout).
    let served = until_served(
        a,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(20),
        Duration::from_millis(50),
        |st, head| {
            assert!(
                st == 503 && head.contains("\r\nRetry-After: "),
                "a refusal must be a 503 with Retry-After: {head:?}"
            )
        },
    );
    match served {
        Ok((_, body)) => assert!(body.contains("rstat_exporter_scrapes_total 1\n"), "{body}"),
        Err((refusals, head)) => panic!(
            "a scrape was still refused after {refusals} tries while idle clients held the server: {head}"
        ),
    }
    drop(idle);
}

#[test]
fn a_scrape_whose_client_went_away_keeps_its_removed_groups() {
    let rs = Rstat::new();
    let c = rs.register_counters("jobs", &["done"]).unwrap();
    // A body far larger than the sockets' buffers (tens of MB: every
    // series of a deep chain of long names carries its whole path), so
    // the server is still writing when the client goes away.
    let chain = big_tree(&rs);
    let srv = start(&rs, Duration::from_secs(5));
    let g = rs.root().create_child("brief").unwrap();
    c.add(&g, 0, 3).unwrap();
    g.remove().unwrap();
    drop(g);
    {
        let mut s = TcpStream::connect(srv.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        // The answer has started; now leave with most of it unread (the
        // close resets the connection, the server's write fails).
        let mut first = [0u8; 4096];
        s.read_exact(&mut first).unwrap();
        assert!(first.starts_with(b"HTTP/1.1 200"));
    }
    // Give the server time to see its write fail (only needed for this
    // test to notice a commit that ignores the failure).
    std::thread::sleep(Duration::from_millis(500));
    let (st, head, body) = exchange(srv.addr(), b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(st, 200, "{head}");
    assert!(
        body.contains("rstat_jobs_done_total{path=\"/brief\"} 3\n"),
        "the undelivered scrape took the removed group ({} bytes)",
        body.len()
    );
    drop(chain);
}

/// A tree whose exposition is tens of MB, far more than the sockets'
/// buffers hold: every series of a deep chain of long names carries its
/// whole path.
fn big_tree(rs: &Rstat) -> Vec<rstat::Group> {
    let name = "n".repeat(250);
    let mut chain = vec![rs.root().create_child(&name).unwrap()];
    for _ in 0..250 {
        let next = chain.last().unwrap().create_child(&name).unwrap();
        chain.push(next);
    }
    chain
}

#[test]
fn clients_that_ask_and_never_read_do_not_keep_a_scrape_out() {
    let rs = Rstat::new();
    let _chain = big_tree(&rs);
    // A few connections, each rendering tens of MB, are enough.
    let max_connections = 4;
    let srv = start_limited(&rs, max_connections, Duration::from_secs(5));
    // As many connections as the server serves, each asking for the big
    // exposition and reading none of it.
    let stalled: Vec<TcpStream> = (0..max_connections)
        .map(|_| {
            let mut s = TcpStream::connect(srv.addr()).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            s
        })
        .collect();
    // Each answer has started (so none is still idle); read no more.
    for s in &stalled {
        let mut s = s;
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut first = [0u8; 4096];
        s.read_exact(&mut first).unwrap();
        assert!(first.starts_with(b"HTTP/1.1 200"));
    }
    // A scraper retrying on refusal is served once an answer has been
    // stalled a while (2 s); the bound is generous, for a busy machine
    // (the writes used to block for 30 s each).
    a_stalled_answer_gives_way(srv.addr());
    drop(stalled);
}

/// A scraper retrying on refusal is served within 20 s while every slot
/// holds an answer its client does not read (one stalled for 2 s gives
/// way); the bound is generous, for a busy machine.
fn a_stalled_answer_gives_way(addr: SocketAddr) {
    match until_served(
        addr,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(20),
        Duration::from_millis(200),
        |_, _| {},
    ) {
        Ok((head, body)) => assert!(body.contains("rstat_exporter_scrapes_total"), "{head}"),
        Err((refusals, head)) => panic!("still refused after {refusals} tries: {head}"),
    }
}

/// Read everything the server sends until it closes (or resets: what
/// arrived before a reset is kept).
fn read_answer(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn every_scraper_gets_an_answer_when_there_are_more_than_the_server_serves() {
    let rs = Rstat::new();
    let c = rs.register_counters("jobs", &["done"]).unwrap();
    c.add(rs.root(), 0, 1).unwrap();
    let max_connections = 2;
    let srv = start_limited(&rs, max_connections, Duration::from_secs(30));
    let (mut served, mut refused) = (0, 0);
    for round in 0..5 {
        // Many more scrapers than the server serves at once, each sending
        // its whole request as soon as it is connected and reading no
        // answer until all are: the server fills up while requests wait
        // unread in its sockets, which must not be closed as "idle" with
        // no answer at all.
        let mut scrapers: Vec<TcpStream> = (0..8 * max_connections)
            .map(|_| {
                let mut s = TcpStream::connect(srv.addr()).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                // A refused connection may be closed before this is sent.
                let _ =
                    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                s
            })
            .collect();
        for (i, s) in scrapers.iter_mut().enumerate() {
            let answer = read_answer(s);
            let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
            if head.starts_with("HTTP/1.1 200 OK\r\n") {
                assert!(body.contains("rstat_jobs_done_total"), "{answer}");
                served += 1;
            } else {
                assert!(
                    head.starts_with("HTTP/1.1 503 ") && head.contains("\r\nRetry-After: "),
                    "round {round}, scraper {i} got neither a scrape nor a 503 with Retry-After: {answer:?}"
                );
                refused += 1;
            }
        }
    }
    // The crowd gone, a scraper (retrying on refusal, as the last
    // round's connections may still hold their slots) is served.
    let check = |st: u16, head: &str| {
        assert!(
            st == 503,
            "after {served} served and {refused} refused: {head}"
        )
    };
    if let Err((_, head)) = until_served(
        srv.addr(),
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(20),
        Duration::from_millis(50),
        check,
    ) {
        panic!("after {served} served and {refused} refused: {head}");
    }
}

/// Send `raw`, read the answer to EOF: (head, body bytes).
fn exchange_bytes(addr: SocketAddr, raw: &[u8]) -> (String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(raw).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let at = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&out[..at]).into_owned();
    (head, out[at + 4..].to_vec())
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn gunzip(bytes: &[u8]) -> String {
    let mut out = String::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_string(&mut out)
        .expect("a gzip stream");
    out
}

#[test]
fn gzip_by_accept_encoding_round_trips() {
    let rs = Rstat::new();
    let c = rs.register_counters("jobs", &["done"]).unwrap();
    let g = rs.root().create_child("t").unwrap();
    c.add(&g, 0, 42).unwrap();
    let srv = start(&rs, Duration::from_secs(5));
    let a = srv.addr();
    let line = "rstat_jobs_done_total{path=\"/t\"} 42\n";
    // Prometheus's Accept-Encoding, and others that accept gzip.
    for ae in ["gzip", "gzip, deflate, br", "identity;q=0.5, GZIP;q=1", "*"] {
        let req = format!("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: {ae}\r\nConnection: close\r\n\r\n");
        let (head, body) = exchange_bytes(a, req.as_bytes());
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(
            header(&head, "Content-Encoding"),
            Some("gzip"),
            "{ae}: {head}"
        );
        assert_eq!(
            header(&head, "Vary"),
            Some("Accept, Accept-Encoding"),
            "{head}"
        );
        let len: usize = header(&head, "Content-Length").unwrap().parse().unwrap();
        assert_eq!(len, body.len(), "Content-Length is the compressed size");
        let text = gunzip(&body);
        assert!(text.contains(line), "{text}");
    }
    // Not acceptable, or not asked for: identity.
    let not_utf8: &[u8] = b"Accept-Encoding: gzip\xff\r\n";
    for ae in [
        &b""[..],
        b"Accept-Encoding: gzip;q=0\r\n",
        b"Accept-Encoding: br\r\n",
        b"Accept-Encoding: *;q=0\r\n",
        b"Accept-Encoding: *, gzip;q=0\r\n",
        not_utf8,
    ] {
        let mut req = b"GET /metrics HTTP/1.1\r\nHost: x\r\n".to_vec();
        req.extend_from_slice(ae);
        req.extend_from_slice(b"Connection: close\r\n\r\n");
        let (head, body) = exchange_bytes(a, &req);
        let ae = String::from_utf8_lossy(ae);
        assert!(head.starts_with("HTTP/1.1 200"), "{ae:?}: {head}");
        assert_eq!(header(&head, "Content-Encoding"), None, "{ae:?}: {head}");
        assert!(String::from_utf8(body).unwrap().contains(line));
    }
    // HEAD: the length of what a GET would send, compressed.
    let (head, body) = exchange_bytes(
        a,
        b"HEAD /metrics HTTP/1.1\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
    );
    assert!(body.is_empty());
    assert_eq!(header(&head, "Content-Encoding"), Some("gzip"), "{head}");
    // The JSON snapshot too.
    let (head, body) = exchange_bytes(
        a,
        b"GET /snapshot.json HTTP/1.1\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(header(&head, "Content-Encoding"), Some("gzip"), "{head}");
    assert!(gunzip(&body).starts_with("{\"controllers\""));
}

/// A client that asks for gzip and goes away after the first bytes: the
/// server stays up and serves the next scrape.
#[test]
fn a_gzip_client_that_closes_early_leaves_the_server_serving() {
    let rs = Rstat::new();
    let _chain = big_tree(&rs);
    let srv = start(&rs, Duration::from_secs(5));
    for _ in 0..3 {
        let mut s = TcpStream::connect(srv.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nAccept-Encoding: gzip\r\n\r\n")
            .unwrap();
        let mut first = [0u8; 16];
        s.read_exact(&mut first).unwrap();
        assert!(first.starts_with(b"HTTP/1.1 200"));
    }
    let (head, body) = exchange_bytes(
        srv.addr(),
        b"GET /metrics HTTP/1.1\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
    );
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(gunzip(&body).contains("rstat_exporter_scrapes_total"));
}

/// Read one answer from a kept-alive connection: the head, then exactly
/// `Content-Length` bytes of body (none for a HEAD). `None` if the server
/// closed the connection before a whole answer.
fn read_one(s: &mut TcpStream, head_only: bool) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => buf.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let len: usize = if head_only {
        0
    } else {
        header(&head, "Content-Length")?.parse().ok()?
    };
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).ok()?;
    Some((head, body))
}

fn scrapes_total(body: &[u8]) -> String {
    String::from_utf8_lossy(body)
        .lines()
        .find_map(|l| l.strip_prefix("rstat_exporter_scrapes_total "))
        .unwrap_or("none")
        .to_owned()
}

#[test]
fn keep_alive_serves_several_requests_on_one_connection() {
    let rs = Rstat::new();
    let srv = start(&rs, Duration::from_secs(5));
    let mut s = TcpStream::connect(srv.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // One after the other, HTTP/1.1's default: the connection stays open.
    for n in 1..=2 {
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\n\r\n")
            .unwrap();
        let (head, body) = read_one(&mut s, false)
            .unwrap_or_else(|| panic!("request {n}: the connection closed before its answer"));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(header(&head, "Connection"), Some("keep-alive"), "{head}");
        assert_eq!(scrapes_total(&body), n.to_string());
    }
    // Pipelined: three requests in one write (a HEAD among them), three
    // answers in order.
    s.write_all(
        b"GET /snapshot.json HTTP/1.1\r\n\r\nHEAD /metrics HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let (head, body) = read_one(&mut s, false).expect("the snapshot");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.starts_with(b"{\"controllers\""));
    let (head, _) = read_one(&mut s, true).expect("the HEAD");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (head, body) = read_one(&mut s, false).expect("the last scrape");
    assert_eq!(header(&head, "Connection"), Some("close"), "{head}");
    assert_eq!(scrapes_total(gunzip(&body).as_bytes()), "3");
    // It asked for the close: the server closes after the answer.
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).unwrap(), 0);
}

/// When the server does not keep a connection open: HTTP/1.0 without
/// `Connection: keep-alive`, a request with a body (never read), and a
/// kept-alive connection idle past `keep_alive`, which is closed with no
/// answer (no request was sent).
#[test]
fn connections_close_when_they_cannot_or_need_not_be_kept() {
    let rs = Rstat::new();
    let srv = Exporter::new(&rs)
        .serve(ServerConfig {
            addr: "127.0.0.1:0".into(),
            keep_alive: Duration::from_millis(200),
            ..ServerConfig::default()
        })
        .unwrap();
    for (raw, keep) in [
        (&b"GET /metrics HTTP/1.0\r\n\r\n"[..], false),
        (
            b"GET /metrics HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            true,
        ),
        (
            b"GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
            false,
        ),
        (b"GET /metrics HTTP/1.1\r\nConnection: Close\r\n\r\n", false),
        (
            b"GET /metrics HTTP/1.1\r\nConnection: TE, keep-alive\r\n\r\n",
            true,
        ),
    ] {
        let mut s = TcpStream::connect(srv.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(raw).unwrap();
        let (head, _) = read_one(&mut s, false).expect("an answer");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let want = if keep { "keep-alive" } else { "close" };
        assert_eq!(header(&head, "Connection"), Some(want), "{head}");
        // Either way the connection ends: at once, or once idle for
        // `keep_alive`, with nothing more sent.
        let mut rest = Vec::new();
        assert_eq!(s.read_to_end(&mut rest).unwrap(), 0, "{rest:?}");
    }
}

/// A full server makes room by closing a kept-alive connection that is
/// idle between requests, without writing an answer nobody asked for.
#[test]
fn idle_kept_alive_connections_make_room_for_new_ones() {
    let rs = Rstat::new();
    let srv = Exporter::new(&rs)
        .serve(ServerConfig {
            addr: "127.0.0.1:0".into(),
            max_connections: 2,
            ..ServerConfig::default()
        })
        .unwrap();
    let kept: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut s = TcpStream::connect(srv.addr()).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
            read_one(&mut s, false).expect("the first answer");
            s
        })
        .collect();
    // A new scraper (retrying on refusal) is served once they idled a
    // while (IDLE_BEFORE_EVICTION).
    if let Err((_, head)) = until_served(
        srv.addr(),
        b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n",
        Duration::from_secs(20),
        Duration::from_millis(50),
        |st, head| assert!(st == 503, "{head}"),
    ) {
        panic!("{head}");
    }
    // At least one kept connection was closed, with nothing written.
    let mut closed = 0;
    for mut s in kept {
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut rest = Vec::new();
        if let Ok(0) = s.read_to_end(&mut rest) {
            closed += 1;
        }
        assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    }
    assert!(closed >= 1);
}

/// As many connections as the server serves, each pipelining HEAD
/// requests and never reading the answers: their heads fill the sockets
/// and the server's threads block writing them. Such a stalled answer gives way to
/// a scraper as a stalled GET does (a HEAD's head used to be written
/// while the slot was `Busy`, which is never evicted: the scrapers were
/// refused for as long as the writes blocked).
#[test]
fn clients_that_pipeline_heads_and_never_read_do_not_keep_a_scrape_out() {
    let rs = Rstat::new();
    // One slot, so its client's answers get a whole CPU: the server's send
    // buffer (which TCP autotuning grows to a few MB whatever the client
    // does) then fills in seconds even in a debug build, where each HEAD,
    // whose Content-Length comes from a rendered exposition, is slow.
    let max_connections = 1;
    let srv = start_limited(&rs, max_connections, Duration::from_secs(5));
    // Each answer's head is ~150 bytes: 200,000 of them are far more than
    // two sockets' buffers hold, once the client's receive buffer is
    // small (TCP autotuning may grow it to tens of MB, which would hold
    // every answer: the server would never block, only take long). The
    // writer blocks too (the server stops reading once its writes block),
    // so it writes from its own thread.
    let reqs = b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(200_000);
    let stalled: Vec<TcpStream> = (0..max_connections)
        .map(|_| {
            let s = TcpStream::connect(srv.addr()).unwrap();
            small_receive_buffer(&s);
            let mut w = s.try_clone().unwrap();
            let reqs = reqs.clone();
            std::thread::spawn(move || {
                let _ = w.write_all(&reqs);
            });
            s
        })
        .collect();
    a_stalled_answer_gives_way(srv.addr());
    for s in &stalled {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
}

/// Cap `s`'s receive buffer at a few KB (no autotuning past it), before
/// anything arrives on it.
fn small_receive_buffer(s: &TcpStream) {
    use std::os::fd::AsRawFd;
    let size: libc::c_int = 4096;
    // SAFETY: a valid socket descriptor, and an option value of the size
    // given.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "SO_RCVBUF: {}", std::io::Error::last_os_error());
}

/// As many connections as the server serves, each trickling a request
/// head a byte at a time (and reconnecting as soon as it is cut off): a
/// head that has been arriving for longer than any real client takes
/// gives way to a new connection, so a scraper is served while they run.
#[test]
fn clients_that_trickle_their_heads_do_not_keep_a_scrape_out() {
    let rs = Rstat::new();
    let max_connections = 4;
    // Longer than the test: no slow client is cut off by the
    // head's timeout while a scraper tries.
    let srv = start_limited(&rs, max_connections, Duration::from_secs(60));
    let addr = srv.addr();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let slow: Vec<_> = (0..max_connections)
        .map(|_| {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: ".to_vec();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect(addr) else {
                        continue;
                    };
                    for b in head.iter().chain(std::iter::repeat(&b'a')) {
                        if stop.load(std::sync::atomic::Ordering::Relaxed)
                            || s.write_all(&[*b]).is_err()
                        {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            })
        })
        .collect();
    // Let them take every slot.
    std::thread::sleep(Duration::from_millis(300));
    let served = until_served(
        addr,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(10),
        Duration::from_millis(100),
        |_, _| {},
    );
    if let Err((refusals, head)) = &served {
        eprintln!("still refused after {refusals} tries: {head}");
    }
    let served = served.is_ok();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in slow {
        t.join().unwrap();
    }
    assert!(
        served,
        "a scrape was refused for 10 s while clients trickled their heads"
    );
}
