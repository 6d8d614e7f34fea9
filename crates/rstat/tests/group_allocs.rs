//! How many heap allocations creating and removing a group makes: pinned,
//! so a change that adds one to the path of a group per request is seen.
//!
//! The engine of issue 27's measurement: the built-in `cpu` controller
//! (3 items), a 4-item counter set and the memory controller counting
//! bytes, a group created under a tenant, one update through a stat
//! handle, then removed. Per group (all freed at removal):
//!
//! - per controller (3): its css, one `LineBox` whose tail holds its
//!   totals (local, hierarchical and pending values) and its published
//!   copy when the values do not fit inline (all three here): 3;
//! - per domain (3): a tree node: 3;
//! - the group, its tables, its name (shared with the parent's children
//!   map), its reference count's shared part: 4;
//! - memory: the owner handle, the page counter, the group's memory state
//!   and the extension slot holding it: 4.
//!
//! 14 in all. Counted on this thread only, so the periodic flusher (or any
//! other thread) cannot move the figure.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use rstat::memory::{Memory, MemoryConfig};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: a thread's allocations during its TLS teardown are not
    // counted (this test's thread does not allocate then).
    let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
}

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.realloc(p, l, n) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// The most allocations one create + update + remove makes (the module
/// doc's count).
const ALLOCS_PER_GROUP: u64 = 14;

#[test]
fn creating_and_removing_a_group_allocates_a_fixed_few_times() {
    for nr_cpus in [2, 64] {
        let rs = rstat::Rstat::builder().nr_cpus(nr_cpus).build().unwrap();
        let c = rs.register_counters("c", &["a", "b", "c", "d"]).unwrap();
        let _m = Memory::register_with(&rs, MemoryConfig::bytes()).unwrap();
        let tenant = rs.root().create_child("tenant").unwrap();
        let once = || {
            let g = tenant.create_child("req").unwrap();
            c.stat_handle(&g).unwrap().item(0).unwrap().add(5);
            g.remove().unwrap();
        };
        // Warm up: the arena's chunk, the children map's node, per-thread
        // state are made by the first groups and kept.
        for _ in 0..8 {
            once();
        }
        let rounds = if cfg!(miri) { 4 } else { 100 };
        let before = allocs();
        for _ in 0..rounds {
            once();
        }
        let per_group = (allocs() - before) as f64 / rounds as f64;
        println!("{nr_cpus} slots: {per_group} allocations per create + remove");
        assert!(
            per_group <= ALLOCS_PER_GROUP as f64,
            "{nr_cpus} slots: {per_group} allocations per group, at most {ALLOCS_PER_GROUP} expected"
        );
    }
}
