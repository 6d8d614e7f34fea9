//! Writing answers: the status line and headers, a body in pieces that
//! report progress (for eviction, see [`conns`](super::conns)), error
//! answers that drain the client's input before closing, and the `503` the
//! accept thread sends without blocking. Built on
//! [`request`](super::request)'s [`Reject`].

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::request::{reject, Reject, MAX_REQUEST_HEAD};

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// How an answer is sent.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Headers {
    /// Compressed with gzip (`Content-Encoding: gzip`).
    pub(super) gzip: bool,
    /// The content was negotiated (`Vary: Accept, Accept-Encoding`).
    pub(super) negotiated: bool,
    /// The connection stays open for another request
    /// (`Connection: keep-alive`; else `close`).
    pub(super) keep_alive: bool,
}

/// `body` compressed as a gzip stream, at the fastest level: scrapes of
/// large trees are exposition text, which compresses well even so, and
/// the exporter's thread (never charged to a group, but on the
/// service's CPUs) spends the least time on it.
fn gzip(body: &[u8]) -> io::Result<Vec<u8>> {
    use flate2::write::GzEncoder;
    let mut enc = GzEncoder::new(
        Vec::with_capacity(body.len() / 8 + 64),
        flate2::Compression::fast(),
    );
    enc.write_all(body)?;
    enc.finish()
}

pub(super) fn respond(
    stream: &mut TcpStream,
    progress: &dyn Fn(),
    status: u16,
    content_type: &str,
    body: &[u8],
    head_only: bool,
    headers: Headers,
) -> io::Result<()> {
    let allow = if status == 405 {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    let compressed;
    let (body, content_encoding) = if headers.gzip {
        compressed = gzip(body)?;
        (&compressed[..], "Content-Encoding: gzip\r\n")
    } else {
        (body, "")
    };
    let vary = if headers.negotiated {
        "Vary: Accept, Accept-Encoding\r\n"
    } else {
        ""
    };
    let connection = if headers.keep_alive {
        "keep-alive"
    } else {
        "close"
    };
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\n{content_encoding}{vary}Content-Length: {}\r\n{allow}Connection: {connection}\r\n\r\n",
        reason(status),
        body.len()
    );
    // The head is part of the answer's progress too: a client that never
    // reads can block this write (an answer to a HEAD is nothing else),
    // and only a `Writing` answer can be evicted.
    progress();
    stream.write_all(head.as_bytes())?;
    if !head_only {
        // In pieces, telling the server the answer is moving (a stalled
        // one may be evicted when the server is full).
        for piece in body.chunks(64 * 1024) {
            progress();
            stream.write_all(piece)?;
        }
    }
    stream.flush()
}

/// Answer with an error, then read (and drop) what the client still
/// sends, for at most 0.5 s and 1 MiB: closing a socket with unread
/// input resets the connection, and the client could lose the answer.
pub(super) fn respond_error(stream: &mut TcpStream, rej: &Reject) -> io::Result<()> {
    let body = format!("{}\n", rej.message);
    respond(
        stream,
        &|| {},
        rej.status,
        "text/plain; charset=utf-8",
        body.as_bytes(),
        false,
        Headers::default(),
    )?;
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let deadline = std::time::Instant::now() + Duration::from_millis(500);
    let mut sink = [0u8; 4096];
    let mut left = 1usize << 20;
    while left > 0 {
        let t = deadline.saturating_duration_since(std::time::Instant::now());
        if t.is_zero() || stream.set_read_timeout(Some(t)).is_err() {
            break;
        }
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => left -= n.min(left),
        }
    }
    Ok(())
}

/// Answer `503` with `Retry-After` without blocking the accept thread:
/// one non-blocking write of the short answer (the socket's send buffer
/// is empty, so it fits), then a non-blocking read of what the client
/// has already sent, so closing the socket does not reset the connection
/// over unread bytes (a reset can make the client lose the answer).
/// The caller closes the socket (dropping or shutting it down).
pub(super) fn refuse(stream: &TcpStream) {
    let rej = reject(503, "too many connections being served; retry");
    let body = format!("{}\n", rej.message);
    let msg = format!(
        "HTTP/1.1 503 {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{body}",
        reason(503),
        body.len()
    );
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let _ = (&*stream).write(msg.as_bytes());
    let mut sink = [0u8; 1024];
    let mut left = MAX_REQUEST_HEAD;
    while left > 0 {
        match (&*stream).read(&mut sink[..left.min(1024)]) {
            Ok(0) | Err(_) => break,
            Ok(n) => left -= n,
        }
    }
    let _ = stream.shutdown(std::net::Shutdown::Write);
}
