//! The accounting allocator's operations on the stocks: charge and
//! uncharge one object (its units, its reference on the owner handle, its
//! stat deltas) in a slot, under a lock the caller holds, or on the fast
//! paths that find the slot by the owner handle alone. The memory
//! controller's side of the allocator (`memory::heap`) and the allocator
//! itself (`memory::alloc`) call them.

use std::sync::Arc;

use core::ptr::NonNull;

use super::lock::Held;
use super::slots::Taken;
use super::Stocks;
use crate::memory::memcg::MemCg;
use crate::memory::objcg::ObjCg;
use crate::sync::Ordering;

impl Stocks {
    /// The accounting allocator's charge of one object: take `n` units of
    /// `memcg` and one reference on its owner handle from the held stock
    /// (references are fetched [`REF_BATCH`](super::slots::REF_BATCH) at a
    /// time). False if the slot
    /// has fewer units, or none.
    ///
    /// The caller checked, under this lock, that `memcg` is online: its
    /// handle's base reference is then held until a drain that waits for
    /// this lock, so the handle is live.
    #[inline(always)]
    pub(crate) fn heap_consume(
        &self,
        h: &mut Held<'_>,
        memcg: &MemCg,
        size: u64,
        overhead: u64,
    ) -> bool {
        h.with(|s| match s.find(memcg) {
            Some(i) => s.heap_take_at(i, size, overhead),
            None => false,
        })
    }

    /// The accounting allocator's uncharge of one object bound to
    /// `memcg`'s handle: its `n` units (at most `batch`) and its reference
    /// go into the held stock. Returns what must be given back once the
    /// lock is released (a slot that overflowed or was evicted).
    ///
    /// The caller checked, under this lock, that `memcg` is online and may
    /// be stocked (see [`refill`](Self::refill) for the rules).
    #[inline(always)]
    pub(crate) fn heap_refill(
        &self,
        h: &mut Held<'_>,
        memcg: &Arc<MemCg>,
        size: u64,
        overhead: u64,
    ) -> Option<Taken> {
        let batch = self.batch;
        h.with(|s| match s.find(memcg) {
            Some(i) => s.heap_put_at(i, size, overhead, batch),
            // Out of line, so the common case returns `None` without
            // moving a `Taken` through the stack.
            None => s.heap_refill_new(memcg, size, overhead, batch),
        })
    }

    /// The accounting allocator's fast charge of one object to the group
    /// whose owner handle has serial `serial` (a handle the caller
    /// remembers but holds no reference on; `hint`: its address as the
    /// caller last saw it, where the slot lookup starts): if CPU `cpu`'s
    /// lock is free and its stock has a slot for that handle with the
    /// units, take them and one reference on the handle from it, and
    /// return the handle.
    /// `None` (nothing done) otherwise: the caller takes the full path.
    ///
    /// The slot's presence is the proof that the group's removal has not
    /// drained this CPU yet: the charge is ordered before that removal, and
    /// the handle's base reference is held until after it. The slot is
    /// found by the serial, not the address: after the removal the handle
    /// may be freed and a new group's handle made at its address, with a
    /// slot here, which an address would match (the loom model
    /// `fast_charge_never_takes_a_slot_of_a_handle_at_a_reused_address`).
    /// So `hint` only picks the index the probe starts at (the handle's
    /// preferred slot): it is neither compared nor dereferenced, and a
    /// stale one costs a longer probe, never a wrong slot.
    #[inline(always)]
    pub(crate) fn heap_charge_fast(
        &self,
        cpu: usize,
        serial: u64,
        hint: *const ObjCg,
        size: u64,
        overhead: u64,
    ) -> Option<NonNull<ObjCg>> {
        let mut h = self.cpus[cpu].try_lock()?;
        h.with(|s| {
            let i = s.find_serial(serial, hint)?;
            // A slot's key is non-null (a handle's address).
            let x = NonNull::new(s.keys[i].cast_mut())?;
            s.heap_take_at(i, size, overhead).then_some(x)
        })
    }

    /// The accounting allocator's fast uncharge of one object of owner
    /// handle `x` (the object's reference on it is given back): if CPU
    /// `cpu`'s lock is free and its stock has a slot for the handle's
    /// group, the units (at most `batch`) and the reference go into it.
    /// False (nothing done) otherwise, or while some group may be over its
    /// `memory.max` (see "Over the limit"): the caller takes the full path.
    ///
    /// As for [`heap_charge_fast`](Self::heap_charge_fast), the slot's
    /// presence orders this free before the group's removal, so the units
    /// go to the group that was charged (a handle is reparented only
    /// during its group's removal, before the drain).
    #[inline(always)]
    pub(crate) fn heap_uncharge_fast(
        &self,
        cpu: usize,
        x: *const ObjCg,
        size: u64,
        overhead: u64,
    ) -> bool {
        let batch = self.batch;
        // Relaxed: as in `may_stock`.
        if size + overhead > batch || self.nr_over.load(Ordering::Relaxed) != 0 {
            return false;
        }
        let Some(mut h) = self.cpus[cpu].try_lock() else {
            return false;
        };
        let out = h.with(|s| match s.find_key(x) {
            Some(i) => Ok(s.heap_put_at(i, size, overhead, batch)),
            None => Err(()),
        });
        drop(h);
        match out {
            Ok(Some(t)) => {
                t.give_back();
                true
            }
            Ok(None) => true,
            Err(()) => false,
        }
    }
}
