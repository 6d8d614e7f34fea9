//! The restartable sections themselves, for x86-64 Linux: the `membarrier`
//! system call and the two sections (`asm!`) behind the parent module's
//! `add_on_this_cpu` and `add_fetch_on_this_cpu`, whose doc comments state
//! the contracts these keep. The parent picks this file as its `imp` on
//! x86-64 Linux outside Miri and loom, and a stub that is never available
//! everywhere else.

/// `enum membarrier_cmd` values (linux/membarrier.h).
const CMD_QUERY: libc::c_long = 0;
const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;
const CMD_PRIVATE_EXPEDITED_RSEQ: libc::c_long = 1 << 7;
const CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ: libc::c_long = 1 << 8;

/// Which command [`barrier`] issues: the plain private expedited one once
/// registered and proven here, else the rseq one (which is a barrier
/// too). Set by [`supported`] before anything uses either.
static BARRIER_CMD: std::sync::atomic::AtomicI64 =
    std::sync::atomic::AtomicI64::new(CMD_PRIVATE_EXPEDITED_RSEQ);

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
    let off = crate::percpu::cpu::rseq_cpu_id_offset()?;
    let cmds = sys_membarrier(CMD_QUERY).ok()?;
    if cmds & CMD_PRIVATE_EXPEDITED_RSEQ == 0 {
        return None;
    }
    sys_membarrier(CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ).ok()?;
    // Prove the command works here (a seccomp filter may allow the query
    // and refuse the rest) before anything relies on it.
    membarrier().ok()?;
    // The plain barrier, where offered and working: see `barrier`.
    if cmds & CMD_PRIVATE_EXPEDITED != 0
        && sys_membarrier(CMD_REGISTER_PRIVATE_EXPEDITED).is_ok()
        && sys_membarrier(CMD_PRIVATE_EXPEDITED).is_ok()
    {
        BARRIER_CMD.store(CMD_PRIVATE_EXPEDITED, std::sync::atomic::Ordering::Relaxed);
    }
    Some(off)
}

/// A full memory barrier on every CPU running a thread of this process,
/// without restarting their sections (the parent's `barrier`).
pub(super) fn barrier() -> Result<(), i32> {
    // (`c_long` is `i64` on x86-64.)
    let cmd = BARRIER_CMD.load(std::sync::atomic::Ordering::Relaxed);
    loop {
        match sys_membarrier(cmd) {
            Ok(_) => return Ok(()),
            Err(libc::EINTR) => continue,
            Err(e) => return Err(e),
        }
    }
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
            // `at * UNIT_STRIDE` as two shifts side by side and an add
            // (two cycles where a multiply takes three).
            "mov {old}, {at}",
            "shl {at}, {shift}",
            "shl {old}, {color}",
            "add {at}, {old}",
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
            "mov {old}, {at}",
            "shl {at}, {shift}",
            "shl {old}, {color}",
            "add {at}, {old}",
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
            color = const crate::percpu::arena::UNIT_COLOR_SHIFT,
            at = out(reg) at,
            old = out(reg) changed,
            new = out(reg) new,
            options(nostack),
        );
    }
    (at, new, changed)
}
