//! A group costs the CPUs it used: its per-CPU state is written only in
//! the arena units of the CPU slots that updated it, so the pages of the
//! other units stay untouched (never made resident by the system), and
//! its release zeroes only those units again. Checked on the pages the
//! system holds (`mincore`), which a write of zeros touches as much as
//! any other.

use crate::memory::{Memory, OnOom};
use crate::testing::{ControllerHandleExt, MemoryExt};
use crate::Rstat;

const SLOTS: usize = 64;

/// Pin the calling thread to the CPU it runs on, so the engine's own work
/// on this thread (a group handle's reference count, a final flush) lands
/// on one slot, which may be any: the test allows one slot it did not
/// choose.
fn pin_here() {
    // SAFETY: plain system calls on this thread, with a zeroed cpu set
    // filled by the libc macros.
    unsafe {
        let cpu = libc::sched_getcpu();
        assert!(cpu >= 0, "sched_getcpu failed");
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        let rc = libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(rc, 0, "sched_setaffinity failed");
    }
}

/// The units that hold more resident pages in `after` than in `before`.
fn grown_units(before: &[usize], after: &[usize]) -> Vec<usize> {
    (0..before.len())
        .filter(|&c| after[c] > before[c])
        .collect()
}

#[test]
fn a_group_writes_only_the_units_of_the_cpu_slots_it_used() {
    // The pin lasts for this test's thread only (the harness runs each
    // test on a thread of its own).
    pin_here();
    let rs = Rstat::builder().nr_cpus(SLOTS).build().unwrap();
    let mem = Memory::register(&rs).unwrap();
    let ctl = rs.register_counters("c", &["a", "b"]).unwrap();
    let p = rs.root().create_child("p").unwrap();
    let snapshot = || {
        let arena = p.inner().engine.arena.arena();
        (0..SLOTS)
            .map(|c| arena.resident_pages(c))
            .collect::<Vec<_>>()
    };
    let before = snapshot();
    let mut groups = Vec::new();
    for i in 0..300 {
        let g = p.create_child(&format!("g{i}")).unwrap();
        // Counters on slot 1, memory through slot 2's stock.
        ctl.add_on_cpu(&g, 1, 0, 5).unwrap();
        mem.charge_raw_on_cpu(&g, 4096, OnOom::Fail, 2).unwrap();
        mem.uncharge_raw_on_cpu(&g, 4096, 2).unwrap();
        groups.push(g);
    }
    // Exact reads flush every slot the groups went on.
    for g in &groups {
        assert_eq!(ctl.read_exact(g).unwrap().local()[0], 5);
    }
    let live = grown_units(&before, &snapshot());
    assert!(
        live.contains(&1),
        "the slot the groups were updated on has new pages: {live:?}"
    );
    assert!(
        live.len() <= 3,
        "300 live groups made pages of units {live:?} of {SLOTS} resident: only slots 1 \
         and 2 (the counter's and the stock's), and the thread's own, may be touched"
    );
    // Remove half, drop every handle: each release zeroes what it wrote.
    for g in groups.iter().step_by(2) {
        g.remove().unwrap();
    }
    drop(groups);
    let released = grown_units(&before, &snapshot());
    assert!(
        released.len() <= 3,
        "after the groups' release, units {released:?} of {SLOTS} have new pages"
    );
    assert_eq!(ctl.read_exact(&p).unwrap().hierarchical()[0], 5 * 300);
}

/// A removal counted on one CPU slot and its release on another cancel
/// out in the engine's zombie count, which never reads below zero (a
/// release may be counted before the removal it follows is seen).
#[test]
fn zombies_counted_on_one_cpu_and_released_on_another_sum_up() {
    let z = crate::group::state::Zombies::new(4);
    z.add_on(0);
    z.add_on(1);
    z.sub_on(3);
    assert_eq!(z.count(), 1);
    z.add_on(6); // folded into slot 2
    assert_eq!(z.count(), 2);
    z.sub_on(2);
    z.sub_on(2);
    assert_eq!(z.count(), 0);
    z.sub_on(1);
    assert_eq!(z.count(), 0, "a sum below zero reads as zero");
}
