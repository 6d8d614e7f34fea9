//! One CPU's slot table ([`Slots`]): which groups it holds units for, and
//! the moves between a slot and its group: take and put units, the
//! allocator's handle references and stat deltas, evict, empty
//! ([`Taken`]). Everything here runs under the CPU's lock (`lock`), which
//! the stock (`mod.rs`) takes around it.

use std::sync::Arc;

use core::ptr::NonNull;

use crate::memory::config::HeapStats;
use crate::memory::memcg::MemCg;
use crate::memory::objcg::ObjCg;

/// Slots per CPU: how many groups one CPU's stock holds pre-charged units
/// for at once; 2 under loom.
///
/// The kernel's stock (`NR_MEMCG_STOCK`) has 7, enough for the few
/// cgroups a CPU runs between context switches. A userspace server's
/// worker thread switches groups at every poll (a tenant per request), so
/// one CPU sees as many groups as there are tenants at work; with fewer
/// slots than that, most charges and frees miss, go up the page counters
/// and evict another tenant's batch. With 32, a CPU serving up to 32
/// groups in turn keeps every one of them stocked; past that, its groups
/// share the slots (one evicted per new group, round-robin), and some
/// charges take the slow path again.
///
/// **Lookup.** A slot's preferred index is a multiplicative hash of its
/// group's owner handle address; a new slot takes the first free index
/// from its preferred one on (wrapping), and a lookup probes from the
/// preferred index on. A hit thus usually costs one probe whatever the
/// slot count. A slot emptied later leaves a hole, so a lookup cannot stop
/// at an empty index; instead each slot keeps a 7-bit tag of its handle's
/// hash, and a lookup that misses the preferred index tests only the
/// occupied slots with its tag: a miss (a group with no slot on this CPU,
/// as for a new group or a free on another CPU) costs one pass over the
/// tag bytes. A removal's drain does not look on a CPU whose stock never
/// made a slot for the group (`MemCg::stocked_on`).
///
/// **Memory.** Each CPU's stock grows with `NR_STOCK` (a slot is about
/// eight words and a tag byte: the group, handle address, tag and serial,
/// units, handle references, stat deltas): per memory controller and CPU,
/// not per group.
pub const NR_STOCK: usize = if cfg!(rstat_loom) { 2 } else { 32 };

/// Bits of a slot index (`NR_STOCK` is a power of two).
const INDEX_BITS: u32 = NR_STOCK.trailing_zeros();

const _: () = assert!(
    NR_STOCK.is_power_of_two() && NR_STOCK >= 2,
    "slot indices are the top bits of a hash"
);
const _: () = assert!(
    NR_STOCK <= u32::BITS as usize,
    "Slots::used has a bit per slot"
);

/// The multiplicative hash of an owner handle's address `x` (times a
/// 64-bit odd constant, 2^64 over the golden ratio), which spreads the
/// aligned, clustered addresses of heap blocks over its top bits. Only the
/// address is used; `x` is never dereferenced.
#[inline(always)]
fn hash(x: *const ObjCg) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    (x.addr() as u64).wrapping_mul(K)
}

/// The preferred slot index of the group whose owner handle is at `x`:
/// the top bits of its [`hash`].
#[inline(always)]
pub(super) fn preferred(x: *const ObjCg) -> usize {
    (hash(x) >> (u64::BITS - INDEX_BITS)) as usize
}

/// The tag of a slot whose owner handle is at `x`: the 7 bits of its
/// [`hash`] below the index bits, with the top bit set (0 is an empty
/// slot's). A lookup that misses its preferred index probes only the
/// occupied slots whose tag matches ([`Slots::tagged`]): about one in 128
/// of the others, so a miss costs a scan of 32 bytes, not a test of every
/// occupied slot.
#[inline(always)]
fn tag_of(x: *const ObjCg) -> u8 {
    ((hash(x) >> (u64::BITS - INDEX_BITS - 7)) as u8 & 0x7f) | 0x80
}

/// The first slot index among `candidates()` (a bit per index), probing
/// from `x`'s preferred index on (wrapping), that satisfies `hit`: the
/// preferred index inline, whatever the candidates (`hit` itself rejects a
/// slot of the wrong kind), then, only if it missed, the candidates (a
/// closure, so a hit does not compute them) out of line ([`probe_rest`]).
/// A new slot takes the first free index this way; lookups
/// ([`Slots::lookup`]) pass the occupied slots with the handle's tag.
#[inline(always)]
fn probe(
    x: *const ObjCg,
    candidates: impl FnOnce() -> u32,
    hit: impl Fn(usize) -> bool,
) -> Option<usize> {
    let h = preferred(x);
    if hit(h) {
        return Some(h);
    }
    match candidates() {
        0 => None,
        c => probe_rest(h, c, hit),
    }
}

/// [`probe`] past the preferred index `h`: the other candidates, those
/// above `h` in increasing order, then those below it.
#[inline(never)]
fn probe_rest(h: usize, candidates: u32, hit: impl Fn(usize) -> bool) -> Option<usize> {
    let above = candidates & !low_bits(h + 1);
    let below = candidates & low_bits(h);
    for mut m in [above, below] {
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            if hit(i) {
                return Some(i);
            }
            m &= m - 1;
        }
    }
    None
}

/// The mask of every slot index.
const ALL_SLOTS: u32 = low_bits(NR_STOCK);

/// The mask of bits `0..k` (all 32 for `k` >= 32).
#[inline(always)]
const fn low_bits(k: usize) -> u32 {
    if k >= u32::BITS as usize {
        u32::MAX
    } else {
        (1u32 << k) - 1
    }
}

/// Heap operations a slot counts before adding its stat deltas to its
/// group's items: a read through [`Memory::read`] or [`read_exact`] adds
/// every slot's first, so it stays exact; a read of the raw stat
/// controller ([`Memory::stat_controller`]) may miss fewer than this many
/// operations' deltas per (group, CPU).
///
/// [`Memory::read`]: crate::memory::Memory::read
/// [`read_exact`]: crate::memory::Memory::read_exact
/// [`Memory::stat_controller`]: crate::memory::Memory::stat_controller
pub const HEAP_STAT_BATCH: u32 = 64;

/// What one operation adds to a slot's packed count of operations
/// ([`Slots::ops`]): allocations in the low half, frees in the high.
const ONE_ALLOC: u64 = 1;
const ONE_FREE: u64 = 1 << 32;

/// References on a handle the allocator takes at once into a stock slot,
/// and the most a slot keeps (above it, the surplus goes back).
pub(crate) const REF_BATCH: usize = 64;
const REF_MAX: usize = 2 * REF_BATCH;

/// The slot table: `cached[i]` holds `nr[i]` pre-charged units,
/// `refs[i]` references on its group's owner handle ([`crate::memory::objcg`]),
/// taken in batches for the allocator's objects, and `stat[i]` the
/// allocator's `memory.stat` deltas of its group not yet added to the
/// group's stat items (see [`HEAP_STAT_BATCH`]).
pub(super) struct Slots {
    pub(super) cached: [Option<Arc<MemCg>>; NR_STOCK],
    /// `cached[i]`'s owner handle address (null for an empty slot): the
    /// accounting allocator finds a slot by the handle an object holds,
    /// without reaching its group. A handle lives while a slot names its
    /// state (the state holds its base reference until its removal has
    /// drained every slot), so an address here is never another handle's.
    pub(super) keys: [*const ObjCg; NR_STOCK],
    /// `keys[i]`'s [`tag_of`] (0 for an empty slot).
    pub(super) tags: [u8; NR_STOCK],
    /// `cached[i]`'s owner handle serial (0 for an empty slot): what a
    /// charge that remembers a handle without holding a reference on it
    /// matches, since a handle's address can be reused once it is freed
    /// (its group removed) and a slot then made for a new group's handle at
    /// that address
    /// ([`Stocks::heap_charge_fast`](super::Stocks::heap_charge_fast)).
    pub(super) serials: [u64; NR_STOCK],
    pub(super) nr: [u64; NR_STOCK],
    pub(super) refs: [usize; NR_STOCK],
    /// `stat[i]`: heap bytes and overhead deltas; `ops[i]`: the
    /// allocations (low 32 bits) and frees (high 32 bits) counted with
    /// them. Each is below [`HEAP_STAT_BATCH`] between two adds, so
    /// neither half overflows into the other.
    pub(super) stat: [[i64; 2]; NR_STOCK],
    pub(super) ops: [u64; NR_STOCK],
    /// This stock's CPU index, and the memory controller's stat
    /// controller id (`usize::MAX`: none, in models), for those adds.
    pub(super) cpu: usize,
    pub(super) stat_ctl: usize,
    /// The next slot index to evict when none is free (round-robin over
    /// the indices; see [`new_slot`](Self::new_slot)).
    pub(super) next_evict: usize,
    /// Bit `i`: slot `i` was used (units taken or put) since the last
    /// idle pass ([`return_idle`](Self::return_idle)), which empties the
    /// slots whose bit is clear and clears the others'.
    pub(super) used: u32,
    /// Bit `i`: slot `i` names a group (`cached[i]` is set), so lookups
    /// probe only these and a new slot only the others.
    pub(super) occupied: u32,
}

impl Slots {
    /// An empty table for CPU `cpu`; `stat_ctl`: the memory controller's
    /// stat controller id (`usize::MAX` in models: none).
    pub(super) fn new(cpu: usize, stat_ctl: usize) -> Slots {
        Slots {
            cached: Default::default(),
            keys: [core::ptr::null(); NR_STOCK],
            tags: [0; NR_STOCK],
            serials: [0; NR_STOCK],
            nr: [0; NR_STOCK],
            refs: [0; NR_STOCK],
            stat: [[0; 2]; NR_STOCK],
            ops: [0; NR_STOCK],
            cpu,
            stat_ctl,
            next_evict: 0,
            used: 0,
            occupied: 0,
        }
    }

    /// The slot of `memcg`, probing from its handle's preferred index
    /// (one probe on a hit, unless it collided; on a miss, only the
    /// occupied slots whose tag matches).
    #[inline(always)]
    pub(super) fn find(&self, memcg: &MemCg) -> Option<usize> {
        self.lookup(memcg.objcg().as_ptr(), |i| {
            self.cached[i]
                .as_deref()
                .is_some_and(|c| core::ptr::eq(c, memcg))
        })
    }

    /// The slot of the state whose owner handle is `x`.
    #[inline(always)]
    pub(super) fn find_key(&self, x: *const ObjCg) -> Option<usize> {
        self.lookup(x, |i| core::ptr::eq(self.keys[i], x))
    }

    /// The slot of the state whose owner handle has serial `serial` (not
    /// 0). `hint`, the handle's address as the caller last knew it, only
    /// says where to start probing and which tag to look for: it is
    /// neither compared nor dereferenced, so a stale one (the handle freed,
    /// its address reused by another handle with a slot here) finds at
    /// most a slot that fails the serial test, never another handle's: the
    /// serial decides. (A live handle's slot carries the tag of the
    /// address it has had since it was made, which is the hint.)
    #[inline(always)]
    pub(super) fn find_serial(&self, serial: u64, hint: *const ObjCg) -> Option<usize> {
        self.lookup(hint, |i| self.serials[i] == serial)
    }

    /// The slot whose handle is at `x` by `hit`: its preferred index
    /// first, inline; then, out of line, the other occupied slots with
    /// `x`'s tag. Every slot of handle `x` carries that tag (`new_slot`),
    /// so the filter only skips slots `hit` would reject.
    #[inline(always)]
    fn lookup(&self, x: *const ObjCg, hit: impl Fn(usize) -> bool) -> Option<usize> {
        probe(x, || self.occupied & self.tagged(tag_of(x)), hit)
    }

    /// The slots whose tag is `tag` (a bit per index): one pass over the
    /// 32 tag bytes, which the compiler turns into vector compares.
    #[inline(always)]
    fn tagged(&self, tag: u8) -> u32 {
        let mut m = 0u32;
        for (i, &t) in self.tags.iter().enumerate() {
            m |= u32::from(t == tag) << i;
        }
        m
    }

    /// The allocator's charge of one object from slot `i`: its units and
    /// one handle reference (fetched [`REF_BATCH`] at a time). False if the
    /// slot has fewer units.
    ///
    /// A slot names a state only until that state's removal drains it, and
    /// the state holds its handle's base reference until after that drain:
    /// the handle is live while we hold the lock.
    #[inline(always)]
    pub(super) fn heap_take_at(&mut self, i: usize, size: u64, overhead: u64) -> bool {
        let n = size + overhead;
        if self.nr[i] < n {
            return false;
        }
        self.nr[i] -= n;
        self.used |= 1 << i;
        if self.refs[i] == 0 {
            // SAFETY: the handle is live (above).
            unsafe { ObjCg::get(NonNull::new_unchecked(self.keys[i].cast_mut()), REF_BATCH) };
            self.refs[i] = REF_BATCH;
        }
        self.refs[i] -= 1;
        // Amounts are below PAGE_COUNTER_MAX: they fit an i64.
        self.count(i, size as i64, overhead as i64, ONE_ALLOC);
        true
    }

    /// The allocator's uncharge of one object into slot `i` (its units, at
    /// most `batch`, and its handle reference). Returns what must be given
    /// back once the lock is released (the slot, if it overflowed).
    #[inline(always)]
    pub(super) fn heap_put_at(
        &mut self,
        i: usize,
        size: u64,
        overhead: u64,
        batch: u64,
    ) -> Option<Taken> {
        // nr ≤ batch before, n ≤ batch ≤ MAX_BATCH: no overflow.
        self.nr[i] += size + overhead;
        self.refs[i] += 1;
        self.used |= 1 << i;
        self.count(i, -(size as i64), -(overhead as i64), ONE_FREE);
        if self.refs[i] > REF_MAX {
            let surplus = self.refs[i] - REF_BATCH;
            self.refs[i] = REF_BATCH;
            // SAFETY: these references were the slot's; the base reference
            // is held (a slot names the state), so this is not the last.
            unsafe { ObjCg::put(NonNull::new_unchecked(self.keys[i].cast_mut()), surplus) };
        }
        if self.nr[i] > batch {
            return self.take(i);
        }
        None
    }

    /// Add slot `i`'s pending heap stat deltas to its group's stat items
    /// (per-CPU adds). Under the lock: the group is live while a slot
    /// names its state (its removal drains the slot first).
    #[inline(never)]
    pub(super) fn flush_stats(&mut self, i: usize) {
        let ops = core::mem::take(&mut self.ops[i]);
        if ops == 0 {
            return;
        }
        let [bytes, overhead] = core::mem::take(&mut self.stat[i]);
        // Each half is below `HEAP_STAT_BATCH`: they fit an i64.
        let d: HeapStats = [bytes, overhead, (ops as u32) as i64, (ops >> 32) as i64];
        if let Some(m) = self.cached[i].as_deref() {
            m.add_heap_stats(self.stat_ctl, self.cpu, d);
        }
    }

    /// Count one heap operation in slot `i`: `bytes` and `overhead`
    /// (signed) and `op` ([`ONE_ALLOC`] or [`ONE_FREE`]), adding them to
    /// the group's items every [`HEAP_STAT_BATCH`] operations.
    ///
    /// Three words per slot, three adds from registers and one test: this
    /// runs on every fast allocation and free.
    #[inline(always)]
    fn count(&mut self, i: usize, bytes: i64, overhead: i64, op: u64) {
        let s = &mut self.stat[i];
        s[0] = s[0].wrapping_add(bytes);
        s[1] = s[1].wrapping_add(overhead);
        let ops = self.ops[i] + op;
        self.ops[i] = ops;
        // Allocations plus frees: both halves below the batch, no carry.
        if (ops as u32).wrapping_add((ops >> 32) as u32) >= HEAP_STAT_BATCH {
            self.flush_stats(i);
        }
    }

    /// Empty slot `i`; its group, units and handle references, if it
    /// named one (its stat deltas are added first).
    #[inline(never)]
    pub(super) fn take(&mut self, i: usize) -> Option<Taken> {
        self.flush_stats(i);
        let nr = core::mem::take(&mut self.nr[i]);
        let refs = core::mem::take(&mut self.refs[i]);
        self.keys[i] = core::ptr::null();
        self.tags[i] = 0;
        self.serials[i] = 0;
        self.occupied &= !(1 << i);
        self.cached[i].take().map(|m| Taken { memcg: m, nr, refs })
    }

    /// Put `n` units (at most `batch`) of `memcg` in its slot `here` (the
    /// caller's lookup), or in a new one if it has none: what must be
    /// given back once the lock is released (the slot, if it now holds
    /// more than `batch`, or a slot the new one evicted).
    #[inline(always)]
    pub(super) fn put(
        &mut self,
        here: Option<usize>,
        memcg: &Arc<MemCg>,
        n: u64,
        batch: u64,
    ) -> Option<Taken> {
        match here {
            Some(i) => {
                // nr ≤ batch before, n ≤ batch ≤ MAX_BATCH: no overflow.
                self.nr[i] += n;
                self.used |= 1 << i;
                if self.nr[i] > batch {
                    self.take(i)
                } else {
                    None
                }
            }
            None => {
                let (i, evicted) = self.new_slot(memcg);
                self.nr[i] = n;
                evicted
            }
        }
    }

    /// [`Stocks::heap_refill`](super::Stocks::heap_refill) when `memcg`
    /// has no slot: make one and put the object in it (its units are at
    /// most the batch, so the new slot cannot overflow); return what was
    /// evicted.
    #[inline(never)]
    pub(super) fn heap_refill_new(
        &mut self,
        memcg: &Arc<MemCg>,
        size: u64,
        overhead: u64,
        batch: u64,
    ) -> Option<Taken> {
        let (i, evicted) = self.new_slot(memcg);
        let overflow = self.heap_put_at(i, size, overhead, batch);
        debug_assert!(overflow.is_none(), "an empty slot overflowed");
        evicted
    }

    /// A slot for `memcg`, which has none (kept out of line; callers
    /// looked it up first): the first free index probing from the handle's preferred
    /// one, so that a lookup usually finds it at the first probe.
    ///
    /// With every slot taken, the slot at the next index in turn is
    /// evicted (round-robin over the indices, whoever holds them), and the
    /// new slot takes its index (not its preferred one: lookups probe every
    /// index, so it is found all the same). Round-robin rather than a
    /// clock: a clock (a second chance for slots used lately) would have to
    /// clear the `used` bits it passes, and the idle pass would then empty
    /// slots used since its previous round as idle; a second bitmask for
    /// the clock would be one more write on every hit. Eviction happens
    /// only with more than `NR_STOCK` groups active on one CPU. A new slot
    /// is made only after a lookup over every index missed, so a group
    /// still has at most one slot per CPU: the overcharge bound (module
    /// docs) does not depend on the placement or the eviction order.
    #[inline(never)]
    fn new_slot(&mut self, memcg: &Arc<MemCg>) -> (usize, Option<Taken>) {
        let key = memcg.objcg().as_ptr();
        let free = !self.occupied & ALL_SLOTS;
        let (i, evicted) = match probe(key, || free, |i| self.cached[i].is_none()) {
            Some(i) => (i, None),
            None => {
                let i = self.next_evict % NR_STOCK;
                self.next_evict = (i + 1) % NR_STOCK;
                (i, self.take(i))
            }
        };
        // Under this CPU's lock (see `MemCg::stocked_on`).
        memcg.stocked_on.mark(self.cpu);
        self.cached[i] = Some(Arc::clone(memcg));
        self.keys[i] = key;
        self.tags[i] = tag_of(key);
        self.serials[i] = memcg.objcg_serial();
        self.used |= 1 << i;
        self.occupied |= 1 << i;
        (i, evicted)
    }

    /// The idle pass: empty every slot not used since the previous pass
    /// into `taken` (given back by the caller once the lock is released),
    /// and start a new round for the others.
    pub(super) fn return_idle(&mut self, taken: &mut [Option<Taken>; NR_STOCK]) {
        for (i, t) in taken.iter_mut().enumerate() {
            if self.cached[i].is_some() && self.used & (1 << i) == 0 {
                *t = self.take(i);
            }
        }
        self.used = 0;
    }
}

/// What a slot held when it was emptied: units to uncharge and handle
/// references to drop, after the lock is released ([`Taken::give_back`]).
#[must_use]
pub(crate) struct Taken {
    memcg: Arc<MemCg>,
    nr: u64,
    refs: usize,
}

impl Taken {
    /// Uncharge the units and drop the references. Returns the units.
    pub(crate) fn give_back(self) -> u64 {
        self.memcg.uncharge_counter(self.nr);
        // SAFETY: the slot owned these references on its group's handle.
        unsafe { self.memcg.put_objcg(self.refs) };
        self.nr
    }
}
