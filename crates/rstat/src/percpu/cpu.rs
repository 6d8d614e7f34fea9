//! Which CPU is this thread on?
//!
//! Per-CPU state is only as cheap as the answer to that question. Three
//! sources, tried in order once per process:
//!
//! 1. **rseq.** glibc (2.35 and later) registers a restartable-sequences area
//!    for every thread and exports its offset from the thread pointer as
//!    `__rseq_offset`; the kernel keeps `cpu_id` in it current across
//!    migrations. Reading it is one load relative to the thread pointer,
//!    with no call at all.
//! 2. **`sched_getcpu()`**, when rseq is not registered (old glibc, or
//!    `GLIBC_TUNABLES=glibc.pthread.rseq=0`). A vDSO call on most systems.
//! 3. **A per-thread hash**: each thread gets a fixed slot, handed out round
//!    robin. Still spreads writers over slots, so contention stays low even
//!    where the CPU cannot be known (and under Miri).
//!
//! `RSTAT_CPU_ID=rseq|getcpu|hash` forces a source (for benchmarks and tests);
//! a forced source that is not available falls back down the list.
//! `rstat bench update` reports the source it ran with, so running it under
//! each setting measures what the sources cost an update.
//!
//! The answer may be stale by the time it is used (the thread can migrate), so
//! callers write per-CPU slots with atomic read-modify-writes: a slot is almost
//! always local, so the RMW is uncontended, and a stale id costs a little
//! contention, never correctness. Ids at or beyond the slot count are folded in
//! with [`fold`], never used as an index.

use std::fmt;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

/// Where CPU ids come from in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuIdSource {
    /// The rseq area glibc registered for each thread.
    Rseq,
    /// The `sched_getcpu()` call.
    SchedGetcpu,
    /// A fixed per-thread slot (round robin over threads).
    ThreadHash,
}

impl CpuIdSource {
    /// The short name used in reports and benchmark output.
    pub fn name(self) -> &'static str {
        match self {
            CpuIdSource::Rseq => "rseq",
            CpuIdSource::SchedGetcpu => "sched_getcpu",
            CpuIdSource::ThreadHash => "thread_hash",
        }
    }
}

impl fmt::Display for CpuIdSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// One word holds everything the hot path needs: the offset of `cpu_id` from
// the thread pointer when the source is rseq, otherwise a sentinel naming the
// source (or "not detected yet"). Offsets are small, so the sentinels (the
// three lowest `isize` values) never collide with one. Relaxed everywhere:
// detection is idempotent (every thread computes the same answer from
// process-wide facts), and the word is self-contained, so a thread that
// sees it needs nothing else published with it.
const UNDETECTED: isize = isize::MIN;
const USE_GETCPU: isize = isize::MIN + 1;
const USE_HASH: isize = isize::MIN + 2;
static FAST: AtomicIsize = AtomicIsize::new(UNDETECTED);

/// The source in use in this process (detected on first use).
pub fn source() -> CpuIdSource {
    match FAST.load(Ordering::Relaxed) {
        UNDETECTED => detect(),
        USE_GETCPU => CpuIdSource::SchedGetcpu,
        USE_HASH => CpuIdSource::ThreadHash,
        _ => CpuIdSource::Rseq,
    }
}

#[cold]
fn detect() -> CpuIdSource {
    let forced = std::env::var("RSTAT_CPU_ID").ok();
    let want = forced.as_deref().unwrap_or("rseq");
    let (word, chosen) = match (want, rseq::cpu_id_offset()) {
        ("rseq", Some(off)) => (off, CpuIdSource::Rseq),
        ("hash", _) => (USE_HASH, CpuIdSource::ThreadHash),
        _ if sched_getcpu().is_some() => (USE_GETCPU, CpuIdSource::SchedGetcpu),
        _ => (USE_HASH, CpuIdSource::ThreadHash),
    };
    FAST.store(word, Ordering::Relaxed);
    chosen
}

/// The offset of `cpu_id` in the rseq area from the thread pointer, when
/// rseq is the source in use (restartable sections need it).
pub(crate) fn rseq_cpu_id_offset() -> Option<isize> {
    if source() != CpuIdSource::Rseq {
        return None;
    }
    Some(FAST.load(Ordering::Relaxed)).filter(|&w| w > USE_HASH)
}

/// The id of the CPU this thread is running on, from the process's source.
/// Not folded: may exceed any slot count; pass it through [`fold`].
///
/// Cost with rseq: one load of a process-wide word and one load relative to
/// the thread pointer, no call. With `sched_getcpu`, a call (through the
/// vDSO on most systems); with the hash, a thread-local read.
#[inline(always)]
pub fn current() -> usize {
    // loom replays each interleaving by re-running the model, and assumes
    // every run makes the same choices: a CPU id read from the machine
    // (which changes when the OS migrates the thread running the model)
    // would steer a replay to other slots and make its exploration
    // meaningless. Under loom the "CPU" is the model thread's number:
    // deterministic, and different threads still use different slots.
    #[cfg(rstat_loom)]
    return loom_thread_number();
    #[cfg(not(rstat_loom))]
    current_on_machine()
}

/// The model thread's number, from loom's thread id, whose `Debug` form is
/// `ThreadId(n)`; callers fold it into their slot count.
#[cfg(rstat_loom)]
fn loom_thread_number() -> usize {
    let id = format!("{:?}", loom::thread::current().id());
    id.chars()
        .filter(char::is_ascii_digit)
        .collect::<String>()
        .parse::<usize>()
        .unwrap_or(0)
}

#[cfg_attr(rstat_loom, allow(dead_code))]
#[inline(always)]
fn current_on_machine() -> usize {
    let word = FAST.load(Ordering::Relaxed);
    if word > USE_HASH {
        // SAFETY: only `detect` stores a value above the sentinels, and only
        // an offset produced by `rseq::cpu_id_offset`, which checked that
        // glibc registered an rseq area (it does so for every thread, at the
        // same offset).
        if let Some(cpu) = unsafe { rseq::read_cpu_id(word) } {
            return cpu;
        }
    }
    current_slow(word)
}

#[cold]
#[inline(never)]
fn current_slow(word: isize) -> usize {
    let source = if word == UNDETECTED {
        detect()
    } else {
        source()
    };
    match source {
        // A thread whose rseq registration failed: ask the kernel.
        CpuIdSource::Rseq | CpuIdSource::SchedGetcpu => sched_getcpu().unwrap_or_else(thread_slot),
        CpuIdSource::ThreadHash => thread_slot(),
    }
}

/// Fold any id into `0..nr` (`nr > 0`). Ids in range are returned unchanged
/// (the predicted branch); others wrap, so an unexpected CPU number (hotplug,
/// a lying source) never indexes out of bounds.
#[inline(always)]
pub fn fold(id: usize, nr: usize) -> usize {
    if id < nr {
        id
    } else {
        id % nr
    }
}

/// A set of CPU slots in one word: bit `c % 64` stands for slot `c` (and
/// for `c + 64`, `c + 128`, ...), so a set over any number of slots fits,
/// read as a superset. Marked slot by slot, never cleared, `Relaxed`
/// throughout: whatever orders a mark before a test of it (a lock held
/// around both, a release the reader follows) is the user's. Walk it with
/// `stat::tree::cpus_in`.
pub(crate) struct CpuMask(crate::sync::AtomicU64);

impl CpuMask {
    /// The empty set.
    pub(crate) fn new() -> Self {
        CpuMask(crate::sync::AtomicU64::new(0))
    }

    /// Add slot `cpu`: a load, and an RMW the first time only.
    #[inline]
    pub(crate) fn mark(&self, cpu: usize) {
        let bit = 1u64 << (cpu % 64);
        if self.0.load(crate::sync::Ordering::Relaxed) & bit == 0 {
            self.0.fetch_or(bit, crate::sync::Ordering::Relaxed);
        }
    }

    /// Whether slot `cpu` may be in the set: false only if it never was.
    #[inline]
    pub(crate) fn may_hold(&self, cpu: usize) -> bool {
        self.bits() & (1u64 << (cpu % 64)) != 0
    }

    /// The word: bit `c % 64` for each slot `c` marked.
    #[inline]
    pub(crate) fn bits(&self) -> u64 {
        self.0.load(crate::sync::Ordering::Relaxed)
    }
}

/// This thread's CPU folded into `0..nr` (`nr > 0`): the slot a per-CPU
/// structure of `nr` slots uses for it ([`current`], then [`fold`]).
#[inline(always)]
pub fn current_in(nr: usize) -> usize {
    fold(current(), nr)
}

/// The number of CPU ids to provide slots for: the highest possible CPU id
/// plus one, from `/sys/devices/system/cpu/possible` (ids can be sparse, so
/// a count of CPUs is not enough), else `sysconf(_SC_NPROCESSORS_CONF)`; at
/// least 1. Per-CPU state has this many slots, so CPUs coming online later
/// still have their own. Cost: a file read the first time, then one load.
pub fn possible_cpus() -> usize {
    static CACHED: AtomicUsize = AtomicUsize::new(0);
    // Relaxed: idempotent; every thread computes the same answer.
    match CACHED.load(Ordering::Relaxed) {
        0 => {
            let n = detect_possible_cpus();
            CACHED.store(n, Ordering::Relaxed);
            n
        }
        n => n,
    }
}

#[cold]
fn detect_possible_cpus() -> usize {
    #[cfg(miri)]
    return 2;
    #[cfg(not(miri))]
    {
        let from_sysfs = std::fs::read_to_string("/sys/devices/system/cpu/possible")
            .ok()
            .and_then(|list| max_cpu_id(&list))
            .and_then(|max| max.checked_add(1));
        // SAFETY: sysconf has no preconditions.
        let conf = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        let conf = usize::try_from(conf).unwrap_or(0);
        from_sysfs.unwrap_or(conf).max(1)
    }
}

/// The largest id in a kernel CPU list (`0-3,8,10-11`), or `None` if it
/// does not parse.
pub(crate) fn max_cpu_id(list: &str) -> Option<usize> {
    let mut max = None;
    for part in list.trim().split(',') {
        let last = match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (lo.parse::<usize>().ok()?, hi.parse::<usize>().ok()?);
                if lo > hi {
                    return None;
                }
                hi
            }
            None => part.parse::<usize>().ok()?,
        };
        max = max.max(Some(last));
    }
    max
}

/// `sched_getcpu()`, or `None` where it fails.
pub fn sched_getcpu() -> Option<usize> {
    #[cfg(miri)]
    return None;
    #[cfg(not(miri))]
    {
        // SAFETY: sched_getcpu has no preconditions.
        let c = unsafe { libc::sched_getcpu() };
        if c < 0 {
            None
        } else {
            Some(c as usize)
        }
    }
}

/// This thread's fixed slot in the per-thread-hash fallback.
pub fn thread_slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    SLOT.try_with(|s| *s).unwrap_or(0)
}

/// Reading `cpu_id` out of glibc's rseq area.
mod rseq {
    /// Byte offset, from the thread pointer, of `cpu_id` in this thread's
    /// rseq area (`struct rseq { u32 cpu_id_start; u32 cpu_id; ... }`), if
    /// glibc registered one.
    #[cfg(all(
        not(miri),
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    pub(super) fn cpu_id_offset() -> Option<isize> {
        // Looked up at run time rather than linked, so a glibc without rseq
        // support (or another libc) is a fallback, not a link error.
        // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name.
        let off = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr()) };
        // SAFETY: as above.
        let size = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr()) };
        if off.is_null() || size.is_null() {
            return None;
        }
        // SAFETY: glibc documents `__rseq_offset` as a `ptrdiff_t` and
        // `__rseq_size` as an `unsigned int`, both constant after startup.
        let (off, size) = unsafe { (*(off as *const isize), *(size as *const u32)) };
        if size < 8 {
            return None; // not registered (tunable off, or the kernel refused)
        }
        let cpu_id = off.checked_add(4)?;
        // SAFETY: glibc registered an area of `size` >= 8 bytes at `off`.
        unsafe { read_cpu_id(cpu_id) }.map(|_| cpu_id)
    }

    #[cfg(not(all(
        not(miri),
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    pub(super) fn cpu_id_offset() -> Option<isize> {
        None
    }

    /// # Safety
    /// `off` must come from `cpu_id_offset`.
    #[inline(always)]
    #[cfg(all(not(miri), target_os = "linux", target_arch = "x86_64"))]
    pub(super) unsafe fn read_cpu_id(off: isize) -> Option<usize> {
        let v: u32;
        // SAFETY: on x86-64 Linux the thread pointer is the %fs base, and the
        // caller guarantees a registered rseq area at `off` whose `cpu_id`
        // the kernel updates; a 4-byte aligned load of it is atomic.
        unsafe {
            core::arch::asm!("mov {v:e}, dword ptr fs:[{off}]", off = in(reg) off, v = out(reg) v,
                options(nostack, readonly, preserves_flags));
        }
        // The kernel writes (u32)-1 before registration, (u32)-2 on failure.
        if (v as i32) < 0 {
            None
        } else {
            Some(v as usize)
        }
    }

    /// # Safety
    /// `off` must come from `cpu_id_offset`.
    #[inline(always)]
    #[cfg(all(not(miri), target_os = "linux", target_arch = "aarch64"))]
    pub(super) unsafe fn read_cpu_id(off: isize) -> Option<usize> {
        let tp: usize;
        // SAFETY: reading TPIDR_EL0 has no side effects.
        unsafe {
            core::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nomem, nostack, preserves_flags));
        }
        // SAFETY: the caller guarantees a registered rseq area at `off`.
        let v = unsafe { core::ptr::read_volatile((tp as isize + off) as *const u32) };
        if (v as i32) < 0 {
            None
        } else {
            Some(v as usize)
        }
    }

    /// # Safety
    /// Never called: `cpu_id_offset` always fails on these targets.
    #[cfg(not(all(
        not(miri),
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    pub(super) unsafe fn read_cpu_id(_off: isize) -> Option<usize> {
        None
    }
}

// Tests of the machine's CPU ids: under loom `current` answers with the
// model thread's number, and only inside a model.
#[cfg(all(test, not(rstat_loom)))]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_to_their_largest_id() {
        assert_eq!(max_cpu_id("0-1\n"), Some(1));
        assert_eq!(max_cpu_id("0"), Some(0));
        assert_eq!(max_cpu_id("0-3,8,10-11"), Some(11));
        assert_eq!(max_cpu_id("4-7,0-1"), Some(7));
        assert_eq!(max_cpu_id(""), None);
        assert_eq!(max_cpu_id("3-1"), None);
        assert_eq!(max_cpu_id("0-x"), None);
    }

    #[test]
    fn fold_keeps_in_range_ids_and_wraps_the_rest() {
        assert_eq!(fold(3, 4), 3);
        assert_eq!(fold(4, 4), 0);
        assert_eq!(fold(usize::MAX, 7), usize::MAX % 7);
        for id in 0..1000 {
            assert!(fold(id, 3) < 3);
        }
    }

    #[test]
    fn current_is_foldable_and_source_is_stable() {
        let s = source();
        let nr = possible_cpus();
        assert!(nr >= 1);
        for _ in 0..100 {
            assert!(fold(current(), nr) < nr);
        }
        assert_eq!(source(), s);
    }

    #[test]
    #[cfg(all(
        not(miri),
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    fn rseq_agrees_with_sched_getcpu_when_registered() {
        let Some(off) = crate::percpu::testing::rseq_for_test(
            "rseq_agrees_with_sched_getcpu_when_registered",
            rseq::cpu_id_offset(),
        ) else {
            return;
        };
        // The thread may migrate between the two reads; pin it to the CPU it
        // is on so both must agree.
        let Some(cpu) = sched_getcpu() else { return };
        // SAFETY: a zeroed cpu_set_t is a valid empty set.
        let mut set: libc::cpu_set_t = unsafe { core::mem::zeroed() };
        // SAFETY: `cpu` < CPU_SETSIZE as reported by the kernel.
        unsafe { libc::CPU_SET(cpu, &mut set) };
        // SAFETY: valid set pointer and size; 0 is this thread.
        let pinned = unsafe { libc::sched_setaffinity(0, core::mem::size_of_val(&set), &set) } == 0;
        if pinned {
            std::thread::yield_now();
            // SAFETY: `off` came from cpu_id_offset.
            assert_eq!(unsafe { rseq::read_cpu_id(off) }, sched_getcpu());
        }
    }

    #[test]
    fn thread_slots_differ_between_threads() {
        let a = thread_slot();
        let b = std::thread::spawn(thread_slot).join().unwrap();
        assert_ne!(a, b);
        assert_eq!(a, thread_slot());
    }
}
