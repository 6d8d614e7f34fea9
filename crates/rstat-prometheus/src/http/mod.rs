//! The embedded HTTP server: one small thread per connection (bounded),
//! one request per connection, no async runtime.
//!
//! Request heads are parsed by `httparse` (hyper's parser) from a buffer
//! of at most [`MAX_REQUEST_HEAD`] bytes read with a timeout, so a client
//! can neither make the server allocate without bound nor hold a thread
//! forever. (`tiny_http` 0.12, the obvious alternative, reads header lines
//! without a size limit.) Every malformed or oversized request gets a 4xx
//! and the connection is closed. Answers are gzip-compressed when the
//! request's `Accept-Encoding` accepts it ([`accepts_gzip`]), with the
//! compressed size as `Content-Length`.
//!
//! Every client that sends a request gets an HTTP answer, never a silent
//! close: its scrape, a 4xx, or `503` with `Retry-After` when the server
//! is full (see [`ServerConfig::max_connections`] for who is served then).

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
