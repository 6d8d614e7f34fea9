//! Limits on what a C caller's input can cost: error messages stay short
//! whatever the names passed, an absurd CPU count is refused rather than
//! reserved, and a failed copy writes no out-parameter.

mod common;

use std::ffi::{c_char, CString};
use std::ptr;

use common::options;
use rstat_capi::*;

/// This thread's last error message's length (`rstat_last_error` with no
/// buffer reports the size it needs).
fn last_error_len() -> usize {
    let mut n = 0usize;
    // SAFETY: no buffer, `n` valid for one write.
    unsafe { rstat_last_error(ptr::null_mut(), 0, &mut n) };
    n
}

/// A 1 MiB name in each call that echoes a name in its error: the message
/// is cut, not a megabyte held by the thread until its next error.
#[test]
fn error_messages_are_bounded_whatever_the_input() {
    let big = CString::new("x".repeat(1 << 20)).unwrap();
    let opts = options(RSTAT_OPT_NO_PERIODIC_FLUSH, 0);
    let mut rs: *mut rstat = ptr::null_mut();
    // SAFETY: valid options and out-parameter.
    assert_eq!(unsafe { rstat_new(&opts, &mut rs) }, 0);
    let mut cs: *mut rstat_counters = ptr::null_mut();
    let items: [*const c_char; 1] = [big.as_ptr()];
    // SAFETY: valid strings, array and out-parameter.
    let rc = unsafe {
        rstat_counters_register(rs, c"s1".as_ptr(), items.as_ptr(), ptr::null(), 1, &mut cs)
    };
    assert_ne!(rc, 0);
    assert!(
        last_error_len() < 4096,
        "item name: {} bytes",
        last_error_len()
    );
    let items: [*const c_char; 1] = [c"a".as_ptr()];
    // SAFETY: as above.
    let rc = unsafe {
        rstat_counters_register(rs, big.as_ptr(), items.as_ptr(), ptr::null(), 1, &mut cs)
    };
    assert_ne!(rc, 0);
    assert!(
        last_error_len() < 4096,
        "controller name: {} bytes",
        last_error_len()
    );
    // SAFETY: as above.
    assert_eq!(
        unsafe {
            rstat_counters_register(rs, c"s2".as_ptr(), items.as_ptr(), ptr::null(), 1, &mut cs)
        },
        0
    );
    let mut idx = 0u32;
    // SAFETY: valid handle, string and out-parameter.
    let rc = unsafe { rstat_counters_item(cs, big.as_ptr(), &mut idx) };
    assert_ne!(rc, 0);
    assert!(
        last_error_len() < 4096,
        "item lookup: {} bytes",
        last_error_len()
    );
    assert_eq!(rstat_free(rs), 0);
}

/// A CPU count no machine has is refused with `RSTAT_EINVAL`, not tried
/// (its per-CPU chunk would be terabytes of address space; under
/// AddressSanitizer the attempt aborted the process).
#[test]
fn an_absurd_cpu_count_is_refused() {
    for n in [u32::MAX, 1 << 20, 8193] {
        let opts = options(RSTAT_OPT_NO_PERIODIC_FLUSH, n);
        let mut rs: *mut rstat = ptr::null_mut();
        // SAFETY: valid options and out-parameter.
        let rc = unsafe { rstat_new(&opts, &mut rs) };
        assert_eq!(rc, RSTAT_EINVAL, "nr_cpus {n}");
        assert!(rs.is_null());
    }
}

/// `*out_len` is not written when the call fails for a NULL buffer.
#[test]
fn a_failed_copy_writes_no_length() {
    let opts = options(RSTAT_OPT_NO_PERIODIC_FLUSH, 0);
    let mut rs: *mut rstat = ptr::null_mut();
    let mut root: *mut rstat_group = ptr::null_mut();
    // SAFETY: valid options and out-parameters.
    unsafe {
        assert_eq!(rstat_new(&opts, &mut rs), 0);
        assert_eq!(rstat_root(rs, &mut root), 0);
    }
    let mut n = 7usize;
    // SAFETY: a NULL buffer with a non-zero length: refused.
    let rc = unsafe { rstat_read(root, c"cpu.stat".as_ptr(), ptr::null_mut(), 1000, &mut n) };
    assert_eq!(rc, RSTAT_EFAULT);
    assert_eq!(n, 7, "out_len written on failure");
    let mut n = 7usize;
    // SAFETY: as above.
    let rc = unsafe { rstat_group_path(root, ptr::null_mut(), 1000, &mut n) };
    assert_eq!(rc, RSTAT_EFAULT);
    assert_eq!(n, 7, "out_len written on failure");
    assert_eq!(rstat_free(rs), 0);
}
