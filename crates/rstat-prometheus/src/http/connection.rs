//! One connection's life on its own thread: read the request head
//! (bounded in size and time), parse it ([`request`](super::request)),
//! render what its route asks for from the [`Exporter`] and write the
//! answer ([`response`](super::response)), telling its slot in
//! [`conns`](super::conns) what it is doing at each step.

use std::io::{self, Read};
use std::net::TcpStream;
use std::time::Duration;

use super::conns::ConnState;
use super::request::{parse_request, reject, Route, MAX_REQUEST_HEAD};
use super::response::{respond, respond_error, Encoding};
use crate::Exporter;

/// Read one request head, answer it, close.
/// `claim` is told what the connection does (see [`Conns`]): `Idle` when
/// bytes of the head arrive, `Busy` once it is parsed or before an error
/// is answered, `Writing` as the answer makes progress. It returns false
/// if the connection was evicted; then the thread writes nothing.
///
/// [`Conns`]: super::conns::Conns
pub(super) fn serve_connection(
    mut stream: TcpStream,
    exporter: &Exporter,
    timeout: Duration,
    claim: &dyn Fn(ConnState) -> bool,
) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(30)));
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    // One deadline for the whole head, so a client trickling bytes cannot
    // hold the connection longer than `timeout`.
    let deadline = std::time::Instant::now() + timeout;
    let timed_out = reject(408, "request head not received in time");
    let req = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            if claim(ConnState::Busy) {
                let _ = respond_error(&mut stream, &timed_out);
            }
            return;
        }
        let room = MAX_REQUEST_HEAD - buf.len();
        match stream.read(&mut chunk[..room.min(1024)]) {
            Ok(0) => {
                if !buf.is_empty() && claim(ConnState::Busy) {
                    let _ = respond_error(&mut stream, &reject(400, "incomplete request head"));
                }
                return;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if claim(ConnState::Busy) {
                    let _ = respond_error(&mut stream, &timed_out);
                }
                return;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        match parse_request(&buf) {
            Ok(Some(r)) => {
                if !claim(ConnState::Busy) {
                    return;
                }
                break r;
            }
            // Bytes arrived: not idle (for eviction) from now.
            Ok(None) => {
                if !claim(ConnState::Idle) {
                    return;
                }
            }
            Err(rej) => {
                if claim(ConnState::Busy) {
                    let _ = respond_error(&mut stream, &rej);
                }
                return;
            }
        }
    };
    let progress = || {
        claim(ConnState::Writing);
    };
    let negotiated = Encoding {
        gzip: req.gzip,
        negotiated: true,
    };
    let _ = match req.route {
        Route::Index => respond(
            &mut stream,
            &progress,
            200,
            "text/plain; charset=utf-8",
            b"rstat exporter: /metrics (Prometheus text, or OpenMetrics by Accept), /snapshot.json\n",
            req.head_only,
            Encoding::default(),
        ),
        // HEAD changes nothing: its Content-Length comes from a peek.
        Route::Metrics if req.head_only => match exporter.peek(req.format) {
            Ok(s) => respond(
                &mut stream,
                &progress,
                200,
                req.format.content_type(),
                s.body.as_bytes(),
                true,
                negotiated,
            ),
            Err(e) => respond_error(&mut stream, &reject(500, e.to_string())),
        },
        // The removed groups in a scrape are marked reported only once its
        // body was written; otherwise the next scrape has them again.
        Route::Metrics => match exporter.render_pending(req.format) {
            Ok(p) => {
                let sent = respond(
                    &mut stream,
                    &progress,
                    200,
                    req.format.content_type(),
                    p.scrape().body.as_bytes(),
                    false,
                    negotiated,
                );
                // Before the close below: a client that reads to the end
                // and scrapes again at once finds them committed.
                if sent.is_ok() {
                    let _ = p.commit();
                }
                sent
            }
            Err(e) => respond_error(&mut stream, &reject(500, e.to_string())),
        },
        Route::Snapshot => match exporter.snapshot_json() {
            Ok(s) => respond(
                &mut stream,
                &progress,
                200,
                "application/json",
                s.as_bytes(),
                req.head_only,
                negotiated,
            ),
            Err(e) => respond_error(&mut stream, &reject(500, e.to_string())),
        },
    };
    let _ = stream.shutdown(std::net::Shutdown::Write);
}
