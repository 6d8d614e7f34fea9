//! Made-up handles: small integers a C program could guess or hold by
//! mistake (an index, a counter, a freed struct's field) are refused, even
//! where they name the slot of a live entry. Its own test binary, so this
//! process's first `rstat_new` fills the table's first slots, as a C
//! program's does.
//!
//! Each forged value is refused except with probability 2^-32 (a slot's
//! generation starts at a per-process random value), so a run with the
//! ~200 values below fails spuriously with probability below 10^-7.

mod common;

use std::ffi::c_char;
use std::ptr;

use common::options;
use rstat_capi::*;

fn last_error() -> String {
    let mut buf = [0 as c_char; 512];
    let mut n = 0usize;
    // SAFETY: `buf` is valid for its length, `n` for one write.
    unsafe { rstat_last_error(buf.as_mut_ptr(), buf.len(), &mut n) };
    // SAFETY: `rstat_last_error` NUL-terminated `buf`.
    unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

fn forged<T>(v: usize) -> *mut T {
    ptr::without_provenance_mut(v)
}

#[test]
fn small_integer_handles_are_refused() {
    let opts = options(RSTAT_OPT_NO_PERIODIC_FLUSH, 0);
    let mut rs: *mut rstat = ptr::null_mut();
    let mut root: *mut rstat_group = ptr::null_mut();
    let mut cpu: *mut rstat_counters = ptr::null_mut();
    // SAFETY: valid options and out-parameters.
    unsafe {
        assert_eq!(rstat_new(&opts, &mut rs), 0);
        assert_eq!(rstat_root(rs, &mut root), 0);
        assert_eq!(rstat_cpu_counters(rs, &mut cpu), 0);
    }
    let real = [rs as usize, root as usize, cpu as usize];

    // The values the first rstat and its root had when handles started at
    // generation 0: the counter set in slot 0, the rstat in slot 1, the
    // root in slot 2.
    let mut g: *mut rstat_group = ptr::null_mut();
    // SAFETY: a valid name and out-parameter; the handle is only checked.
    let rc = unsafe { rstat_group_create(forged(0x22), c"x".as_ptr(), &mut g) };
    assert_eq!(rc, RSTAT_EBADF, "group_create on 0x22: {}", last_error());
    assert!(g.is_null(), "nothing written on failure");
    let rc = rstat_free(forged(0x11));
    assert_eq!(rc, RSTAT_EBADF, "rstat_free(0x11): {}", last_error());
    let mut id = 0u64;
    // SAFETY: a valid out-parameter.
    let rc = unsafe { rstat_group_id(forged(0x22), &mut id) };
    assert_eq!(rc, RSTAT_EBADF, "group_id(0x22): {}", last_error());
    let rc = rstat_add(forged(0x03), root, 0, 1);
    assert_eq!(rc, RSTAT_EBADF, "rstat_add(0x03, ..): {}", last_error());

    // Every kind, the first 64 slots, generation 0: none is accepted by
    // any kind of call (a value that is a real handle would be the 2^-32
    // case, and fails the test, too).
    for index in 0..64usize {
        for kind in 1..=3usize {
            let v = kind | index << 4;
            assert!(!real.contains(&v), "{v:#x} is a real handle: guessable");
            assert_eq!(rstat_free(forged(v)), RSTAT_EBADF, "rstat_free({v:#x})");
            assert_eq!(rstat_group_get(forged(v)), RSTAT_EBADF, "get({v:#x})");
            let mut n = 0usize;
            // SAFETY: a valid out-parameter.
            let rc = unsafe { rstat_counters_len(forged(v), &mut n) };
            assert_eq!(rc, RSTAT_EBADF, "counters_len({v:#x})");
        }
    }

    // The real handles still work, and the engine is still there.
    // SAFETY: valid out-parameter.
    unsafe { assert_eq!(rstat_group_id(root, &mut id), 0) };
    assert_eq!(id, 1);
    assert_eq!(rstat_group_put(root), 0);
    assert_eq!(rstat_free(rs), 0);
    assert_eq!(rstat_free(rs), RSTAT_EBADF, "freed twice: stale");
}
