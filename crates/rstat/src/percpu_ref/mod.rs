//! Per-CPU reference counts: the kernel's `percpu_ref`, in userspace.
//!
//! A [`PercpuRef`] counts references to something that is pinned far more
//! often than it dies (in rstat, a group). While it is live the count is
//! spread over per-CPU *slots*: a `get` or `put` is one add on this CPU's
//! slot (unlocked, in a restartable sequence, where the machine allows; see
//! [Two fast paths](#two-fast-paths)); no shared cache line is written, and
//! nobody can tell whether the total is zero. [`kill`](PercpuRef::kill) marks it dying,
//! *folds* the slots into one shared atomic count and drops the initial
//! reference. From then on it is an ordinary atomic refcount, and the put that
//! takes it to zero runs the release callback, once.
//!
//! ```
//! use rstat::percpu_ref::PercpuRef;
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::sync::Arc;
//!
//! let freed = Arc::new(AtomicBool::new(false));
//! let f = Arc::clone(&freed);
//! let r = PercpuRef::new(move || f.store(true, Ordering::Relaxed));
//!
//! assert!(r.tryget_live()); // a lookup pins the object
//! r.kill()?; // removal: new lookups fail from now on
//! assert!(!r.tryget_live());
//! assert!(!freed.load(Ordering::Relaxed)); // the lookup still holds it
//! r.put()?; // the last reference goes: release runs here
//! assert!(freed.load(Ordering::Relaxed) && r.is_zero());
//! # Ok::<(), rstat::percpu_ref::PercpuRefError>(())
//! ```
//!
//! # Modes and life cycle
//!
//! - **percpu mode** (the default after [`PercpuRef::new`]): gets and puts
//!   touch only this CPU's slot; a put never releases, because the shared
//!   count carries a large bias that keeps it away from zero.
//! - **atomic mode**: every operation is a compare-and-swap on the shared
//!   count; the put that reaches zero runs the release callback. `kill`
//!   enters it; [`switch_to_atomic`](PercpuRef::switch_to_atomic) enters it
//!   without killing and makes it sticky across kill/reinit cycles until
//!   [`switch_to_percpu`](PercpuRef::switch_to_percpu).
//! - **dying** (after `kill`): [`tryget_live`](PercpuRef::tryget_live) fails;
//!   [`tryget`](PercpuRef::tryget) and `get` still work while references
//!   remain. [`resurrect`](PercpuRef::resurrect) undoes the kill.
//! - **released** (count zero): every get fails; [`reinit`](PercpuRef::reinit)
//!   starts a new cycle with one reference.
//!
//! As in the kernel, a ref in atomic mode releases whenever its count reaches
//! zero, killed or not; in percpu mode it cannot reach zero. Also as in the
//! kernel, if the release callback frees what the ref guards, it must not
//! race a `resurrect`/`reinit` of the same ref (the old cycle's callback may
//! still be running when the new cycle begins).
//!
//! # Confirmation without RCU
//!
//! The kernel switches asynchronously: it marks the ref atomic, waits an RCU
//! grace period so that every CPU that read "percpu mode" is done with its
//! slot, sums the slots and then calls the confirmation callback. Userspace
//! has no RCU, so the switch here is synchronous, by one of two means (see
//! [Two fast paths](#two-fast-paths)): on the `Rseq` path a `membarrier`
//! stands for the grace period; on the `Locked` path the slots carry the
//! mode themselves (see [Synchronization](#synchronization)): a slot is
//! *frozen* by one atomic read-modify-write that also reads its final value,
//! and an operation that lands on a frozen slot moves to the shared count.
//! Either way the switch is complete the moment the last slot is frozen. [`switch_to_atomic`](PercpuRef::switch_to_atomic) and
//! [`kill_and_confirm`](PercpuRef::kill_and_confirm) fold synchronously and
//! run `confirm` on the calling thread before they return, without the ref's
//! lock held (so `confirm` may use the ref). When `confirm` runs:
//!
//! - every slot is frozen and folded: no operation can still count on a slot;
//! - after a kill, a `tryget_live` that starts after `confirm` (happens-after
//!   it) fails, and every `tryget_live` that succeeded took effect before
//!   `confirm`: its slot add preceded that slot's freeze, or its count update
//!   preceded the dying bit.
//!
//! # Two fast paths
//!
//! The kernel's `this_cpu_inc` is an *unlocked* add, safe because preemption
//! is off between finding the slot and writing it. Userspace has two ways to
//! the same guarantee, and a ref uses one of them for life
//! ([`fast_path`](PercpuRef::fast_path)):
//!
//! - [`FastPath::Rseq`] (the default where available: x86-64 Linux, glibc
//!   2.35 or later with its rseq area registered and used as the CPU-id
//!   source, `membarrier`'s rseq commands (Linux 5.10), owned slots): each
//!   get or put
//!   is a *restartable sequence* (see [`crate::percpu`]'s rseq module): read
//!   this CPU's id from the rseq area, compare it with the slot count (held
//!   in a register), check the slot's *gate* (this CPU's copy of the mode,
//!   on the slot's own line: nonzero in percpu mode, 0 otherwise), add to
//!   the slot. The kernel restarts the sequence if the thread is preempted,
//!   migrated or signalled inside it, so the add needs no lock prefix and
//!   nothing waits for a store buffer to drain; and the section touches one
//!   line of the ref, the one it writes (the gate sits there rather than
//!   in a shared mode word, which would cost a second line per get, and
//!   shows beside a memory-bound sibling hyperthread). A switch to atomic
//!   mode stores 0 to
//!   every gate and calls
//!   `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ)`: on return, every
//!   sequence that read an open gate has committed (and is visible) or was
//!   aborted (and will read 0 and go to `count`). That is the
//!   kernel's RCU grace period, synchronous. Only then are the slots frozen
//!   and folded, as below. The price: a `kill` makes a system call that
//!   interrupts every CPU running a thread of this process (and recent
//!   kernels serialise these system calls machine-wide), and it can fail
//!   (a seccomp filter, or `ENOMEM` in the kernel): the kill then returns
//!   [`PercpuRefError::Membarrier`] having changed nothing. A CPU whose id
//!   is at or beyond the slot count has no slot on this path (a section
//!   cannot share another CPU's slot); its gets and puts go to the shared
//!   count: exact, but contended.
//! - [`FastPath::Locked`] (elsewhere, with [`InitFlags::LOCKED_SLOTS`], for
//!   arena slots, or with `RSTAT_PERCPU_REF=locked`): each get or put is a
//!   locked add on the slot whose old value carries the mode (the `FROZEN`
//!   bit; see [Synchronization](#synchronization)). A switch disturbs no
//!   other CPU and cannot fail. rstat's groups are on it (their slots live
//!   in the per-CPU arena, and they say `LOCKED_SLOTS` as well): they are
//!   killed at the rate requests end, and a `membarrier` per removal would
//!   interrupt every busy CPU.
//!
//! On one thread, what separates the two paths from a shared atomic
//! counter is instructions, not contention: the `Rseq` path drops the lock
//! prefix but arms a section, reads the CPU id and checks the gate; the
//! `Locked` path keeps a locked add per get and per put, as the atomic
//! does, and reads the CPU id and computes the slot's address before each.
//! With two or more CPUs taking references both pull ahead of the atomic,
//! whose one line every CPU writes, where each CPU writes only its own
//! slot's.
//! `rstat bench percpu-ref` measures the three side by side (a get, a
//! short copy and a put, on one thread and on every CPU); BENCHMARKS.md
//! holds a run. loom checks the `Rseq` protocol through
//! [`FastPath::Simulated`]: the same switch code, with a section modelled
//! as a per-CPU lock held across "check the gate, add to the slot" and the
//! `membarrier` as taking every CPU's lock in turn (Miri runs it too). Not
//! modelled: the instructions of the real section (tested directly, with
//! concurrent `membarrier`s, in `percpu::rseq`), the system call's
//! failure, and the test-only `*_on(cpu)` calls, which the model sends to
//! the named CPU's slot where the real path sends them to `count`.
//!
//! # Costs
//!
//! | operation | percpu mode | atomic mode |
//! |---|---|---|
//! | `get`, `put`, `tryget`, `tryget_live` | `Rseq`: arm the section, read the CPU id, one compare, one load of the slot's gate, one unlocked add on the same line. `Locked`: read the CPU id, one uncontended locked add. No lock, no allocation, no shared line written | `Rseq`: the section refuses at the compare; `Locked`: the add finds the slot frozen. Then a CAS loop on the shared count |
//! | `kill`, `switch_to_atomic` | the ref's lock + (`Rseq`) one `membarrier` system call + one RMW per CPU + one CAS | the lock |
//! | `switch_to_percpu`, `resurrect`, `reinit` | the lock | the lock + one RMW per CPU |
//!
//! Memory: the slots are padded to a cache line each
//! (`nr_cpus ×` [`CACHE_LINE`](crate::percpu::CACHE_LINE) bytes, 128 per CPU
//! on x86-64), or 16 bytes per CPU in the caller's per-CPU arena
//! ([`with_arena_slots`](PercpuRef::with_arena_slots)); plus one allocation
//! (256 bytes on x86-64) for the shared count (on its own cache line), the
//! lock and the release callback.
//!
//! # Synchronization
//!
//! This section is the `Locked` protocol, and the part of the `Rseq` one
//! that runs once the sections are stopped. For `Rseq`, the fast path's
//! correctness rests on two facts, one per side: a section either commits
//! its add on the CPU whose id it read, with that CPU's gate open when it
//! read it, or has no effect and restarts (the kernel's rseq guarantee);
//! and after storing 0 to every gate + `membarrier`, no section can commit
//! without reading 0 (the membarrier guarantee), and
//! every committed add happens before the switcher's next step (membarrier
//! is a full barrier on every CPU it interrupts, and the scheduler one on
//! the others). From then on the slots have no writer but the lock holder,
//! which freezes and folds them exactly as below; a fast path that reads 0
//! goes to `count`, exactly like one that finds its slot frozen. Returning
//! to percpu mode resets the slots and then opens every gate with Release,
//! which the section's acquire load (a plain x86 load) pairs with. A section cannot target another CPU's slot, so
//! the test-only `*_on(cpu)` calls count on `count` on this path.
//!
//! Shared state:
//!
//! - `slots[c]`: references taken minus dropped on CPU `c` since its last
//!   reset, times two, wrapping; bit 0 is `FROZEN`. A CPU's count can be
//!   negative (a reference taken on one CPU and dropped on another); only
//!   the sum means anything. Every write to a slot after construction is a
//!   read-modify-write.
//! - `count`: bit 63 is `DEAD`; the rest is the value. In percpu mode the
//!   value is `BIAS` (2^61) plus the initial reference plus whatever was
//!   counted here rather than on a slot; in atomic mode it is the count.
//!   Every write to it after construction is a read-modify-write.
//! - `percpu_hint`: a copy of the mode for [`is_percpu`](PercpuRef::is_percpu)
//!   and `Debug`. Relaxed, a snapshot; the fast paths do not read it (on the
//!   `Locked` path the slot's own `FROZEN` bit is their mode check, one load
//!   fewer on the hot path).
//! - the gates (`Rseq` and `Simulated`, owned slots): described above;
//!   written only by the `ctl` holder, all together.
//! - `ctl`: a mutex serialising kill, the switches, resurrect and reinit. Only
//!   its holder freezes or resets slots, adds or removes `BIAS`, or changes
//!   `DEAD`.
//!
//! **The argument.** The mode check and the count change are one atomic
//! read-modify-write on the slot. A fast-path operation adds to its slot and
//! looks at the `FROZEN` bit of the value it replaced. The switch freezes each
//! slot with `fetch_or(FROZEN)`, which returns the slot's value at that point
//! of its modification order. So each operation on slot `c` is either before
//! the freeze (the freezer read a value that includes it: it is folded,
//! once) or after it (it saw `FROZEN`, its change to the frozen slot is
//! ignored forever, and it is redone on `count`). Both sides decide on the
//! same location, so there is no store-buffering pair, no fence and no
//! `SeqCst`: coherence of that one location is the whole proof. A thread
//! preempted between reading its CPU id and touching the slot is harmless:
//! its RMW lands before or after the freeze like any other.
//!
//! The fold sums the frozen values, then adds `sum - BIAS` to `count` in one
//! CAS. Until then `BIAS` keeps `count` far from zero, whatever mix of slot
//! and `count` operations runs meanwhile, so no put can release mid-switch.
//! Returning to percpu mode adds `BIAS` first and only then resets the slots
//! to zero with `swap(0)` (clearing `FROZEN`); an operation that raced with
//! a reset saw either the frozen slot (and went to `count`) or the reset one.
//! The reset is a swap rather than a store so that each slot's history is a
//! single chain of read-modify-writes (which is also what lets loom, whose
//! modification order for plain stores racing RMWs is partial, check it).
//!
//! Orderings, each non-Relaxed access and what it pairs with. "(loom)" marks
//! the orderings whose weakening makes a loom model in `tests_loom` fail
//! (checked by mutation); the others are argued here.
//!
//! - fast `get`/`tryget`/`tryget_live` slot `fetch_add`: **Acquire**, pairing
//!   with the freeze's Release (an operation that finds its slot frozen sees
//!   the `DEAD` bit the killer set before freezing) and with the reset's
//!   Release (a reference counted on a freshly reset slot sees `BIAS`
//!   already in `count`: if it is later put on a CPU whose slot is still
//!   frozen, that put goes to `count` and must not find the pre-`BIAS`
//!   value there, or it could take `count` to zero while the initial
//!   reference is held). Without it, the put's CAS on `count` could be
//!   ordered before the switcher's `BIAS` CAS even though the get saw the
//!   later reset, a reordering of two independent RMWs that Arm allows and
//!   that loom, which executes RMWs in a single order, cannot show.
//! - fast `put` slot `fetch_sub`: **Release** (loom), pairing with the
//!   freeze's Acquire: what a holder did before dropping its reference
//!   happens before the fold, and so before the release callback. A put
//!   needs no Acquire: it decides nothing from others' writes, except on
//!   `count`, whose CAS is AcqRel.
//! - freeze `fetch_or(FROZEN)`: **AcqRel**, the other side of both pairs
//!   above (Acquire: loom).
//! - reset `swap(0)`: **Release**, pairing with the fast get's Acquire. No
//!   Acquire: the frozen value it discards is meaningless.
//! - every CAS on `count`: **AcqRel** (failure Relaxed: the value it reads
//!   only feeds the next attempt or a refusal, see the last item). Every
//!   write to `count` is a read-modify-write, so they form one release
//!   sequence: the CAS that takes the value to zero (Acquire: loom) acquires
//!   every earlier put on `count`, and the fold's CAS (Release: loom), which
//!   itself acquired every put counted on a slot. That thread then runs the
//!   release callback. The Acquire on the other CASes is not needed by the
//!   counting; it is kept so that a thread that passed through `count` sees
//!   the switch state that produced the value it read, and because the slow
//!   path is a contended CAS whose cost is the cache line, not the ordering.
//! - `kill`'s `fetch_or(DEAD)`: Relaxed. Fast paths learn of it through the
//!   freezes that follow it (Release, above); operations on `count` learn of
//!   it through `count`'s modification order, because a successful CAS
//!   reads the latest value.
//! - `is_zero`'s load: **Acquire**, pairing with the zeroing CAS, so a caller
//!   that sees zero also sees what the holders did before their puts.
//! - The first load of each CAS loop, loads of `count` under `ctl`,
//!   `is_dying` and `percpu_hint`: Relaxed. A CAS loop's first load may be
//!   stale: a refusal decided from it (zero, dying, underflow) is a refusal
//!   at a point where that value was current, which is all a concurrent
//!   caller can ask, and a CAS from a stale value fails and retries. `DEAD`
//!   and the mode change only under `ctl`, whose lock orders them for its
//!   holders; for anyone else the answer is a snapshot.

mod error;
mod get_put;
mod sections;
mod slots;
mod state;
mod switch;

#[cfg(all(test, not(rstat_loom)))]
mod tests;
#[cfg(all(test, rstat_loom))]
mod tests_loom;

use core::fmt;

pub use error::PercpuRefError;
pub use slots::{PercpuRefSlot, MAX_SLOTS};
pub use state::{ReleaseFn, MAX_MANY, VALUE_LIMIT};

use crate::percpu::arena::PcpuPtr;
use crate::percpu::{cpu, rseq, CachePadded};
use crate::sync::Ordering::{Acquire, Relaxed};
use crate::sync::{AtomicBool, AtomicU64, Mutex};
use slots::Slots;
use state::{Ctl, Shared, BIAS, DEAD, FROZEN, VALUE};

/// How a [`PercpuRef`] starts (the kernel's `PERCPU_REF_INIT_*` flags).
/// Combine with `|`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct InitFlags(u8);

impl InitFlags {
    /// Percpu mode, one (initial) reference, not reinitialisable.
    pub const PERCPU: InitFlags = InitFlags(0);
    /// Start in atomic mode and stay there until
    /// [`switch_to_percpu`](PercpuRef::switch_to_percpu). Implies
    /// `ALLOW_REINIT`.
    pub const ATOMIC: InitFlags = InitFlags(1);
    /// Start dying with a count of zero (no initial reference, release not
    /// run); bring it to life with [`reinit`](PercpuRef::reinit). Implies
    /// atomic mode until then, and `ALLOW_REINIT`.
    pub const DEAD: InitFlags = InitFlags(2);
    /// Allow returning to percpu mode and new life cycles
    /// ([`switch_to_percpu`](PercpuRef::switch_to_percpu),
    /// [`resurrect`](PercpuRef::resurrect), [`reinit`](PercpuRef::reinit)).
    pub const ALLOW_REINIT: InitFlags = InitFlags(4);
    /// Use the [locked](FastPath::Locked) fast path even where restartable
    /// sections are available: gets and puts cost a locked add instead of
    /// an unlocked one (slower on one thread; `rstat bench percpu-ref`
    /// measures both paths), and in exchange a switch to atomic
    /// mode never calls `membarrier`, so it disturbs no other CPU and cannot
    /// fail for want of it. For refs killed at a high rate (rstat's groups
    /// are on this path).
    pub const LOCKED_SLOTS: InitFlags = InitFlags(8);

    /// Whether every flag in `other` is set in `self`.
    pub const fn contains(self, other: InitFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for InitFlags {
    type Output = InitFlags;
    fn bitor(self, rhs: InitFlags) -> InitFlags {
        InitFlags(self.0 | rhs.0)
    }
}

/// How a ref's fast paths (`get`, `put`, `tryget`, `tryget_live` in percpu
/// mode) reach this CPU's slot. Chosen when the ref is created; see the
/// [module documentation](self#two-fast-paths).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FastPath {
    /// A restartable sequence: read the CPU id, check the mode, and add to
    /// the slot with an unlocked add, which the kernel aborts and restarts
    /// if the thread is preempted or migrated in between. Switches to atomic
    /// mode call `membarrier`. The kernel's own cost, where available
    /// (x86-64 Linux, glibc rseq, Linux 5.10).
    Rseq,
    /// A locked add on the slot, whose old value says whether the slot was
    /// frozen by a switch. Switches cost one locked RMW per CPU and no
    /// system call. Used where `Rseq` is not available, with
    /// [`InitFlags::LOCKED_SLOTS`], or when `RSTAT_PERCPU_REF=locked`.
    Locked,
    /// The `Rseq` protocol with each simulated CPU's sections serialised by
    /// a lock and `membarrier` simulated by taking every CPU's lock: what
    /// loom and Miri check, since neither can run the real sections.
    Simulated,
}

impl FastPath {
    /// The short name used in reports (`rseq`, `locked`, `simulated`).
    pub fn name(self) -> &'static str {
        match self {
            FastPath::Rseq => "rseq",
            FastPath::Locked => "locked",
            FastPath::Simulated => "simulated",
        }
    }
}

/// Which slot a fast-path operation targets.
#[derive(Clone, Copy)]
enum Cpu {
    /// The CPU this thread runs on.
    Current,
    /// A given CPU's slot (folded into range on the `Locked` path; `count`
    /// on `Rseq`), for models and tests.
    #[cfg_attr(not(test), allow(dead_code))]
    Given(usize),
}

/// A per-CPU reference count with the kernel's `percpu_ref` semantics. See
/// the [module documentation](self).
///
/// Share it by reference (`&PercpuRef` is `Send`, so scoped threads work) or
/// in an `Arc`.
pub struct PercpuRef {
    // Everything here is immutable after construction (no `UnsafeCell`), so
    // `&PercpuRef` is a `noalias readonly` pointer to the compiler: a loop
    // of gets and puts keeps these fields in registers.
    fast: FastPath,
    /// `Rseq`: the thread-pointer offset of the rseq area's `cpu_id`.
    rseq_off: isize,
    slots: Slots,
    /// The mutable state.
    shared: crate::percpu::LineBox<Shared>,
}

impl PercpuRef {
    /// A live ref in percpu mode with one (initial) reference and a slot per
    /// possible CPU. `release` runs when the count reaches zero after a
    /// [`kill`](Self::kill). The first ref of a process detects the fast
    /// path (and registers the process with `membarrier`). Cost: one
    /// allocation of `nr_cpus × CACHE_LINE` bytes and one of the shared
    /// count.
    pub fn new(release: impl Fn() + Send + Sync + 'static) -> Self {
        Self::with_flags(InitFlags::PERCPU, release)
    }

    /// As [`new`](Self::new), starting as `flags` says.
    pub fn with_flags(flags: InitFlags, release: impl Fn() + Send + Sync + 'static) -> Self {
        Self::with_nr_cpus(cpu::possible_cpus(), flags, release)
    }

    /// As [`with_flags`](Self::with_flags) with `nr_cpus` slots (clamped to
    /// `1..=MAX_SLOTS`; CPU ids beyond share slots on the `Locked` path and
    /// use the shared count on the `Rseq` path). Cost: one allocation
    /// of `nr_cpus × CACHE_LINE` bytes and one of the shared count.
    pub fn with_nr_cpus(
        nr_cpus: usize,
        flags: InitFlags,
        release: impl Fn() + Send + Sync + 'static,
    ) -> Self {
        Self::build(Slots::owned(nr_cpus), flags, Box::new(release))
    }

    /// As [`with_nr_cpus`](Self::with_nr_cpus), with the slots in the
    /// caller's per-CPU arena rather than a private padded array: allocate
    /// them with `arena.alloc::<PercpuRefSlot>(1, |_, _| PercpuRefSlot::new())`
    /// and free them after this ref is dropped. Always on the
    /// [`Locked`](FastPath::Locked) fast path (sections address padded slots
    /// with a constant stride). Cost: one small allocation (the shared
    /// count), none for the slots.
    ///
    /// # Safety
    /// `slots` must have `len() >= 1`, come from an arena with at least
    /// `nr_cpus.max(1)` units, stay allocated (and its arena alive) until
    /// this `PercpuRef` is dropped, and not be used by anything else
    /// meanwhile.
    pub unsafe fn with_arena_slots(
        slots: PcpuPtr<PercpuRefSlot>,
        nr_cpus: usize,
        flags: InitFlags,
        release: impl Fn() + Send + Sync + 'static,
    ) -> Self {
        // SAFETY: forwarded from this function's contract.
        let slots = unsafe { Slots::arena(slots, nr_cpus) };
        Self::build(slots, flags, Box::new(release))
    }

    fn build(slots: Slots, flags: InitFlags, release: ReleaseFn) -> Self {
        let (fast, rseq_off) = if flags.contains(InitFlags::LOCKED_SLOTS) || !slots.is_owned() {
            (FastPath::Locked, 0)
        } else if cfg!(any(rstat_loom, miri)) {
            (FastPath::Simulated, 0)
        } else {
            match rseq::available() {
                Some(off) if off != 0 => (FastPath::Rseq, off),
                _ => (FastPath::Locked, 0),
            }
        };
        let dead = flags.contains(InitFlags::DEAD);
        let atomic = dead || flags.contains(InitFlags::ATOMIC);
        // Relaxed: the ref is not shared yet; whatever shares it (a spawn, an
        // Arc sent through a channel) orders these stores before any use.
        for c in 0..slots.nr() {
            slots
                .slot(c)
                .store(if atomic { FROZEN } else { 0 }, Relaxed);
        }
        let mut word = if atomic { 0 } else { BIAS };
        if dead {
            word |= DEAD;
        } else {
            word += 1;
        }
        // Relaxed: as the slot stores above.
        slots.set_gates(fast != FastPath::Locked && !atomic, Relaxed);
        let shared = crate::percpu::LineBox::new(Shared {
            count: CachePadded::new(AtomicU64::new(word)),
            percpu_hint: AtomicBool::new(!atomic),
            #[cfg(any(rstat_loom, miri))]
            sim: (0..slots.nr()).map(|_| Mutex::new(())).collect(),
            ctl: Mutex::new(Ctl {
                percpu: !atomic,
                force_atomic: flags.contains(InitFlags::ATOMIC),
                allow_reinit: atomic || flags.contains(InitFlags::ALLOW_REINIT),
            }),
            release,
        });
        PercpuRef {
            fast,
            rseq_off,
            slots,
            shared,
        }
    }

    /// The number of per-CPU slots.
    pub fn nr_cpus(&self) -> usize {
        self.slots.nr()
    }

    /// How this ref's fast paths reach a slot.
    pub fn fast_path(&self) -> FastPath {
        self.fast
    }

    #[inline(always)]
    fn cpu_id(&self, cpu: Cpu) -> usize {
        match cpu {
            Cpu::Current => cpu::current(),
            Cpu::Given(c) => c,
        }
    }

    // ------------------------------------------------------------- queries

    /// Whether the count is zero: the release callback has run (or is
    /// running) for this cycle, or the ref was created `DEAD`. Never true in
    /// percpu mode. Cost: one load of the shared count.
    pub fn is_zero(&self) -> bool {
        // Acquire: pairs with the CAS that reached zero.
        self.shared.count.load(Acquire) & VALUE == 0
    }

    /// Whether the ref has been killed (and not resurrected or reinit'd). A
    /// snapshot. Cost: one load of the shared count.
    pub fn is_dying(&self) -> bool {
        self.shared.count.load(Relaxed) & DEAD != 0
    }

    /// Whether gets and puts currently go to per-CPU slots. A snapshot (a
    /// Relaxed load of a copy of the mode). Cost: one load.
    pub fn is_percpu(&self) -> bool {
        self.shared.percpu_hint.load(Relaxed)
    }

    /// The exact count in atomic mode, `None` in percpu mode (where it is
    /// unknowable without a switch). Meant for tests and diagnostics. Cost:
    /// the ref's lock and one load.
    pub fn atomic_count(&self) -> Option<u64> {
        let ctl = crate::sync::lock(&self.shared.ctl);
        if ctl.percpu {
            None
        } else {
            // Acquire: as `is_zero`.
            Some(self.shared.count.load(Acquire) & VALUE)
        }
    }
}

impl fmt::Debug for PercpuRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PercpuRef")
            .field("fast_path", &self.fast)
            .field("percpu", &self.is_percpu())
            .field("dying", &self.is_dying())
            .field("zero", &self.is_zero())
            .field("nr_cpus", &self.nr_cpus())
            .finish_non_exhaustive()
    }
}
