//! The accounting-allocator tests' figures: what an object charges, and
//! a group's usage with nothing left pre-charged in the stocks.

use rstat::alloc::overhead;
use rstat::memory::Memory;
use rstat::Group;

/// The bytes an object of `bytes` charges: its size plus the allocator's
/// per-object overhead.
pub fn charged(bytes: usize) -> u64 {
    (bytes + overhead(bytes)) as u64
}

/// `memory.current` of `g` after draining the stocks of `g`'s subtree, so
/// it is exactly what its live objects charge.
pub fn current(mem: &Memory, g: &Group) -> u64 {
    mem.drain_stocks(g).unwrap();
    mem.current(g).unwrap()
}
