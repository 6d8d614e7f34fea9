//! The engine: `rstat_new`, `rstat_free`, `rstat_root`, `rstat_abi_version`.

use std::ffi::c_int;
use std::sync::Arc;
use std::time::Duration;

use ::rstat::memory::{Memory, MemoryConfig};
use ::rstat::{FlushPolicy, Rstat};

use crate::args::{check_out, read_sized, write_out};
use crate::error::{ffi, CError, CResult, RSTAT_EINVAL};
use crate::table::{to_ptr, CountersEntry, Engine, Entry, GroupEntry, TABLE};
use crate::{rstat, rstat_counters, rstat_group};

/// Major version of the ABI: changes when a function's meaning or a
/// struct's layout changes incompatibly (it is the soname's number).
pub const RSTAT_ABI_VERSION_MAJOR: u32 = 0;
/// Minor version of the ABI: grows when functions, flags or struct fields
/// are added.
pub const RSTAT_ABI_VERSION_MINOR: u32 = 2;
/// The ABI version this header describes: `(major << 16) | minor`.
pub const RSTAT_ABI_VERSION: u32 = (RSTAT_ABI_VERSION_MAJOR << 16) | RSTAT_ABI_VERSION_MINOR;

/// `rstat_options.flags`: no memory controller (the `rstat_memory_*` calls
/// then fail with `RSTAT_EOPNOTSUPP`).
pub const RSTAT_OPT_NO_MEMORY: u32 = 1;
/// `rstat_options.flags`: no periodic root flusher thread.
pub const RSTAT_OPT_NO_PERIODIC_FLUSH: u32 = 2;
/// `rstat_options.flags`: use `memory_batch` as the memory controller's
/// charge batch (otherwise the default, 64 units).
pub const RSTAT_OPT_MEMORY_BATCH: u32 = 4;
const KNOWN_OPTS: u32 = RSTAT_OPT_NO_MEMORY | RSTAT_OPT_NO_PERIODIC_FLUSH | RSTAT_OPT_MEMORY_BATCH;

/// `rstat_options.flush_policy`: kernel v6.8's threshold policy (the
/// default): a read flushes only when more than 64 × nr_cpus units are
/// pending.
pub const RSTAT_FLUSH_THRESHOLD: u32 = 0;
/// `rstat_options.flush_policy`: every read flushes its subtree (exact).
pub const RSTAT_FLUSH_ALWAYS: u32 = 1;
/// `rstat_options.flush_policy`: one root flusher, others read stale.
pub const RSTAT_FLUSH_UNIFIED_ROOT: u32 = 2;
/// `rstat_options.flush_policy`: trylock, else wait for the root flush.
pub const RSTAT_FLUSH_COALESCED: u32 = 3;

/// The size of the first version of `struct rstat_options`.
pub const RSTAT_OPTIONS_SIZE_VER0: u32 = 32;

/// Options of `rstat_new`. Zero-initialise it, set `size` to
/// `sizeof(struct rstat_options)`, then the fields you want; a zero field
/// means the default. Later versions only add fields at the end.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct rstat_options {
    /// `sizeof(struct rstat_options)`.
    pub size: u32,
    /// `RSTAT_OPT_*` bits.
    pub flags: u32,
    /// `RSTAT_FLUSH_*`: the flush policy counter sets start with.
    pub flush_policy: u32,
    /// Per-CPU slots (0: the machine's possible CPUs; at most 8192).
    pub nr_cpus: u32,
    /// With `RSTAT_OPT_MEMORY_BATCH`: units the memory controller charges
    /// at once and stocks per CPU (0 disables the stock; at most 2^32).
    pub memory_batch: u64,
    /// The periodic root flusher's period in milliseconds (0: 2000;
    /// 1 to 86,400,000).
    pub periodic_flush_ms: u64,
}

const _: () = assert!(std::mem::size_of::<rstat_options>() == RSTAT_OPTIONS_SIZE_VER0 as usize);

/// The ABI version of the library loaded: `(major << 16) | minor`. A
/// program built against this header should check that the major numbers
/// match and the library's minor is at least `RSTAT_ABI_VERSION_MINOR`.
/// Cannot fail.
#[no_mangle]
pub extern "C" fn rstat_abi_version() -> u32 {
    RSTAT_ABI_VERSION
}

fn build(o: &rstat_options) -> Result<Engine, CError> {
    if o.flags & !KNOWN_OPTS != 0 {
        return Err(CError::new(
            RSTAT_EINVAL,
            format!(
                "options.flags has unknown bits {:#x}; use RSTAT_OPT_* only",
                o.flags & !KNOWN_OPTS
            ),
        ));
    }
    let policy = match o.flush_policy {
        RSTAT_FLUSH_THRESHOLD => FlushPolicy::Threshold,
        RSTAT_FLUSH_ALWAYS => FlushPolicy::Always,
        RSTAT_FLUSH_UNIFIED_ROOT => FlushPolicy::UnifiedRoot,
        RSTAT_FLUSH_COALESCED => FlushPolicy::Coalesced,
        p => {
            return Err(CError::new(
                RSTAT_EINVAL,
                format!("options.flush_policy {p} is not an RSTAT_FLUSH_* value"),
            ))
        }
    };
    let mut b = Rstat::builder().flush_policy(policy);
    if o.nr_cpus != 0 {
        b = b.nr_cpus(o.nr_cpus as usize);
    }
    b = b.periodic_flush(if o.flags & RSTAT_OPT_NO_PERIODIC_FLUSH != 0 {
        None
    } else if o.periodic_flush_ms != 0 {
        Some(Duration::from_millis(o.periodic_flush_ms))
    } else {
        Some(::rstat::DEFAULT_FLUSH_PERIOD)
    });
    let rs = b.build()?;
    let memory = if o.flags & RSTAT_OPT_NO_MEMORY != 0 {
        None
    } else {
        let mut cfg = MemoryConfig::default();
        if o.flags & RSTAT_OPT_MEMORY_BATCH != 0 {
            cfg.batch = o.memory_batch;
        }
        Some(Memory::register_with(&rs, cfg)?)
    };
    Ok(Engine::new(rs, memory))
}

/// Create an rstat instance: a root group, the built-in `cpu` counter set,
/// and (unless `RSTAT_OPT_NO_MEMORY`) the memory controller. `opts` may be
/// NULL for the defaults. `*out` gets the handle; free it with
/// `rstat_free`.
///
/// Errors: `RSTAT_EFAULT` (`out` NULL, or `out` or `opts` misaligned),
/// `RSTAT_EINVAL` (unknown flag or policy, `size` below
/// `RSTAT_OPTIONS_SIZE_VER0`, period or batch out of range, `nr_cpus`
/// above 8192), `RSTAT_E2BIG` (fields this library does not know are
/// set), `RSTAT_EAGAIN` (the flusher thread could not start),
/// `RSTAT_ENOMEM` (the system refused memory for the per-CPU state, e.g.
/// of an `nr_cpus` far above the machine's), `RSTAT_EMFILE` (the handle
/// table is full).
///
/// Cost: allocations, and a thread for the periodic flusher.
///
/// # Safety
/// `opts` must be NULL or point to `opts->size` readable bytes; `out` NULL
/// or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rstat_new(opts: *const rstat_options, out: *mut *mut rstat) -> c_int {
    ffi(|| {
        check_out(out, "out")?;
        let o = if opts.is_null() {
            rstat_options::default()
        } else {
            // SAFETY: forwarded from the caller; `rstat_options` is a
            // padding-free repr(C) struct of integers starting with `size`.
            unsafe { read_sized(opts, RSTAT_OPTIONS_SIZE_VER0 as usize, "opts")? }
        };
        let engine = Arc::new(build(&o)?);
        let cpu_ctl = engine.rs.cpu().cloned();
        let h = TABLE.write(|t| {
            let cpu = match cpu_ctl {
                Some(ctl) => t.insert(Entry::Counters(Arc::new(CountersEntry {
                    engine: engine.clone(),
                    ctl,
                })))?,
                None => 0,
            };
            t.insert(Entry::Engine {
                engine: engine.clone(),
                cpu,
            })
            .inspect_err(|_| {
                t.remove(cpu);
            })
        })?;
        // SAFETY: checked above; writable by the caller's promise.
        unsafe { write_out(out, to_ptr(h), "out") }
    })
}

/// Free an rstat instance and release every handle made from it: its
/// groups and counter sets become stale (`RSTAT_EBADF`) in every thread.
/// Groups are removed bottom-up and folded into their parents as they go.
/// Calls running on its handles in other threads finish first or fail.
///
/// Errors: `RSTAT_EBADF` (NULL, stale), `RSTAT_EPROTOTYPE`.
///
/// Cost: a pass over the handle table, the engine's teardown.
#[no_mangle]
pub extern "C" fn rstat_free(rs: *mut rstat) -> c_int {
    ffi(|| {
        let gone = TABLE.write(|t| {
            let engine = t.engine(rs as usize, "rs")?.0.clone();
            Ok::<_, CError>(t.remove_engine(&engine))
        })?;
        drop(gone); // outside the table lock: tears the engine down
        Ok(())
    })
}

/// A new handle on the root group (put it with `rstat_group_put`).
///
/// Errors: `RSTAT_EBADF`, `RSTAT_EPROTOTYPE`, `RSTAT_EFAULT` (`out` NULL),
/// `RSTAT_EMFILE` (the handle table is full).
///
/// # Safety
/// `out` must be NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rstat_root(rs: *mut rstat, out: *mut *mut rstat_group) -> c_int {
    ffi(|| {
        // SAFETY: forwarded from the caller.
        unsafe { new_group_handle(rs, out, |r| r.root().clone()) }
    })
}

/// The body of `rstat_root` and `rstat_current_group` (run it in
/// `ffi`): a new handle, written to `out`, on the group `pick` chooses in
/// `rs`'s engine.
///
/// # Safety
/// `out` must be NULL or valid for one write.
pub(crate) unsafe fn new_group_handle(
    rs: *mut rstat,
    out: *mut *mut rstat_group,
    pick: impl FnOnce(&Rstat) -> ::rstat::Group,
) -> CResult {
    {
        check_out(out, "out")?;
        let h = TABLE.write(|t| {
            let engine = t.engine(rs as usize, "rs")?.0.clone();
            let group = pick(&engine.rs);
            // Only `RSTAT_EMFILE` can refuse it here (the engine was just
            // found live under this lock, which also keeps it referenced,
            // so dropping the refused entry here is cheap).
            t.insert(Entry::Group(GroupEntry {
                engine,
                group,
                refs: 1,
            }))
            .map_err(CError::from)
        })?;
        // SAFETY: checked above.
        unsafe { write_out(out, to_ptr(h), "out") }
    }
}

/// The built-in `cpu` counter set (items `usage_usec`, `user_usec`,
/// `system_usec`, microseconds): read it with `rstat_read_exact` or
/// `rstat_counters_read`. The handle lives as long as `rs`; every call
/// returns the same one.
///
/// Errors: `RSTAT_EBADF`, `RSTAT_EPROTOTYPE`, `RSTAT_EFAULT`.
///
/// # Safety
/// `out` must be NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rstat_cpu_counters(
    rs: *mut rstat,
    out: *mut *mut rstat_counters,
) -> c_int {
    ffi(|| {
        check_out(out, "out")?;
        let h = TABLE.read(|t| t.engine(rs as usize, "rs").map(|(_, cpu)| cpu))?;
        // SAFETY: checked above.
        unsafe { write_out(out, to_ptr(h), "out") }
    })
}
