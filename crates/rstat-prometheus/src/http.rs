//! The embedded HTTP server: one small thread per connection (bounded),
//! one request per connection, no async runtime.
//!
//! Request heads are parsed by `httparse` (hyper's parser) from a buffer
//! of at most [`MAX_REQUEST_HEAD`] bytes read with a timeout, so a client
//! can neither make the server allocate without bound nor hold a thread
//! forever. (`tiny_http` 0.12, the obvious alternative, reads header lines
//! without a size limit.) Every malformed or oversized request gets a 4xx
//! and the connection is closed.
//!
//! Every client that sends a request gets an HTTP answer, never a silent
//! close: its scrape, a 4xx, or `503` with `Retry-After` when the server
//! is full (see [`ServerConfig::max_connections`] for who is served then).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{Exporter, Format};

/// The largest request head (request line and headers) accepted: 8 KiB,
/// as common servers allow. Larger heads get `431`.
pub const MAX_REQUEST_HEAD: usize = 8 * 1024;

/// The most headers accepted in a request (more get `431`).
pub const MAX_HEADERS: usize = 64;

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// `/metrics`: the exposition.
    Metrics,
    /// `/snapshot.json`: the live tree as JSON (what `rstat top` reads).
    Snapshot,
    /// `/`: a short index.
    Index,
}

/// A parsed request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// What it asks for.
    pub route: Route,
    /// `HEAD`: headers only.
    pub head_only: bool,
    /// The exposition format negotiated from `Accept`.
    pub format: Format,
}

/// A refused request: the status to answer with and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reject {
    /// A 4xx status code.
    pub status: u16,
    /// Said in the response body.
    pub message: String,
}

fn reject(status: u16, message: impl Into<String>) -> Reject {
    Reject {
        status,
        message: message.into(),
    }
}

/// Parse a request head from the bytes received so far: `Ok(None)` if
/// more bytes are needed (the caller answers `431` once it holds
/// [`MAX_REQUEST_HEAD`] bytes), `Ok(Some(_))` for a complete, acceptable
/// request, `Err` with the 4xx to send otherwise. Never panics, whatever
/// the bytes (fuzzed in CI).
pub fn parse_request(buf: &[u8]) -> Result<Option<Request>, Reject> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Partial) => {
            return if buf.len() >= MAX_REQUEST_HEAD {
                Err(too_large())
            } else {
                Ok(None)
            }
        }
        Ok(httparse::Status::Complete(_)) => {}
        Err(httparse::Error::TooManyHeaders) => {
            return Err(reject(
                431,
                format!("more than {MAX_HEADERS} request headers"),
            ))
        }
        Err(e) => return Err(reject(400, format!("malformed HTTP request: {e}"))),
    }
    let head_only = match req.method {
        Some("GET") => false,
        Some("HEAD") => true,
        _ => return Err(reject(405, "only GET and HEAD are served")),
    };
    let path = origin_path(req.path.unwrap_or(""));
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let route = match path {
        "/metrics" => Route::Metrics,
        "/snapshot.json" => Route::Snapshot,
        "/" => Route::Index,
        _ => return Err(reject(404, "not found; the metrics are at /metrics")),
    };
    let mut accept = String::new();
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("accept") {
            let Ok(v) = std::str::from_utf8(h.value) else {
                return Err(reject(400, "the Accept header is not UTF-8"));
            };
            if !accept.is_empty() {
                accept.push(',');
            }
            accept.push_str(v);
        }
    }
    Ok(Some(Request {
        route,
        head_only,
        format: negotiate(&accept),
    }))
}

/// The path of a request target: origin-form (`/metrics`) as is, and
/// absolute-form (`http://host:port/metrics`), which HTTP/1.1 servers must
/// accept (RFC 9112, section 3.2.2), without its scheme and authority (an
/// empty path is `/`).
fn origin_path(target: &str) -> &str {
    let lower = |n: usize| target.get(..n).map(str::to_ascii_lowercase);
    let rest = if lower(7).as_deref() == Some("http://") {
        &target[7..]
    } else if lower(8).as_deref() == Some("https://") {
        &target[8..]
    } else {
        return target;
    };
    match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => &rest[i..],
        _ => "/",
    }
}

fn too_large() -> Reject {
    reject(
        431,
        format!("request head larger than {MAX_REQUEST_HEAD} bytes"),
    )
}

/// Pick the exposition format from an `Accept` header value: OpenMetrics
/// if `application/openmetrics-text` is acceptable (q > 0) and preferred at
/// least as much as `text/plain`, classic text otherwise (also when the
/// header is absent or unparsable). Prometheus sends OpenMetrics first.
pub fn negotiate(accept: &str) -> Format {
    let (mut om, mut text) = (0.0f64, 0.0f64);
    for part in accept.split(',') {
        let mut params = part.split(';');
        let media = params.next().unwrap_or("").trim();
        let mut q = 1.0;
        for p in params {
            if let Some((k, v)) = p.split_once('=') {
                if k.trim().eq_ignore_ascii_case("q") {
                    q = match v.trim().parse::<f64>() {
                        Ok(q) if (0.0..=1.0).contains(&q) => q,
                        _ => 0.0,
                    };
                }
            }
        }
        if media.eq_ignore_ascii_case("application/openmetrics-text") {
            om = om.max(q);
        } else if media.eq_ignore_ascii_case("text/plain") {
            text = text.max(q);
        }
    }
    if om > 0.0 && om >= text {
        Format::OpenMetrics
    } else {
        Format::Classic
    }
}

/// Settings of the server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Where to listen. Default `127.0.0.1:9756`.
    pub addr: String,
    /// Listen on a non-loopback address: the metrics name every group, so
    /// exposing them beyond this machine is an explicit choice. Default
    /// false.
    pub allow_non_loopback: bool,
    /// Connections served at once, each on a thread of its own that
    /// renders its own answer (so this also bounds the memory of
    /// overlapping scrapes). Default 16: a typical deployment (a
    /// Prometheus HA pair, `rstat top` and a curl) has four clients, each
    /// with one request at a time; 16 lets every one of them overlap its
    /// next request with a slow answer still being written, several times
    /// over, without a `503`.
    ///
    /// When all are taken, a new connection replaces one that is really
    /// idle, oldest first: one still waiting for its request head that
    /// has received no byte for [`IDLE_BEFORE_EVICTION`] and has none
    /// waiting unread in its socket (a client that connected and sends
    /// nothing); it is answered `503` with `Retry-After` before it is
    /// closed. Failing that, it replaces one whose answer has not moved
    /// for 2 s (a client that asked and does not read; it has the start
    /// of its answer). A connection whose request has arrived, read yet
    /// or not, is not replaced: it is served. (Only a client that stays
    /// silent that long after connecting, or in the middle of its head,
    /// may be replaced as its bytes arrive; it gets the `503`.) If no
    /// connection can be replaced, the new one is answered `503` with
    /// `Retry-After: 1` and closed. So every client that sends a request
    /// gets an HTTP answer: its scrape, a 4xx, or a `503` to retry after.
    pub max_connections: usize,
    /// How long a client may take to send its whole request head.
    /// Default 2 s (Prometheus sends it at once).
    pub read_timeout: Duration,
}

/// The default listen address.
pub const DEFAULT_ADDR: &str = "127.0.0.1:9756";

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            addr: DEFAULT_ADDR.to_owned(),
            allow_non_loopback: false,
            max_connections: 16,
            read_timeout: Duration::from_secs(2),
        }
    }
}

/// A running server; dropping it (or [`shutdown`](Self::shutdown)) stops
/// accepting and joins the accept thread (connections being served finish
/// on their own threads).
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// The address it listens on (with the port the system chose, if `:0`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop the server.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop_now();
    }
}

pub(crate) fn start(exporter: Exporter, cfg: ServerConfig) -> io::Result<Server> {
    let addrs: Vec<SocketAddr> = cfg
        .addr
        .to_socket_addrs()
        .map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "cannot resolve listen address {:?} ({e}); give HOST:PORT such as {DEFAULT_ADDR}",
                    cfg.addr
                ),
            )
        })?
        .collect();
    let Some(&addr) = addrs.first() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("listen address {:?} resolves to nothing", cfg.addr),
        ));
    };
    if !addr.ip().is_loopback() && !cfg.allow_non_loopback {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "refusing to serve metrics on {addr}, which is not a loopback address: they name every group; \
                 set allow_non_loopback (rstat demo: --allow-remote) to expose them, or listen on 127.0.0.1"
            ),
        ));
    }
    let listener = TcpListener::bind(addr).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot listen on {addr}: {e}; pick another port (HOST:0 lets the system choose)"
            ),
        )
    })?;
    let addr = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let conns = SharedConns::default();
    let thread = {
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("rstat-exporter".into())
            .spawn(move || accept_loop(listener, exporter, cfg, stop, conns))?
    };
    Ok(Server {
        addr,
        stop,
        thread: Some(thread),
    })
}

/// A connection waiting for its request head that has received no byte
/// for this long (and has none unread) may be replaced by a new one when
/// the server is full. Far longer than a real client takes between
/// connecting and sending its request (Prometheus, curl and `rstat top`
/// send it at once), far shorter than the head's timeout.
pub const IDLE_BEFORE_EVICTION: Duration = Duration::from_millis(250);

/// The connections being served. When the server is full, a new
/// connection takes the place of one that is really idle (`Idle` for
/// [`IDLE_BEFORE_EVICTION`] with nothing unread in its socket, oldest
/// first; it is answered `503`), or else of the one whose answer has been
/// stalled longest (`Writing`, no progress for [`STALLED`]): clients that
/// connect and send nothing, or ask and never read, cannot keep a scraper
/// out. (Prometheus sends its request at once and reads the answer as it
/// comes.) A connection whose request has arrived is never evicted: its
/// bytes are unread in the socket (seen by a peek), or its thread has
/// read them and holds the slot `Idle` with a fresh `since`, or `Busy`.
///
/// # Synchronization
///
/// One mutex over the slots. A connection's thread writes to its socket
/// only after [`claim`](Conns::claim)ing its slot under the lock, and the
/// accept thread peeks at an `Idle` connection's socket, answers it and
/// removes its slot under the same lock: so exactly one of them answers,
/// and a thread whose slot is gone closes without writing. The thread
/// claims its slot again each time bytes of the head arrive, so a client
/// that is still sending is never taken for idle. Answering an evicted
/// connection makes its socket non-blocking, for its thread as well (the
/// flag belongs to the socket, not the handle); that thread's next read
/// may then fail at once, but it finds its slot gone and writes nothing.
#[derive(Default)]
struct Conns {
    next_id: u64,
    slots: Vec<Slot>,
}

struct Slot {
    id: u64,
    /// A handle to answer and shut the connection down when evicted.
    stream: TcpStream,
    state: ConnState,
    /// When `state` was set: for `Idle`, when the connection was accepted
    /// or last received bytes; for `Writing`, when the answer last made
    /// progress.
    since: Instant,
}

/// What a connection is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ConnState {
    /// Waiting for (the rest of) the request head.
    Idle,
    /// Rendering the answer.
    Busy,
    /// Writing the answer.
    Writing,
}

/// An answer that made no progress for this long may be evicted when the
/// server is full.
const STALLED: Duration = Duration::from_secs(2);

/// What a socket holds that its reader has not read yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unread {
    /// Nothing yet: the client is silent.
    Nothing,
    /// Bytes: a request (or part of one) has arrived.
    Bytes,
    /// The end of the stream, or an error: the client is gone.
    Gone,
}

/// Look at `stream`'s receive queue without waiting and without taking
/// anything from it.
fn unread(stream: &TcpStream) -> Unread {
    let mut byte = 0u8;
    // SAFETY: `byte` is a live, writable buffer of the 1 byte passed as
    // the length, for the whole call; the descriptor is owned by `stream`,
    // borrowed for the call, so it stays open. `MSG_PEEK` leaves the byte
    // queued for the connection's thread; `MSG_DONTWAIT` makes this call
    // alone non-blocking (the descriptor's flags, shared with that thread's
    // blocking reads, are left alone).
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            std::ptr::from_mut(&mut byte).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        1.. => Unread::Bytes,
        0 => Unread::Gone,
        _ => match io::Error::last_os_error().kind() {
            io::ErrorKind::WouldBlock => Unread::Nothing,
            // Not seen with MSG_DONTWAIT; if it were, keep the connection.
            io::ErrorKind::Interrupted => Unread::Bytes,
            _ => Unread::Gone,
        },
    }
}

impl Conns {
    /// The slot to evict for a new connection, if any: a really idle one
    /// (or one whose client is gone), else a stalled answer. Looks at
    /// the sockets of the `Idle` slots (a non-blocking peek each).
    fn victim(&self, now: Instant) -> Option<usize> {
        let idle = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state == ConnState::Idle)
            .filter(|(_, s)| match unread(&s.stream) {
                Unread::Bytes => false,
                Unread::Gone => true,
                Unread::Nothing => now.saturating_duration_since(s.since) >= IDLE_BEFORE_EVICTION,
            })
            .min_by_key(|(_, s)| s.since)
            .map(|(i, _)| i);
        idle.or_else(|| {
            self.slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.state == ConnState::Writing)
                .filter(|(_, s)| now.saturating_duration_since(s.since) >= STALLED)
                .min_by_key(|(_, s)| s.since)
                .map(|(i, _)| i)
        })
    }

    /// Set connection `id`'s state (and its `since` to now); false if it
    /// was evicted, and then its thread must close without writing.
    fn claim(&mut self, id: u64, state: ConnState) -> bool {
        match self.slots.iter_mut().find(|s| s.id == id) {
            Some(s) => {
                s.state = state;
                s.since = Instant::now();
                true
            }
            None => false,
        }
    }
}

type SharedConns = Arc<std::sync::Mutex<Conns>>;

fn lock(c: &SharedConns) -> std::sync::MutexGuard<'_, Conns> {
    c.lock().unwrap_or_else(|p| p.into_inner())
}

fn accept_loop(
    listener: TcpListener,
    exporter: Exporter,
    cfg: ServerConfig,
    stop: Arc<AtomicBool>,
    conns: SharedConns,
) {
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = conn else {
            // Out of file descriptors and the like: back off briefly.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let Ok(handle) = stream.try_clone() else {
            refuse(&stream);
            continue;
        };
        let id = {
            let mut c = lock(&conns);
            if c.slots.len() >= cfg.max_connections {
                if let Some(i) = c.victim(Instant::now()) {
                    let old = c.slots.remove(i);
                    // An idle one has not been answered (its thread
                    // answers only once it claims its slot, see `Conns`);
                    // a stalled one has the start of its answer.
                    if old.state == ConnState::Idle {
                        refuse(&old.stream);
                    }
                    // Also wakes its thread, which finds its slot gone.
                    let _ = old.stream.shutdown(std::net::Shutdown::Both);
                }
            }
            if c.slots.len() >= cfg.max_connections {
                drop(c);
                refuse(&stream);
                continue;
            }
            let id = c.next_id;
            c.next_id += 1;
            c.slots.push(Slot {
                id,
                stream: handle,
                state: ConnState::Idle,
                since: Instant::now(),
            });
            id
        };
        let (exporter, conns2, timeout) = (exporter.clone(), Arc::clone(&conns), cfg.read_timeout);
        let spawned = std::thread::Builder::new()
            .name("rstat-exporter-conn".into())
            .spawn(move || {
                serve_connection(stream, &exporter, timeout, &|st| {
                    lock(&conns2).claim(id, st)
                });
                lock(&conns2).slots.retain(|s| s.id != id);
            });
        if spawned.is_err() {
            // The stream went with the closure; its slot's handle is the
            // same connection.
            let mut c = lock(&conns);
            if let Some(i) = c.slots.iter().position(|s| s.id == id) {
                let slot = c.slots.remove(i);
                drop(c);
                refuse(&slot.stream);
            }
        }
    }
}

/// Answer `503` with `Retry-After` without blocking the accept thread:
/// one non-blocking write of the short answer (the socket's send buffer
/// is empty, so it fits), then a non-blocking read of what the client
/// has already sent, so closing the socket does not reset the connection
/// over unread bytes (a reset can make the client lose the answer).
/// The caller closes the socket (dropping or shutting it down).
fn refuse(stream: &TcpStream) {
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

/// Read one request head, answer it, close.
/// `claim` is told what the connection does (see [`Conns`]): `Idle` when
/// bytes of the head arrive, `Busy` once it is parsed or before an error
/// is answered, `Writing` as the answer makes progress. It returns false
/// if the connection was evicted; then the thread writes nothing.
fn serve_connection(
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
    let _ = match req.route {
        Route::Index => respond(
            &mut stream,
            &progress,
            200,
            "text/plain; charset=utf-8",
            b"rstat exporter: /metrics (Prometheus text, or OpenMetrics by Accept), /snapshot.json\n",
            req.head_only,
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
            ),
            Err(e) => respond_error(&mut stream, &reject(500, e.to_string())),
        },
    };
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

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

fn respond(
    stream: &mut TcpStream,
    progress: &dyn Fn(),
    status: u16,
    content_type: &str,
    body: &[u8],
    head_only: bool,
) -> io::Result<()> {
    let allow = if status == 405 {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
        reason(status),
        body.len()
    );
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
fn respond_error(stream: &mut TcpStream, rej: &Reject) -> io::Result<()> {
    let body = format!("{}\n", rej.message);
    respond(
        stream,
        &|| {},
        rej.status,
        "text/plain; charset=utf-8",
        body.as_bytes(),
        false,
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
