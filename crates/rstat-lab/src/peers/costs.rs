//! What a group costs rstat, and the fence an exact read on the rseq path
//! pays: creating and removing one group, the heap bytes one holds, and
//! one `membarrier` system call.
//!
//! The groups are made on an engine with `Builder::nr_cpus(slots)` and
//! otherwise default settings (the built-in `cpu` controller), with a
//! memory controller ([`Memory::register`]) and a 4-item counter set,
//! under one parent group.
//!
//! **Bytes per group** are counted inside the experiment, without a
//! global allocator, for N groups each created and then used once on the
//! measuring thread (a counter add, a memory charge and its uncharge, an
//! enter and exit): glibc's `mallinfo2` before and after (bytes in use in
//! every malloc arena plus mmapped blocks, so the allocator's own header
//! and rounding per block are included; the per-CPU arena's chunks are
//! mappings of their own, outside malloc, whose pages become resident only
//! as they are written), plus the arena pages the groups made resident
//! (`arena_stats().resident_bytes`, from `mincore`). A group writes its
//! per-CPU state only on the CPUs it is used on, so that part grows with
//! the CPUs the thread ran on, not with the slots; the address space the
//! groups reserve in every slot (`arena_stats`: bytes in use per unit x
//! units) is reported beside it. The handle vector is allocated before
//! the first reading. Nothing else runs meanwhile but the engine's
//! periodic flusher. `None` where the C library is not glibc.

use std::time::Instant;

use rstat::memory::{Memory, OnOom};
use rstat::{ControllerHandle, Group, Rstat};
use serde::Serialize;

use crate::machine::median;

/// An engine with `slots` per-CPU slots, its controllers and a parent.
/// Fields drop in order: the parent and controllers before the engine.
struct Engine {
    parent: Group,
    ctl: ControllerHandle,
    mem: Memory,
    rs: Rstat,
}

impl Engine {
    fn new(slots: usize) -> Result<Self, String> {
        let rs = Rstat::builder()
            .nr_cpus(slots)
            .build()
            .map_err(|e| format!("building an engine with {slots} slots: {e}"))?;
        let mem = Memory::register(&rs).map_err(|e| format!("registering memory: {e}"))?;
        let ctl = rs
            .register_counters("c", &["a", "b", "x", "y"])
            .map_err(|e| format!("registering a counter set: {e}"))?;
        let parent = rs
            .root()
            .create_child("p")
            .map_err(|e| format!("creating the parent: {e}"))?;
        Ok(Engine {
            parent,
            ctl,
            mem,
            rs,
        })
    }
}

/// Names of equal length, so every group's name costs the same.
fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("g{i:07}")).collect()
}

/// The median over `samples` of the mean ns to create a group, remove it
/// and drop its handle, `groups` times in a row, with `slots` slots.
pub fn create_remove_ns(slots: usize, groups: usize, samples: usize) -> Result<f64, String> {
    let e = Engine::new(slots)?;
    let names = names(groups.max(1));
    let mut ns = Vec::with_capacity(samples);
    for _ in 0..samples.max(1) {
        let t0 = Instant::now();
        for n in &names {
            let g = e
                .parent
                .create_child(n)
                .map_err(|err| format!("creating group {n}: {err}"))?;
            g.remove()
                .map_err(|err| format!("removing group {n}: {err}"))?;
        }
        ns.push(t0.elapsed().as_nanos() as f64 / names.len() as f64);
    }
    Ok(median(ns))
}

/// Heap bytes one group holds (see the module doc for the method).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct GroupBytes {
    /// All of it.
    pub total: f64,
    /// Of which per-CPU (arena) bytes: the pages the groups made
    /// resident where `mincore` answers, else the address space reserved.
    pub percpu: f64,
    /// The per-CPU address space the group reserves, every slot.
    pub reserved_percpu: f64,
}

/// The bytes per group over `groups` live groups, with `slots` slots
/// (`None` without glibc's `mallinfo2`).
pub fn bytes_per_group(slots: usize, groups: usize) -> Result<Option<GroupBytes>, String> {
    let e = Engine::new(slots)?;
    let names = names(groups.max(1));
    let mut live = Vec::with_capacity(names.len());
    let (arena0, heap0) = (e.rs.arena_stats(), heap_in_use());
    for n in &names {
        let g = e
            .parent
            .create_child(n)
            .map_err(|err| format!("creating group {n}: {err}"))?;
        use_once(&e, &g).map_err(|err| format!("using group {n}: {err}"))?;
        live.push(g);
    }
    let (arena1, heap1) = (e.rs.arena_stats(), heap_in_use());
    for g in &live {
        g.remove()
            .map_err(|err| format!("removing a group: {err}"))?;
    }
    drop(live);
    let (Some(h0), Some(h1)) = (heap0, heap1) else {
        return Ok(None);
    };
    let k = names.len() as f64;
    let reserved = (arena1.bytes_in_use_per_unit as f64 - arena0.bytes_in_use_per_unit as f64)
        * arena1.nr_units as f64;
    let percpu = match (arena0.resident_bytes, arena1.resident_bytes) {
        (Some(r0), Some(r1)) => r1 as f64 - r0 as f64,
        _ => reserved,
    };
    let other = h1 as f64 - h0 as f64;
    Ok(Some(GroupBytes {
        total: (other + percpu) / k,
        percpu: percpu / k,
        reserved_percpu: reserved / k,
    }))
}

/// Use a new group once on this thread, as a request would: a counter
/// add, a memory charge and its uncharge, an enter and exit.
fn use_once(e: &Engine, g: &Group) -> Result<(), String> {
    e.ctl.add(g, 0, 1).map_err(|err| err.to_string())?;
    e.mem
        .charge_raw(g, 4096, OnOom::Force)
        .map_err(|err| err.to_string())?;
    e.mem.uncharge_raw(g, 4096).map_err(|err| err.to_string())?;
    drop(g.enter());
    Ok(())
}

/// Bytes glibc's malloc has handed out and not had back: in use in every
/// arena, plus mmapped blocks.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn heap_in_use() -> Option<usize> {
    // SAFETY: mallinfo2 takes no arguments and returns a plain struct.
    let m = unsafe { libc::mallinfo2() };
    Some(m.uordblks + m.hblkhd)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn heap_in_use() -> Option<usize> {
    None
}

/// The `membarrier` command an exact read on the rseq path issues: the
/// plain private expedited one (a barrier on each CPU running the
/// process's threads), or the rseq one where the kernel lacks it.
#[derive(Clone, Copy, Debug)]
pub struct Membarrier {
    cmd: libc::c_long,
    /// Its name.
    pub name: &'static str,
}

/// `enum membarrier_cmd` values (linux/membarrier.h).
const CMD_QUERY: libc::c_long = 0;
const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;
const CMD_PRIVATE_EXPEDITED_RSEQ: libc::c_long = 1 << 7;
const CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ: libc::c_long = 1 << 8;

#[cfg(target_os = "linux")]
fn sys_membarrier(cmd: libc::c_long) -> libc::c_long {
    // SAFETY: membarrier takes (cmd, flags, cpu_id) integers and touches
    // no user memory.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            cmd,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    }
}

#[cfg(not(target_os = "linux"))]
fn sys_membarrier(_cmd: libc::c_long) -> libc::c_long {
    -1
}

impl Membarrier {
    /// Register this process for the plain private expedited command (the
    /// one rstat's flushes issue), else for the rseq one; `None` if the
    /// kernel offers neither.
    pub fn register() -> Option<Self> {
        let cmds = sys_membarrier(CMD_QUERY);
        if cmds < 0 {
            return None;
        }
        for (cmd, register, name) in [
            (
                CMD_PRIVATE_EXPEDITED,
                CMD_REGISTER_PRIVATE_EXPEDITED,
                "MEMBARRIER_CMD_PRIVATE_EXPEDITED",
            ),
            (
                CMD_PRIVATE_EXPEDITED_RSEQ,
                CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ,
                "MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ",
            ),
        ] {
            if cmds & cmd != 0 && sys_membarrier(register) == 0 {
                let m = Membarrier { cmd, name };
                if m.call().is_some() {
                    return Some(m);
                }
            }
        }
        None
    }

    /// One call, timed: ns, or `None` if it failed.
    pub fn call(&self) -> Option<f64> {
        let t0 = Instant::now();
        loop {
            if sys_membarrier(self.cmd) == 0 {
                return Some(t0.elapsed().as_nanos() as f64);
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return None;
            }
        }
    }
}
