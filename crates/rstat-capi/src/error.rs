//! Error codes, `rstat_strerror`, the per-thread last error message, and
//! the guard every exported function runs its body in.
//!
//! Every function returns 0 or one of the negative codes below: the
//! negated Linux `errno` value whose meaning is closest (the kernel's own
//! convention), so `strerror(-code)` also prints something sensible.
//! `rstat_strerror` says what the code means *in rstat*, and
//! `rstat_last_error` gives the full message of this thread's last failure
//! (which group, which limit, what to do next).

use std::cell::RefCell;
use std::ffi::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};

use ::rstat::memory::MemoryError;
use ::rstat::percpu::arena::ArenaError;

/// Success.
pub const RSTAT_OK: c_int = 0;
/// The root group cannot be removed (`EPERM`).
pub const RSTAT_EPERM: c_int = -1;
/// No live group at that path, no stat item or report file by that name
/// (`ENOENT`).
pub const RSTAT_ENOENT: c_int = -2;
/// An option or result struct whose `size` is larger than this library
/// knows, with nonzero bytes past the fields it knows (`E2BIG`).
pub const RSTAT_E2BIG: c_int = -7;
/// A NULL, released, or never issued handle (`EBADF`).
pub const RSTAT_EBADF: c_int = -9;
/// A background thread could not be started (`EAGAIN`).
pub const RSTAT_EAGAIN: c_int = -11;
/// Out of memory (`ENOMEM`): a charge over `memory.max` that reclaim
/// could not make room for (nothing was charged), or the system refused
/// memory for the per-CPU state of a new rstat, group or counter set
/// (nothing was created). `rstat_last_error` says which.
pub const RSTAT_ENOMEM: c_int = -12;
/// A NULL or misaligned pointer argument (`EFAULT`).
pub const RSTAT_EFAULT: c_int = -14;
/// The group still has live children (`EBUSY`).
pub const RSTAT_EBUSY: c_int = -16;
/// A group or counter set by that name already exists (`EEXIST`).
pub const RSTAT_EEXIST: c_int = -17;
/// Handles from two different `rstat` instances mixed in one call
/// (`EXDEV`).
pub const RSTAT_EXDEV: c_int = -18;
/// The group has been removed (`ENODEV`).
pub const RSTAT_ENODEV: c_int = -19;
/// An invalid argument: a bad name, path, limit, amount, flag, index,
/// count, struct size or option; or a call out of order: an exit without
/// its enter, an enter while the thread exits (`EINVAL`).
pub const RSTAT_EINVAL: c_int = -22;
/// The handle table is full (`EMFILE`).
pub const RSTAT_EMFILE: c_int = -24;
/// No room for another counter set in this `rstat` (`ENOSPC`).
pub const RSTAT_ENOSPC: c_int = -28;
/// The buffer given is too small for the result (`ERANGE`); the size
/// needed is in the length out-parameter.
pub const RSTAT_ERANGE: c_int = -34;
/// A value too large (`EOVERFLOW`): an amount or CPU time beyond what can
/// be accounted, or a group handle's 2^63rd owner.
pub const RSTAT_EOVERFLOW: c_int = -75;
/// A handle of the wrong type, e.g. a counter set passed as a group
/// (`EPROTOTYPE`).
pub const RSTAT_EPROTOTYPE: c_int = -91;
/// The `rstat` was created without the controller this call needs
/// (`EOPNOTSUPP`).
pub const RSTAT_EOPNOTSUPP: c_int = -95;
/// rstat hit an internal error (a Rust panic, caught at the boundary);
/// the call did nothing it reports, and the message says where
/// (`ENOTRECOVERABLE`).
pub const RSTAT_ENOTRECOVERABLE: c_int = -131;

/// A failed call: its code and the message `rstat_last_error` returns.
#[derive(Debug)]
pub(crate) struct CError {
    pub(crate) code: c_int,
    pub(crate) msg: String,
}

pub(crate) type CResult<T = ()> = Result<T, CError>;

impl CError {
    pub(crate) fn new(code: c_int, msg: impl Into<String>) -> CError {
        CError {
            code,
            msg: msg.into(),
        }
    }
}

/// A NULL (or misaligned) pointer argument.
pub(crate) fn null_arg(what: &str) -> CError {
    CError::new(
        RSTAT_EFAULT,
        format!("{what} is NULL or misaligned; pass a valid pointer"),
    )
}

impl From<::rstat::Error> for CError {
    fn from(e: ::rstat::Error) -> CError {
        use ::rstat::Error as E;
        let code = match &e {
            E::InvalidName { .. } | E::InvalidPath { .. } | E::InvalidCpuMax { .. } => RSTAT_EINVAL,
            E::NameExists { .. } | E::ControllerExists { .. } | E::ExtensionExists { .. } => {
                RSTAT_EEXIST
            }
            E::NotFound { .. } | E::UnknownStatName { .. } | E::UnknownFile { .. } => RSTAT_ENOENT,
            E::HasChildren { .. } => RSTAT_EBUSY,
            E::Removed { .. } => RSTAT_ENODEV,
            E::Killed { .. } => RSTAT_ENOMEM,
            E::RootNotRemovable => RSTAT_EPERM,
            E::TooManyControllers { .. } | E::TooManyExtensions { .. } => RSTAT_ENOSPC,
            E::InvalidController { .. }
            | E::InvalidExtension { .. }
            | E::UnknownStat { .. }
            | E::UnknownPolicy { .. }
            | E::InvalidPeriod { .. }
            | E::TooManyCpus { .. } => RSTAT_EINVAL,
            E::CpuTimeOutOfRange { .. } => RSTAT_EOVERFLOW,
            E::ForeignGroup => RSTAT_EXDEV,
            E::Thread { .. } => RSTAT_EAGAIN,
            // The system allocator refused a chunk: out of memory.
            E::Arena(ArenaError::OutOfMemory { .. }) => RSTAT_ENOMEM,
            // Per-CPU state larger than an arena unit: no amount of memory
            // helps (registration refuses such a counter set first).
            E::Arena(ArenaError::TooLarge { .. }) => RSTAT_EINVAL,
            _ => RSTAT_EINVAL,
        };
        CError::new(code, e.to_string())
    }
}

impl From<MemoryError> for CError {
    fn from(e: MemoryError) -> CError {
        let code = match &e {
            MemoryError::OverLimit(_) | MemoryError::Killed { .. } => RSTAT_ENOMEM,
            MemoryError::TooLarge { .. } | MemoryError::Overflow { .. } => RSTAT_EOVERFLOW,
            MemoryError::Underflow { .. }
            | MemoryError::InvalidLimit { .. }
            | MemoryError::InvalidConfig { .. } => RSTAT_EINVAL,
            MemoryError::Removed { .. } => RSTAT_ENODEV,
            MemoryError::Engine(inner) => return CError::from(inner.clone()),
            _ => RSTAT_EINVAL,
        };
        CError::new(code, e.to_string())
    }
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// The longest message kept as a thread's last error, in bytes: messages
/// quote what the caller passed (cut where they quote it), and this
/// bounds any that does not.
const MAX_MESSAGE: usize = 8192;

fn set_last_error(mut msg: String) {
    if msg.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !msg.is_char_boundary(end) {
            end -= 1;
        }
        msg.truncate(end);
        msg.push_str(" [message cut]");
    }
    // `try_with`: a call from a thread-local destructor after ours is gone
    // still returns its code, only without a message.
    let _ = LAST_ERROR.try_with(|m| {
        if let Ok(mut m) = m.try_borrow_mut() {
            *m = msg;
        }
    });
}

/// Run an exported function's body: its error becomes a code (and this
/// thread's last error message), and a panic is caught here, so no Rust
/// unwind ever crosses into C.
#[inline(always)]
pub(crate) fn ffi(body: impl FnOnce() -> CResult) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => RSTAT_OK,
        Ok(Err(e)) => {
            set_last_error(e.msg);
            e.code
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            // A payload whose drop panics would unwind into C: drop it
            // inside a catch, and leak only such a second payload.
            if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
                std::mem::forget(again);
            }
            set_last_error(format!(
                "internal error in rstat (a bug, please report it): {what}; \
                 the call was abandoned"
            ));
            RSTAT_ENOTRECOVERABLE
        }
    }
}

/// Copy `text` and a terminating NUL into `buf` of `len` bytes; `*out_len`
/// (if not NULL) gets the text's length on success and the size needed
/// (length + 1) on `RSTAT_ERANGE`.
///
/// # Safety
/// `buf` must be NULL or valid for `len` bytes of writes; `out_len` NULL or
/// valid for one write.
pub(crate) unsafe fn copy_out_str(
    text: &str,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> CResult {
    let need = text.len() + 1;
    // A NULL buffer is only a size query (`len == 0`); with a length it
    // is a bad argument, refused before anything is written.
    if buf.is_null() && len != 0 {
        return Err(null_arg("buf"));
    }
    if !out_len.is_null() {
        if !out_len.is_aligned() {
            return Err(null_arg("out_len"));
        }
        // SAFETY: non-NULL and aligned; the caller promises it is writable.
        unsafe { out_len.write(if len >= need { text.len() } else { need }) };
    }
    if len < need {
        return Err(CError::new(
            RSTAT_ERANGE,
            format!("the buffer holds {len} bytes but the result needs {need} (with its NUL); pass a larger one"),
        ));
    }
    if buf.is_null() {
        return Err(null_arg("buf"));
    }
    // SAFETY: `buf` is valid for `len >= need` bytes (caller's promise) and
    // cannot overlap `text`, which is ours.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
        buf.add(text.len()).write(0);
    }
    Ok(())
}

/// What an error code means, as a static NUL-terminated string (never
/// NULL; "unknown error code" for a code rstat does not return). For the
/// details of this thread's last failure, see `rstat_last_error`.
#[no_mangle]
pub extern "C" fn rstat_strerror(code: c_int) -> *const c_char {
    let s: &'static std::ffi::CStr = match code {
        RSTAT_OK => c"success",
        RSTAT_EPERM => c"operation not permitted (the root group cannot be removed)",
        RSTAT_ENOENT => {
            c"not found: no live group at that path, or no stat item or file by that name"
        }
        RSTAT_E2BIG => {
            c"struct size larger than this library knows, with nonzero bytes past its fields"
        }
        RSTAT_EBADF => c"bad handle: NULL, released, freed with its rstat, or never issued",
        RSTAT_EAGAIN => c"a background thread could not be started",
        RSTAT_ENOMEM => c"out of memory: a charge over memory.max after reclaim, or no memory for new per-CPU state",
        RSTAT_EFAULT => c"NULL or misaligned pointer argument",
        RSTAT_EBUSY => c"the group still has live children",
        RSTAT_EEXIST => c"a group or counter set with that name already exists",
        RSTAT_EXDEV => c"handles from different rstat instances mixed in one call",
        RSTAT_ENODEV => c"the group has been removed",
        RSTAT_EINVAL => c"invalid argument (name, path, limit, amount, flag, index, count, size or option), or a group exit without its enter",
        RSTAT_EMFILE => c"too many handles are open",
        RSTAT_ENOSPC => c"no room for another counter set in this rstat",
        RSTAT_ERANGE => c"buffer too small for the result",
        RSTAT_EOVERFLOW => c"value too large: an amount or CPU time beyond what can be accounted, or a handle's 2^63rd owner",
        RSTAT_EPROTOTYPE => c"handle of the wrong type",
        RSTAT_EOPNOTSUPP => c"this rstat was created without the controller this call needs",
        RSTAT_ENOTRECOVERABLE => c"internal error in rstat (a caught panic; see rstat_last_error)",
        _ => c"unknown error code",
    };
    s.as_ptr()
}

/// Copy this thread's last error message (the failure of the most recent
/// call on this thread that failed; "" if none has) into `buf` of `len`
/// bytes, NUL-terminated. `*out_len` (may be NULL) gets its length, or on
/// `RSTAT_ERANGE` the size needed. Does not change the message.
///
/// Errors: `RSTAT_ERANGE` (buffer too small: nothing copied),
/// `RSTAT_EFAULT`.
///
/// # Safety
/// `buf` must be NULL or valid for `len` bytes; `out_len` NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn rstat_last_error(
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> c_int {
    // Not through `ffi`: reporting an error here would overwrite the
    // message being read.
    let msg = LAST_ERROR
        .try_with(|m| m.try_borrow().map(|m| m.clone()).unwrap_or_default())
        .unwrap_or_default();
    // SAFETY: forwarded from the caller.
    match catch_unwind(AssertUnwindSafe(|| unsafe {
        copy_out_str(&msg, buf, len, out_len)
    })) {
        Ok(Ok(())) => RSTAT_OK,
        Ok(Err(e)) => e.code,
        Err(_) => RSTAT_ENOTRECOVERABLE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_negated_linux_errno_values() {
        let pairs = [
            (RSTAT_EPERM, libc::EPERM),
            (RSTAT_ENOENT, libc::ENOENT),
            (RSTAT_E2BIG, libc::E2BIG),
            (RSTAT_EBADF, libc::EBADF),
            (RSTAT_EAGAIN, libc::EAGAIN),
            (RSTAT_ENOMEM, libc::ENOMEM),
            (RSTAT_EFAULT, libc::EFAULT),
            (RSTAT_EBUSY, libc::EBUSY),
            (RSTAT_EEXIST, libc::EEXIST),
            (RSTAT_EXDEV, libc::EXDEV),
            (RSTAT_ENODEV, libc::ENODEV),
            (RSTAT_EINVAL, libc::EINVAL),
            (RSTAT_EMFILE, libc::EMFILE),
            (RSTAT_ENOSPC, libc::ENOSPC),
            (RSTAT_ERANGE, libc::ERANGE),
            (RSTAT_EOVERFLOW, libc::EOVERFLOW),
            (RSTAT_EPROTOTYPE, libc::EPROTOTYPE),
            (RSTAT_EOPNOTSUPP, libc::EOPNOTSUPP),
            (RSTAT_ENOTRECOVERABLE, libc::ENOTRECOVERABLE),
        ];
        for (ours, errno) in pairs {
            assert_eq!(ours, -errno);
            // Every code has its own message.
            // SAFETY: rstat_strerror returns a static NUL-terminated string.
            let s = unsafe { std::ffi::CStr::from_ptr(rstat_strerror(ours)) };
            assert_ne!(s.to_str().unwrap(), "unknown error code", "{ours}");
        }
    }

    #[test]
    fn a_panic_becomes_a_code_and_a_message() {
        let rc = ffi(|| panic!("boom at the boundary"));
        assert_eq!(rc, RSTAT_ENOTRECOVERABLE);
        let msg = LAST_ERROR.with(|m| m.borrow().clone());
        assert!(msg.contains("boom at the boundary"), "{msg}");
        let rc = ffi(|| -> CResult { panic!("{}", String::from("owned")) });
        assert_eq!(rc, RSTAT_ENOTRECOVERABLE);
        assert!(LAST_ERROR.with(|m| m.borrow().contains("owned")));
    }
}
