//! The depth x delta sweep of `rstat bench update` (its `shapes`): the
//! same update through a [`rstat::StatItem`] at depths 1, 2, 4 and 8 with
//! deltas 1, 64 and 4096 on an item in unit 1, so a delta of 64 or more
//! crosses the `Threshold` count on every update and the cost of the walk
//! over the ancestors shows as the tree deepens. [`super::run`] runs it on
//! its default engine after the other cases.

use serde::Serialize;

use super::engines::{item_loop, must};
use crate::machine::{median, round};

/// Depths of the sweep (group depth below the root).
pub const SWEEP_DEPTHS: [usize; 4] = [1, 2, 4, 8];
/// Deltas of the sweep (item unit 1).
pub const SWEEP_DELTAS: [i64; 3] = [1, 64, 4096];

/// One cell of the depth x delta sweep.
#[derive(Clone, Debug, Serialize)]
pub struct ShapeRow {
    /// Depth of the updated group below the root.
    pub depth: usize,
    /// Delta of each update (item unit 1).
    pub delta: i64,
    /// ns per update, 1 thread.
    pub ns_1t: f64,
    /// Million updates per second, `threads` threads on the same group.
    pub mops_nt: f64,
}

/// The depth x delta sweep on `rs`: per cell, the median of `samples`
/// samples of `n` updates per thread at 1 and at `threads` threads; the
/// honesty check runs on every group.
pub(super) fn sweep(rs: &rstat::Rstat, n: u64, samples: usize, threads: usize) -> Vec<ShapeRow> {
    let n = n.max(1);
    let ctl = must(
        "registering the sweep controller",
        rs.register_counters("sweep", &["v"]),
    );
    let mut rows = Vec::new();
    for depth in SWEEP_DEPTHS {
        let mut g = rs.root().clone();
        for d in 1..=depth {
            g = must(
                "creating the sweep groups",
                g.create_child(&format!("sweep{depth}-{d}")),
            );
        }
        let item = must(
            "resolving the sweep item",
            ctl.stat_handle(&g).and_then(|h| h.item(0)),
        );
        // Warm the new group's lines and the code up, unmeasured.
        item_loop(1, n, &item, 1);
        let mut want = n as i64;
        for delta in SWEEP_DELTAS {
            let (mut one, mut many) = (Vec::new(), Vec::new());
            for _ in 0..samples.max(1) {
                one.push(1e3 / item_loop(1, n, &item, delta));
                many.push(item_loop(threads, n, &item, delta));
                want += (1 + threads as i64) * n as i64 * delta;
            }
            rows.push(ShapeRow {
                depth,
                delta,
                ns_1t: round(median(one), 3),
                mops_nt: round(median(many), 1),
            });
        }
        let got = must("the sweep's honesty read", ctl.read_exact(&g)).local()[0];
        assert_eq!(got, want, "rstat lost updates in the sweep (depth {depth})");
    }
    rows
}
