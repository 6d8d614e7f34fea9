//! One connection's life on its own thread: read a request head (bounded
//! in size and time), parse it ([`request`](super::request)), render what
//! its route asks for from the [`Exporter`] and write the answer
//! ([`response`](super::response)), then, if the connection is kept
//! alive, wait for the next request on it; telling its slot in
//! [`conns`](super::conns) what it is doing at each step.

use std::io::{self, Read};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::conns::ConnState;
use super::request::{parse_head, reject, Request, Route, MAX_REQUEST_HEAD};
use super::response::{respond, respond_error, Headers};
use crate::Exporter;

/// How long a connection waits for its requests.
#[derive(Clone, Copy, Debug)]
pub(super) struct Timeouts {
    /// For a whole request head: from the connection's accept for its
    /// first request, from the first byte of each later one.
    pub(super) head: Duration,
    /// For the first byte of the next request on a kept-alive connection;
    /// zero: one request per connection.
    pub(super) keep_alive: Duration,
}

/// Serve requests on `stream` until one asks to close (or cannot be
/// followed by another), the client closes, or it stays idle for
/// `keep_alive`, then close.
/// `claim` is told what the connection does (see [`Conns`]): `Reading` when
/// bytes of a head arrive, `Busy` once it is parsed or before an error is
/// answered, `Writing` as the answer makes progress, `KeptAlive` between
/// requests. It returns false if the connection was evicted; then the
/// thread writes nothing.
///
/// [`Conns`]: super::conns::Conns
pub(super) fn serve_connection(
    mut stream: TcpStream,
    exporter: &Exporter,
    timeouts: Timeouts,
    claim: &dyn Fn(ConnState) -> bool,
) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(30)));
    // Bytes received and not yet parsed: a request head, and what a
    // pipelining client sent after it.
    let mut buf = Vec::with_capacity(1024);
    let mut first = true;
    loop {
        let Some((req, len)) = read_request(&mut stream, &mut buf, timeouts, first, claim) else {
            return;
        };
        buf.drain(..len);
        first = false;
        let keep = req.keep_alive && !timeouts.keep_alive.is_zero();
        if answer(&mut stream, exporter, &req, keep, claim).is_err() || !keep {
            break;
        }
        if !claim(ConnState::KeptAlive) {
            return;
        }
    }
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

/// Read until `buf` holds a whole request head, and parse it: the request
/// and its head's length. `None` when the connection is to be closed (the
/// client left, stayed silent, or sent a bad head, which is answered).
fn read_request(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    timeouts: Timeouts,
    first: bool,
    claim: &dyn Fn(ConnState) -> bool,
) -> Option<(Request, usize)> {
    let mut chunk = [0u8; 1024];
    let timed_out = reject(408, "request head not received in time");
    // One deadline for the whole head, so a client trickling bytes cannot
    // hold the connection longer than `timeouts.head`. Between requests
    // of a kept-alive connection, the wait for the first byte is
    // `keep_alive`, and the head's deadline starts with that byte.
    let mut deadline = if first || !buf.is_empty() {
        Some(Instant::now() + timeouts.head)
    } else {
        None
    };
    let idle_until = Instant::now() + timeouts.keep_alive;
    loop {
        if !buf.is_empty() {
            match parse_head(buf) {
                Ok(Some(r)) => return claim(ConnState::Busy).then_some(r),
                // Part of a head: not idle (for eviction), but a head
                // that keeps arriving for too long may be evicted.
                Ok(None) => {
                    if !claim(ConnState::Reading) {
                        return None;
                    }
                }
                Err(rej) => {
                    if claim(ConnState::Busy) {
                        let _ = respond_error(stream, &rej);
                    }
                    return None;
                }
            }
        }
        let until = deadline.unwrap_or(idle_until);
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            // Idle between requests: close without an answer, as no
            // request was made.
            if deadline.is_some() && claim(ConnState::Busy) {
                let _ = respond_error(stream, &timed_out);
            }
            return None;
        }
        let room = MAX_REQUEST_HEAD.saturating_sub(buf.len());
        match stream.read(&mut chunk[..room.min(1024)]) {
            Ok(0) => {
                if !buf.is_empty() && claim(ConnState::Busy) {
                    let _ = respond_error(stream, &reject(400, "incomplete request head"));
                }
                return None;
            }
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                deadline.get_or_insert_with(|| Instant::now() + timeouts.head);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if deadline.is_some() && claim(ConnState::Busy) {
                    let _ = respond_error(stream, &timed_out);
                }
                return None;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
    }
}

/// Render and write the answer to `req`. An error: the connection is to
/// be closed (the answer was an error, or could not be written).
fn answer(
    stream: &mut TcpStream,
    exporter: &Exporter,
    req: &Request,
    keep_alive: bool,
    claim: &dyn Fn(ConnState) -> bool,
) -> io::Result<()> {
    let progress = || {
        claim(ConnState::Writing);
    };
    let negotiated = Headers {
        gzip: req.gzip,
        negotiated: true,
        keep_alive,
    };
    let failed = |stream: &mut TcpStream, e: crate::Error| {
        respond_error(stream, &reject(500, e.to_string()))?;
        Err(io::Error::other("answered 500"))
    };
    match req.route {
        Route::Index => respond(
            stream,
            &progress,
            200,
            "text/plain; charset=utf-8",
            b"rstat exporter: /metrics (Prometheus text, or OpenMetrics by Accept), /snapshot.json\n",
            req.head_only,
            Headers {
                keep_alive,
                ..Headers::default()
            },
        ),
        // HEAD changes nothing: its Content-Length comes from a peek.
        Route::Metrics if req.head_only => match exporter.peek(req.format) {
            Ok(s) => respond(
                stream,
                &progress,
                200,
                req.format.content_type(),
                s.body.as_bytes(),
                true,
                negotiated,
            ),
            Err(e) => failed(stream, e),
        },
        // The removed groups in a scrape are marked reported only once its
        // body was written; otherwise the next scrape has them again.
        Route::Metrics => match exporter.render_pending(req.format) {
            Ok(p) => {
                let sent = respond(
                    stream,
                    &progress,
                    200,
                    req.format.content_type(),
                    p.scrape().body.as_bytes(),
                    false,
                    negotiated,
                );
                // Before the next request on this connection (and before
                // the close): a client that reads to the end and scrapes
                // again on this connection finds them committed.
                if sent.is_ok() {
                    let _ = p.commit();
                }
                sent
            }
            Err(e) => failed(stream, e),
        },
        Route::Snapshot => match exporter.snapshot_json() {
            Ok(s) => respond(
                stream,
                &progress,
                200,
                "application/json",
                s.as_bytes(),
                req.head_only,
                negotiated,
            ),
            Err(e) => failed(stream, e),
        },
    }
}
