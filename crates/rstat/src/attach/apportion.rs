//! Apportioning a thread's CPU time among the wall-time segments it spent
//! in groups since its last reconciliation (see `feed.rs`).
//!
//! Two steps, both in integers, both exact in sum:
//!
//! 1. [`fill_shortest_first`]: the CPU time (ns) is shared out so that no segment
//!    gets more than its own wall time (a thread cannot run longer than
//!    the time that passed), and the time the thread did *not* run (it
//!    blocked, or was preempted) is taken from the longest segments
//!    first: the segments are filled with their wall time from the
//!    shortest up, until the CPU time runs out. Off-CPU time comes in
//!    long stretches (a sleep, a wait for I/O, a scheduler slice taken by
//!    another thread), and a stretch makes its segment the long one; so
//!    the segment that blocked is the one charged less. When the thread
//!    ran all along, every segment gets its wall time. (A common cap, as
//!    in water filling, would spread a sleep's deficit over the segments
//!    that ran: 50 µs run, 1 ms asleep with 5 µs run, 50 µs run would be
//!    charged 35 µs each instead of 50, 5, 50.)
//! 2. [`to_units`]: the ns shares become whole µs (the `cpu` controller's
//!    unit) by the largest-remainder method: each gets the floor of its
//!    exact share of the interval's µs, and the µs left over (fewer than
//!    the segments) go one each to the largest remainders. Each segment's
//!    µs are within 1 µs of its exact share, and they sum to the interval's
//!    µs exactly.

/// Share `cpu` ns among segments of `walls` ns (same length as `out`, at
/// least one), shortest first: `out[i] <= walls[i]` unless the walls sum
/// to less than `cpu`, in which case every segment gets its wall and the
/// longest the excess. `out` sums to `cpu` exactly.
pub(crate) fn fill_shortest_first(walls: &[u64], cpu: u64, out: &mut [u64]) {
    let n = walls.len();
    debug_assert!(n >= 1 && out.len() == n);
    let Some(longest) = (0..n).max_by_key(|&i| walls[i]) else {
        return;
    };
    let total: u128 = walls.iter().map(|&w| u128::from(w)).sum();
    if total <= u128::from(cpu) {
        // The thread ran all along (the two clocks were read a few ns
        // apart, so the CPU time can exceed the wall time by that).
        out.copy_from_slice(walls);
        // `total <= cpu`, so it fits in a u64.
        out[longest] += cpu - total as u64;
        return;
    }
    // Fill the segments from the shortest up; the first that does not fit
    // gets what is left, and the longer ones nothing.
    let mut order = [0usize; super::feed::MAX_SEGMENTS + 1];
    let order = &mut order[..n];
    for (i, o) in order.iter_mut().enumerate() {
        *o = i;
    }
    order.sort_unstable_by_key(|&i| walls[i]);
    let mut left = cpu;
    for &i in order.iter() {
        out[i] = walls[i].min(left);
        left -= out[i];
    }
}

/// Turn `shares` (ns, summing to `cpu`) into whole units summing to
/// `total` (the µs boundaries the thread's clock crossed in the interval),
/// each within one unit of `total * share / cpu`.
pub(crate) fn to_units(shares: &[u64], cpu: u64, total: u64, out: &mut [u64]) {
    let n = shares.len();
    debug_assert!(n >= 1 && out.len() == n);
    out.fill(0);
    if cpu == 0 {
        // No time passed, so no boundary was crossed either.
        if let Some(last) = out.last_mut() {
            *last = total;
        }
        return;
    }
    let mut rems = [0u64; super::feed::MAX_SEGMENTS + 1];
    let rems = &mut rems[..n];
    let mut assigned = 0u64;
    for i in 0..n {
        let p = u128::from(total) * u128::from(shares[i]);
        // Each quotient is at most `total` (a share is at most `cpu`) and
        // each remainder is below `cpu`.
        out[i] = (p / u128::from(cpu)) as u64;
        rems[i] = (p % u128::from(cpu)) as u64;
        assigned += out[i];
    }
    // The remainders sum to `left * cpu`, each below `cpu`: more than
    // `left` of them are non-zero, so each largest is picked at most once.
    let mut left = total.saturating_sub(assigned);
    while left > 0 {
        let Some(i) = (0..n).max_by_key(|&i| (rems[i], core::cmp::Reverse(i))) else {
            break;
        };
        out[i] += 1;
        rems[i] = 0;
        left -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_blocked_segment_takes_the_time_not_run() {
        // 50 µs on the CPU, 1 ms asleep with 5 µs on the CPU, 50 µs on it.
        let walls = [50_000, 1_000_000, 50_000];
        let mut out = [0; 3];
        fill_shortest_first(&walls, 105_000, &mut out);
        assert_eq!(out, [50_000, 5_000, 50_000]);
    }

    #[test]
    fn a_thread_that_ran_all_along_is_charged_its_walls() {
        let mut out = [0; 3];
        fill_shortest_first(&[10, 20, 30], 63, &mut out);
        assert_eq!(out, [10, 20, 33]);
        fill_shortest_first(&[0, 0, 0], 7, &mut out);
        assert_eq!(out.iter().sum::<u64>(), 7);
    }

    #[test]
    fn units_follow_the_largest_remainders() {
        let mut out = [0; 3];
        to_units(&[1_500, 1_500, 0], 3_000, 3, &mut out);
        assert_eq!(out.iter().sum::<u64>(), 3);
        assert_eq!(out[2], 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 8 } else { 2000 }))]
        #[test]
        fn shares_are_exact_in_sum_and_bounded(
            walls in proptest::collection::vec(0u64..10_000_000_000, 1..=17),
            cpu in 0u64..20_000_000_000,
            since in 0u64..1_000_000,
        ) {
            let n = walls.len();
            let mut shares = vec![0; n];
            fill_shortest_first(&walls, cpu, &mut shares);
            prop_assert_eq!(shares.iter().sum::<u64>(), cpu);
            let total: u64 = walls.iter().sum();
            if total >= cpu {
                for i in 0..n {
                    prop_assert!(shares[i] <= walls[i]);
                }
                // Shortest first: a segment charged less than its wall
                // is at least as long as any segment charged all of its.
                for i in 0..n {
                    for j in 0..n {
                        if shares[i] < walls[i] && shares[j] == walls[j] && walls[j] > 0 {
                            prop_assert!(walls[i] >= walls[j]);
                        }
                    }
                }
            }
            let units = (since + cpu) / 1000 - since / 1000;
            let mut us = vec![0; n];
            to_units(&shares, cpu, units, &mut us);
            prop_assert_eq!(us.iter().sum::<u64>(), units);
            if cpu > 0 {
                for i in 0..n {
                    let exact = units as f64 * shares[i] as f64 / cpu as f64;
                    prop_assert!((us[i] as f64 - exact).abs() < 1.0 + 1e-6);
                }
            }
        }
    }
}
