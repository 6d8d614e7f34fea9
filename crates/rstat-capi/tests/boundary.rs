//! The boundary itself: every exported function catches panics, and the
//! unsafe argument handling (strings, out-parameters, size-prefixed
//! structs, text buffers, the handle table's lock) is exercised once per
//! path, small enough to run under Miri (`.ci/run`).

use std::ffi::c_char;
use std::ptr;

use rstat_capi::*;

/// Every `extern "C"` function runs its body in `ffi` (or, for
/// `rstat_last_error`, its own `catch_unwind`), except the two that cannot
/// panic: a constant and a match over static strings.
#[test]
fn every_exported_function_catches_panics() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
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
    let opts = rstat_options {
        size: std::mem::size_of::<rstat_options>() as u32,
        flags: RSTAT_OPT_NO_PERIODIC_FLUSH,
        nr_cpus: 2,
        ..Default::default()
    };
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
