//! The Prometheus exporter from C: `rstat_serve`, `rstat_serve_stop`.
//!
//! The same server as the Rust exporter (`rstat_prometheus::Exporter::
//! serve`): `/metrics` in the Prometheus text format or OpenMetrics (by the
//! scraper's `Accept`), gzip by `Accept-Encoding`, `/snapshot.json` for
//! `rstat top`, on threads of its own. One server per `rstat`; it stops at
//! `rstat_serve_stop` or `rstat_free`.

use std::ffi::{c_char, c_int};
use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use rstat_prometheus::{Config, Exporter, ServerConfig};

use crate::args::{read_sized, str_arg, write_out};
use crate::error::{
    ffi, CError, CResult, RSTAT_EAGAIN, RSTAT_EBUSY, RSTAT_EINVAL, RSTAT_ENOENT, RSTAT_EPERM,
};
use crate::rstat;
use crate::table::{Engine, TABLE};

/// `rstat_serve_options.flags`: listen on an address that is not loopback.
/// The metrics name every group, so exposing them beyond this machine is
/// an explicit choice; without this flag such an address is refused with
/// `RSTAT_EPERM`.
pub const RSTAT_SERVE_ALLOW_NON_LOOPBACK: u32 = 1;
const KNOWN_SERVE_FLAGS: u32 = RSTAT_SERVE_ALLOW_NON_LOOPBACK;

/// The size of the first version of `struct rstat_serve_options`.
pub const RSTAT_SERVE_OPTIONS_SIZE_VER0: u32 = 24;

/// Options of `rstat_serve`. Zero-initialise it, set `size` to
/// `sizeof(struct rstat_serve_options)`, then the fields you want; a zero
/// field means the default. Later versions only add fields at the end.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct rstat_serve_options {
    /// `sizeof(struct rstat_serve_options)`.
    pub size: u32,
    /// `RSTAT_SERVE_*` bits.
    pub flags: u32,
    /// Connections served at once, each on its own thread (0: 16; at most
    /// 1024). When all are taken, an idle one makes room or the new one is
    /// answered `503` with `Retry-After`.
    pub max_connections: u32,
    /// Export groups at most this deep, the root being depth 0 (0: all).
    /// The root alone is not selectable: depth 0 means no limit.
    pub max_depth: u32,
    /// Bytes per memory charge unit, so memory series are in bytes
    /// (0: 1, charges are bytes).
    pub memory_unit_bytes: u64,
}

const _: () =
    assert!(std::mem::size_of::<rstat_serve_options>() == RSTAT_SERVE_OPTIONS_SIZE_VER0 as usize);

/// The most connections `max_connections` may ask for: each holds a thread.
const MAX_CONNECTIONS: u32 = 1024;

/// The server of one engine, if running.
#[derive(Default)]
pub(crate) struct Serving(Mutex<Option<rstat_prometheus::Server>>);

impl Serving {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<rstat_prometheus::Server>> {
        // A panic while holding it (caught at the boundary) leaves either a
        // server or none, both valid.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn engine_of(rs: *mut rstat) -> CResult<Arc<Engine>> {
    TABLE.read(|t| t.engine(rs as usize, "rs").map(|(e, _)| e.clone()))
}

fn io_error(e: io::Error) -> CError {
    let code = match e.kind() {
        io::ErrorKind::InvalidInput => RSTAT_EINVAL,
        io::ErrorKind::PermissionDenied => RSTAT_EPERM,
        io::ErrorKind::AddrInUse => RSTAT_EBUSY,
        _ => RSTAT_EAGAIN,
    };
    let mut msg = e.to_string();
    if code == RSTAT_EPERM {
        msg.push_str(" (from C: RSTAT_SERVE_ALLOW_NON_LOOPBACK in opts->flags)");
    }
    CError::new(code, msg)
}

fn server_config(addr: Option<&str>, o: &rstat_serve_options) -> CResult<(Config, ServerConfig)> {
    if o.flags & !KNOWN_SERVE_FLAGS != 0 {
        return Err(CError::new(
            RSTAT_EINVAL,
            format!(
                "opts.flags has unknown bits {:#x}; use RSTAT_SERVE_* only",
                o.flags & !KNOWN_SERVE_FLAGS
            ),
        ));
    }
    if o.max_connections > MAX_CONNECTIONS {
        return Err(CError::new(
            RSTAT_EINVAL,
            format!(
                "opts.max_connections is {}, above {MAX_CONNECTIONS} (each connection holds a thread); \
                 give 0 for the default or at most {MAX_CONNECTIONS}",
                o.max_connections
            ),
        ));
    }
    let mut server = ServerConfig::default();
    if let Some(addr) = addr {
        server.addr = addr.to_owned();
    }
    server.allow_non_loopback = o.flags & RSTAT_SERVE_ALLOW_NON_LOOPBACK != 0;
    if o.max_connections != 0 {
        server.max_connections = o.max_connections as usize;
    }
    let mut cfg = Config::default();
    if o.max_depth != 0 {
        cfg.max_depth = o.max_depth as usize;
    }
    if o.memory_unit_bytes != 0 {
        cfg.memory_unit_bytes = o.memory_unit_bytes;
    }
    Ok((cfg, server))
}

/// Serve `rs`'s groups to Prometheus over HTTP: `/metrics` (the text
/// format, or OpenMetrics when the scraper asks for it; gzip when it
/// accepts it) and `/snapshot.json` (what `rstat top` reads), on threads
/// of the library's own, until `rstat_serve_stop(rs)` or `rstat_free(rs)`.
///
/// `addr` is `"HOST:PORT"`; NULL means `"127.0.0.1:9756"`, and port 0 lets
/// the system pick a free port, written to `*port_out` (which may be
/// NULL). A non-loopback address is refused unless `opts->flags` has
/// `RSTAT_SERVE_ALLOW_NON_LOOPBACK`. `opts` may be NULL for the defaults.
///
/// Errors: `RSTAT_EBADF`, `RSTAT_EPROTOTYPE` (`rs`), `RSTAT_EBUSY`
/// (`rs` is already serving: stop it first; or the address is in use),
/// `RSTAT_EINVAL` (`addr` not UTF-8 or not `HOST:PORT`, unknown flag,
/// `size` below `RSTAT_SERVE_OPTIONS_SIZE_VER0`, `max_connections` above
/// 1024), `RSTAT_E2BIG` (fields this library does not know are set),
/// `RSTAT_EPERM` (a non-loopback address without the flag), `RSTAT_EFAULT`
/// (`opts` or `port_out` misaligned), `RSTAT_EAGAIN` (the socket or the
/// server's thread could not be made). `rstat_last_error` says which.
///
/// Cost: a listening socket and a thread, plus a thread per connection
/// being served. Each scrape reads every exported group (as
/// `rstat_read_exact` would) on the connection's thread.
///
/// # Safety
/// `addr` must be NULL or a NUL-terminated string; `opts` NULL or pointing
/// to `opts->size` readable bytes; `port_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rstat_serve(
    rs: *mut rstat,
    addr: *const c_char,
    opts: *const rstat_serve_options,
    port_out: *mut u16,
) -> c_int {
    ffi(|| {
        let addr = if addr.is_null() {
            None
        } else {
            // SAFETY: non-NULL, NUL-terminated by the caller's promise.
            Some(unsafe { str_arg(addr, "addr")? })
        };
        let o = if opts.is_null() {
            rstat_serve_options::default()
        } else {
            // SAFETY: forwarded from the caller; a padding-free repr(C)
            // struct of integers starting with `size`.
            unsafe { read_sized(opts, RSTAT_SERVE_OPTIONS_SIZE_VER0 as usize, "opts")? }
        };
        if !port_out.is_null() && !port_out.is_aligned() {
            return Err(crate::error::null_arg("port_out"));
        }
        let (cfg, server_cfg) = server_config(addr, &o)?;
        let engine = engine_of(rs)?;
        let mut slot = engine.serving.slot();
        if let Some(running) = slot.as_ref() {
            return Err(CError::new(
                RSTAT_EBUSY,
                format!(
                    "this rstat already serves metrics on {}; call rstat_serve_stop first",
                    running.addr()
                ),
            ));
        }
        let server = Exporter::with_config(&engine.rs, cfg)
            .serve(server_cfg)
            .map_err(io_error)?;
        let port = server.addr().port();
        *slot = Some(server);
        drop(slot);
        if !port_out.is_null() {
            // SAFETY: non-NULL and aligned (checked above), writable by the
            // caller's promise.
            unsafe { write_out(port_out, port, "port_out")? };
        }
        Ok(())
    })
}

/// Stop the server `rstat_serve` started: stop accepting, wait for the
/// accepting thread (connections being answered finish on their own
/// threads). `rstat_free` does this too.
///
/// Errors: `RSTAT_EBADF`, `RSTAT_EPROTOTYPE`, `RSTAT_ENOENT` (`rs` is not
/// serving).
///
/// Cost: joins the accepting thread (it wakes within its poll interval).
#[no_mangle]
pub extern "C" fn rstat_serve_stop(rs: *mut rstat) -> c_int {
    ffi(|| {
        let engine = engine_of(rs)?;
        // Taken out under the lock, stopped after it (a stop waits).
        let server = engine.serving.slot().take();
        match server {
            Some(server) => {
                server.shutdown();
                Ok(())
            }
            None => Err(CError::new(
                RSTAT_ENOENT,
                "this rstat is not serving metrics (rstat_serve was not called, or it was stopped)",
            )),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked() {
        let mut o = rstat_serve_options {
            size: RSTAT_SERVE_OPTIONS_SIZE_VER0,
            flags: 8,
            ..Default::default()
        };
        assert_eq!(server_config(None, &o).err().unwrap().code, RSTAT_EINVAL);
        o.flags = 0;
        o.max_connections = MAX_CONNECTIONS + 1;
        assert_eq!(server_config(None, &o).err().unwrap().code, RSTAT_EINVAL);
        o.max_connections = 0;
        let (cfg, server) = server_config(Some("127.0.0.1:0"), &o).unwrap();
        assert_eq!(server.addr, "127.0.0.1:0");
        assert!(!server.allow_non_loopback);
        assert_eq!(
            server.max_connections,
            ServerConfig::default().max_connections
        );
        assert_eq!(cfg.max_depth, usize::MAX);
        assert_eq!(cfg.memory_unit_bytes, 1);
    }
}
