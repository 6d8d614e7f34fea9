//! Helpers shared by the C ABI's test binaries: each declares
//! `mod common;` and uses a subset (hence the `dead_code` allowance).
//!
//! Here: options filled in as the header tells a C program to.
//! [`doc_codes`] holds the error codes `rstat.h` documents per function.
#![allow(dead_code)]

pub mod doc_codes;

use rstat_capi::rstat_options;

/// Options for `rstat_new` as `rstat.h` says to fill them: zeroed, `size`
/// set to the struct's size, then `flags` (`RSTAT_OPT_*`) and `nr_cpus`
/// (0: the machine's possible CPUs).
pub fn options(flags: u32, nr_cpus: u32) -> rstat_options {
    rstat_options {
        size: std::mem::size_of::<rstat_options>() as u32,
        flags,
        nr_cpus,
        ..Default::default()
    }
}
