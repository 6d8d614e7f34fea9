//! How often the kernel aborted a restartable section: the `rseq:rseq_ip_fixup`
//! tracepoint, counted for this process and the threads it starts.
//!
//! The kernel fires `rseq_ip_fixup` each time it moves a thread's
//! instruction pointer from inside a restartable section to the section's
//! abort handler (the thread was preempted, migrated or signalled inside
//! it). Counting it is exact and costs the sections nothing: no
//! instrumented copy of the code under test, no counter in the abort path.
//!
//! Needs the tracepoint's id from tracefs (`/sys/kernel/tracing`, or
//! `/sys/kernel/debug/tracing`) and permission to count a kernel tracepoint
//! (`perf_event_paranoid` <= 1, or `CAP_PERFMON`/root). When either is
//! missing, [`AbortCounter::open`] says which, and the benchmarks report the
//! abort rate as unavailable with that reason instead of a number.

use std::io;

/// An open counter of the tracepoint, inherited by threads started after it
/// was opened (their counts are added when they exit).
pub struct AbortCounter {
    fd: libc::c_int,
}

const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];
const EVENT: &str = "events/rseq/rseq_ip_fixup/id";
const PERF_TYPE_TRACEPOINT: u32 = 2;
/// `struct perf_event_attr`'s first published size (`PERF_ATTR_SIZE_VER0`):
/// the fields this counter needs are all in it.
const ATTR_SIZE: usize = 64;
/// `perf_event_attr` flag bits (the bitfield word at byte 40).
const FLAG_INHERIT: u64 = 1 << 1;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

impl AbortCounter {
    /// Open the counter for this process (all its current CPU, every CPU),
    /// counting from now. Errors say what is missing.
    pub fn open() -> Result<AbortCounter, String> {
        let id = tracepoint_id()?;
        // `struct perf_event_attr`, VER0 layout: type (u32) at 0, size (u32)
        // at 4, config (u64) at 8, then sample fields left 0 (counting
        // mode), the flags word at 40.
        let mut attr = [0u8; ATTR_SIZE];
        attr[0..4].copy_from_slice(&PERF_TYPE_TRACEPOINT.to_ne_bytes());
        attr[4..8].copy_from_slice(&(ATTR_SIZE as u32).to_ne_bytes());
        attr[8..16].copy_from_slice(&id.to_ne_bytes());
        attr[40..48].copy_from_slice(&FLAG_INHERIT.to_ne_bytes());
        // SAFETY: `attr` is a valid VER0 `perf_event_attr` that outlives the
        // call; pid 0 = this process, cpu -1 = any CPU, no group.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                attr.as_ptr(),
                0 as libc::pid_t,
                -1 as libc::c_int,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(format!(
                "perf_event_open(rseq:rseq_ip_fixup) failed: {e} (counting a kernel tracepoint needs root, CAP_PERFMON or kernel.perf_event_paranoid <= 1)"
            ));
        }
        Ok(AbortCounter {
            fd: fd as libc::c_int,
        })
    }

    /// Aborts counted so far (threads that have exited included).
    pub fn read(&self) -> u64 {
        let mut v = 0u64;
        // SAFETY: reading 8 bytes into `v` from our own open perf fd.
        let n = unsafe { libc::read(self.fd, (&mut v as *mut u64).cast(), 8) };
        if n == 8 {
            v
        } else {
            0
        }
    }
}

impl Drop for AbortCounter {
    fn drop(&mut self) {
        // SAFETY: our fd, closed once.
        unsafe { libc::close(self.fd) };
    }
}

fn tracepoint_id() -> Result<u64, String> {
    let mut why = Vec::new();
    for root in TRACEFS {
        let path = format!("{root}/{EVENT}");
        match std::fs::read_to_string(&path) {
            Ok(s) => {
                return s
                    .trim()
                    .parse()
                    .map_err(|e| format!("{path}: not a number ({e})"))
            }
            Err(e) => why.push(format!("{path}: {e}")),
        }
    }
    Err(format!(
        "the rseq_ip_fixup tracepoint is not visible ({}); mount tracefs (`mount -t tracefs nodev /sys/kernel/tracing`) as root",
        why.join("; ")
    ))
}
