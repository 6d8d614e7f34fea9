//! The clock a change of group reads: what the feed measures its wall-time
//! segments with (`feed.rs`), at every enter, exit and scoped poll.
//!
//! Only durations between two readings of this clock matter (a segment's
//! length, the time since the last reconciliation), and only in proportion:
//! a reconciliation shares the thread's CPU time, read from its own CPU
//! clock, among the segments by their lengths (`apportion`). So the
//! clock must be cheap, monotonic across CPUs, and steady in rate; its
//! scale need only be close to nanoseconds (it decides when a stay counts
//! as long, [`LONG_SEGMENT`](super::feed::LONG_SEGMENT), and when a
//! reconciliation is due).
//!
//! - **The TSC**, where the kernel itself keeps time with it (the current
//!   clocksource is `tsc`: the kernel checked that it runs at a constant
//!   rate, through idle states, in step on every CPU): one `rdtsc`,
//!   scaled to nanoseconds by a factor measured against
//!   `CLOCK_MONOTONIC`. Cheaper than the vDSO's monotonic clock, which
//!   reads the same counter and then its own scale under a sequence
//!   count (and, in a guest, the hypervisor's clock page);
//!   `rstat bench enter` measures both (BENCHMARKS.md).
//! - **`CLOCK_MONOTONIC`** (the vDSO) everywhere else: another
//!   clocksource, another architecture, Miri, loom models, and until the
//!   factor is measured.
//!
//! **Calibration.** The first reading notes both clocks (the anchor) and
//! returns the monotonic one; readings stay monotonic until
//! [`CALIBRATE_AFTER_NS`] has passed, when one of them divides the two
//! clocks' advances since the anchor and publishes the factor. From then
//! on a reading is the anchor's monotonic time plus the scaled TSC
//! advance since the anchor: the same epoch, so the switch from one clock
//! to the other moves a reading by the measurement's error only (a few
//! hundred ns at most over the calibration window, and the feed clamps a
//! segment that would come out negative to zero). The factor is not
//! updated after: the TSC's rate is constant, and the monotonic clock's
//! small NTP slews do not change CPU time's apportioning.

/// How long after the anchor the TSC factor is measured: long enough
/// that the two clocks' read jitter (tens of ns) is a part in a million.
#[cfg_attr(
    not(all(target_arch = "x86_64", not(miri), not(rstat_loom))),
    allow(dead_code)
)]
pub(crate) const CALIBRATE_AFTER_NS: u64 = 50_000_000;

/// Where the kernel names the clocksource it keeps time with.
#[cfg_attr(
    not(any(test, all(target_arch = "x86_64", not(miri), not(rstat_loom)))),
    allow(dead_code)
)]
const KERNEL_CLOCKSOURCE: &str = "/sys/devices/system/clocksource/clocksource0/current_clocksource";

/// A reading of the segment clock, in (approximately) nanoseconds of
/// `CLOCK_MONOTONIC`'s epoch.
#[inline]
pub(crate) fn now_ns() -> u64 {
    #[cfg(all(target_arch = "x86_64", not(miri), not(rstat_loom)))]
    {
        tsc::now_ns()
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri), not(rstat_loom))))]
    {
        crate::os::mono_ns()
    }
}

/// Which clock a change of the current group reads now: `"tsc"` (the
/// time-stamp counter, scaled to nanoseconds, where the kernel's own
/// clocksource is the TSC) or `"monotonic"` (`CLOCK_MONOTONIC`; also the
/// first 50 ms of a process, while the TSC's rate is measured). Only the
/// cost of a change depends on it; the CPU time charged is the thread's
/// CPU clock either way (see the [module docs](crate::attach)).
pub fn source() -> &'static str {
    #[cfg(all(target_arch = "x86_64", not(miri), not(rstat_loom)))]
    if tsc::ready() {
        return "tsc";
    }
    "monotonic"
}

#[cfg(all(target_arch = "x86_64", not(miri), not(rstat_loom)))]
mod tsc {
    use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

    /// Not looked at yet / the monotonic clock for good / anchored,
    /// measuring / the factor is published.
    const UNKNOWN: u8 = 0;
    const MONOTONIC: u8 = 1;
    const ANCHORED: u8 = 2;
    const READY: u8 = 3;
    /// A transient state: one reading is writing the anchor or the factor.
    const BUSY: u8 = 4;

    static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
    static ANCHOR_MONO: AtomicU64 = AtomicU64::new(0);
    static ANCHOR_TSC: AtomicU64 = AtomicU64::new(0);
    /// Nanoseconds per TSC tick, in 32.32 fixed point.
    static FACTOR: AtomicU64 = AtomicU64::new(0);

    #[inline(always)]
    fn rdtsc() -> u64 {
        // SAFETY: `rdtsc` reads the time-stamp counter; it has no memory
        // effects and is available on every x86_64 CPU (user mode may
        // read it unless the kernel set CR4.TSD, which Linux does only
        // for seccomp-strict or prctl(PR_SET_TSC) processes: see
        // `usable`).
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    pub(super) fn ready() -> bool {
        STATE.load(Ordering::Acquire) == READY
    }

    #[inline]
    pub(super) fn now_ns() -> u64 {
        let state = STATE.load(Ordering::Acquire);
        if state == MONOTONIC {
            // For good: no calibration step to take.
            return crate::os::mono_ns();
        }
        if state == READY {
            // Acquire above: the anchor and factor were written before
            // READY was published.
            let (m0, t0, f) = (
                ANCHOR_MONO.load(Ordering::Relaxed),
                ANCHOR_TSC.load(Ordering::Relaxed),
                FACTOR.load(Ordering::Relaxed),
            );
            let ticks = rdtsc().saturating_sub(t0);
            let ns = (u128::from(ticks) * u128::from(f)) >> 32;
            return m0.saturating_add(u64::try_from(ns).unwrap_or(u64::MAX));
        }
        slow()
    }

    /// Until the factor is published or the TSC refused: the monotonic
    /// clock, and the state's steps (each taken by one reading, under
    /// `BUSY`).
    #[cold]
    fn slow() -> u64 {
        let mono = crate::os::mono_ns();
        match STATE.load(Ordering::Acquire) {
            UNKNOWN
                if STATE
                    .compare_exchange(UNKNOWN, BUSY, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok() =>
            {
                let next = if usable() {
                    // After the checks' I/O: see `pair`.
                    let (t0, m0) = pair();
                    ANCHOR_MONO.store(m0, Ordering::Relaxed);
                    ANCHOR_TSC.store(t0, Ordering::Relaxed);
                    ANCHORED
                } else {
                    MONOTONIC
                };
                STATE.store(next, Ordering::Release);
            }
            ANCHORED => {
                let m0 = ANCHOR_MONO.load(Ordering::Relaxed);
                if mono.saturating_sub(m0) >= super::CALIBRATE_AFTER_NS
                    && STATE
                        .compare_exchange(ANCHORED, BUSY, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                {
                    let (t1, m1) = pair();
                    let t0 = ANCHOR_TSC.load(Ordering::Relaxed);
                    let next = match factor(m1.saturating_sub(m0), t1.saturating_sub(t0)) {
                        Some(f) => {
                            FACTOR.store(f, Ordering::Relaxed);
                            READY
                        }
                        None => MONOTONIC,
                    };
                    STATE.store(next, Ordering::Release);
                }
            }
            _ => {}
        }
        mono
    }

    /// A TSC reading and the monotonic time at it. The factor is the ratio
    /// of two such pairs' differences, so a gap between a pair's two reads
    /// (the thread preempted between them, or I/O) skews it by the gap's
    /// share of the calibration window. So the TSC is read between two
    /// monotonic reads, and of a few tries the tightest bracket is kept,
    /// its midpoint taken as the time.
    fn pair() -> (u64, u64) {
        let mut best = (0, 0, u64::MAX);
        for _ in 0..8 {
            let before = crate::os::mono_ns();
            let t = rdtsc();
            let after = crate::os::mono_ns();
            let width = after.saturating_sub(before);
            if width < best.2 {
                best = (t, before + width / 2, width);
            }
        }
        (best.0, best.1)
    }

    /// Nanoseconds per tick in 32.32 fixed point from `ns` and `ticks`
    /// measured over the same stretch; `None` for a counter that did not
    /// advance or whose rate is outside 1 MHz to 100 GHz (no working TSC).
    pub(super) fn factor(ns: u64, ticks: u64) -> Option<u64> {
        if ns == 0 || ticks == 0 {
            return None;
        }
        let f = (u128::from(ns) << 32) / u128::from(ticks);
        // 100 GHz: 0.01 ns per tick; 1 MHz: 1000 ns per tick.
        let (lo, hi) = ((1u128 << 32) / 100, 1000u128 << 32);
        (lo..=hi).contains(&f).then_some(f as u64)
    }

    /// Whether the kernel keeps time with the TSC (its current
    /// clocksource), so the counter is constant-rate and in step across
    /// CPUs, and this process may read it (not forbidden by
    /// `PR_SET_TSC`).
    fn usable() -> bool {
        let source = std::fs::read_to_string(super::KERNEL_CLOCKSOURCE);
        if !matches!(source.as_deref().map(str::trim), Ok("tsc")) {
            return false;
        }
        let mut mode: libc::c_int = 0;
        // SAFETY: PR_GET_TSC writes one int through the pointer given.
        let rc = unsafe { libc::prctl(libc::PR_GET_TSC, &mut mode as *mut libc::c_int) };
        rc == 0 && mode == libc::PR_TSC_ENABLE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reading tracks the monotonic clock's rate once calibrated: over a
    /// sleep, its advance lies between the monotonic advances measured
    /// inside and outside its two readings, within the calibration's
    /// error (far below the 0.1% allowed) and a few µs of read order, and
    /// reads the monotonic clock's epoch.
    #[test]
    fn readings_advance_with_the_monotonic_clock() {
        // Calibrate (or settle on the monotonic clock).
        let start = crate::os::mono_ns();
        while crate::os::mono_ns() - start < CALIBRATE_AFTER_NS + 1_000_000 {
            let _ = now_ns();
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let _ = now_ns();
        let kernel_tsc =
            std::fs::read_to_string(KERNEL_CLOCKSOURCE).is_ok_and(|s| s.trim() == "tsc");
        if cfg!(all(target_arch = "x86_64", not(miri), not(rstat_loom))) && kernel_tsc {
            assert_eq!(source(), "tsc", "the kernel keeps time with the TSC");
        }
        for _ in 0..3 {
            let outer0 = crate::os::mono_ns();
            let s0 = now_ns();
            let inner0 = crate::os::mono_ns();
            std::thread::sleep(std::time::Duration::from_millis(20));
            let inner1 = crate::os::mono_ns();
            let s1 = now_ns();
            let outer1 = crate::os::mono_ns();
            let (seg, inner, outer) = (s1 - s0, inner1 - inner0, outer1 - outer0);
            let slack = outer / 1000 + 5_000;
            assert!(
                seg + slack >= inner && seg <= outer + slack,
                "{} clock: advanced {seg} ns; the monotonic clock {inner}..{outer} ns",
                source()
            );
            // Same epoch: a reading lies between the monotonic clock's
            // readings around it, within the calibration's error (1 ms
            // allowed), however long the three reads take (a busy machine,
            // or an interpreter, may stop the thread between them).
            let (m0, s, m1) = (crate::os::mono_ns(), now_ns(), crate::os::mono_ns());
            assert!(
                s + 1_000_000 >= m0 && s <= m1 + 1_000_000,
                "{} clock reads {s}, monotonic {m0} before it and {m1} after",
                source()
            );
        }
    }

    #[cfg(all(target_arch = "x86_64", not(miri), not(rstat_loom)))]
    #[test]
    fn the_factor_is_the_rate_and_refuses_a_stopped_counter() {
        // 3 GHz: a third of a ns per tick.
        let f = tsc::factor(1_000_000_000, 3_000_000_000).unwrap();
        assert_eq!(f, (1u64 << 32) / 3);
        assert_eq!(tsc::factor(1_000, 0), None);
        assert_eq!(tsc::factor(0, 1_000), None);
        // A counter 10,000 times slower than a 1 MHz one is no TSC.
        assert_eq!(tsc::factor(1_000_000_000, 100), None);
    }
}
