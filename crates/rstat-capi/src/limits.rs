//! Limits that stop a group's work, from C: kill (`rstat_group_kill`,
//! `rstat_group_is_killed`), `cpu.max` (`rstat_group_set_cpu_max`; read it
//! back with `rstat_read(g, "cpu.max")`, its counts in `"cpu.stat"`), and
//! the `memory.high` delay a thread owes (`rstat_throttle_point`).

use std::ffi::{c_char, c_int};

use crate::args::{check_out, str_arg, write_out};
use crate::error::ffi;
use crate::rstat_group;
use crate::table::TABLE;

/// Kill the group's work and its descendants' (the kernel's
/// `memory.oom.group` kill, by hand): each is marked killed (groups
/// created under them later too), its kill hooks run once, fallible
/// memory charges to it fail (`RSTAT_ENOMEM`), and Rust futures made
/// killable end at their next poll. C threads check
/// `rstat_group_is_killed` (or `rstat_current_killed`) where they can
/// stop. `*killed_out` (may be NULL) gets how many groups were newly
/// killed (0 if all already were). A kill is final.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EFAULT`
/// (`killed_out` misaligned).
///
/// Cost: a walk of the subtree (each group's children lock in turn).
///
/// # Safety
/// `killed_out` must be NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rstat_group_kill(g: *mut rstat_group, killed_out: *mut u64) -> c_int {
    ffi(|| {
        if !killed_out.is_null() {
            check_out(killed_out, "killed_out")?;
        }
        let group = TABLE.read(|t| t.group(g as usize, "g").map(|e| e.group.clone()))?;
        let n = group.kill() as u64;
        if !killed_out.is_null() {
            // SAFETY: checked above.
            unsafe { write_out(killed_out, n, "killed_out")? };
        }
        Ok(())
    })
}

/// Whether the group was killed (1) or not (0), in `*out`: by
/// `rstat_group_kill` of it or an ancestor, or by the memory controller's
/// OOM kill (Rust's `HeapLimitMode::Kill`).
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EFAULT`.
///
/// Cost: one load under the handle table's read lock.
///
/// # Safety
/// `out` must be NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rstat_group_is_killed(g: *mut rstat_group, out: *mut c_int) -> c_int {
    ffi(|| {
        check_out(out, "out")?;
        let k = TABLE.read(|t| t.group(g as usize, "g").map(|e| e.group.is_killed()))?;
        // SAFETY: checked above.
        unsafe { write_out(out, c_int::from(k), "out") }
    })
}

/// Whether the calling thread's current group (`rstat_group_enter`) was
/// killed (1) or not (0, also in no group), in `*out`: the cheap check a
/// thread makes where it can stop.
///
/// Errors: `RSTAT_EFAULT`.
///
/// Cost: a thread-local load and one load of the group's flag.
///
/// # Safety
/// `out` must be NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rstat_current_killed(out: *mut c_int) -> c_int {
    ffi(|| {
        check_out(out, "out")?;
        let k = ::rstat::attach::current_killed();
        // SAFETY: checked above.
        unsafe { write_out(out, c_int::from(k), "out") }
    })
}

/// Set the group's `cpu.max` from the kernel's text: `"QUOTA PERIOD"` in
/// µs (`"20000 100000"`: 20% of a CPU), `"QUOTA"` (period 100000), or
/// `"max"` (no limit). It holds back the group's scoped Rust futures (a C
/// thread's time is charged to the group but not held); its counts are in
/// `rstat_read(g, "cpu.stat")`'s `nr_periods`, `nr_throttled`,
/// `throttled_usec` lines.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EFAULT` (`value`
/// NULL), `RSTAT_EINVAL` (not in the format, a period outside 1 ms..1 s,
/// a quota below 1 ms or above 1024 periods: `rstat_last_error` says
/// which; nothing changes).
///
/// Cost: a few stores; a walk of the subtree to mark it limited.
///
/// # Safety
/// `value` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn rstat_group_set_cpu_max(
    g: *mut rstat_group,
    value: *const c_char,
) -> c_int {
    ffi(|| {
        // SAFETY: forwarded.
        let v = unsafe { str_arg(value, "value")? };
        let group = TABLE.read(|t| t.group(g as usize, "g").map(|e| e.group.clone()))?;
        group.write_cpu_max(v)?;
        Ok(())
    })
}

/// Sleep the delay the calling thread owes for allocating past a
/// `memory.high` (through Rust's accounting allocator) and clear it; call
/// it where the thread may wait. `*slept_ns` (may be NULL) gets the time
/// slept, 0 if none was owed.
///
/// Errors: `RSTAT_EFAULT` (`slept_ns` misaligned).
///
/// Cost: a thread-local swap, and the sleep.
///
/// # Safety
/// `slept_ns` must be NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rstat_throttle_point(slept_ns: *mut u64) -> c_int {
    ffi(|| {
        if !slept_ns.is_null() {
            check_out(slept_ns, "slept_ns")?;
        }
        let d = ::rstat::attach::throttle_point();
        if !slept_ns.is_null() {
            let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
            // SAFETY: checked above.
            unsafe { write_out(slept_ns, ns, "slept_ns")? };
        }
        Ok(())
    })
}
