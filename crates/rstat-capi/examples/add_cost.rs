//! What the C ABI adds to an update: `rstat_add` (the extern "C" function
//! C calls) against the Rust API's `ControllerHandle::add`, measured side
//! by side in one run, at one thread and at two (each thread its own
//! group, as a server's workers usually are). Prints ns per update and the
//! ratio. Figures from a busy machine are noisy; compare the ratios.
//!
//! `cargo run --release -p rstat-capi --example add_cost`

use std::ptr;
use std::time::Instant;

use rstat_capi::*;

const N: u64 = 5_000_000;

fn per_thread<F: Fn(usize) + Sync>(threads: usize, f: F) -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let f = &f;
            s.spawn(move || f(t));
        }
    });
    start.elapsed().as_nanos() as f64 / N as f64
}

fn main() {
    // Rust API.
    let rs = ::rstat::Rstat::builder()
        .periodic_flush(None)
        .build()
        .unwrap();
    let io = rs.register_counters("io", &["ops"]).unwrap();
    let groups: Vec<_> = (0..2)
        .map(|i| rs.root().create_child(&format!("g{i}")).unwrap())
        .collect();

    // C ABI.
    let opts = rstat_options {
        size: std::mem::size_of::<rstat_options>() as u32,
        flags: RSTAT_OPT_NO_PERIODIC_FLUSH,
        ..Default::default()
    };
    let mut crs: *mut rstat = ptr::null_mut();
    let mut root: *mut rstat_group = ptr::null_mut();
    let mut cs: *mut rstat_counters = ptr::null_mut();
    let mut cg = [0usize; 2];
    // SAFETY: valid pointers and NUL-terminated strings.
    unsafe {
        assert_eq!(rstat_new(&opts, &mut crs), 0);
        assert_eq!(rstat_root(crs, &mut root), 0);
        let items = [c"ops".as_ptr()];
        assert_eq!(
            rstat_counters_register(crs, c"io".as_ptr(), items.as_ptr(), ptr::null(), 1, &mut cs),
            0
        );
        for (i, name) in [c"g0", c"g1"].iter().enumerate() {
            let mut g: *mut rstat_group = ptr::null_mut();
            assert_eq!(rstat_group_create(root, name.as_ptr(), &mut g), 0);
            cg[i] = g as usize;
        }
    }
    let csv = cs as usize;

    println!("update cost, ns per update per thread ({N} updates per thread; machine may be busy)");
    for threads in [1, 2] {
        let rust = per_thread(threads, |t| {
            for _ in 0..N {
                io.add(&groups[t], 0, 1).unwrap();
            }
        });
        let c = per_thread(threads, |t| {
            let (cs, g) = (
                ptr::without_provenance_mut(csv),
                ptr::without_provenance_mut(cg[t]),
            );
            for _ in 0..N {
                assert_eq!(rstat_add(cs, g, 0, 1), 0);
            }
        });
        println!(
            "{threads} thread(s): Rust ControllerHandle::add {rust:6.2} ns, C rstat_add {c:6.2} ns, ratio {:.2}",
            c / rust
        );
    }
    assert_eq!(rstat_free(crs), 0);
}
