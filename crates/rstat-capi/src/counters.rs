//! Counter sets: register, resolve an item, add, read (by policy, or
//! exact), local or hierarchical.

use std::ffi::{c_char, c_int};
use std::sync::Arc;

use ::rstat::GroupStats;

use crate::args::{check_out, str_arg, write_out};
use crate::error::{ffi, null_arg, CError, CResult, RSTAT_EINVAL, RSTAT_ERANGE};
use crate::table::{race_window, same_engine, to_ptr, CountersEntry, Entry, TABLE};
use crate::{rstat, rstat_counters, rstat_group};

/// Most items one counter set can have (Rust's `rstat::MAX_STAT_ITEMS`):
/// a set of this many registers, one more is `RSTAT_EINVAL`.
pub const RSTAT_MAX_ITEMS: usize = 4096;
const _: () = assert!(RSTAT_MAX_ITEMS == ::rstat::MAX_STAT_ITEMS);

/// `rstat_read_exact` / `rstat_counters_read` flag: the group's local
/// totals (its own updates only) instead of its hierarchical ones (its own
/// and every descendant's, removed ones included).
pub const RSTAT_READ_LOCAL: u32 = 1;

/// Register a counter set called `name` on `rs`, with `n_items` items named
/// `items[0..n_items]`. `units` may be NULL (each item counts in units of
/// one) or give each item's unit, a power of two up to 2^32 (bytes charged
/// in pages: 4096), which scales only when reads flush under the default
/// policy. `*out` gets its handle, valid as long as `rs`.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE` (rs; `RSTAT_EBADF` too if it
/// is freed by another thread during the call), `RSTAT_EFAULT` (`name`,
/// `items`, an item name or `out` NULL; `items`, `units` or `out`
/// misaligned), `RSTAT_EINVAL` (no items, more than `RSTAT_MAX_ITEMS`, a
/// name that is not UTF-8, a set name that is not a valid group name, an
/// item name that is empty, a duplicate, over 255 bytes or with whitespace
/// or control characters, a unit that is not a power of two up to 2^32),
/// `RSTAT_EEXIST` (the name is taken),
/// `RSTAT_ENOSPC` (16 controllers already), `RSTAT_ENOMEM` (the system
/// refused memory for the per-CPU state), `RSTAT_EMFILE` (the handle table
/// is full). Nothing is registered on an error.
///
/// Cost: the topology lock; per-CPU state for every group.
///
/// # Safety
/// `name` and `items[0..n_items]` must be NULL or NUL-terminated strings;
/// `items` NULL or valid for `n_items` reads, `units` NULL or valid for
/// `n_items` reads; `out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rstat_counters_register(
    rs: *mut rstat,
    name: *const c_char,
    items: *const *const c_char,
    units: *const u64,
    n_items: usize,
    out: *mut *mut rstat_counters,
) -> c_int {
    ffi(|| {
        check_out(out, "out")?;
        // SAFETY: forwarded from the caller.
        let name = unsafe { str_arg(name, "name")? };
        if n_items == 0 || n_items > RSTAT_MAX_ITEMS {
            return Err(CError::new(
                RSTAT_EINVAL,
                format!("n_items is {n_items}; a counter set has 1 to {RSTAT_MAX_ITEMS} items"),
            ));
        }
        if items.is_null() || !items.is_aligned() {
            return Err(null_arg("items"));
        }
        if !units.is_null() && !units.is_aligned() {
            return Err(null_arg("units"));
        }
        let mut list = Vec::with_capacity(n_items);
        for i in 0..n_items {
            // SAFETY: `items` is valid for `n_items` reads (caller).
            let p = unsafe { items.add(i).read() };
            // SAFETY: each item is NULL or NUL-terminated (caller).
            let item = unsafe { str_arg(p, &format!("items[{i}]"))? };
            let unit = if units.is_null() {
                1
            } else {
                // SAFETY: `units` is valid for `n_items` reads (caller).
                unsafe { units.add(i).read() }
            };
            list.push((item, unit));
        }
        let engine = TABLE.read(|t| t.engine(rs as usize, "rs").map(|(e, _)| e.clone()))?;
        let ctl = engine.rs.register_counters_with_units(name, &list)?;
        race_window();
        // Refused if `rstat_free` ran meanwhile.
        let h = TABLE.insert(Entry::Counters(Arc::new(CountersEntry { engine, ctl })))?;
        // SAFETY: checked above.
        unsafe { write_out(out, to_ptr(h), "out") }
    })
}

/// The index of the item called `name` in `*out` (resolve once, then add
/// by index).
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EFAULT`,
/// `RSTAT_EINVAL` (`name` is not UTF-8), `RSTAT_ENOENT` (no such item;
/// `rstat_last_error` lists them).
///
/// # Safety
/// `name` must be NULL or NUL-terminated; `out` NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn rstat_counters_item(
    cs: *mut rstat_counters,
    name: *const c_char,
    out: *mut u32,
) -> c_int {
    ffi(|| {
        check_out(out, "out")?;
        // SAFETY: forwarded from the caller.
        let name = unsafe { str_arg(name, "name")? };
        let idx = TABLE.read(|t| {
            let c = t.counters(cs as usize, "cs")?;
            c.ctl.index_of(name).ok_or_else(|| {
                CError::from(::rstat::Error::UnknownStatName {
                    controller: c.ctl.name().to_owned(),
                    name: name.to_owned(),
                    items: c.ctl.stat_names().to_vec(),
                })
            })
        })?;
        // SAFETY: checked above.
        unsafe { write_out(out, idx as u32, "out") }
    })
}

/// The number of items of the counter set, in `*out`.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EFAULT`.
///
/// # Safety
/// `out` must be NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rstat_counters_len(cs: *mut rstat_counters, out: *mut usize) -> c_int {
    ffi(|| {
        check_out(out, "out")?;
        let n = TABLE.read(|t| {
            t.counters(cs as usize, "cs")
                .map(|c| c.ctl.stat_names().len())
        })?;
        // SAFETY: checked above.
        unsafe { write_out(out, n, "out") }
    })
}

/// Add `delta` to item `item` of the counter set in group `g`. Works on a
/// removed group too: the update reaches its ancestors' hierarchical
/// totals.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE` (either handle),
/// `RSTAT_EXDEV` (handles of two rstats), `RSTAT_EINVAL` (item out of
/// range); nothing is changed.
///
/// Cost: the handle table's read lock on this thread's shard (one
/// uncontended atomic each way), two table lookups, and rstat's update: one
/// uncontended add on this CPU's slot, no lock, no allocation.
#[no_mangle]
pub extern "C" fn rstat_add(
    cs: *mut rstat_counters,
    g: *mut rstat_group,
    item: u32,
    delta: i64,
) -> c_int {
    ffi(|| {
        TABLE.read(|t| {
            let c = t.counters(cs as usize, "cs")?;
            let e = t.group(g as usize, "g")?;
            same_engine(&c.engine, &e.engine)?;
            c.ctl.add(&e.group, item as usize, delta)?;
            Ok(())
        })
    })
}

/// Look both handles up and clone what a read needs, so the read itself
/// (which may flush) runs without the table lock.
/// Also checks the read flags, so a bad one fails before any flush.
fn resolve(
    cs: *mut rstat_counters,
    g: *mut rstat_group,
    flags: u32,
) -> CResult<(Arc<CountersEntry>, ::rstat::Group)> {
    if flags & !RSTAT_READ_LOCAL != 0 {
        return Err(CError::new(
            RSTAT_EINVAL,
            format!(
                "flags has unknown bits {:#x}; use RSTAT_READ_LOCAL or 0",
                flags & !RSTAT_READ_LOCAL
            ),
        ));
    }
    TABLE.read(|t| {
        let c = t.counters(cs as usize, "cs")?;
        let e = t.group(g as usize, "g")?;
        same_engine(&c.engine, &e.engine)?;
        Ok((c.clone(), e.group.clone()))
    })
}

/// Copy a read's totals to the caller's array.
///
/// # Safety
/// `values` must be NULL or valid for `len` writes.
unsafe fn copy_values(s: &GroupStats, flags: u32, values: *mut i64, len: usize) -> CResult {
    let src = if flags & RSTAT_READ_LOCAL != 0 {
        s.local()
    } else {
        s.hierarchical()
    };
    if len < src.len() {
        return Err(CError::new(
            RSTAT_ERANGE,
            format!("the counter set has {} items but values holds {len}; pass an array of rstat_counters_len() values", src.len()),
        ));
    }
    if values.is_null() || !values.is_aligned() {
        return Err(null_arg("values"));
    }
    // SAFETY: `values` is valid for `len >= src.len()` writes (caller) and
    // is not our memory.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), values, src.len()) };
    Ok(())
}

/// Read the counter set's totals in group `g` exactly: every `rstat_add`
/// that returned before this call began is included. `values[i]` gets item
/// `i`'s hierarchical total, or with `RSTAT_READ_LOCAL` its local total;
/// `len` must be at least the number of items.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EXDEV`,
/// `RSTAT_EINVAL` (unknown flag), `RSTAT_ERANGE` (`len` too small; nothing
/// written), `RSTAT_EFAULT`.
///
/// Cost: the counter set's flush lock and a flush of `g`'s subtree (only
/// the groups that changed since the last flush, × CPUs).
///
/// # Safety
/// `values` must be NULL or valid for `len` writes.
#[no_mangle]
pub unsafe extern "C" fn rstat_read_exact(
    cs: *mut rstat_counters,
    g: *mut rstat_group,
    flags: u32,
    values: *mut i64,
    len: usize,
) -> c_int {
    ffi(|| {
        let (c, group) = resolve(cs, g, flags)?;
        let s = c.ctl.read_exact(&group)?;
        // SAFETY: forwarded from the caller.
        unsafe { copy_values(&s, flags, values, len) }
    })
}

/// As `rstat_read_exact`, but under the counter set's flush policy (by
/// default kernel v6.8's threshold, paced: no flush, a lock-free copy,
/// unless more than 64 × nr_cpus units are pending and no flush of the
/// group's subtree or of the root started within the engine's read pace
/// (100 ms by default); so the result lags by at most that many units, or
/// includes every update made a read pace before the call).
///
/// Errors: as `rstat_read_exact`: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`,
/// `RSTAT_EXDEV`, `RSTAT_EINVAL` (unknown flag), `RSTAT_ERANGE` (`len` too
/// small; nothing written), `RSTAT_EFAULT`.
///
/// # Safety
/// `values` must be NULL or valid for `len` writes.
#[no_mangle]
pub unsafe extern "C" fn rstat_counters_read(
    cs: *mut rstat_counters,
    g: *mut rstat_group,
    flags: u32,
    values: *mut i64,
    len: usize,
) -> c_int {
    ffi(|| {
        let (c, group) = resolve(cs, g, flags)?;
        let s = c.ctl.read(&group)?;
        // SAFETY: forwarded from the caller.
        unsafe { copy_values(&s, flags, values, len) }
    })
}
