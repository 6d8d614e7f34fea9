//! rstat's C ABI: `rstat.h`, `librstat.so.0` and `librstat.a`.
//!
//! Runtimes, proxies and databases in C, C++ or any language with a C FFI
//! get the same accounting as Rust callers: a tree of groups, counter sets
//! updated at per-CPU cost and read exactly, and the cgroup v2 memory
//! controller (limits written as `"max"` or `"200M"`, charge, uncharge,
//! events).
//!
//! # Conventions
//!
//! - **Handles are opaque**: `rstat *`, `rstat_group *`,
//!   `rstat_counters *`. They are not pointers to memory but checked
//!   entries of a handle table with generation counters ([`table`]): a
//!   NULL, released (stale), wrongly typed or foreign (another `rstat`'s)
//!   handle is always refused with an error code; a made-up one is refused
//!   except with probability 2^-32 per guess (a slot's generations start at
//!   a per-process random value). No handle is ever dereferenced.
//! - **Every function returns 0 or a negative errno-style code**
//!   ([`error`]), except `rstat_abi_version` and `rstat_strerror`, which
//!   cannot fail. Each function's `Errors:` paragraph lists every code it
//!   can return besides `RSTAT_ENOTRECOVERABLE` (below), which any call
//!   can. Results go to out-parameters, which are checked for NULL
//!   before anything changes. `rstat_strerror(code)` says what a code means;
//!   `rstat_last_error` gives the full message of this thread's last
//!   failure (which group, which limit, what to do next).
//! - **Structs start with their own size** (`rstat_options`,
//!   `rstat_memory_events`), so they can grow: the kernel's
//!   `copy_struct_from_user` rules (older callers' missing fields read as
//!   zero; a newer caller's unknown fields must be zero, else
//!   `RSTAT_E2BIG`).
//! - **No unwinding into C**: every exported function runs in a
//!   `catch_unwind`; a panic (a bug in rstat) becomes
//!   `RSTAT_ENOTRECOVERABLE` with a message.
//! - **Exports**: only `rstat_*` functions, no data symbols, under the
//!   version node `RSTAT_0` (`rstat.map`); `scripts/install.sh` links the
//!   shared library from the static one with that script and installs the
//!   header and `rstat.pc`.
//!
//! # Costs
//!
//! A call that only uses handles (`rstat_add`, `rstat_memory_try_charge`)
//! takes the read side of the handle table's lock on this thread's shard
//! (one uncontended atomic read-modify-write each way, no shared cache line
//! between threads on different shards), checks its handles, and then
//! costs what the Rust call costs. So a C update costs more than the same
//! update from Rust: the lock's two atomics come on top of the rstat
//! update (`cargo run --release -p rstat-capi --example add_cost` measures
//! both side by side; see BENCHMARKS.md for the lab's figures). The 16
//! shards keep two threads' lock words on different cache lines, so the
//! lock does not become a shared line between threads.
//! A call that makes or releases a handle (`rstat_group_create`,
//! `rstat_group_lookup`, `rstat_root`, `rstat_group_get`/`_put`) takes the
//! write side of all 16 shards. Reads that flush clone what they need and
//! flush without the table lock.
//!
//! # Threads
//!
//! Every function may be called from any thread at any time, on any
//! handle: the handle checks make a race between a use and a release
//! (a C use-after-free) an `RSTAT_EBADF`, not undefined behaviour.
#![warn(
    clippy::undocumented_unsafe_blocks,
    unsafe_op_in_unsafe_fn,
    missing_docs
)]
#![allow(non_camel_case_types)]

mod args;
pub mod attach;
pub mod counters;
pub mod engine;
pub mod error;
pub mod group;
pub mod limits;
pub mod memory;
pub mod report;
pub mod serve;
pub mod table;

/// An rstat instance (the engine): opaque, from `rstat_new`.
pub struct rstat {
    _opaque: [u8; 0],
}

/// A handle on a group: opaque, from `rstat_root`, `rstat_group_create` or
/// `rstat_group_lookup`; released by `rstat_group_put`.
pub struct rstat_group {
    _opaque: [u8; 0],
}

/// A counter set: opaque, from `rstat_counters_register` or
/// `rstat_cpu_counters`; valid as long as its rstat.
pub struct rstat_counters {
    _opaque: [u8; 0],
}

pub use attach::*;
pub use counters::*;
pub use engine::*;
pub use error::*;
pub use group::*;
pub use limits::*;
pub use memory::*;
pub use report::*;
pub use serve::*;
