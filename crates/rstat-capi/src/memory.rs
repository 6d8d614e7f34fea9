//! The memory controller: limits written as the kernel's strings, charge
//! and uncharge, usage, peak and events.
//!
//! Charges through the C ABI are raw (the Rust API's `charge_raw` /
//! `uncharge_raw`): the caller uncharges what it charged, to the same
//! group handle. A charge to a removed group lands on its nearest live
//! ancestor, and so does the uncharge.

use std::ffi::{c_char, c_int};

use ::rstat::memory::{Limit, Memory, MemoryEvents, OnOom};

use crate::args::{check_out, str_arg, write_out, write_sized};
use crate::error::{ffi, CError, CResult, RSTAT_EINVAL, RSTAT_EOPNOTSUPP};
use crate::rstat_group;
use crate::table::{GroupEntry, Table, TABLE};

/// `memory.min`: hard protection from reclaim.
pub const RSTAT_MEMORY_MIN: u32 = 0;
/// `memory.low`: best-effort protection from reclaim.
pub const RSTAT_MEMORY_LOW: u32 = 1;
/// `memory.high`: throttling threshold (charges past it succeed and report
/// `RSTAT_CHARGED_OVER_HIGH`).
pub const RSTAT_MEMORY_HIGH: u32 = 2;
/// `memory.max`: hard limit (charges past it fail with `RSTAT_ENOMEM`).
pub const RSTAT_MEMORY_MAX: u32 = 3;

/// The largest limit and usage, 2^62 - 1: `"max"` reads as this, and
/// larger values written are clamped to it (the kernel's
/// `PAGE_COUNTER_MAX`).
pub const RSTAT_MEMORY_LIMIT_MAX: u64 = 0x3fff_ffff_ffff_ffff;
const _: () = assert!(RSTAT_MEMORY_LIMIT_MAX == ::rstat::page_counter::PAGE_COUNTER_MAX);

/// `rstat_memory_try_charge` flag: charge past `memory.max` rather than
/// fail (counted as an `oom` event and a forced charge).
pub const RSTAT_CHARGE_FORCE: u32 = 1;
/// `rstat_memory_try_charge` result flag: some level is over its
/// `memory.high`: throttle before charging more.
pub const RSTAT_CHARGED_OVER_HIGH: u32 = 1;
/// `rstat_memory_try_charge` result flag: the charge was forced past
/// `memory.max`.
pub const RSTAT_CHARGED_FORCED: u32 = 2;

/// `rstat_memory_read_events` flag: the group's own events
/// (`memory.events.local`) instead of its subtree's (`memory.events`).
pub const RSTAT_EVENTS_LOCAL: u32 = 1;

/// The size of the first version of `struct rstat_memory_events`.
pub const RSTAT_MEMORY_EVENTS_SIZE_VER0: u32 = 48;

/// A group's `memory.events` counts. Set `size` to
/// `sizeof(struct rstat_memory_events)` before the call; the library
/// fills the fields that fit in `size` and that it knows (later versions
/// only add fields at the end).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct rstat_memory_events {
    /// `sizeof(struct rstat_memory_events)`, set by the caller.
    pub size: u32,
    /// Zero (reserved).
    pub reserved: u32,
    /// Reclaim took memory from within `memory.low`.
    pub low: u64,
    /// Charges that left usage above `memory.high`.
    pub high: u64,
    /// Charges that found usage at `memory.max`.
    pub max: u64,
    /// Charges (or `memory.max` writes) reclaim could not satisfy.
    pub oom: u64,
    /// OOM handlers that freed something (never from C: no handlers).
    pub oom_kill: u64,
}

const _: () =
    assert!(std::mem::size_of::<rstat_memory_events>() == RSTAT_MEMORY_EVENTS_SIZE_VER0 as usize);

fn which(w: u32) -> CResult<Limit> {
    Ok(match w {
        RSTAT_MEMORY_MIN => Limit::Min,
        RSTAT_MEMORY_LOW => Limit::Low,
        RSTAT_MEMORY_HIGH => Limit::High,
        RSTAT_MEMORY_MAX => Limit::Max,
        _ => {
            return Err(CError::new(
                RSTAT_EINVAL,
                format!("which is {w}, not one of RSTAT_MEMORY_MIN/LOW/HIGH/MAX"),
            ))
        }
    })
}

fn memory_of(t: &Table, g: *mut rstat_group) -> CResult<(&Memory, &GroupEntry)> {
    let e = t.group(g as usize, "g")?;
    let m = e.engine.memory.as_ref().ok_or_else(|| {
        CError::new(
            RSTAT_EOPNOTSUPP,
            "this rstat was created with RSTAT_OPT_NO_MEMORY; create it without that flag",
        )
    })?;
    Ok((m, e))
}

/// Set `memory.min`, `memory.low`, `memory.high` or `memory.max` (`which`:
/// `RSTAT_MEMORY_*`) from text as written to the cgroupfs file: `"max"`
/// (no limit) or a whole number with an optional K/M/G/T/P/E suffix
/// (powers of 1024), e.g. `"200M"`. Writing `memory.max` or `memory.high`
/// below usage drains the stocks and reclaims toward it (no reclaimers are
/// registered through C, so usage stays until uncharged) and keeps the
/// limit anyway.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EFAULT`,
/// `RSTAT_EINVAL` (bad text, e.g. `"-5"`, `"1.5"`, `"12Q"`, or not UTF-8,
/// or bad `which`; nothing changed), `RSTAT_ENODEV` (group removed),
/// `RSTAT_EOPNOTSUPP`.
///
/// # Safety
/// `value` must be NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn rstat_memory_set_limit(
    g: *mut rstat_group,
    which_limit: u32,
    value: *const c_char,
) -> c_int {
    ffi(|| {
        let (engine, group) = TABLE.read(|t| {
            memory_of(t, g)?;
            let e = t.group(g as usize, "g")?;
            Ok::<_, CError>((e.engine.clone(), e.group.clone()))
        })?;
        let w = which(which_limit)?;
        // SAFETY: forwarded from the caller.
        let text = unsafe { str_arg(value, "value")? };
        let m = engine.memory.as_ref().expect("checked by memory_of");
        m.write_limit(&group, w, text)?;
        Ok(())
    })
}

/// The value of a limit or protection in `*out` (`"max"` reads as
/// `RSTAT_MEMORY_LIMIT_MAX`).
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EFAULT`,
/// `RSTAT_EINVAL` (bad `which`), `RSTAT_EOPNOTSUPP`.
///
/// # Safety
/// `out` must be NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rstat_memory_limit(
    g: *mut rstat_group,
    which_limit: u32,
    out: *mut u64,
) -> c_int {
    ffi(|| {
        check_out(out, "out")?;
        let v = TABLE.read(|t| {
            let (m, e) = memory_of(t, g)?;
            Ok::<_, CError>(m.limit(&e.group, which(which_limit)?)?)
        })?;
        // SAFETY: checked above.
        unsafe { write_out(out, v, "out") }
    })
}

/// Charge `amount` units (bytes, pages: the caller's choice) to group `g`
/// (or, if it was removed, its nearest live ancestor). Over `memory.max`:
/// drain the stocks, retry, then fail with `RSTAT_ENOMEM` (nothing
/// charged; a `max` and an `oom` event counted), or with
/// `RSTAT_CHARGE_FORCE` charge anyway. `*out_flags` (may be NULL) gets
/// `RSTAT_CHARGED_*` bits. Undo with `rstat_memory_uncharge` of the same
/// amount on the same handle.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EFAULT` (`out_flags`
/// misaligned), `RSTAT_EINVAL` (unknown flag), `RSTAT_ENOMEM` (over
/// `memory.max`, see above), `RSTAT_EOVERFLOW` (amount above
/// `RSTAT_MEMORY_LIMIT_MAX`, or a forced charge that would take a usage
/// past it), `RSTAT_EOPNOTSUPP`.
///
/// Cost, served from this CPU's stock (at most the batch, 64 units by
/// default): the table's read lock, a few loads, one uncontended
/// compare-and-swap, one per-CPU stat add; otherwise one atomic add per
/// ancestor.
///
/// # Safety
/// `out_flags` must be NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rstat_memory_try_charge(
    g: *mut rstat_group,
    amount: u64,
    flags: u32,
    out_flags: *mut u32,
) -> c_int {
    ffi(|| {
        if flags & !RSTAT_CHARGE_FORCE != 0 {
            return Err(CError::new(
                RSTAT_EINVAL,
                format!(
                    "flags has unknown bits {:#x}; use RSTAT_CHARGE_FORCE or 0",
                    flags & !RSTAT_CHARGE_FORCE
                ),
            ));
        }
        if !out_flags.is_null() {
            check_out(out_flags, "out_flags")?;
        }
        let on_oom = if flags & RSTAT_CHARGE_FORCE != 0 {
            OnOom::Force
        } else {
            OnOom::Fail
        };
        let c = TABLE.read(|t| {
            let (m, e) = memory_of(t, g)?;
            Ok::<_, CError>(m.charge_raw(&e.group, amount, on_oom)?)
        })?;
        if !out_flags.is_null() {
            let bits = (u32::from(c.over_high) * RSTAT_CHARGED_OVER_HIGH)
                | (u32::from(c.forced) * RSTAT_CHARGED_FORCED);
            // SAFETY: checked above.
            unsafe { write_out(out_flags, bits, "out_flags")? };
        }
        Ok(())
    })
}

/// Uncharge `amount` units from group `g` (or its nearest live ancestor if
/// it was removed).
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EINVAL` (more than
/// the group holds: its usage less what the stocks pre-charged; nothing
/// uncharged. An excess hidden by other CPUs' stocks, or by uncharges
/// racing on the group, is caught later and counted as an underflow),
/// `RSTAT_EOVERFLOW` (amount
/// above `RSTAT_MEMORY_LIMIT_MAX`), `RSTAT_EOPNOTSUPP`.
///
/// Cost: as a charge served from the stock.
#[no_mangle]
pub extern "C" fn rstat_memory_uncharge(g: *mut rstat_group, amount: u64) -> c_int {
    ffi(|| {
        TABLE.read(|t| {
            let (m, e) = memory_of(t, g)?;
            m.uncharge_raw(&e.group, amount)?;
            Ok(())
        })
    })
}

/// `memory.current` of the group in `*out`: units charged to it and its
/// descendants, including units pre-charged into per-CPU stocks (at most
/// the batch per CPU; `rstat_memory_drain` returns them).
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EFAULT`,
/// `RSTAT_EOPNOTSUPP`.
///
/// # Safety
/// `out` must be NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rstat_memory_current(g: *mut rstat_group, out: *mut u64) -> c_int {
    ffi(|| {
        check_out(out, "out")?;
        let v = TABLE.read(|t| {
            let (m, e) = memory_of(t, g)?;
            Ok::<_, CError>(m.current(&e.group)?)
        })?;
        // SAFETY: checked above.
        unsafe { write_out(out, v, "out") }
    })
}

/// `memory.peak` of the group in `*out`: the highest `memory.current`
/// seen.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EFAULT`,
/// `RSTAT_EOPNOTSUPP`.
///
/// # Safety
/// `out` must be NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rstat_memory_peak(g: *mut rstat_group, out: *mut u64) -> c_int {
    ffi(|| {
        check_out(out, "out")?;
        let v = TABLE.read(|t| {
            let (m, e) = memory_of(t, g)?;
            Ok::<_, CError>(m.peak(&e.group)?)
        })?;
        // SAFETY: checked above.
        unsafe { write_out(out, v, "out") }
    })
}

/// Return the units every CPU's stock holds for the group's subtree to its
/// counters, so `memory.current` counts only what is charged.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EOPNOTSUPP`.
///
/// Cost: every CPU's stock lock.
#[no_mangle]
pub extern "C" fn rstat_memory_drain(g: *mut rstat_group) -> c_int {
    ffi(|| {
        TABLE.read(|t| {
            let (m, e) = memory_of(t, g)?;
            m.drain_stocks(&e.group)?;
            Ok(())
        })
    })
}

/// The group's `memory.events` (or with `RSTAT_EVENTS_LOCAL`
/// `memory.events.local`) into `*out`, whose `size` the caller sets.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EFAULT`,
/// `RSTAT_EINVAL` (unknown flag, `out->size` below
/// `RSTAT_MEMORY_EVENTS_SIZE_VER0`), `RSTAT_EOPNOTSUPP`.
///
/// # Safety
/// `out` must be NULL or point to `out->size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn rstat_memory_read_events(
    g: *mut rstat_group,
    flags: u32,
    out: *mut rstat_memory_events,
) -> c_int {
    ffi(|| {
        if flags & !RSTAT_EVENTS_LOCAL != 0 {
            return Err(CError::new(
                RSTAT_EINVAL,
                format!(
                    "flags has unknown bits {:#x}; use RSTAT_EVENTS_LOCAL or 0",
                    flags & !RSTAT_EVENTS_LOCAL
                ),
            ));
        }
        check_out(out, "out")?;
        let ev: MemoryEvents = TABLE.read(|t| {
            let (m, e) = memory_of(t, g)?;
            Ok::<_, CError>(if flags & RSTAT_EVENTS_LOCAL != 0 {
                m.events_local(&e.group)?
            } else {
                m.events(&e.group)?
            })
        })?;
        let v = rstat_memory_events {
            size: RSTAT_MEMORY_EVENTS_SIZE_VER0,
            reserved: 0,
            low: ev.low,
            high: ev.high,
            max: ev.max,
            oom: ev.oom,
            oom_kill: ev.oom_kill,
        };
        // SAFETY: forwarded from the caller; a padding-free repr(C) struct
        // of integers starting with `size`.
        unsafe { write_sized(out, &v, RSTAT_MEMORY_EVENTS_SIZE_VER0 as usize, "out") }
    })
}
