//! `rstat_read`: a group's stats as the cgroupfs-style text files of
//! rstat's report module (`memory.stat`, `memory.events`, `cpu.stat`,
//! `<counter set>.stat`, ...).

use std::ffi::{c_char, c_int};

use crate::args::str_arg;
use crate::error::{copy_out_str, ffi};
use crate::rstat_group;
use crate::table::TABLE;

/// Read report file `file` of group `g` into `buf` of `len` bytes,
/// NUL-terminated, in the kernel's cgroup v2 format: `"memory.stat"`,
/// `"memory.events"`, `"memory.events.local"`, `"memory.current"`,
/// `"memory.peak"`, `"memory.max"` (and `high`, `low`, `min`: a number or
/// `max`), `"cpu.stat"`, and `"<name>.stat"` / `"<name>.stat.local"` for
/// every counter set. `*out_len` (may be NULL) gets the text's length, or
/// on `RSTAT_ERANGE` the size needed (call again with a buffer that big;
/// counters can grow in between, so a caller loops while the answer is
/// `RSTAT_ERANGE`, or passes room to spare).
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EFAULT`,
/// `RSTAT_EINVAL` (`file` is not UTF-8), `RSTAT_ENOENT` (no such file:
/// `rstat_last_error` lists the files), `RSTAT_ERANGE` (nothing copied).
///
/// Cost: exact: a `.stat` file flushes its counter set's subtree under
/// `g`; `memory.*` files are a few loads; allocates the text.
///
/// # Safety
/// `file` must be NULL or NUL-terminated; `buf` NULL or valid for `len`
/// bytes; `out_len` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rstat_read(
    g: *mut rstat_group,
    file: *const c_char,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> c_int {
    ffi(|| {
        // SAFETY: forwarded from the caller.
        let file = unsafe { str_arg(file, "file")? };
        let group = TABLE.read(|t| t.group(g as usize, "g").map(|e| e.group.clone()))?;
        let text = ::rstat::report::Reporter::for_group(&group).read(&group, file)?;
        // SAFETY: forwarded from the caller.
        unsafe { copy_out_str(&text, buf, len, out_len) }
    })
}
