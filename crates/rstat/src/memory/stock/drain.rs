//! Emptying and reading the stocks across every CPU: drain chosen slots
//! into their page counters (limit writes, reclaim, a group going
//! offline), add their pending heap stat deltas, count a group's stocked
//! units. Each waits for every CPU's lock in turn.

use super::slots::{Taken, NR_STOCK};
use super::Stocks;
use crate::memory::memcg::MemCg;
#[cfg(all(rstat_loom, test))]
use crate::memory::objcg::ObjCg;

#[cfg(all(test, not(rstat_loom)))]
thread_local! {
    static DRAIN_LOOKUPS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Stocks {
    /// Empty, on every CPU, the slots whose group satisfies `pred`, into
    /// their page counters. Waits for each CPU's lock in turn. Returns the
    /// units uncharged.
    pub(crate) fn drain(&self, pred: impl Fn(&MemCg) -> bool) -> u64 {
        let mut total = 0u64;
        // Room for one CPU's slots, on the stack: no allocation, so a drain
        // is exact for the caller's own group (a scratch buffer's free
        // would go back into its stock), and nothing is allocated under a
        // stock lock (the accounting allocator's charge may need it).
        let mut taken: [Option<Taken>; NR_STOCK] = Default::default();
        for cpu in self.cpus.iter() {
            let mut h = cpu.lock();
            h.with(|s| {
                for (i, t) in taken.iter_mut().enumerate() {
                    if s.cached[i].as_deref().is_some_and(&pred) {
                        *t = s.take(i);
                    }
                }
            });
            drop(h);
            for t in taken.iter_mut().filter_map(Option::take) {
                total = total.saturating_add(t.give_back());
            }
        }
        total
    }

    /// [`drain`](Self::drain) of one group's slots: on every CPU, empty
    /// `memcg`'s slot, found by its lookup (one probe when it has a slot
    /// there) rather than by testing every slot, and looked up only on the
    /// CPUs whose stock ever made a slot for it (`MemCg::stocked_on`, read
    /// under the CPU's lock, where it is exact): a group used on a few
    /// CPUs costs a lock per CPU and a lookup per CPU it used. What a group
    /// going offline (or the root, at its engine's drop) pays. Every CPU's
    /// lock is still taken: that is also the owner handles' grace period
    /// (see `objcg`). Returns the units uncharged.
    pub(crate) fn drain_one(&self, memcg: &MemCg) -> u64 {
        let mut total = 0u64;
        for (c, cpu) in self.cpus.iter().enumerate() {
            let mut h = cpu.lock();
            if !memcg.stocked_on.may_hold(c) {
                continue;
            }
            let t = h.with(|s| {
                #[cfg(all(test, not(rstat_loom)))]
                DRAIN_LOOKUPS.with(|n| n.set(n.get() + 1));
                s.find(memcg).and_then(|i| s.take(i))
            });
            drop(h);
            if let Some(t) = t {
                total = total.saturating_add(t.give_back());
            }
        }
        total
    }

    /// Return idle stock (the periodic flusher's pass, every
    /// [`DEFAULT_FLUSH_PERIOD`](crate::DEFAULT_FLUSH_PERIOD) by default):
    /// on every CPU, empty the slots not used since the previous pass into
    /// their page counters, and mark the others unused. So a group that
    /// stops charging and uncharging gets its pre-charged units back out of
    /// its `memory.current` within two passes. Takes each CPU's lock in
    /// turn (waiting for it, as every drain does). Returns the units
    /// uncharged.
    pub(crate) fn return_idle(&self) -> u64 {
        let mut total = 0u64;
        // On the stack, as in `drain`: nothing allocated under a lock.
        let mut taken: [Option<Taken>; NR_STOCK] = Default::default();
        for cpu in self.cpus.iter() {
            let mut h = cpu.lock();
            h.with(|s| s.return_idle(&mut taken));
            drop(h);
            for t in taken.iter_mut().filter_map(Option::take) {
                total = total.saturating_add(t.give_back());
            }
        }
        total
    }

    /// Add the pending heap stat deltas of every slot whose group
    /// satisfies `pred`, on every CPU, to their groups' stat items. Takes
    /// each CPU's lock in turn.
    pub(crate) fn flush_stats(&self, pred: impl Fn(&MemCg) -> bool) {
        for cpu in self.cpus.iter() {
            let mut h = cpu.lock();
            h.with(|s| {
                for i in 0..NR_STOCK {
                    if s.cached[i].as_deref().is_some_and(&pred) {
                        s.flush_stats(i);
                    }
                }
            });
        }
    }

    /// Give `memcg`'s slot on CPU `cpu` the key `addr`, as if its handle
    /// had been made at that address (the loom model of address reuse).
    #[cfg(all(rstat_loom, test))]
    pub(crate) fn rekey_for_model(&self, cpu: usize, memcg: &MemCg, addr: *const ObjCg) {
        let mut h = self.cpus[cpu].lock();
        h.with(|s| {
            if let Some(i) = s.find(memcg) {
                s.keys[i] = addr;
            }
        });
    }

    /// How many slot lookups this thread's [`drain_one`](Self::drain_one)
    /// calls made so far (tests of the drain).
    #[cfg(all(test, not(rstat_loom)))]
    pub(crate) fn drain_lookups() -> usize {
        DRAIN_LOOKUPS.with(std::cell::Cell::get)
    }

    /// The preferred slot index of `memcg` (tests of the lookup).
    #[cfg(all(test, not(rstat_loom)))]
    pub(crate) fn preferred_slot(memcg: &MemCg) -> usize {
        super::slots::preferred(memcg.objcg().as_ptr())
    }

    /// The index of `memcg`'s slot on CPU `cpu`, if it has one (tests of
    /// the lookup).
    #[cfg(all(test, not(rstat_loom)))]
    pub(crate) fn slot_index(&self, cpu: usize, memcg: &MemCg) -> Option<usize> {
        self.cpus[cpu].lock().with(|s| s.find(memcg))
    }

    /// Units of `memcg` in all stocks. Takes every CPU's lock in turn, and
    /// looks up the group's slot only where it ever had one (as
    /// [`drain_one`](Self::drain_one)).
    pub(crate) fn stocked(&self, memcg: &MemCg) -> u64 {
        let mut total = 0u64;
        for (c, cpu) in self.cpus.iter().enumerate() {
            let mut h = cpu.lock();
            if memcg.stocked_on.may_hold(c) {
                total += h.with(|s| s.find(memcg).map_or(0, |i| s.nr[i]));
            }
        }
        total
    }
}
