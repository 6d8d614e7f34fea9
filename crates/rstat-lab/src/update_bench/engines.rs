//! The engines `rstat bench update` measures and the loop that updates
//! through an item: [`Bench`] builds one engine's controllers, groups and
//! items and checks afterwards that an exact read equals every update made
//! (the honesty check); [`item_loop`] times threads adding through a
//! [`rstat::StatItem`]. Used by the run ([`super::run`]) and by the sweep
//! ([the sweep](mod@super::sweep)).

use std::hint::black_box;

use crate::machine::per_thread;

/// Panic with the setup step that failed (a benchmark has no caller to
/// hand an error to).
pub(super) fn must<T>(what: &str, r: rstat::Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what}: {e}"),
    }
}

/// The counter-set updates measured on one engine: a delta-1 item of a
/// group at depth 1, and a 4096-unit item of a group at depth 5.
pub(super) struct Bench {
    pub(super) rs: rstat::Rstat,
    pub(super) ctl: rstat::ControllerHandle,
    pub(super) g: rstat::Group,
    pub(super) handle: rstat::StatHandle,
    pub(super) item: rstat::StatItem,
    pub(super) bytes: rstat::ControllerHandle,
    pub(super) deep: rstat::Group,
    pub(super) deep_item: rstat::StatItem,
}

impl Bench {
    pub(super) fn new(b: rstat::Builder) -> Self {
        let rs = must("building the engine", b.build());
        let ctl = must(
            "registering the bench controller",
            rs.register_counters("bench", &["ops"]),
        );
        let bytes = must(
            "registering the bytes controller",
            rs.register_counters_with_units("bytes", &[("bytes", 4096)]),
        );
        let g = must("creating the bench group", rs.root().create_child("g"));
        let handle = must("resolving the handle", ctl.stat_handle(&g));
        let item = must("resolving the item", handle.item(0));
        let mut deep = rs.root().clone();
        for d in 1..=5 {
            deep = must(
                "creating the deep groups",
                deep.create_child(&format!("d{d}")),
            );
        }
        let deep_item = must(
            "resolving the deep item",
            bytes.stat_handle(&deep).and_then(|h| h.item(0)),
        );
        Bench {
            rs,
            ctl,
            g,
            handle,
            item,
            bytes,
            deep,
            deep_item,
        }
    }

    /// The honesty check: an exact read equals the sum of every update.
    pub(super) fn check(
        &self,
        ctl: &rstat::ControllerHandle,
        g: &rstat::Group,
        want: i64,
        what: &str,
    ) {
        let got = must("the honesty check's read", ctl.read_exact(g)).local()[0];
        assert_eq!(
            got, want,
            "rstat lost updates during the benchmark ({what})"
        );
    }
}

/// Mops/s of `threads` threads each adding `delta` `n` times through `item`.
pub(super) fn item_loop(threads: usize, n: u64, item: &rstat::StatItem, delta: i64) -> f64 {
    per_thread(threads, n, |_| {
        let h = item.clone();
        move || {
            for _ in 0..n {
                h.add(black_box(delta));
            }
        }
    })
}
