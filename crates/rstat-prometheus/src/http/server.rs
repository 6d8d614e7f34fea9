//! The server: its settings, the listening socket (loopback unless asked
//! otherwise) and the accept loop, which admits each connection into
//! [`conns`](super::conns) (evicting one if full, else refusing with `503`)
//! and serves it on a thread of its own ([`connection`](super::connection)).
//! The top of the HTTP server; [`Exporter::serve`](crate::Exporter::serve)
//! starts it.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::connection::{serve_connection, Timeouts};
use super::conns::{lock, ConnState, SharedConns, Slot};
use super::response::refuse;
use crate::Exporter;

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
    /// nothing; it is answered `503` with `Retry-After` before it is
    /// closed), or a kept-alive one idle as long between two requests
    /// (closed without an answer: it asked nothing). Failing that, it replaces one whose answer has not moved
    /// for 2 s (a client that asked and does not read; it has the start
    /// of its answer). A connection whose request has arrived, read yet
    /// or not, is not replaced: it is served. (Only a client that stays
    /// silent that long after connecting, or in the middle of its head,
    /// may be replaced as its bytes arrive; it gets the `503`.) If no
    /// connection can be replaced, the new one is answered `503` with
    /// `Retry-After: 1` and closed. So every client that sends a request
    /// gets an HTTP answer: its scrape, a 4xx, or a `503` to retry after.
    ///
    /// [`IDLE_BEFORE_EVICTION`]: super::IDLE_BEFORE_EVICTION
    pub max_connections: usize,
    /// How long a client may take to send its whole request head (for
    /// a later request on a kept-alive connection: from its first byte).
    /// Default 2 s (Prometheus sends it at once).
    pub read_timeout: Duration,
    /// How long a connection is kept open after an answer, waiting for
    /// the client's next request (HTTP keep-alive); then it is closed.
    /// Zero: one request per connection. Default 120 s, longer than
    /// usual scrape intervals, so a scraper reuses its connection. A
    /// kept-alive connection holds its thread, but is closed to make room
    /// when the server is full (see `max_connections`); a client that
    /// sends its next request just then sees the connection close without
    /// an answer, and resends it on a new one (as HTTP clients do for a
    /// request on a reused connection that got no answer).
    pub keep_alive: Duration,
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
            keep_alive: Duration::from_secs(120),
        }
    }
}

/// A running server; dropping it (or [`shutdown`](Self::shutdown)) stops
/// accepting and joins the accept thread (connections being served finish
/// on their own threads). So keep it for as long as metrics are to be
/// served: it is `#[must_use]`, and a server dropped at once is a warning
/// (an error under `#![deny(unused_must_use)]`):
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// fn main() -> std::io::Result<()> {
///     let rs = rstat::Rstat::new();
///     // Dropped at the end of the statement: nothing would be served.
///     rstat_prometheus::Exporter::new(&rs).serve(Default::default())?;
///     Ok(())
/// }
/// ```
///
/// ```no_run
/// #![deny(unused_must_use)]
/// fn main() -> std::io::Result<()> {
///     let rs = rstat::Rstat::new();
///     let _server = rstat_prometheus::Exporter::new(&rs).serve(Default::default())?;
///     // ... the service runs; metrics are served until `_server` drops.
///     Ok(())
/// }
/// ```
#[derive(Debug)]
#[must_use = "dropping the Server stops serving metrics: keep it for as long as they are to be served"]
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
                    // At most 64 characters of it: the text is the caller's.
                    cfg.addr.chars().take(64).collect::<String>()
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
                    // An idle or reading one has not been answered (its
                    // thread answers only once it claims its slot, see
                    // `Conns`);
                    // a stalled one has the start of its answer; a
                    // kept-alive one asked nothing since its last answer.
                    if matches!(old.state, ConnState::Idle | ConnState::Reading) {
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
        let (exporter, conns2) = (exporter.clone(), Arc::clone(&conns));
        let timeouts = Timeouts {
            head: cfg.read_timeout,
            keep_alive: cfg.keep_alive,
        };
        let spawned = std::thread::Builder::new()
            .name("rstat-exporter-conn".into())
            .spawn(move || {
                serve_connection(stream, &exporter, timeouts, &|st| {
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
