//! Request parsing: a request head's bytes to a [`Request`] (method,
//! route, exposition format from `Accept`) or the 4xx to answer with. Pure
//! functions over bytes, the bottom of the server: no socket here.

use crate::Format;

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
    /// `Accept-Encoding` accepts gzip ([`accepts_gzip`]): the body is sent
    /// compressed, with `Content-Encoding: gzip`.
    pub gzip: bool,
    /// The connection may carry another request after this one's answer:
    /// HTTP/1.1 unless `Connection: close`, HTTP/1.0 only with
    /// `Connection: keep-alive`; never for a request with a body
    /// (`Content-Length` other than 0, or `Transfer-Encoding`), which the
    /// server does not read.
    pub keep_alive: bool,
}

/// A refused request: the status to answer with and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reject {
    /// A 4xx status code.
    pub status: u16,
    /// Said in the response body.
    pub message: String,
}

pub(super) fn reject(status: u16, message: impl Into<String>) -> Reject {
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
    Ok(parse_head(buf)?.map(|(r, _)| r))
}

/// [`parse_request`], and the length of the head in `buf`: the bytes
/// after it belong to the next request (pipelining).
pub(super) fn parse_head(buf: &[u8]) -> Result<Option<(Request, usize)>, Reject> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Partial) => {
            return if buf.len() >= MAX_REQUEST_HEAD {
                Err(too_large())
            } else {
                Ok(None)
            }
        }
        Ok(httparse::Status::Complete(n)) => n,
        Err(httparse::Error::TooManyHeaders) => {
            return Err(reject(
                431,
                format!("more than {MAX_HEADERS} request headers"),
            ))
        }
        Err(e) => return Err(reject(400, format!("malformed HTTP request: {e}"))),
    };
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
    let mut encodings = String::new();
    let (mut close, mut keep, mut body) = (false, false, false);
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("connection") {
            // A list of tokens, case-insensitive (RFC 9110, section 7.6.1);
            // not UTF-8: no token.
            let tokens = std::str::from_utf8(h.value).unwrap_or("");
            for t in tokens.split(',').map(str::trim) {
                close |= t.eq_ignore_ascii_case("close");
                keep |= t.eq_ignore_ascii_case("keep-alive");
            }
        }
        // A body is never read, so the connection cannot carry another
        // request after it.
        body |= (h.name.eq_ignore_ascii_case("content-length")
            && h.value.iter().any(|&b| b != b'0'))
            || h.name.eq_ignore_ascii_case("transfer-encoding");
        if h.name.eq_ignore_ascii_case("accept-encoding") {
            // Not UTF-8: ignored, as if absent (identity is always
            // acceptable, RFC 9110, section 12.5.3).
            if let Ok(v) = std::str::from_utf8(h.value) {
                if !encodings.is_empty() {
                    encodings.push(',');
                }
                encodings.push_str(v);
            }
        }
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
    // HTTP/1.1 keeps the connection by default, HTTP/1.0 closes it.
    let keep_alive = !close && !body && (req.version == Some(1) || keep);
    Ok(Some((
        Request {
            route,
            head_only,
            format: negotiate(&accept),
            gzip: accepts_gzip(&encodings),
            keep_alive,
        },
        len,
    )))
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

/// One element of an `Accept` or `Accept-Encoding` list: its name
/// (trimmed) and its q-value (1 when absent; 0 when out of range or
/// unparsable, so a malformed weight never makes a choice acceptable).
fn weighted(part: &str) -> (&str, f64) {
    let mut params = part.split(';');
    let name = params.next().unwrap_or("").trim();
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
    (name, q)
}

/// Pick the exposition format from an `Accept` header value: OpenMetrics
/// if `application/openmetrics-text` is acceptable (q > 0) and preferred at
/// least as much as `text/plain`, classic text otherwise (also when the
/// header is absent or unparsable). Prometheus sends OpenMetrics first.
pub fn negotiate(accept: &str) -> Format {
    let (mut om, mut text) = (0.0f64, 0.0f64);
    for part in accept.split(',') {
        let (media, q) = weighted(part);
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

/// Whether an `Accept-Encoding` header value accepts gzip: `gzip` (or
/// `x-gzip`) with a q-value above 0, or else `*` with one (RFC 9110,
/// section 12.5.3). Names are case-insensitive; an absent or unparsable
/// value accepts identity only.
pub fn accepts_gzip(accept_encoding: &str) -> bool {
    let (mut gzip, mut any) = (None, None);
    for part in accept_encoding.split(',') {
        let (coding, q) = weighted(part);
        if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
            gzip = Some(gzip.map_or(q, |g: f64| g.max(q)));
        } else if coding == "*" {
            any = Some(q);
        }
    }
    gzip.or(any).is_some_and(|q| q > 0.0)
}
