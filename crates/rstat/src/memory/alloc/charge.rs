//! Whom an allocation charges and a free uncharges: the fast paths
//! through this CPU's stock (the allocation's keyed by the thread's
//! [`ChargeCache`], the free's by the object's owner handle), the full
//! paths through the memory controller (`memory::heap`), and `realloc`'s
//! resize. The `GlobalAlloc` impl (`global`) calls these.

use std::cell::Cell;
use std::ptr::NonNull;

use super::accounted::{Accounted, Binding};
use super::reentry::{inside, Inside};
use crate::group::EngineInner;
use crate::group::{Group, GroupInner};
use crate::memory::objcg::ObjCg;
use crate::memory::stock::Stocks;
// std's, as the allocator's atomics are (see `accounted`).
use std::sync::atomic::Ordering;

thread_local! {
    /// The fast path's memory of whom the last full-path charge went to:
    /// see [`ChargeCache`]. No destructor, `const`.
    static CHARGE_CACHE: Cell<ChargeCache> = const { Cell::new(ChargeCache::EMPTY) };
}

/// Whom this thread's allocations were last charged to by the full path:
/// while the binding and the thread's current group are the same (the same
/// group, not a new one at the same address: its engine and its id, unique
/// in that engine, are compared), allocations go to the same owner handle,
/// and the fast path charges it from this CPU's stock without resolving
/// the group again. Nothing here is dereferenced unless it matches; the
/// handle is used only if this CPU's stock still has a slot for it (the
/// proof that its group has not been removed: see
/// `Stocks::heap_charge_fast`).
#[derive(Clone, Copy)]
struct ChargeCache {
    binding: *const Binding,
    /// The current group's address (null: no group, so the root).
    group: *const GroupInner,
    /// Its id (0 for the root case).
    id: u64,
    /// The serial of the owner handle the full path charged (the handle
    /// itself is found through this CPU's stock slot carrying it: its
    /// address alone could be another handle's by now).
    serial: u64,
    /// That handle's address: only a hint of where its slot sits in the
    /// stock (the probe starts at its preferred index), never dereferenced
    /// nor compared (the serial decides), so a stale one is harmless.
    handle: *const ObjCg,
    /// The binding's stocks (which live as long as the binding: forever).
    stocks: *const Stocks,
}

impl ChargeCache {
    const EMPTY: ChargeCache = ChargeCache {
        binding: core::ptr::null(),
        group: core::ptr::null(),
        id: 0,
        serial: 0,
        handle: core::ptr::null(),
        stocks: core::ptr::null(),
    };
}

impl<A> Accounted<A> {
    /// The fast charge of a new object: the owner handle this thread
    /// charged last ([`ChargeCache`]), if it is still the right one, charged
    /// from this CPU's stock. `None`: take the full path. Writes nothing
    /// but this CPU's stock slot (under its lock), allocates nothing, so
    /// it needs no re-entry flag (only checks it).
    #[inline(always)]
    fn charge_fast(&self, size: usize, overhead: usize) -> Option<NonNull<ObjCg>> {
        if inside() {
            return None;
        }
        let b = self.bind.load(Ordering::Acquire).cast_const();
        let c = CHARGE_CACHE.try_with(Cell::get).ok()?;
        let cur = crate::attach::current_group_ptr();
        if b.is_null() || !core::ptr::eq(c.binding, b) || !core::ptr::eq(c.group, cur) {
            return None;
        }
        if !cur.is_null() {
            // SAFETY: the current group is kept alive by the guard that made
            // it current (see `current_group_ptr`); the binding is never
            // freed.
            let g = unsafe { &*cur };
            // SAFETY: bindings are never freed.
            let engine = unsafe { (*b).engine };
            if g.id != c.id || !core::ptr::eq(engine_of(g), engine) {
                return None;
            }
        }
        if c.serial == 0 {
            return None;
        }
        // SAFETY: the binding's stocks, which it keeps forever. The handle
        // is reached only through this CPU's stock slot carrying its
        // serial, which proves it live (its group was removed, and the
        // handle perhaps freed, only if no slot names it: see
        // `heap_charge_fast`).
        let stocks = unsafe { &*c.stocks };
        stocks.heap_charge_fast(
            stocks.this_cpu(),
            c.serial,
            c.handle,
            size as u64,
            overhead as u64,
        )
    }

    /// Charge a new object of `size` bytes. `Ok(None)`: pass through;
    /// `Err(())`: refused (enforced limit).
    #[inline(always)]
    pub(super) fn charge_new(
        &self,
        size: usize,
        overhead: usize,
    ) -> Result<Option<NonNull<ObjCg>>, ()> {
        if let Some(x) = self.charge_fast(size, overhead) {
            return Ok(Some(x));
        }
        self.charge_full(size, overhead)
    }

    /// [`charge_new`](Self::charge_new)'s full path: resolve the group,
    /// charge it, and remember the handle for the fast path.
    #[inline(never)]
    fn charge_full(&self, size: usize, overhead: usize) -> Result<Option<NonNull<ObjCg>>, ()> {
        let Some(_inside) = Inside::enter() else {
            return Ok(None);
        };
        // SAFETY: bindings are never freed.
        let Some(b) = (unsafe { self.bind.load(Ordering::Acquire).as_ref() }) else {
            return Ok(None);
        };
        if !b.root.is_online() {
            return Ok(None); // the engine was dropped
        }
        let cur = crate::attach::current_group_ptr();
        // The group to charge, and the id the fast path's cache keys it by
        // (`None`: not cached, for a group of another engine).
        let (group, cache_id) = match NonNull::new(cur.cast_mut()) {
            // SAFETY: the current group is kept alive by the guard that
            // made it current, until this thread enters or leaves a group
            // (see `current_group_ptr`): not during this call.
            Some(p) if core::ptr::eq(engine_of(unsafe { p.as_ref() }), b.engine) => {
                // SAFETY: as above.
                (
                    unsafe { Group::borrow_ptr(p) },
                    Some(unsafe { p.as_ref() }.id),
                )
            }
            // SAFETY: the binding holds a reference on its root.
            p => (
                unsafe { Group::borrow_ptr(b.root.inner_ptr()) },
                p.is_none().then_some(0),
            ),
        };
        let cpu = b.mem.this_cpu();
        let x = b
            .mem
            .heap_charge(&group, size as u64, overhead as u64, cpu)
            .ok_or(())?;
        // Remember whom this went to, if it is the group's own handle (not
        // an ancestor's, after a removal) and the group is of this binding's
        // engine.
        if let Some(id) = cache_id.filter(|_| b.mem.heap_objcg_of(&group) == Some(x)) {
            let _ = CHARGE_CACHE.try_with(|c| {
                c.set(ChargeCache {
                    binding: b,
                    group: cur,
                    id,
                    // SAFETY: the new object's reference keeps `x` live.
                    serial: unsafe { x.as_ref() }.serial(),
                    handle: x.as_ptr(),
                    stocks: b.mem.stocks(),
                })
            });
        }
        Ok(Some(x))
    }

    /// The fast uncharge of a freed object: its units and its reference on
    /// `owner` into this CPU's stock, if that has a slot for the handle's
    /// group. False: take the full path ([`uncharge`](Self::uncharge)).
    /// Allocates nothing.
    #[inline(always)]
    pub(super) fn uncharge_fast(
        &self,
        owner: NonNull<ObjCg>,
        size: usize,
        overhead: usize,
    ) -> bool {
        // SAFETY: the object holds a reference on its handle.
        let stocks = Stocks::of_handle(unsafe { owner.as_ref() });
        if stocks.is_null() || crate::memory::reclaim::in_reclaim() {
            return false;
        }
        // SAFETY: the stocks of the controller the object was charged
        // through, which its binding keeps for the rest of the process.
        let stocks = unsafe { &*stocks };
        stocks.heap_uncharge_fast(
            stocks.this_cpu(),
            owner.as_ptr(),
            size as u64,
            overhead as u64,
        )
    }

    /// Uncharge the object whose owner word holds `owner`, giving back its
    /// reference on the handle.
    #[inline(always)]
    pub(super) fn uncharge(&self, owner: NonNull<ObjCg>, size: usize, overhead: usize) {
        // The re-entry flag is only for new allocations: this object's
        // bytes must leave its group whatever the nesting (the uncharge
        // path allocates only on errors, which then pass through).
        let _inside = Inside::enter();
        // SAFETY: the object holds a reference on its handle.
        let engine =
            core::ptr::without_provenance::<EngineInner>(unsafe { owner.as_ref() }.engine());
        match self.binding_for(engine) {
            Some(b) => {
                let cpu = b.mem.this_cpu();
                // SAFETY: the object's reference, given back once (its
                // owner word is not read again: the object is being freed).
                unsafe {
                    b.mem
                        .heap_uncharge(owner, size as u64, overhead as u64, cpu)
                }
            }
            // Cannot happen (a handle is only written through a binding,
            // and bindings are never freed); keep the count right anyway.
            // SAFETY: as above.
            None => drop(unsafe { ObjCg::put(owner, 1) }),
        }
    }

    /// Charge (grow) or uncharge (shrink) the difference of a resized
    /// object to its owner, counting the size and overhead changes. False
    /// if a growth was refused.
    pub(super) fn resize(
        &self,
        owner: NonNull<ObjCg>,
        old: (usize, usize),
        new: (usize, usize),
    ) -> bool {
        let _inside = Inside::enter();
        // SAFETY: the object holds a reference on its handle.
        let engine =
            core::ptr::without_provenance::<EngineInner>(unsafe { owner.as_ref() }.engine());
        let Some(b) = self.binding_for(engine) else {
            return true;
        };
        let cpu = b.mem.this_cpu();
        // SAFETY: the object's reference is held for the whole call.
        unsafe {
            b.mem.heap_resize(
                owner,
                (old.0 as u64, old.1 as u64),
                (new.0 as u64, new.1 as u64),
                cpu,
            )
        }
    }
}

/// The engine a group belongs to (an identity).
#[inline(always)]
fn engine_of(g: &GroupInner) -> *const EngineInner {
    std::sync::Arc::as_ptr(&g.engine)
}
