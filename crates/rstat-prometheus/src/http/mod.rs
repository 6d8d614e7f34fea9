//! The embedded HTTP server: one small thread per connection (bounded),
//! HTTP/1.1 keep-alive (requests one after the other on a connection,
//! pipelined ones answered in order, the connection closed once idle for
//! [`ServerConfig::keep_alive`]), no async runtime.
//!
//! It is written here rather than taken from a crate because what it must
//! guarantee is its own: heads bounded in bytes and time, every client
//! that sends a request answered (its scrape, a 4xx or a `503`) while
//! silent or non-reading clients make room, removed groups committed only
//! once a body was written; `hyper` would bring an async runtime into
//! every service that does not run one, and `tiny_http` 0.12 reads header
//! lines without a size limit.
//!
//! Request heads are parsed by `httparse` (hyper's parser) from a buffer
//! of at most [`MAX_REQUEST_HEAD`] bytes read with a timeout, so a client
//! can neither make the server allocate without bound nor hold a thread
//! forever. Every malformed or oversized request gets a 4xx
//! and the connection is closed. Answers are gzip-compressed when the
//! request's `Accept-Encoding` accepts it ([`accepts_gzip`]), with the
//! compressed size as `Content-Length`.
//!
//! Every client that sends a request gets an HTTP answer, never a silent
//! close: its scrape, a 4xx, or `503` with `Retry-After` when the server
//! is full (see [`ServerConfig::max_connections`] for who is served then).
//! The one exception is the race HTTP allows on persistent connections:
//! a request sent on a kept-alive connection just as the server closes it
//! for idling (see [`ServerConfig::keep_alive`]); clients resend it on a
//! new connection.

mod connection;
mod conns;
mod request;
mod response;
mod server;

pub use conns::IDLE_BEFORE_EVICTION;
pub use request::{
    accepts_gzip, negotiate, parse_request, Reject, Request, Route, MAX_HEADERS, MAX_REQUEST_HEAD,
};
pub(crate) use server::start;
pub use server::{Server, ServerConfig, DEFAULT_ADDR};
