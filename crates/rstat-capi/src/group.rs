//! Groups: create, look up, remove, reference get/put, id and path.
//!
//! A group handle holds one reference on its group (the Rust `Group`),
//! shared by however many owners `rstat_group_get` added: the handle stays
//! valid, removed or not, until the last `rstat_group_put`. Every call that
//! returns a group (`rstat_root`, `rstat_group_create`,
//! `rstat_group_lookup`) returns a new handle with one owner, even for a
//! group another handle already names; compare groups with
//! `rstat_group_id`.

use std::ffi::{c_char, c_int};

use crate::args::{check_out, str_arg, write_out};
use crate::error::{copy_out_str, ffi, CError};
use crate::table::{race_window, to_ptr, Entry, GroupEntry, TABLE};
use crate::{rstat, rstat_group};

/// Create a child of `parent` called `name` (1-255 bytes of UTF-8, no `/`,
/// not `.` or `..`). `*out` gets a new handle on it.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE` (parent; `RSTAT_EBADF` too
/// if its rstat is freed by another thread during the call), `RSTAT_EFAULT`
/// (`name` or `out` NULL), `RSTAT_EINVAL` (bad name, or not UTF-8),
/// `RSTAT_EEXIST` (a sibling has that name), `RSTAT_ENODEV` (parent
/// removed), `RSTAT_ENOMEM` (the system refused memory for the group's
/// per-CPU state; nothing is created), `RSTAT_EMFILE` (the handle table is
/// full; nothing is created).
///
/// Cost: the engine's topology lock, per-CPU arena allocations, and the
/// handle table's write lock.
///
/// # Safety
/// `name` must be NULL or a NUL-terminated string; `out` NULL or valid for
/// one write.
#[no_mangle]
pub unsafe extern "C" fn rstat_group_create(
    parent: *mut rstat_group,
    name: *const c_char,
    out: *mut *mut rstat_group,
) -> c_int {
    ffi(|| {
        check_out(out, "out")?;
        // SAFETY: forwarded from the caller.
        let name = unsafe { str_arg(name, "name")? };
        let (engine, parent) = TABLE.read(|t| {
            let g = t.group(parent as usize, "parent")?;
            Ok::<_, CError>((g.engine.clone(), g.group.clone()))
        })?;
        let child = parent.create_child(name)?;
        race_window();
        // Refused if `rstat_free` ran meanwhile (the child is then dropped
        // with the engine's last reference).
        let h = TABLE.insert(Entry::Group(GroupEntry {
            engine,
            group: child,
            refs: 1,
        }))?;
        // SAFETY: checked above.
        unsafe { write_out(out, to_ptr(h), "out") }
    })
}

/// Look up the live group at `path` from the root of `rs`: `"a/b"` or
/// `"/a/b"`; `""` and `"/"` are the root. `*out` gets a new handle.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE` (rs; `RSTAT_EBADF` too if it
/// is freed by another thread during the call), `RSTAT_EFAULT`,
/// `RSTAT_EINVAL` (a component is not a valid name, e.g. `"a//b"`, or the
/// path is not UTF-8), `RSTAT_ENOENT` (no live group there;
/// `rstat_last_error` names the missing component), `RSTAT_EMFILE` (the
/// handle table is full).
///
/// Cost: one child-map lookup per component.
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string; `out` NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn rstat_group_lookup(
    rs: *mut rstat,
    path: *const c_char,
    out: *mut *mut rstat_group,
) -> c_int {
    ffi(|| {
        check_out(out, "out")?;
        // SAFETY: forwarded from the caller.
        let path = unsafe { str_arg(path, "path")? };
        let engine = TABLE.read(|t| t.engine(rs as usize, "rs").map(|(e, _)| e.clone()))?;
        let group = engine.rs.lookup(path)?;
        race_window();
        // Refused if `rstat_free` ran meanwhile.
        let h = TABLE.insert(Entry::Group(GroupEntry {
            engine,
            group,
            refs: 1,
        }))?;
        // SAFETY: checked above.
        unsafe { write_out(out, to_ptr(h), "out") }
    })
}

/// Remove the group: it goes offline at once (lookups fail, no new
/// children) and its totals fold into its parent; the handle stays valid
/// (reads and adds still work, and land in the parent's history) until
/// its last `rstat_group_put`.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EBUSY` (it has live
/// children: remove them first), `RSTAT_EPERM` (the root),
/// `RSTAT_ENODEV` (already removed).
///
/// Cost: the topology lock, one subtree flush per controller.
#[no_mangle]
pub extern "C" fn rstat_group_remove(g: *mut rstat_group) -> c_int {
    ffi(|| {
        let group = TABLE.read(|t| t.group(g as usize, "g").map(|e| e.group.clone()))?;
        group.remove()?;
        Ok(())
    })
}

/// Add an owner to the handle: one more `rstat_group_put` is needed
/// before it is released.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EOVERFLOW` (2^63
/// owners).
///
/// Cost: the handle table's write lock.
#[no_mangle]
pub extern "C" fn rstat_group_get(g: *mut rstat_group) -> c_int {
    ffi(|| {
        TABLE.write(|t| {
            let e = t.group_mut(g as usize, "g")?;
            if e.refs >= i64::MAX as u64 {
                return Err(CError::new(
                    crate::error::RSTAT_EOVERFLOW,
                    "the handle has 2^63 owners already; put some first",
                ));
            }
            e.refs += 1;
            Ok(())
        })
    })
}

/// Drop an owner of the handle; the last one releases it: the handle
/// becomes stale everywhere (`RSTAT_EBADF`) and its reference on the group
/// is dropped (a removed group nobody else holds is then flushed into its
/// parent and freed). Putting a handle does not remove the group.
///
/// Errors: `RSTAT_EBADF` (NULL, stale: e.g. put once too often),
/// `RSTAT_EPROTOTYPE`.
///
/// Cost: the handle table's write lock.
#[no_mangle]
pub extern "C" fn rstat_group_put(g: *mut rstat_group) -> c_int {
    ffi(|| {
        let gone = TABLE.write(|t| {
            let e = t.group_mut(g as usize, "g")?;
            e.refs -= 1;
            Ok::<_, CError>(if e.refs == 0 {
                t.remove(g as usize)
            } else {
                None
            })
        })?;
        drop(gone); // outside the table lock
        Ok(())
    })
}

/// The group's id: unique in its rstat for the rstat's lifetime (never
/// reused); the root's is 1. Two handles name the same group iff their ids
/// are equal.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EFAULT`.
///
/// # Safety
/// `out` must be NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rstat_group_id(g: *mut rstat_group, out: *mut u64) -> c_int {
    ffi(|| {
        check_out(out, "out")?;
        let id = TABLE.read(|t| t.group(g as usize, "g").map(|e| e.group.id()))?;
        // SAFETY: checked above.
        unsafe { write_out(out, id, "out") }
    })
}

/// Copy the group's absolute path (`"/a/b"`, `"/"` for the root; the
/// last path it had, if removed), the form `rstat_group_lookup` takes and
/// `rstat_last_error` messages print, into `buf` of `len` bytes,
/// NUL-terminated. `*out_len` (may be NULL) gets its length, or on
/// `RSTAT_ERANGE` the size needed.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_ERANGE` (nothing
/// copied), `RSTAT_EFAULT`.
///
/// # Safety
/// `buf` must be NULL or valid for `len` bytes; `out_len` NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn rstat_group_path(
    g: *mut rstat_group,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> c_int {
    ffi(|| {
        let path = TABLE.read(|t| t.group(g as usize, "g").map(|e| e.group.path()))?;
        // SAFETY: forwarded from the caller.
        unsafe { copy_out_str(&path, buf, len, out_len) }
    })
}

/// Whether the group is online (1) or removed (0), in `*out`.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EFAULT`.
///
/// # Safety
/// `out` must be NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rstat_group_is_online(g: *mut rstat_group, out: *mut c_int) -> c_int {
    ffi(|| {
        check_out(out, "out")?;
        let on = TABLE.read(|t| t.group(g as usize, "g").map(|e| e.group.is_online()))?;
        // SAFETY: checked above.
        unsafe { write_out(out, c_int::from(on), "out") }
    })
}

/// Charge CPU time to the group's built-in `cpu` counters:
/// `usage_usec += user + system`, `user_usec += user`,
/// `system_usec += system`.
///
/// Errors: `RSTAT_EBADF` / `RSTAT_EPROTOTYPE`, `RSTAT_EOVERFLOW`
/// (`user + system` above 2^63 - 1: usually a negative duration cast to
/// unsigned; nothing is charged).
///
/// Cost: three per-CPU counter updates (no lock, no allocation) under the
/// handle table's read lock.
#[no_mangle]
pub extern "C" fn rstat_account_cputime(
    g: *mut rstat_group,
    user_usec: u64,
    system_usec: u64,
) -> c_int {
    ffi(|| {
        TABLE.read(|t| {
            let e = t.group(g as usize, "g")?;
            e.engine
                .rs
                .account_cputime(&e.group, user_usec, system_usec)?;
            Ok(())
        })
    })
}

#[cfg(test)]
mod tests {
    use std::ptr;
    use std::sync::Arc;

    use crate::table::{IN_RACE_WINDOW, TABLE};
    use crate::*;

    /// `rstat_free` runs (on this thread, through the test hook) exactly
    /// between a call's lookup of its handles and its insert of the new
    /// one: the call must fail and leave no handle of the freed engine,
    /// which would keep it alive.
    #[test]
    fn create_lookup_and_register_refuse_an_engine_freed_meanwhile() {
        for call in [
            "rstat_group_create",
            "rstat_group_lookup",
            "rstat_counters_register",
        ] {
            let opts = rstat_options {
                size: std::mem::size_of::<rstat_options>() as u32,
                flags: RSTAT_OPT_NO_PERIODIC_FLUSH,
                ..Default::default()
            };
            let mut rs: *mut rstat = ptr::null_mut();
            let mut root: *mut rstat_group = ptr::null_mut();
            // SAFETY: valid options and out-parameters.
            unsafe {
                assert_eq!(rstat_new(&opts, &mut rs), 0);
                assert_eq!(rstat_root(rs, &mut root), 0);
            }
            let engine = TABLE.read(|t| Arc::downgrade(t.engine(rs as usize, "rs").unwrap().0));
            IN_RACE_WINDOW.with(|h| {
                *h.borrow_mut() = Some(Box::new(move || assert_eq!(rstat_free(rs), 0)));
            });
            let mut g: *mut rstat_group = ptr::null_mut();
            let mut cs: *mut rstat_counters = ptr::null_mut();
            let items = [c"n".as_ptr()];
            // SAFETY: valid strings, arrays and out-parameters.
            let rc = unsafe {
                match call {
                    "rstat_group_create" => rstat_group_create(root, c"x".as_ptr(), &mut g),
                    "rstat_group_lookup" => rstat_group_lookup(rs, c"".as_ptr(), &mut g),
                    _ => rstat_counters_register(
                        rs,
                        c"c".as_ptr(),
                        items.as_ptr(),
                        ptr::null(),
                        1,
                        &mut cs,
                    ),
                }
            };
            assert!(
                IN_RACE_WINDOW.with(|h| h.borrow().is_none()),
                "{call} never reached its race window"
            );
            assert_eq!(rc, RSTAT_EBADF, "{call} on an rstat freed meanwhile");
            assert!(g.is_null() && cs.is_null(), "{call} wrote a handle");
            assert!(
                engine.upgrade().is_none(),
                "{call} left a handle that keeps the freed rstat alive"
            );
        }
    }
}
