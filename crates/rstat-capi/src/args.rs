//! Checking what C passes: strings, out-parameters, size-prefixed structs.

use std::ffi::{c_char, CStr};

use crate::error::{null_arg, CError, CResult, RSTAT_E2BIG, RSTAT_EINVAL};

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string that outlives the
/// call.
pub(crate) unsafe fn str_arg<'a>(p: *const c_char, what: &str) -> CResult<&'a str> {
    if p.is_null() {
        return Err(null_arg(what));
    }
    // SAFETY: non-NULL, NUL-terminated by the caller's promise.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|e| {
        CError::new(
            RSTAT_EINVAL,
            format!(
                "{what} is not valid UTF-8 (bad byte at offset {}); rstat names are UTF-8",
                e.valid_up_to()
            ),
        )
    })
}

/// Write `v` through the out-parameter `p`.
///
/// # Safety
/// `p` must be NULL or valid for one write of `T`.
pub(crate) unsafe fn write_out<T>(p: *mut T, v: T, what: &str) -> CResult {
    if p.is_null() || !p.is_aligned() {
        return Err(null_arg(what));
    }
    // SAFETY: non-NULL, aligned, writable by the caller's promise.
    unsafe { p.write(v) };
    Ok(())
}

/// Check an out-parameter before doing the work whose result it gets, so a
/// NULL one fails before anything changes.
pub(crate) fn check_out<T>(p: *mut T, what: &str) -> CResult {
    if p.is_null() || !p.is_aligned() {
        return Err(null_arg(what));
    }
    Ok(())
}

/// Read a size-prefixed struct the kernel's way (`copy_struct_from_user`):
/// `T` starts with a `u32` size field; a smaller size than `min` is
/// refused, fields past a smaller caller's size read as zero, and bytes
/// past our `T` in a larger caller's struct must be zero (`RSTAT_E2BIG`
/// otherwise, so a caller relying on a newer field learns this library
/// does not have it).
///
/// # Safety
/// `p` must be NULL or point to at least `*(const uint32_t *)p` readable
/// bytes, and `T` must be a `repr(C)` struct of integers (all bit patterns
/// valid) whose first field is the `u32` size.
pub(crate) unsafe fn read_sized<T: Default>(p: *const T, min: usize, what: &str) -> CResult<T> {
    if p.is_null() || !p.is_aligned() {
        return Err(null_arg(what));
    }
    // SAFETY: the first field is a u32 the caller promises is readable.
    let size = unsafe { p.cast::<u32>().read() } as usize;
    let ours = std::mem::size_of::<T>();
    if size < min {
        return Err(CError::new(
            RSTAT_EINVAL,
            format!("{what}->size is {size}, below the smallest version ({min} bytes); set it to sizeof(*{what})"),
        ));
    }
    if size > ours {
        // SAFETY: the caller promises `size` readable bytes.
        let tail = unsafe { std::slice::from_raw_parts(p.cast::<u8>().add(ours), size - ours) };
        if tail.iter().any(|&b| b != 0) {
            return Err(CError::new(
                RSTAT_E2BIG,
                format!(
                    "{what} is {size} bytes and sets fields past the {ours} this library knows; \
                     link a newer librstat or leave those fields zero"
                ),
            ));
        }
    }
    let mut v = T::default();
    // SAFETY: copies min(size, ours) bytes from the caller's readable
    // struct into ours (both `repr(C)` integer structs, so any bytes are a
    // valid value); they do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(
            p.cast::<u8>(),
            (&mut v as *mut T).cast::<u8>(),
            size.min(ours),
        )
    };
    Ok(v)
}

/// Write a size-prefixed result struct: as many bytes of `v` as the
/// caller's `size` field (read first from `p`) has room for, from the start,
/// and the caller's `size` left as it was.
///
/// # Safety
/// `p` must be NULL or point to at least `*(uint32_t *)p` writable bytes;
/// `T` as for [`read_sized`].
pub(crate) unsafe fn write_sized<T>(p: *mut T, v: &T, min: usize, what: &str) -> CResult {
    if p.is_null() || !p.is_aligned() {
        return Err(null_arg(what));
    }
    // SAFETY: the first field is the caller's readable u32 size.
    let size = unsafe { p.cast::<u32>().read() } as usize;
    if size < min {
        return Err(CError::new(
            RSTAT_EINVAL,
            format!("{what}->size is {size}, below the smallest version ({min} bytes); set it to sizeof(*{what})"),
        ));
    }
    let n = size.min(std::mem::size_of::<T>());
    // SAFETY: the caller promises `size >= n` writable bytes; we skip the
    // size field (4 bytes) and copy the rest of the first `n` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (v as *const T).cast::<u8>().add(4),
            p.cast::<u8>().add(4),
            n - 4,
        )
    };
    Ok(())
}
