//! The current group of a thread: `rstat_group_enter`, `rstat_group_exit`,
//! `rstat_current_group` (rstat's `Group::enter` guards, kept per thread).
//!
//! Each enter pushes a guard on a thread-local stack of this library's,
//! tagged with the handle value it was entered through; an exit drops the
//! most recent guard entered through that handle on this thread (so exits
//! out of order work as rstat's guards do: the current group is always the
//! innermost entered group not yet exited). A guard holds its own
//! reference on the group, so putting the handle while entered is safe,
//! and the exit still matches it. Guards a thread never exits are dropped
//! when the thread exits.

use std::cell::RefCell;
use std::ffi::c_int;

use ::rstat::attach::EnterGuard;

use crate::error::{ffi, CError, RSTAT_EBADF, RSTAT_EINVAL};
use crate::table::TABLE;
use crate::{rstat, rstat_group};

thread_local! {
    static ENTERED: RefCell<Vec<(usize, EnterGuard)>> = const { RefCell::new(Vec::new()) };
}

/// Make `g` this thread's current group until the matching
/// `rstat_group_exit(g)` (enters nest). A removed group is not entered:
/// its nearest live ancestor is.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EINVAL` (called
/// while the thread exits, from a thread-local destructor that runs after
/// this library's).
///
/// Cost: the table's read lock, a group reference, two pushes (rstat's
/// per-thread stack and this library's), thread-local stores.
#[no_mangle]
pub extern "C" fn rstat_group_enter(g: *mut rstat_group) -> c_int {
    ffi(|| {
        let guard = TABLE.read(|t| t.group(g as usize, "g").map(|e| e.group.enter()))?;
        ENTERED
            .try_with(|s| s.borrow_mut().push((g as usize, guard)))
            .map_err(|_| {
                CError::new(
                    RSTAT_EINVAL,
                    "this thread is exiting (its thread-locals are gone); enter groups before",
                )
            })
    })
}

/// Leave the group most recently entered through handle `g` on this
/// thread. The handle may have been put since the enter.
///
/// Errors: `RSTAT_EBADF` (NULL), `RSTAT_EINVAL` (not entered through `g`
/// on this thread, or exited already).
///
/// Cost: a scan of this thread's entered groups from the top, a
/// thread-local store, a reference put.
#[no_mangle]
pub extern "C" fn rstat_group_exit(g: *mut rstat_group) -> c_int {
    ffi(|| {
        if g.is_null() {
            return Err(CError::new(
                RSTAT_EBADF,
                "g is NULL; pass the handle you entered",
            ));
        }
        let guard = ENTERED
            .try_with(|s| {
                let mut s = s.borrow_mut();
                let i = s.iter().rposition(|(h, _)| *h == g as usize)?;
                Some(s.remove(i).1)
            })
            .ok()
            .flatten()
            .ok_or_else(|| {
                CError::new(
                    RSTAT_EINVAL,
                    "g was not entered on this thread (or was exited already); exit each group \
                     once, on the thread that entered it, with the handle it was entered through",
                )
            })?;
        drop(guard); // outside the borrow
        Ok(())
    })
}

/// A new handle on this thread's current group in `rs`: the innermost
/// group entered and not exited, or `rs`'s root if there is none (or it
/// belongs to another rstat). Put it with `rstat_group_put`.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EFAULT`,
/// `RSTAT_EMFILE` (the handle table is full).
///
/// # Safety
/// `out` must be NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rstat_current_group(rs: *mut rstat, out: *mut *mut rstat_group) -> c_int {
    ffi(|| {
        // SAFETY: forwarded from the caller.
        unsafe { crate::engine::new_group_handle(rs, out, |r| r.current_group()) }
    })
}
