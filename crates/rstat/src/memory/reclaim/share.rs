//! How much a reclaim takes from each group (module docs, "How much to
//! take from each group", "Granularity", "Concurrent reclaims"): the
//! candidates of a pass with their effective protection and scaled size,
//! the reservation that keeps concurrent reclaims above a group's
//! protection, and the split of a group's request among its reclaimers.
//! The walk (`walk`) decides whom to visit and calls these.

use std::sync::Arc;

use super::{reclaiming, Reclaimer};
use crate::group::Group;
use crate::memory::memcg::MemCg;
use crate::sync;

/// One group of the subtree being reclaimed.
pub(super) struct Node {
    pub(super) group: Group,
    pub(super) memcg: Arc<MemCg>,
    pub(super) parent: Option<usize>,
}

/// A reclaimer of a group chosen in a pass, with what it reported.
pub(super) struct Sized {
    reclaimer: Arc<dyn Reclaimer>,
    /// Its reclaimable size.
    size: u64,
    /// Its granularity, at least 1.
    granularity: u64,
}

/// A group chosen in a pass.
pub(super) struct Candidate {
    pub(super) node: usize,
    pub(super) reclaimers: Vec<Sized>,
    pub(super) size: u64,
    /// The largest of its reclaimers' granularities: what a request to the
    /// group is rounded to.
    pub(super) granularity: u64,
    pub(super) scan: u64,
    pub(super) protection: u64,
    /// Its protection in this pass is its `elow`, above its `emin`.
    pub(super) held_by_low: bool,
    pub(super) breaches_low: bool,
}

/// The groups a pass may reclaim from, in tree order, and whether a group
/// was skipped for its `low` (module docs).
pub(super) fn candidates(nodes: &[Node], tm: &MemCg, low_reclaim: bool) -> (Vec<Candidate>, bool) {
    let mut low_skipped = false;
    // Each group's own usage: its usage minus its children's.
    let usage: Vec<u64> = nodes.iter().map(|n| n.memcg.counter.usage()).collect();
    let mut own = usage.clone();
    for (i, n) in nodes.iter().enumerate() {
        if let Some(p) = n.parent {
            own[p] = own[p].saturating_sub(usage[i]);
        }
    }
    let mut cands = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let c = &n.memcg.counter;
        // Top-down: each group's parent was computed just before it.
        c.calculate_protection(&tm.counter);
        if usage[i] == 0 {
            continue;
        }
        let (emin, elow) = if i == 0 { (0, 0) } else { (c.emin(), c.elow()) };
        if usage[i] <= emin {
            continue;
        }
        let breaches_low = usage[i] <= elow;
        if breaches_low && !low_reclaim {
            low_skipped = true;
            continue;
        }
        // Cloned out of the lock: reclaimers are called without it.
        let reclaimers: Vec<Arc<dyn Reclaimer>> = sync::lock(&n.memcg.reclaimers)
            .0
            .iter()
            .map(|(_, r)| Arc::clone(r))
            .collect();
        let reclaimers: Vec<Sized> = reclaimers
            .into_iter()
            .map(|r| Sized {
                size: r.reclaimable().unwrap_or(own[i]),
                granularity: r.granularity().max(1),
                reclaimer: r,
            })
            .collect();
        let size = reclaimers
            .iter()
            .fold(0u64, |a, r| a.saturating_add(r.size));
        if size == 0 {
            continue;
        }
        let granularity = reclaimers.iter().map(|r| r.granularity).max().unwrap_or(1);
        // Held back by `low` rather than `min`: what `low` keeps from
        // this pass, a low-reclaim pass may take.
        let held_by_low = !low_reclaim && elow > emin;
        let protection = if held_by_low { elow } else { emin };
        let scan = scaled_size(size, usage[i], protection);
        if scan == 0 {
            low_skipped |= held_by_low;
            continue;
        }
        cands.push(Candidate {
            node: i,
            reclaimers,
            size,
            granularity,
            scan,
            protection,
            held_by_low,
            breaches_low,
        });
    }
    (cands, low_skipped)
}

/// Units reserved above a group's protection for one visit: what its
/// reclaimers are asked for, not yet freed. Released on drop (also if a
/// reclaimer panics).
pub(super) struct Reservation<'a> {
    memcg: &'a MemCg,
    pub(super) amount: u64,
}

impl<'a> Reservation<'a> {
    /// Reserve what `amount` (a multiple of `g`) fits, as [`fit`] does, in
    /// the room `memcg` has above `protection` less what other visits have
    /// reserved; possibly nothing. Usage is read under the lock, after the
    /// reclaims that released their reservations uncharged what they freed
    /// (module docs, "Concurrent reclaims").
    pub(super) fn take(memcg: &'a MemCg, protection: u64, amount: u64, g: u64) -> Self {
        let mut reserved = sync::lock(&memcg.reclaim_reserved);
        let room = memcg
            .counter
            .usage()
            .saturating_sub(protection)
            .saturating_sub(*reserved);
        let amount = fit(amount, room, g);
        *reserved += amount;
        Reservation { memcg, amount }
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.amount > 0 {
            *sync::lock(&self.memcg.reclaim_reserved) -= self.amount;
        }
    }
}

/// The kernel's protection scaling of a reclaimable `size`:
/// `size − size × protection / (max(usage, protection) + 1)`, capped at
/// `usage − protection` so a request never reaches into the protection.
fn scaled_size(size: u64, usage: u64, protection: u64) -> u64 {
    if protection == 0 {
        return size;
    }
    let cgroup_size = u128::from(usage.max(protection)) + 1;
    let kept = u128::from(size) * u128::from(protection) / cgroup_size;
    // kept ≤ size because protection < cgroup_size.
    let scan = size - kept as u64;
    scan.min(usage.saturating_sub(protection))
}

/// `n` rounded up to a multiple of `g` (≥ 1), saturating at the largest
/// multiple that fits.
pub(super) fn round_up(n: u64, g: u64) -> u64 {
    n.checked_next_multiple_of(g)
        .unwrap_or(u64::MAX - u64::MAX % g)
}

/// What to ask of a group for a claim of `amount` (a multiple of `g`) when
/// `room` is all it has above its protection: the claim if it fits, else
/// the largest multiple of `g` that does (possibly 0). Never more than
/// `room`: rounding up to the granularity never reaches into protection.
fn fit(amount: u64, room: u64, g: u64) -> u64 {
    if amount <= room {
        amount
    } else {
        room - room % g
    }
}

/// ⌈a / b⌉ for b > 0, saturating into u64.
pub(super) fn div_ceil(a: u128, b: u128) -> u64 {
    u64::try_from(a.div_ceil(b)).unwrap_or(u64::MAX)
}

/// Ask a group's reclaimers for `ask` units in proportion to their sizes
/// (which sum to `size`), each share rounded up to the reclaimer's
/// granularity but never past `ask` in all (so never into the group's
/// protection: `ask` was fitted to its room). Returns what they reported
/// freeing.
pub(super) fn call_reclaimers(rs: &[Sized], size: u64, ask: u64) -> u64 {
    reclaiming(|| {
        let mut got = 0u64;
        for r in rs {
            if got >= ask {
                break;
            }
            let left = ask - got;
            let share = div_ceil(u128::from(ask) * u128::from(r.size), u128::from(size))
                .min(r.size)
                .min(left);
            let share = fit(round_up(share, r.granularity), left, r.granularity);
            if share > 0 {
                got = got.saturating_add(r.reclaimer.reclaim(share));
            }
        }
        got
    })
}

#[cfg(all(test, not(rstat_loom)))]
mod tests {
    use super::*;
    use crate::page_counter::PAGE_COUNTER_MAX;

    #[test]
    fn scaled_size_follows_the_kernel_formula_and_never_reaches_protection() {
        assert_eq!(scaled_size(100, 100, 0), 100);
        // 100 − 100·60/101 = 100 − 59 = 41, capped at 100 − 60 = 40.
        assert_eq!(scaled_size(100, 100, 60), 40);
        // Local size smaller than usage: 10 − 10·50/201 = 10 − 2 = 8.
        assert_eq!(scaled_size(10, 200, 50), 8);
        assert_eq!(scaled_size(10, 50, 50), 0);
        assert_eq!(
            scaled_size(u64::MAX, PAGE_COUNTER_MAX, 1),
            PAGE_COUNTER_MAX - 1
        );
    }

    #[test]
    fn requests_round_up_to_the_granularity_but_never_past_the_room() {
        assert_eq!(round_up(0, 4096), 0);
        assert_eq!(round_up(1, 4096), 4096);
        assert_eq!(round_up(4096, 4096), 4096);
        assert_eq!(round_up(7, 1), 7);
        assert_eq!(round_up(u64::MAX, 4096), u64::MAX - u64::MAX % 4096);
        assert_eq!(fit(4096, 10_000, 4096), 4096);
        assert_eq!(fit(8192, 6000, 4096), 4096);
        assert_eq!(fit(4096, 2000, 4096), 0);
    }

    #[test]
    fn div_ceil_rounds_up() {
        assert_eq!(div_ceil(10, 3), 4);
        assert_eq!(div_ceil(9, 3), 3);
        assert_eq!(div_ceil(u128::MAX, 1), u64::MAX);
    }
}
