//! Restartable per-CPU critical sections: the userspace stand-in for the
//! kernel's "preemption disabled".
//!
//! The kernel updates a per-CPU counter with one unlocked `add` because
//! nothing can run on that CPU between reading the counter's address and
//! writing it. Userspace gets the same guarantee from *restartable
//! sequences* (rseq): a thread announces a critical section to the kernel
//! (a start address, a length, an abort address, stored in its rseq area),
//! and if the thread is preempted, migrated or signalled while its
//! instruction pointer is inside, the kernel resumes it at the abort address
//! instead. A section whose last instruction is its only store (the
//! *commit*) therefore either takes effect entirely on the CPU whose id it
//! read, or not at all, and is retried. No lock prefix is needed, so the
//! add costs what an ordinary add costs, and nothing after it waits for a
//! store buffer to drain.
//!
//! The other half is how a remote CPU can stop the sections: a thread
//! switching a per-CPU structure to another mode (a [`PercpuRef`] kill)
//! first stores the new mode, then calls [`membarrier`]:
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ)` interrupts every CPU
//! currently running a thread of this process, aborting any critical section
//! in progress, with a full memory barrier there, and returns after all of
//! them did. Every section that committed before is then visible to the
//! caller; every section that had not is restarted and reads the new mode.
//! That is the grace period of the kernel's percpu_ref, for the price of one
//! system call (about 0.2 µs with nothing else running, a few microseconds
//! when it has to interrupt other CPUs).
//!
//! Requirements, checked once per process by [`available`]: x86-64 Linux,
//! glibc's rseq area registered (see [`cpu`](super::cpu)), and the
//! `membarrier` rseq commands (Linux 5.10). `RSTAT_PERCPU_REF=locked` turns
//! the fast path off, for comparison; callers then use locked per-CPU
//! read-modify-writes instead.
//!
//! [`PercpuRef`]: crate::percpu_ref::PercpuRef

use std::sync::atomic::{AtomicU8, Ordering};

const UNKNOWN: u8 = 0;
const YES: u8 = 1;
const NO: u8 = 2;
static AVAILABLE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Whether restartable per-CPU sections work in this process; if so, the
/// offset of this thread's `cpu_id` from the thread pointer (the same for
/// every thread). Detected on first call (which also registers the process
/// for `membarrier`'s rseq command) and fixed from then on.
pub(crate) fn available() -> Option<isize> {
    match AVAILABLE.load(Ordering::Relaxed) {
        YES => super::cpu::rseq_cpu_id_offset(),
        NO => None,
        _ => detect(),
    }
}

#[cold]
fn detect() -> Option<isize> {
    let off = if std::env::var("RSTAT_PERCPU_REF").as_deref() == Ok("locked") {
        None
    } else {
        imp::supported()
    };
    // Relaxed: idempotent; every thread computes the same answer (a second
    // registration of membarrier is harmless).
    AVAILABLE.store(if off.is_some() { YES } else { NO }, Ordering::Relaxed);
    off
}

/// The environment variable that makes tests of restartable sections fail,
/// instead of skipping, where the sections are unavailable. CI sets it for
/// its native test run (not for Miri or loom, which have no rseq).
#[cfg(all(test, not(rstat_loom)))]
pub(crate) const REQUIRE_ENV: &str = "RSTAT_REQUIRE_RSEQ";

/// For tests of restartable sections (or of glibc's rseq registration):
/// what `test` needs (`needed`: the section offset, a counter, ...), or
/// `None` if it is missing here, and then the caller returns. With
/// [`REQUIRE_ENV`] set (and not under Miri, which never has rseq) a
/// missing `needed` fails the test instead, so that a machine without rseq
/// cannot pass these tests by skipping them. A skip says so on stderr,
/// past the test harness's capture, so it shows in a plain `cargo test`.
#[cfg(all(test, not(rstat_loom)))]
pub(crate) fn rseq_for_test<T>(test: &str, needed: Option<T>) -> Option<T> {
    if needed.is_some() {
        return needed;
    }
    let why = if cfg!(miri) {
        "Miri has no restartable sequences"
    } else {
        "restartable sections are unavailable here (they need x86-64 Linux with \
         glibc's rseq registration, which GLIBC_TUNABLES=glibc.pthread.rseq=0 turns \
         off, the membarrier rseq commands of Linux 5.10, and RSTAT_PERCPU_REF unset)"
    };
    use std::io::Write;
    if cfg!(miri) {
        let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
        return None;
    }
    if std::env::var_os(REQUIRE_ENV).is_some() {
        panic!("{test}: {why}, but {REQUIRE_ENV} is set: this test must run");
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {why} (set {REQUIRE_ENV}=1 to make this a failure)"
    );
    None
}

/// Abort every restartable section running on another CPU of this process,
/// with a full memory barrier on each of those CPUs, and return once all of
/// them have (see the module documentation). Only meaningful once
/// [`available`] returned `Some`.
///
/// # Errors
/// The system call's error number: a seccomp filter installed after
/// detection, `ENOMEM` (the kernel allocates a CPU mask per call on some
/// configurations), or a process restored without its registration.
pub(crate) fn membarrier() -> Result<(), i32> {
    imp::membarrier()
}

/// log2 of the distance between two CPUs' slots for [`add_on_this_cpu`]
/// (128 bytes: two cache lines, so no two CPUs' slots share a line or an
/// adjacent-line prefetch pair). A constant, so the section shifts by an
/// immediate.
pub(crate) const SLOT_SHIFT: u32 = 7;

/// Where [`add_on_this_cpu`] finds a slot's gate: this many bytes after
/// its count, on the same line.
pub(crate) const GATE_OFFSET: usize = 8;

/// Add `delta` (wrapping) to the `u64` at `base + (cpu << SLOT_SHIFT)`,
/// where `cpu` is the id of the CPU this thread runs on, in one restartable
/// section that first checks `cpu < nr` and that the slot's *gate* (the
/// `u64` [`GATE_OFFSET`] bytes after it) is not 0. Returns whether the add
/// was done; `false` (nothing written) when `cpu >= nr`, the gate is 0 or
/// this thread has no rseq area. The gates are the switch: storing 0 to
/// every one and then calling [`membarrier`] stops every section.
///
/// Cost: one store (arming the section), one load of the CPU id, one
/// compare with `nr` (a register), one load of the gate, one unlocked add
/// on the gate's line; no lock prefix, no fence.
///
/// # Safety
/// `cpu_id_off` comes from [`available`]; for every `cpu < nr`,
/// `base + (cpu << SLOT_SHIFT)` is an aligned, live `u64` (an `AtomicU64`)
/// followed by its gate, written only by such sections, or by others while
/// no section can pass the check (0 was stored to every gate and
/// [`membarrier`] returned since).
#[inline(always)]
#[cfg_attr(any(rstat_loom, miri), allow(dead_code))] // the model simulates it
pub(crate) unsafe fn add_on_this_cpu(
    cpu_id_off: isize,
    base: *const u8,
    nr: usize,
    delta: u64,
) -> bool {
    // SAFETY: forwarded.
    unsafe { imp::add_on_this_cpu(cpu_id_off, base, nr, delta) }
}

/// Add `delta` (wrapping) to the `i64` at `base + (cpu << UNIT_SHIFT)`,
/// where `cpu` is the id of the CPU this thread runs on, in one restartable
/// section that first checks `cpu < limit`; return `(cpu << UNIT_SHIFT, new
/// value, old ^ new)` (the bits the add changed: what a caller testing for
/// a boundary crossing wants, in one register; `old` is `new - delta`).
/// This is the kernel's `this_cpu_add` for stat slots
/// in the per-CPU arena (whose units are `1 << UNIT_SHIFT` bytes apart);
/// the unit offset it returns addresses the caller's other per-CPU data of
/// the same CPU without another shift. Unlike [`add_on_this_cpu`]'s, the
/// limit is fixed for the slots' life (a css's `section_limit`), so it
/// comes by value, in a register.
///
/// A thread the check refuses (it has no rseq area, so its CPU id reads
/// as `u32::MAX`) adds with one locked RMW to slot `limit` instead, which
/// no section writes, and gets `limit << UNIT_SHIFT` back: every call adds,
/// and the caller takes no branch to tell the two apart.
///
/// Cost: one store (arming the section), one load of the CPU id, one
/// compare, one shift, one load and one store of the slot; no lock prefix,
/// no fence. The store can sit in this CPU's store buffer after the
/// section: callers that need it ordered before a later load pair a
/// compiler fence here with [`membarrier`] on the reading side (see
/// `engine::backlog`).
///
/// # Safety
/// `cpu_id_off` comes from [`available`]; for every `cpu < limit`,
/// `base + (cpu << UNIT_SHIFT)` is an aligned, live `i64` (an `AtomicI64`)
/// that no other CPU writes while sections can pass the check; so is
/// `base + (limit << UNIT_SHIFT)`, written only by atomic RMWs.
///
/// [`UNIT_SHIFT`]: crate::percpu::arena::UNIT_SHIFT
#[inline(always)]
#[cfg_attr(any(rstat_loom, miri), allow(dead_code))]
pub(crate) unsafe fn add_fetch_on_this_cpu(
    cpu_id_off: isize,
    base: *const u8,
    limit: u32,
    delta: i64,
) -> (usize, i64, i64) {
    // SAFETY: forwarded.
    unsafe { imp::add_fetch_on_this_cpu(cpu_id_off, base, limit, delta) }
}

/// A bare per-CPU counter on [`add_fetch_on_this_cpu`] and nothing else:
/// one slot per possible CPU id and one past them (for threads without an
/// rseq area), in a per-CPU [`Arena`] of its own as the engine's slots
/// are, and no boundary test, on-list flag or handle around the section.
/// It is the floor under every rstat update on the rseq path; the lab's
/// update benchmark runs it beside them, so a report can tell the
/// section's own cost (above all the chain through one slot: each add
/// loads what the last one stored) from the instructions an update adds.
/// Not part of the API.
///
/// [`Arena`]: crate::percpu::arena::Arena
#[doc(hidden)]
pub struct BareSectionCounter {
    /// Owns `slots`' memory (`AtomicI64` needs no drop, so the arena's
    /// drop, which returns its chunks, is the whole cleanup).
    _arena: crate::percpu::arena::Arena,
    slots: crate::percpu::arena::PcpuPtr<core::sync::atomic::AtomicI64>,
    limit: u32,
    off: isize,
}

// SAFETY: the arena is only touched at construction and drop (`&mut`);
// the slots are written only by sections (each on its own CPU's slot) and
// locked RMWs, and read with atomic loads.
unsafe impl Send for BareSectionCounter {}
// SAFETY: as above.
unsafe impl Sync for BareSectionCounter {}

impl BareSectionCounter {
    /// A counter at 0, or `None` where restartable sections are not
    /// available (see [`available`]) or the slots cannot be allocated.
    pub fn new() -> Option<Self> {
        Self::with_limit(u32::try_from(super::cpu::possible_cpus()).ok()?)
    }

    /// A counter whose sections run on CPUs below `limit` (the others add
    /// to slot `limit` with a locked add): `new` takes every possible CPU;
    /// the tests take fewer, to reach the locked slot.
    fn with_limit(limit: u32) -> Option<Self> {
        let off = available()?;
        let mut arena = crate::percpu::arena::Arena::new(limit as usize + 1);
        let slots = arena
            .alloc(1, |_, _| core::sync::atomic::AtomicI64::new(0))
            .ok()?;
        Some(BareSectionCounter {
            _arena: arena,
            slots,
            limit,
            off,
        })
    }

    /// Add `delta` on this CPU's slot; return the slot's new value.
    #[inline(always)]
    pub fn add(&self, delta: i64) -> i64 {
        // SAFETY: `off` came from `available`; the arena has `limit + 1`
        // units, so slots `0..=limit` are live, aligned `i64`s `1 <<
        // UNIT_SHIFT` bytes apart; slots below `limit` are written only by
        // sections (this type offers no other writer), slot `limit` only by
        // the stub's locked add.
        unsafe { add_fetch_on_this_cpu(self.off, self.slots.raw(0).cast(), self.limit, delta).1 }
    }

    /// The sum of every slot. Exact once the adding threads are joined (a
    /// section's store is plain and may still sit in its CPU's store
    /// buffer, so a sum taken while adds run may miss recent ones).
    pub fn sum(&self) -> i64 {
        (0..=self.limit as usize)
            // SAFETY: the arena has `limit + 1` units and lives with
            // `self`; the atomic load does not race the sections' plain
            // stores in Rust's sense (they are inside `asm!`), and after
            // they returned it sees them.
            .map(|c| unsafe { self.slots.elem(c, 0) }.load(Ordering::Relaxed))
            .fold(0i64, i64::wrapping_add)
    }
}

#[cfg(all(
    target_os = "linux",
    target_arch = "x86_64",
    not(miri),
    not(rstat_loom)
))]
mod imp {
    /// `enum membarrier_cmd` values (linux/membarrier.h).
    const CMD_QUERY: libc::c_long = 0;
    const CMD_PRIVATE_EXPEDITED_RSEQ: libc::c_long = 1 << 7;
    const CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ: libc::c_long = 1 << 8;

    fn sys_membarrier(cmd: libc::c_long) -> Result<libc::c_long, i32> {
        // SAFETY: membarrier takes (cmd, flags, cpu_id) integers and touches
        // no user memory.
        let r = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                cmd,
                0 as libc::c_long,
                0 as libc::c_long,
            )
        };
        if r < 0 {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
        } else {
            Ok(r)
        }
    }

    pub(super) fn supported() -> Option<isize> {
        let off = super::super::cpu::rseq_cpu_id_offset()?;
        let cmds = sys_membarrier(CMD_QUERY).ok()?;
        if cmds & CMD_PRIVATE_EXPEDITED_RSEQ == 0 {
            return None;
        }
        sys_membarrier(CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ).ok()?;
        // Prove the command works here (a seccomp filter may allow the query
        // and refuse the rest) before anything relies on it.
        membarrier().ok()?;
        Some(off)
    }

    pub(super) fn membarrier() -> Result<(), i32> {
        loop {
            match sys_membarrier(CMD_PRIVATE_EXPEDITED_RSEQ) {
                Ok(_) => return Ok(()),
                Err(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// x86-64: `struct rseq { u32 cpu_id_start; u32 cpu_id; u64 rseq_cs; ... }`
    /// at a fixed offset from `%fs`; `cpu_id_off` points at `cpu_id`, so the
    /// section pointer is 4 bytes further. The descriptor (`struct rseq_cs`:
    /// version, flags, start, length, abort) goes to the `__rseq_cs`
    /// section, 32-byte aligned, as the ABI asks. The abort handler is
    /// preceded by the signature glibc registered for x86 (`0x53053053`),
    /// encoded as the operand of a `ud1`; it re-arms the section and starts
    /// over. It lives out of line, in its own text section, so a committed
    /// section falls straight through (no jump over the handler, one
    /// taken branch fewer per update). A refused check jumps straight
    /// to the caller's slow path (`asm goto`), so the fast path materialises
    /// no flag.
    #[inline(always)]
    pub(super) unsafe fn add_on_this_cpu(
        cpu_id_off: isize,
        base: *const u8,
        nr: usize,
        delta: u64,
    ) -> bool {
        // SAFETY: the caller guarantees the addresses (see the wrapper). The
        // section's only store is its last instruction, so an abort leaves
        // memory untouched; the kernel validates the descriptor and the
        // signature before jumping to the abort address.
        unsafe {
            core::arch::asm!(
                "2:",
                "lea {t}, [rip + 5f]",
                "mov qword ptr fs:[{off} + 4], {t}",
                "3:",
                "mov {t:e}, dword ptr fs:[{off}]",
                "cmp {t}, {nr}",
                "jae {refused}",
                "shl {t}, {shift}",
                "cmp qword ptr [{base} + {t} + {gate}], 0",
                "je {refused}",
                "add qword ptr [{base} + {t}], {d}",
                "4:",
                ".pushsection .text.rstat_rseq_abort, \"ax\"",
                ".byte 0x0f, 0xb9, 0x3d",
                ".long 0x53053053",
                "6:",
                "jmp 2b",
                ".popsection",
                ".pushsection __rseq_cs, \"aw\"",
                ".balign 32",
                "5:",
                ".long 0, 0",
                ".quad 3b, 4b - 3b, 6b",
                ".popsection",
                off = in(reg) cpu_id_off,
                nr = in(reg) nr,
                base = in(reg) base,
                d = in(reg) delta,
                shift = const super::SLOT_SHIFT,
                gate = const super::GATE_OFFSET,
                t = out(reg) _,
                refused = label { return false; },
                options(nostack),
            );
        }
        true
    }

    /// As `add_on_this_cpu`, with the unit stride of the per-CPU arena and
    /// the unit offset, the new value and the changed bits as results. The
    /// section loads the slot, adds in a register and commits with its only
    /// store; one `xor` after the commit gives the changed bits. A refused
    /// check jumps to an out-of-line stub (outside the section's range, so
    /// never aborted) that adds with `lock xadd` to slot `limit` and
    /// rejoins before that `xor`: the accepted path takes no branch, and
    /// neither does the caller.
    #[inline(always)]
    pub(super) unsafe fn add_fetch_on_this_cpu(
        cpu_id_off: isize,
        base: *const u8,
        limit: u32,
        delta: i64,
    ) -> (usize, i64, i64) {
        let at: usize;
        let changed: i64;
        let new: i64;
        // SAFETY: as `add_on_this_cpu`: the caller guarantees the addresses
        // (slot `limit` included); the commit store is the section's last
        // instruction.
        unsafe {
            core::arch::asm!(
                "2:",
                "lea {at}, [rip + 5f]",
                "mov qword ptr fs:[{off} + 4], {at}",
                "3:",
                "mov {at:e}, dword ptr fs:[{off}]",
                "cmp {at:e}, {limit:e}",
                "jae 7f",
                "shl {at}, {shift}",
                "mov {old}, qword ptr [{base} + {at}]",
                // A new register for the sum: a restarted section must find
                // its inputs unchanged.
                "lea {new}, [{old} + {d}]",
                "mov qword ptr [{base} + {at}], {new}",
                "4:",
                // Past the commit: not restarted.
                "xor {old}, {new}",
                ".pushsection .text.rstat_rseq_abort, \"ax\"",
                ".byte 0x0f, 0xb9, 0x3d",
                ".long 0x53053053",
                "6:",
                "jmp 2b",
                "7:",
                "mov {at:e}, {limit:e}",
                "shl {at}, {shift}",
                "mov {old}, {d}",
                "lock xadd qword ptr [{base} + {at}], {old}",
                "lea {new}, [{old} + {d}]",
                "jmp 4b",
                ".popsection",
                ".pushsection __rseq_cs, \"aw\"",
                ".balign 32",
                "5:",
                ".long 0, 0",
                ".quad 3b, 4b - 3b, 6b",
                ".popsection",
                off = in(reg) cpu_id_off,
                limit = in(reg) limit,
                base = in(reg) base,
                d = in(reg) delta,
                shift = const crate::percpu::arena::UNIT_SHIFT,
                at = out(reg) at,
                old = out(reg) changed,
                new = out(reg) new,
                options(nostack),
            );
        }
        (at, new, changed)
    }
}

#[cfg(not(all(
    target_os = "linux",
    target_arch = "x86_64",
    not(miri),
    not(rstat_loom)
)))]
mod imp {
    pub(super) fn supported() -> Option<isize> {
        None
    }

    pub(super) fn membarrier() -> Result<(), i32> {
        Ok(())
    }

    /// Never called: `supported` is `None` here.
    #[inline(always)]
    #[cfg_attr(any(rstat_loom, miri), allow(dead_code))]
    pub(super) unsafe fn add_fetch_on_this_cpu(
        _cpu_id_off: isize,
        _base: *const u8,
        _limit: u32,
        _delta: i64,
    ) -> (usize, i64, i64) {
        unreachable!("restartable sections are never available here")
    }

    /// Never called: `supported` is `None` here.
    #[inline(always)]
    #[cfg_attr(any(rstat_loom, miri), allow(dead_code))]
    pub(super) unsafe fn add_on_this_cpu(
        _cpu_id_off: isize,
        _base: *const u8,
        _nr: usize,
        _delta: u64,
    ) -> bool {
        false
    }
}

#[cfg(all(test, not(rstat_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    /// A count and its gate, as `percpu_ref`'s owned slots.
    #[repr(C, align(128))]
    struct Slot(AtomicU64, AtomicU64);
    const _: () = assert!(core::mem::size_of::<Slot>() == 1 << SLOT_SHIFT);
    const _: () = assert!(core::mem::offset_of!(Slot, 1) == GATE_OFFSET);

    fn open_slots(nr: usize) -> Vec<Slot> {
        (0..nr)
            .map(|_| Slot(AtomicU64::new(0), AtomicU64::new(1)))
            .collect()
    }

    #[test]
    fn sections_add_on_this_cpu_slot_and_respect_the_switch() {
        let Some(off) = rseq_for_test(
            "sections_add_on_this_cpu_slot_and_respect_the_switch",
            available(),
        ) else {
            return;
        };
        let nr = super::super::cpu::possible_cpus();
        let slots = open_slots(nr);
        let base = slots.as_ptr().cast::<u8>();
        let mut done = 0u64;
        for _ in 0..10_000 {
            // SAFETY: `slots` has `nr` slots `1 << SLOT_SHIFT` apart, each
            // followed by its gate; only this thread writes them.
            done += u64::from(unsafe { add_on_this_cpu(off, base, nr, 3) });
        }
        assert_eq!(
            done, 10_000,
            "a registered thread with cpu < nr always commits"
        );
        let sum: u64 = slots.iter().map(|s| s.0.load(Ordering::Relaxed)).sum();
        assert_eq!(sum, 30_000);
        // SAFETY: as above; a slot count of 0 admits no CPU.
        assert!(!unsafe { add_on_this_cpu(off, base, 0, 3) });
        // Closed gates admit no CPU either.
        for s in &slots {
            s.1.store(0, Ordering::Relaxed);
        }
        // SAFETY: as above.
        assert!(!unsafe { add_on_this_cpu(off, base, nr, 3) });
        let sum: u64 = slots.iter().map(|s| s.0.load(Ordering::Relaxed)).sum();
        assert_eq!(sum, 30_000, "a refused section writes nothing");
        membarrier().expect("membarrier works once available() said so");
    }

    #[test]
    fn concurrent_sections_and_membarriers_lose_no_add() {
        let Some(off) = rseq_for_test(
            "concurrent_sections_and_membarriers_lose_no_add",
            available(),
        ) else {
            return;
        };
        let nr = super::super::cpu::possible_cpus();
        let slots = open_slots(nr);
        let base = slots.as_ptr() as usize;
        let stop = std::sync::atomic::AtomicBool::new(false);
        let threads = 2 * nr.max(2);
        let per_thread = 200_000u64;
        std::thread::scope(|s| {
            s.spawn(|| {
                // Aborts sections in flight over and over.
                while !stop.load(Ordering::Relaxed) {
                    membarrier().unwrap();
                }
            });
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(move || {
                        let mut missed = 0u64;
                        for i in 0..per_thread {
                            // SAFETY: as in the test above; several threads
                            // share a CPU's slot only through sections.
                            let ok = unsafe { add_on_this_cpu(off, base as *const u8, nr, 1) };
                            missed += u64::from(!ok);
                            if i % 4096 == 0 {
                                std::thread::yield_now();
                            }
                        }
                        missed
                    })
                })
                .collect();
            let missed: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
            stop.store(true, Ordering::Relaxed);
            assert_eq!(missed, 0);
        });
        let sum: u64 = slots.iter().map(|s| s.0.load(Ordering::Relaxed)).sum();
        assert_eq!(
            sum,
            threads as u64 * per_thread,
            "every committed add counted once"
        );
    }

    /// A buffer laid out like the per-CPU arena: one `i64` per unit, for
    /// `nr` CPUs and the slot past them that a refused section writes.
    fn unit_slots(nr: usize) -> Vec<std::sync::atomic::AtomicI64> {
        let per = crate::percpu::arena::UNIT_SIZE / 8;
        (0..(nr + 1) * per)
            .map(|_| std::sync::atomic::AtomicI64::new(0))
            .collect()
    }

    #[test]
    fn fetching_sections_return_their_cpu_and_the_old_value() {
        let Some(off) = rseq_for_test(
            "fetching_sections_return_their_cpu_and_the_old_value",
            available(),
        ) else {
            return;
        };
        let nr = super::super::cpu::possible_cpus();
        let per = crate::percpu::arena::UNIT_SIZE / 8;
        let slots = unit_slots(nr);
        let base = slots.as_ptr().cast::<u8>();
        for i in 0..10_000i64 {
            // SAFETY: `slots` has an i64 every UNIT_SIZE bytes for `nr`
            // CPUs; only this thread writes them.
            let (at, new, changed) = unsafe { add_fetch_on_this_cpu(off, base, nr as u32, 5) };
            assert_eq!(changed, (new - 5) ^ new, "the bits the add changed");
            assert_eq!(at % crate::percpu::arena::UNIT_SIZE, 0, "a unit offset");
            let cpu = at >> crate::percpu::arena::UNIT_SHIFT;
            assert!(cpu < nr);
            let now = slots[cpu * per].load(Ordering::Relaxed);
            assert_eq!(now, new, "add {i}: the slot of the CPU reported");
        }
        let sum: i64 = (0..nr)
            .map(|c| slots[c * per].load(Ordering::Relaxed))
            .sum();
        assert_eq!(sum, 50_000);
        // A limit of 0 admits no CPU: the refused thread adds to slot 0
        // (the slot at the limit) with a locked RMW, and is told so.
        let before = slots[0].load(Ordering::Relaxed);
        // SAFETY: as above; slot 0 is written only by this thread.
        let (at, new, changed) = unsafe { add_fetch_on_this_cpu(off, base, 0, 5) };
        assert_eq!((at, new, changed), (0, before + 5, before ^ (before + 5)));
        assert_eq!(slots[0].load(Ordering::Relaxed), before + 5);
        let sum: i64 = (0..nr)
            .map(|c| slots[c * per].load(Ordering::Relaxed))
            .sum();
        assert_eq!(sum, 50_005, "a refused section adds once, at the limit");
    }

    #[test]
    fn concurrent_fetching_sections_and_membarriers_lose_no_add() {
        let Some(off) = rseq_for_test(
            "concurrent_fetching_sections_and_membarriers_lose_no_add",
            available(),
        ) else {
            return;
        };
        let nr = super::super::cpu::possible_cpus();
        let per = crate::percpu::arena::UNIT_SIZE / 8;
        let slots = unit_slots(nr);
        let base = slots.as_ptr() as usize;
        let stop = std::sync::atomic::AtomicBool::new(false);
        let threads = 2 * nr.max(2);
        let per_thread = 200_000i64;
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    membarrier().unwrap();
                }
            });
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(move || {
                        for i in 0..per_thread {
                            // SAFETY: as above; threads share a CPU's slot
                            // only through sections.
                            let (at, new, changed) = unsafe {
                                add_fetch_on_this_cpu(off, base as *const u8, nr as u32, 1)
                            };
                            assert!(at >> crate::percpu::arena::UNIT_SHIFT < nr);
                            assert_eq!(changed, (new - 1) ^ new);
                            if i % 4096 == 0 {
                                std::thread::yield_now();
                            }
                        }
                    })
                })
                .collect();
            for w in workers {
                w.join().unwrap();
            }
            stop.store(true, Ordering::Relaxed);
        });
        let sum: i64 = (0..nr)
            .map(|c| slots[c * per].load(Ordering::Relaxed))
            .sum();
        assert_eq!(
            sum,
            threads as i64 * per_thread,
            "every committed add counted once"
        );
    }

    /// More threads than CPUs (so they share slots through preemption),
    /// deltas of several sizes: the bare counter's sum is every add once,
    /// with sections on every CPU, on none (every add takes the locked
    /// slot past the limit) and on some.
    #[test]
    fn the_bare_section_counter_counts_every_add_once() {
        let Some(c) = rseq_for_test(
            "the_bare_section_counter_counts_every_add_once",
            BareSectionCounter::new(),
        ) else {
            return;
        };
        count_every_add_once(&c);
        for limit in [0, 1] {
            count_every_add_once(&BareSectionCounter::with_limit(limit).unwrap());
        }
    }

    fn count_every_add_once(c: &BareSectionCounter) {
        let threads = 2 * super::super::cpu::possible_cpus().max(2);
        let per_thread = 100_000i64;
        std::thread::scope(|s| {
            for t in 0..threads as i64 {
                s.spawn(move || {
                    for i in 0..per_thread {
                        c.add(1 + (i & 7) * t);
                        if i % 4096 == 0 {
                            std::thread::yield_now();
                        }
                    }
                });
            }
        });
        let want: i64 = (0..threads as i64)
            .map(|t| (0..per_thread).map(|i| 1 + (i & 7) * t).sum::<i64>())
            .sum();
        assert_eq!(c.sum(), want);
    }
}
