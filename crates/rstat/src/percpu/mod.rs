//! Per-CPU building blocks: which CPU am I on ([`cpu`]), and where does
//! per-CPU state live ([`arena`], densely, one unit per CPU; or
//! [`CachePadded`], one value on cache lines of its own).

pub mod arena;
mod cache_padded;
pub mod cpu;
pub(crate) mod rseq;
pub(crate) mod rwlock;
pub(crate) mod shared_arena;
#[cfg(all(test, not(rstat_loom)))]
pub(crate) mod testing;
#[cfg(test)]
mod tests_line_box;
#[cfg(all(test, not(rstat_loom)))]
mod tests_shared_arena;

pub use cache_padded::{CachePadded, LineBox, CACHE_LINE};

/// Ask for the cache line holding `p`, to be written soon: `prefetchw`
/// (fetched for ownership, so the write that follows needs no second
/// transfer) where the CPU has it, else a read prefetch. A hint: it never
/// faults, whatever `p` is, and changes no memory. Nothing on other
/// targets, under Miri or under loom.
#[inline(always)]
#[cfg_attr(rstat_loom, allow(dead_code))]
pub(crate) fn prefetch_write(p: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(any(miri, rstat_loom))))]
    if has_prefetchw() {
        // SAFETY: the CPU has the instruction (above); a prefetch reads
        // and writes nothing a program can see and does not fault on any
        // address.
        unsafe {
            core::arch::asm!(
                "prefetchw byte ptr [{}]",
                in(reg) p,
                options(nostack, preserves_flags, readonly)
            );
        }
    } else {
        prefetch_read(p);
    }
    #[cfg(not(all(target_arch = "x86_64", not(any(miri, rstat_loom)))))]
    let _ = p;
}

/// Whether this CPU has `prefetchw` (CPUID `0x8000_0001`, ECX bit 8),
/// asked once.
#[cfg(all(target_arch = "x86_64", not(any(miri, rstat_loom))))]
fn has_prefetchw() -> bool {
    use core::sync::atomic::{AtomicU8, Ordering};
    // 0: not asked yet; 1: no; 2: yes.
    static HAS: AtomicU8 = AtomicU8::new(0);
    match HAS.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: `cpuid` exists on every x86-64 CPU; the extended leaf
            // is read only where the highest one reported includes it.
            // (`__cpuid` is safe to call in newer Rust releases.)
            #[allow(unused_unsafe)]
            let yes = unsafe {
                core::arch::x86_64::__cpuid(0x8000_0000).eax >= 0x8000_0001
                    && core::arch::x86_64::__cpuid(0x8000_0001).ecx & (1 << 8) != 0
            };
            HAS.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
            yes
        }
        v => v == 2,
    }
}

/// Ask for the cache line holding `p`, to be read soon. A hint, as
/// [`prefetch_write`].
#[inline(always)]
#[cfg_attr(rstat_loom, allow(dead_code))]
pub(crate) fn prefetch_read(p: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(any(miri, rstat_loom))))]
    // SAFETY: as in `prefetch_write`.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(all(target_arch = "x86_64", not(any(miri, rstat_loom)))))]
    let _ = p;
}
