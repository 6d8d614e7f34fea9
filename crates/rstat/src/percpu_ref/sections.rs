//! Restartable sections on a ref's slots ([`FastPath::Rseq`], and its model
//! [`FastPath::Simulated`]): both sides of the protocol described in the
//! parent module's "Two fast paths". The fast path's side is
//! [`section_add`](PercpuRef::section_add), an add on this CPU's slot behind
//! the slot's gate, called by `get_put`; the switch's side is
//! [`stop_sections`](PercpuRef::stop_sections), which closes every gate and
//! waits until no section can still commit (`membarrier`, or taking every
//! simulated CPU's lock), called by `switch` before it freezes the slots.
//! The `Locked` fast path needs neither.

use super::{Cpu, FastPath, PercpuRef, PercpuRefError};
use crate::percpu::rseq;
#[cfg(any(rstat_loom, miri))]
use crate::sync::Ordering::Acquire;
use crate::sync::Ordering::{Relaxed, Release};

impl PercpuRef {
    /// Whether the fast paths use restartable sections (`Rseq`,
    /// `Simulated`) rather than locked slot updates.
    #[inline(always)]
    pub(super) fn uses_sections(&self) -> bool {
        // `rseq_off` is non-zero exactly for `Rseq` (glibc's rseq area is
        // never at the thread pointer itself), so the real fast path tests
        // the field it is about to use.
        if cfg!(any(rstat_loom, miri)) {
            self.fast == FastPath::Simulated
        } else {
            self.rseq_off != 0
        }
    }

    /// Add `delta` to this CPU's slot in a restartable section (`Rseq`,
    /// `Simulated`); `false` if the section refused (not percpu mode, or no
    /// slot for this CPU): the caller then counts on `count`. See "Two fast
    /// paths".
    #[inline(always)]
    pub(super) fn section_add(&self, cpu: Cpu, delta: u64) -> bool {
        #[cfg(not(any(rstat_loom, miri)))]
        {
            // A section can only add on the CPU it runs on: a count aimed at
            // another CPU's slot goes to `count` instead (exact in either
            // mode).
            if let Cpu::Given(_) = cpu {
                return false;
            }
            // SAFETY: `fast` is not `Locked`, so it is `Rseq` (`Simulated`
            // exists only under loom and Miri), which `build` chose only
            // with `rseq_off` from `rseq::available()` and owned slots:
            // `nr` live `AtomicU64`s `1 << SLOT_SHIFT` bytes apart, as long
            // as `self`, each followed by its gate. In percpu mode only
            // sections write the slots (`Cpu::Given` was refused above);
            // the lock holder writes them (freeze, reset) only after storing
            // 0 to every gate and a `membarrier`. See "Two fast paths".
            unsafe {
                rseq::add_on_this_cpu(
                    self.rseq_off,
                    self.slots.base_bytes(),
                    self.slots.nr(),
                    delta,
                )
            }
        }
        #[cfg(any(rstat_loom, miri))]
        {
            self.simulated_add(cpu, delta)
        }
    }

    /// The model of a section: the CPU's lock stands for "nothing else runs
    /// a section on this CPU meanwhile", a plain load and store for the
    /// unlocked add.
    #[cfg(any(rstat_loom, miri))]
    fn simulated_add(&self, cpu: Cpu, delta: u64) -> bool {
        let c = self.cpu_id(cpu);
        if c >= self.slots.nr() {
            return false; // as the real section: no slot, use `count`
        }
        let _on_cpu = crate::sync::lock(&self.shared.sim[c]);
        // Acquire: the real section's load of the gate is an x86 load
        // (acquire); pairs with the Release stores that end a switch to
        // percpu mode. (Owned slots: every `Simulated` ref has them.)
        if self.slots.gate(c).is_none_or(|g| g.load(Acquire) == 0) {
            return false;
        }
        let slot = self.slots.slot(c);
        // Relaxed: the CPU's lock orders this against every other section
        // on the CPU, and the simulated membarrier against the switcher.
        slot.store(slot.load(Relaxed).wrapping_add(delta), Relaxed);
        true
    }

    /// Wait until no section can still be running with a check made before
    /// the gates were closed, and every section that committed is
    /// visible here. Holds `ctl`.
    fn quiesce_sections(&self) -> Result<(), PercpuRefError> {
        match self.fast {
            FastPath::Locked => Ok(()),
            FastPath::Rseq => rseq::membarrier().map_err(|errno| PercpuRefError::Membarrier {
                errno: errno.unsigned_abs() as usize,
            }),
            FastPath::Simulated => {
                #[cfg(any(rstat_loom, miri))]
                for cpu in self.shared.sim.iter() {
                    drop(crate::sync::lock(cpu));
                }
                Ok(())
            }
        }
    }

    /// Stop the restartable sections (`Rseq`, `Simulated`; nothing to do on
    /// the `Locked` path or when they are already stopped): store 0 to
    /// every slot's gate, then wait until every section that read an open
    /// gate has committed or been aborted. Holds `ctl` (the only writer of
    /// the gates, which change together). On failure nothing changed.
    pub(super) fn stop_sections(&self) -> Result<(), PercpuRefError> {
        if !self.slots.gates_open() {
            return Ok(());
        }
        // Relaxed: the sections learn of it through the quiescence below (a
        // membarrier, a full barrier on every CPU running this process; or
        // the simulated CPUs' locks).
        self.slots.set_gates(false, Relaxed);
        if let Err(e) = self.quiesce_sections() {
            // Release: as the stores that opened them (the slots were not
            // touched, so sections simply carry on).
            self.slots.set_gates(true, Release);
            return Err(e);
        }
        Ok(())
    }
}
