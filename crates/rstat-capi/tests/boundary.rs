//! The boundary itself: every exported function catches panics, and the
//! unsafe argument handling (strings, out-parameters, size-prefixed
//! structs, text buffers, the handle table's lock) is exercised once per
//! path, small enough to run under Miri (`.ci/run`).

mod common;

use std::ffi::c_char;
use std::ptr;

use common::{doc_codes, options};
use rstat_capi::*;

/// Every `extern "C"` function runs its body in `ffi` (or, for
/// `rstat_last_error`, its own `catch_unwind`), except the two that cannot
/// panic: a constant and a match over static strings.
#[test]
fn every_exported_function_catches_panics() {
    // Every file under src/, modules in folders included.
    let mut files = Vec::new();
    let mut dirs = vec![std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src"
    ))];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    let mut checked = 0;
    for path in files {
        let src = std::fs::read_to_string(&path).unwrap();
        for (i, _) in src.match_indices("extern \"C\" fn ") {
            let rest = &src[i..];
            let name: String = rest["extern \"C\" fn ".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            // The body: from the first `{` after the signature to the next
            // function.
            let body = &rest[rest.find('{').unwrap()..];
            let body = &body[..body.find("\n}\n").unwrap_or(body.len())];
            if name == "rstat_abi_version" || name == "rstat_strerror" {
                assert!(
                    !body.contains("unwrap") && !body.contains('['),
                    "{name} must not be able to panic"
                );
            } else {
                assert!(
                    body.trim_start_matches('{')
                        .trim_start()
                        .starts_with("ffi(")
                        || body.contains("catch_unwind("),
                    "{name} in {} does not run its body in ffi()",
                    path.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 30, "found only {checked} exported functions");
}

#[test]
fn pointers_structs_and_buffers() {
    let opts = options(RSTAT_OPT_NO_PERIODIC_FLUSH, 2);
    let mut rs: *mut rstat = ptr::null_mut();
    // SAFETY: valid pointers (as for every call below).
    unsafe {
        assert_eq!(rstat_new(&opts, &mut rs), 0);
        // A larger struct with a nonzero tail is refused; a misaligned
        // out-pointer too.
        #[repr(C)]
        struct Bigger {
            base: rstat_options,
            extra: u64,
        }
        let mut big = Bigger {
            base: opts,
            extra: 1,
        };
        big.base.size = std::mem::size_of::<Bigger>() as u32;
        let mut other: *mut rstat = ptr::null_mut();
        assert_eq!(rstat_new((&raw const big).cast(), &mut other), RSTAT_E2BIG);
        // One byte into an 8-aligned buffer: misaligned wherever the buffer
        // lands (a byte array may itself sit at an odd address, as Miri
        // places it at random, making `+1` aligned).
        let mut raw = [0u64; 2];
        let misaligned = raw.as_mut_ptr().cast::<u8>().add(1).cast::<*mut rstat>();
        assert_eq!(rstat_new(&opts, misaligned), RSTAT_EFAULT);

        let mut root: *mut rstat_group = ptr::null_mut();
        let mut g: *mut rstat_group = ptr::null_mut();
        assert_eq!(rstat_root(rs, &mut root), 0);
        assert_eq!(rstat_group_create(root, c"t".as_ptr(), &mut g), 0);
        assert_eq!(
            rstat_group_create(root, c"\xff".as_ptr(), &mut g),
            RSTAT_EINVAL
        );

        let items = [c"a".as_ptr(), c"b".as_ptr()];
        let units = [1u64, 4096];
        let mut cs: *mut rstat_counters = ptr::null_mut();
        assert_eq!(
            rstat_counters_register(
                rs,
                c"io".as_ptr(),
                items.as_ptr(),
                units.as_ptr(),
                2,
                &mut cs
            ),
            0
        );
        // Two threads use the table at once (reader shards), one makes and
        // releases handles (the write side).
        let (csv, gv, rsv) = (cs as usize, g as usize, rs as usize);
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..10 {
                    assert_eq!(
                        rstat_add(
                            ptr::without_provenance_mut(csv),
                            ptr::without_provenance_mut(gv),
                            1,
                            4096
                        ),
                        0
                    );
                }
            });
            s.spawn(|| {
                for _ in 0..10 {
                    let mut h: *mut rstat_group = ptr::null_mut();
                    assert_eq!(
                        rstat_group_lookup(ptr::without_provenance_mut(rsv), c"t".as_ptr(), &mut h),
                        0
                    );
                    assert_eq!(rstat_group_put(h), 0);
                }
            });
        });
        let mut vals = [0i64; 2];
        assert_eq!(rstat_read_exact(cs, g, 0, vals.as_mut_ptr(), 2), 0);
        assert_eq!(vals, [0, 40960]);
        assert_eq!(
            rstat_read_exact(cs, g, 0, vals.as_mut_ptr(), 1),
            RSTAT_ERANGE
        );

        let mut buf = [0 as c_char; 64];
        let mut n = 0usize;
        assert_eq!(
            rstat_read(g, c"io.stat".as_ptr(), buf.as_mut_ptr(), buf.len(), &mut n),
            0
        );
        assert_eq!(
            std::ffi::CStr::from_ptr(buf.as_ptr()).to_str().unwrap(),
            "a 0\nb 40960\n"
        );
        assert_eq!(
            rstat_read(g, c"io.stat".as_ptr(), buf.as_mut_ptr(), 4, &mut n),
            RSTAT_ERANGE
        );
        assert_eq!(n, 13);
        let mut msg = [0 as c_char; 1024];
        assert_eq!(
            rstat_last_error(msg.as_mut_ptr(), msg.len(), &mut n),
            RSTAT_OK
        );
        assert!(n > 0);

        assert_eq!(
            rstat_memory_set_limit(g, RSTAT_MEMORY_MAX, c"1K".as_ptr()),
            0
        );
        assert_eq!(
            rstat_memory_try_charge(g, 2048, 0, ptr::null_mut()),
            RSTAT_ENOMEM
        );
        // A result struct: an older (smaller) one is refused, a newer
        // (larger) one filled up to what this library knows.
        #[repr(C)]
        struct BigEvents {
            base: rstat_memory_events,
            extra: u64,
        }
        let mut ev = BigEvents {
            base: rstat_memory_events::default(),
            extra: 7,
        };
        ev.base.size = std::mem::size_of::<BigEvents>() as u32;
        assert_eq!(rstat_memory_read_events(g, 0, (&raw mut ev).cast()), 0);
        assert_eq!((ev.base.max, ev.base.oom, ev.extra), (1, 1, 7));
        ev.base.size = 8;
        assert_eq!(rstat_memory_read_events(g, 0, &mut ev.base), RSTAT_EINVAL);

        assert_eq!(rstat_group_enter(g), 0);
        assert_eq!(rstat_group_exit(g), 0);
        assert_eq!(rstat_free(rs), 0);
        assert_eq!(rstat_add(cs, g, 0, 1), RSTAT_EBADF);
    }
}

/// `rc` is `want`, and `rstat.h` lists it among `func`'s errors.
fn returns_documented(func: &str, rc: i32, want: i32) {
    assert_eq!(
        rc,
        want,
        "{func} returned {} instead of {}",
        doc_codes::name(rc),
        doc_codes::name(want)
    );
    let docs = doc_codes::documented();
    let Some(listed) = docs.get(func) else {
        panic!("{func} has no `Errors:` paragraph in rstat.h");
    };
    assert!(
        listed.contains(&rc),
        "{func} returns {} but its `Errors:` paragraph in rstat.h does not list it",
        doc_codes::name(rc)
    );
}

/// Every function that returns a code has an `Errors:` paragraph in
/// `rstat.h` (what the header's preamble promises).
#[test]
fn every_function_that_can_fail_documents_its_errors() {
    let docs = doc_codes::documented();
    let header = include_str!("../include/rstat.h");
    let mut seen = 0;
    for line in header.lines().filter(|l| l.starts_with("int rstat_")) {
        let name = &line["int ".len()..line.find('(').unwrap()];
        assert!(
            docs.get(name).is_some_and(|c| !c.is_empty()),
            "{name} has no `Errors:` paragraph naming its codes"
        );
        seen += 1;
    }
    assert!(seen >= 30, "found only {seen} functions");
}

/// Codes that calls return on paths their documentation once left out:
/// each is returned, and listed in the function's `Errors:` paragraph.
#[test]
fn every_code_a_call_returns_is_in_its_documentation() {
    let opts = options(RSTAT_OPT_NO_PERIODIC_FLUSH | RSTAT_OPT_NO_MEMORY, 2);
    let mut rs: *mut rstat = ptr::null_mut();
    let mut root: *mut rstat_group = ptr::null_mut();
    let mut raw = [0u64; 4];
    // SAFETY: valid pointers, except the misaligned ones the calls must
    // refuse before using them.
    unsafe {
        let misaligned = raw.as_mut_ptr().cast::<u8>().add(1);
        returns_documented(
            "rstat_new",
            rstat_new(misaligned.cast(), &mut rs),
            RSTAT_EFAULT,
        );
        assert_eq!(rstat_new(&opts, &mut rs), 0);
        assert_eq!(rstat_root(rs, &mut root), 0);
        let items = [c"a".as_ptr()];
        let mut cs: *mut rstat_counters = ptr::null_mut();
        assert_eq!(
            rstat_counters_register(rs, c"io".as_ptr(), items.as_ptr(), ptr::null(), 1, &mut cs),
            0
        );
        let mut x: *mut rstat_counters = ptr::null_mut();
        returns_documented(
            "rstat_counters_register",
            rstat_counters_register(
                rs,
                c"big".as_ptr(),
                items.as_ptr(),
                ptr::null(),
                RSTAT_MAX_ITEMS + 1,
                &mut x,
            ),
            RSTAT_EINVAL,
        );
        returns_documented(
            "rstat_counters_register",
            rstat_counters_register(rs, c"\xff".as_ptr(), items.as_ptr(), ptr::null(), 1, &mut x),
            RSTAT_EINVAL,
        );
        let mut idx = 0u32;
        returns_documented(
            "rstat_counters_item",
            rstat_counters_item(cs, c"\xff".as_ptr(), &mut idx),
            RSTAT_EINVAL,
        );
        let mut v = [0i64; 1];
        returns_documented(
            "rstat_counters_read",
            rstat_counters_read(cs, root, 0, v.as_mut_ptr(), 0),
            RSTAT_ERANGE,
        );
        returns_documented(
            "rstat_counters_read",
            rstat_counters_read(cs, root, 8, v.as_mut_ptr(), 1),
            RSTAT_EINVAL,
        );
        returns_documented(
            "rstat_counters_read",
            rstat_counters_read(cs, root, 0, ptr::null_mut(), 1),
            RSTAT_EFAULT,
        );
        returns_documented(
            "rstat_counters_read",
            rstat_counters_read(root.cast(), root, 0, v.as_mut_ptr(), 1),
            RSTAT_EPROTOTYPE,
        );
        let mut buf = [0 as c_char; 16];
        returns_documented(
            "rstat_read",
            rstat_read(
                root,
                c"\xff".as_ptr(),
                buf.as_mut_ptr(),
                buf.len(),
                ptr::null_mut(),
            ),
            RSTAT_EINVAL,
        );
        // Without a memory controller.
        let mut u = 0u64;
        for (func, rc) in [
            ("rstat_memory_current", rstat_memory_current(root, &mut u)),
            ("rstat_memory_peak", rstat_memory_peak(root, &mut u)),
            ("rstat_memory_drain", rstat_memory_drain(root)),
        ] {
            returns_documented(func, rc, RSTAT_EOPNOTSUPP);
        }
        returns_documented(
            "rstat_memory_current",
            rstat_memory_current(root, ptr::null_mut()),
            RSTAT_EFAULT,
        );
        returns_documented(
            "rstat_memory_peak",
            rstat_memory_peak(root, ptr::null_mut()),
            RSTAT_EFAULT,
        );
        returns_documented(
            "rstat_memory_drain",
            rstat_memory_drain(cs.cast()),
            RSTAT_EPROTOTYPE,
        );
        assert_eq!(rstat_free(rs), 0);

        // With one: a misaligned result pointer.
        let opts = rstat_options {
            flags: RSTAT_OPT_NO_PERIODIC_FLUSH,
            ..opts
        };
        assert_eq!(rstat_new(&opts, &mut rs), 0);
        assert_eq!(rstat_root(rs, &mut root), 0);
        returns_documented(
            "rstat_memory_try_charge",
            rstat_memory_try_charge(root, 1, 0, misaligned.cast()),
            RSTAT_EFAULT,
        );
        assert_eq!(rstat_free(rs), 0);
    }
}

/// Slots for 2^32 CPUs are refused with `RSTAT_EINVAL` (once, the
/// attempt to reserve them was the way to `RSTAT_ENOMEM`, and under
/// AddressSanitizer an abort); per-CPU state the system cannot give is
/// `RSTAT_ENOMEM`, and `rstat_strerror` describes that case too, not only
/// a charge over `memory.max`.
#[test]
fn a_cpu_count_past_any_machine_is_einval_and_enomem_is_described() {
    let opts = options(RSTAT_OPT_NO_PERIODIC_FLUSH, u32::MAX);
    let mut rs: *mut rstat = ptr::null_mut();
    // SAFETY: valid pointers.
    let rc = unsafe { rstat_new(&opts, &mut rs) };
    returns_documented("rstat_new", rc, RSTAT_EINVAL);
    assert!(rs.is_null());
    let mut msg = [0 as c_char; 512];
    // SAFETY: a buffer of that length.
    unsafe { rstat_last_error(msg.as_mut_ptr(), msg.len(), ptr::null_mut()) };
    // SAFETY: NUL-terminated by rstat_last_error.
    let msg = unsafe { std::ffi::CStr::from_ptr(msg.as_ptr()) };
    assert!(msg.to_str().unwrap().contains("per-CPU slots"), "{msg:?}");
    // Per-CPU state the system refuses (a machine out of memory) is
    // `RSTAT_ENOMEM`, whose description fits it as well as `memory.max`.
    // SAFETY: a static NUL-terminated string.
    let what = unsafe { std::ffi::CStr::from_ptr(rstat_strerror(RSTAT_ENOMEM)) };
    let what = what.to_str().unwrap();
    assert!(
        what.contains("memory.max") && what.contains("per-CPU"),
        "rstat_strerror(RSTAT_ENOMEM) does not fit both causes: {what:?}"
    );
}
