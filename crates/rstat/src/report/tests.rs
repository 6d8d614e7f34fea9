use super::*;
use crate::memory::{Limit, Memory, MemoryEvent, OnOom};
use crate::{Error, Rstat};

fn setup() -> (Rstat, Memory, ControllerHandle, Group, Group) {
    let rs = Rstat::new();
    let mem = Memory::register(&rs).unwrap();
    let io = rs.register_counters("io", &["rbytes", "wbytes"]).unwrap();
    let t = rs.root().create_child("tenant").unwrap();
    let r = t.create_child("req").unwrap();
    (rs, mem, io, t, r)
}

// Formatting only: native runs suffice (Miri runs the removal watch test).
#[cfg_attr(miri, ignore)]
#[test]
fn controller_files_are_key_value_lines_hierarchical_and_local() {
    let (rs, _mem, io, t, r) = setup();
    io.add(&r, 0, 4096).unwrap();
    io.add(&t, 1, 7).unwrap();
    rs.account_cputime(&r, 30, 12).unwrap();
    let rep = Reporter::new(&rs);
    assert_eq!(rep.read(&t, "io.stat").unwrap(), "rbytes 4096\nwbytes 7\n");
    assert_eq!(
        rep.read(&t, "io.stat.local").unwrap(),
        "rbytes 0\nwbytes 7\n"
    );
    assert_eq!(
        rep.read(&t, "cpu.stat").unwrap(),
        "usage_usec 42\nuser_usec 30\nsystem_usec 12\n"
    );
    // The root is the process: its usage is the process's CPU time (at
    // least what was charged below it), still split into user + system.
    let root = read(&rs, rs.root(), "cpu.stat").unwrap();
    let v: Vec<i64> = root
        .lines()
        .map(|l| l.split(' ').nth(1).unwrap().parse().unwrap())
        .collect();
    assert!(root.starts_with("usage_usec ") && v[0] >= 42, "{root}");
    assert_eq!(v[1] + v[2], v[0], "{root}");
    assert_eq!(
        rep.read_path("/tenant/req", "io.stat").unwrap(),
        "rbytes 4096\nwbytes 0\n"
    );
}

// Formatting only: native runs suffice (Miri runs the removal watch test).
#[cfg_attr(miri, ignore)]
#[test]
fn memory_files_follow_cgroupfs() {
    let (rs, mem, _io, t, r) = setup();
    let rep = Reporter::new(&rs);
    for f in ["memory.max", "memory.high"] {
        assert_eq!(rep.read(&t, f).unwrap(), "max\n", "{f}");
    }
    for f in ["memory.low", "memory.min", "memory.current", "memory.peak"] {
        assert_eq!(rep.read(&t, f).unwrap(), "0\n", "{f}");
    }
    mem.write_limit(&t, Limit::Max, "1000").unwrap();
    mem.write_limit(&t, Limit::Low, "max").unwrap();
    mem.write_limit(&t, Limit::Min, "100").unwrap();
    let c = mem.try_charge(&r, 600).unwrap();
    assert!(mem.try_charge(&r, 600).is_err());
    let forced = mem.try_charge_with(&r, 600, OnOom::Force).unwrap();
    assert_eq!(rep.read(&t, "memory.max").unwrap(), "1000\n");
    assert_eq!(rep.read(&t, "memory.low").unwrap(), "max\n");
    assert_eq!(rep.read(&t, "memory.min").unwrap(), "100\n");
    let cur = mem.current(&t).unwrap();
    assert_eq!(rep.read(&t, "memory.current").unwrap(), format!("{cur}\n"));
    assert_eq!(
        rep.read(&t, "memory.peak").unwrap(),
        format!("{}\n", mem.peak(&t).unwrap())
    );
    let ev = mem.events(&t).unwrap();
    assert!(ev.get(MemoryEvent::Oom) >= 2 && ev.get(MemoryEvent::Max) >= 2);
    assert_eq!(
        rep.read(&t, "memory.events").unwrap(),
        format!(
            "low {}\nhigh {}\nmax {}\noom {}\noom_kill {}\n",
            ev.low, ev.high, ev.max, ev.oom, ev.oom_kill
        )
    );
    // The events were raised on `t` (whose max refused), so `req` has none
    // locally and the root's hierarchical ones include them.
    assert_eq!(
        rep.read(&r, "memory.events.local").unwrap(),
        "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n"
    );
    assert_eq!(
        rep.read(rs.root(), "memory.events").unwrap(),
        rep.read(&t, "memory.events").unwrap()
    );
    let stat = rep.read(&t, "memory.stat").unwrap();
    let keys: Vec<&str> = stat.lines().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(keys, crate::memory::MEMORY_STAT_NAMES);
    let exact = mem.read_exact(&t).unwrap();
    assert_eq!(exact.get("forced"), Some(600));
    let charged = exact.get("charged").unwrap();
    assert!(stat.contains(&format!("charged {charged}\n")), "{stat}");
    assert!(stat.contains("failcnt 1\n"), "{stat}");
    drop((c, forced));
}

// Formatting only: native runs suffice (Miri runs the removal watch test).
#[cfg_attr(miri, ignore)]
#[test]
fn unknown_files_are_errors_that_list_the_files() {
    let (rs, _mem, _io, t, _r) = setup();
    let rep = Reporter::new(&rs);
    for bad in [
        "memory.bogus",
        "nope.stat",
        "cpu",
        "",
        "cpu.stat.locall",
        "io.stat\n",
    ] {
        match rep.read(&t, bad) {
            Err(Error::UnknownFile { files, .. }) => {
                assert!(files.contains(&"memory.current".to_string()));
                assert!(files.contains(&"io.stat.local".to_string()));
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    let msg = rep.read(&t, "nope.stat").unwrap_err().to_string();
    assert!(
        msg.contains("no controller named \"nope\"") && msg.contains("cpu.stat"),
        "{msg}"
    );
    // Without a memory controller, memory.current says why.
    let bare = Rstat::new();
    let e = read(&bare, bare.root(), "memory.current")
        .unwrap_err()
        .to_string();
    assert!(e.contains("Memory::register"), "{e}");
    // A group of another engine.
    assert_eq!(read(&bare, &t, "cpu.stat"), Err(Error::ForeignGroup));
    // A memory controller whose handles are all gone is not found.
    let rs2 = Rstat::new();
    drop(Memory::register(&rs2).unwrap());
    assert!(read(&rs2, rs2.root(), "memory.current").is_err());
    assert!(read(&rs2, rs2.root(), "memory.stat").is_ok()); // the stat items stay
}

// Formatting only: native runs suffice (Miri runs the removal watch test).
#[cfg_attr(miri, ignore)]
#[test]
fn snapshot_has_paths_in_preorder_and_local_and_hierarchical_values() {
    let (rs, mem, io, t, r) = setup();
    let b = rs.root().create_child("b").unwrap();
    let odd = t.create_child("we\"ird\\ name\nx").unwrap();
    io.add(&r, 0, 5).unwrap();
    io.add(&odd, 0, 1).unwrap();
    io.add(&b, 1, 2).unwrap();
    let _c = mem.try_charge(&r, 10).unwrap();
    let rep = Reporter::new(&rs);
    let s = rep.snapshot_all().unwrap();
    let paths: Vec<&str> = s.groups.iter().map(|g| g.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/",
            "/b",
            "/tenant",
            "/tenant/req",
            "/tenant/we\"ird\\ name\nx"
        ]
    );
    assert_eq!(s.get("/tenant", "io", "rbytes"), Some((0, 6)));
    assert_eq!(s.get("/tenant/req", "io", "rbytes"), Some((5, 5)));
    assert_eq!(s.get("/", "io", "wbytes"), Some((0, 2)));
    let names: Vec<&str> = s.controllers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["cpu", "memory", "io"]);
    let m = s.groups[3].memory.as_ref().unwrap();
    assert_eq!(m.current, mem.current(&r).unwrap());
    assert_eq!((m.max, m.low), (None, Some(0)));
    assert_eq!(s.groups[1].depth, 1);
    let shallow = rep.snapshot_depth(rs.root(), 1).unwrap();
    let paths: Vec<&str> = shallow.groups.iter().map(|g| g.path.as_str()).collect();
    assert_eq!(paths, ["/", "/b", "/tenant"]);
    assert_eq!(shallow.get("/tenant", "io", "rbytes"), Some((0, 6)));
    // A subtree.
    let sub = rep.snapshot(&t).unwrap();
    assert_eq!(sub.groups.len(), 3);
    assert_eq!(sub.groups[0].path, "/tenant");
}

#[test]
fn removal_watch_hands_over_removed_groups_once_with_final_values() {
    let (rs, _mem, io, t, r) = setup();
    let w = rs.watch_removals(2, usize::MAX);
    io.add(&r, 0, 9).unwrap();
    r.remove().unwrap();
    io.add(&r, 0, 1).unwrap(); // a late update through a handle still counts
    drop(r);
    let gone = w.take();
    assert_eq!(gone.len(), 1);
    assert!(w.take().is_empty(), "handed over once");
    let rep = Reporter::new(&rs);
    let s = rep.snapshot_groups(&gone).unwrap();
    assert_eq!(s.groups[0].path, "/tenant/req");
    assert!(!s.groups[0].online);
    assert_eq!(s.get("/tenant/req", "io", "rbytes"), Some((10, 10)));
    drop(gone);
    assert_eq!(rs.zombie_count(), 0);
    // The live tree no longer has it; the parent kept its history.
    assert_eq!(rep.read(&t, "io.stat").unwrap(), "rbytes 10\nwbytes 0\n");
    // Bounded: past the capacity, removals are counted, not held.
    for i in 0..5 {
        t.create_child(&format!("c{i}")).unwrap().remove().unwrap();
    }
    assert_eq!(w.take().len(), 2);
    assert_eq!(w.lost(), 3);
    // Too deep: neither queued nor lost.
    let shallow = rs.watch_removals(10, 1);
    let d2 = t.create_child("d2").unwrap();
    d2.remove().unwrap();
    drop(d2);
    t.create_child("x").unwrap(); // depth 2 stays
    let d1 = rs.root().create_child("d1").unwrap();
    d1.remove().unwrap();
    let got = shallow.take();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].path(), "/d1");
    assert_eq!(shallow.lost(), 0);
    assert_eq!(w.take().len(), 2, "the other watch saw both");
    drop((got, d1, shallow));
    // A dropped watch holds nothing and queues nothing.
    drop(w);
    t.create_child("late").unwrap().remove().unwrap();
    assert_eq!(rs.zombie_count(), 0);
}

#[cfg(feature = "serde")]
#[test]
fn snapshot_round_trips_through_json() {
    let (rs, mem, io, t, _r) = setup();
    io.add(&t, 0, 3).unwrap();
    mem.write_limit(&t, Limit::High, "64K").unwrap();
    let s = Reporter::new(&rs).snapshot_all().unwrap();
    let json = serde_json::to_string(&s).unwrap();
    assert!(json.contains("\"path\":\"/tenant\""), "{json}");
    assert!(json.contains("\"high\":65536"), "{json}");
    assert!(json.contains("\"max\":null"), "{json}");
    let back: Snapshot = serde_json::from_str(&json).unwrap();
    assert_eq!(back, s);
}

/// Every group's hierarchical value of every rstat-flushed item is its
/// local value plus its children's hierarchical values, in a snapshot
/// taken while threads update groups at every level (groups
/// read one by one, a child re-flushed after its parent was read, showed
/// more than the parent). Checked on every snapshot while the writers
/// run, under the default policy and under `Always` (which flushes at
/// every read), for whole trees, a subtree and a list of groups.
#[test]
fn snapshot_hierarchical_values_add_up_while_writers_run() {
    use crate::FlushPolicy;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as O};
    use std::sync::Arc;

    let snapshots = if cfg!(miri) { 3 } else { 300 };
    let (rs, mem, io, t, r) = setup();
    let rs = Arc::new(rs);
    let b = rs.root().create_child("b").unwrap();
    let groups = vec![
        rs.root().clone(),
        t.clone(),
        r.clone(),
        t.create_child("req2").unwrap(),
        b.clone(),
        b.create_child("x").unwrap(),
    ];
    let rep = Reporter::new(&rs);
    for policy in [FlushPolicy::Threshold, FlushPolicy::Always] {
        for c in rep.controllers() {
            c.set_flush_policy(policy);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let writes = Arc::new(AtomicU64::new(0));
        let writers: Vec<_> = (0..2usize)
            .map(|w| {
                let (rs, mem, io, groups) = (rs.clone(), mem.clone(), io.clone(), groups.clone());
                let (stop, writes) = (stop.clone(), writes.clone());
                std::thread::spawn(move || {
                    let mut i = w;
                    while !stop.load(O::Relaxed) {
                        let g = &groups[i % groups.len()];
                        io.add(g, i % 2, 100 + i as i64 % 7).unwrap();
                        rs.account_cputime(g, 70, 30).unwrap();
                        if i % 3 == 0 {
                            drop(mem.try_charge(g, 1000).unwrap());
                        }
                        writes.fetch_add(1, O::Relaxed);
                        i += 1;
                    }
                })
            })
            .collect();
        // The writers are running before the first snapshot.
        while writes.load(O::Relaxed) < 2 {
            std::thread::yield_now();
        }
        let mut checked = 0;
        for n in 0..snapshots {
            let snap = match n % 3 {
                0 => rep.snapshot_all().unwrap(),
                1 => rep.snapshot(&t).unwrap(),
                // The whole tree again, as a list.
                _ => rep.snapshot_groups(&groups).unwrap(),
            };
            check_hierarchical_sums(&snap, policy);
            checked += 1;
            if cfg!(miri) {
                std::thread::yield_now();
            }
        }
        stop.store(true, O::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(checked, snapshots);
        assert!(writes.load(O::Relaxed) > 0);
    }
}

/// For each group of `snap` and each controller's item: hierarchical ==
/// local + the hierarchical values of its children in `snap` (every group
/// here is live, so no removed child's history is in the parent).
fn check_hierarchical_sums(snap: &Snapshot, policy: crate::FlushPolicy) {
    for (ci, ctl) in snap.controllers.iter().enumerate() {
        for g in &snap.groups {
            let prefix = if g.path == "/" {
                "/".to_owned()
            } else {
                format!("{}/", g.path)
            };
            let children: Vec<&GroupSnapshot> = snap
                .groups
                .iter()
                .filter(|k| {
                    k.depth == g.depth + 1
                        && k.path.starts_with(&prefix)
                        && !k.path[prefix.len()..].contains('/')
                })
                .collect();
            let s = &g.stats[ci];
            for (ii, item) in ctl.items.iter().enumerate() {
                let sum: i64 = children.iter().map(|k| k.stats[ci].hierarchical[ii]).sum();
                assert_eq!(
                    s.hierarchical[ii],
                    s.local[ii] + sum,
                    "{policy:?}: {} {}.{item}: hierarchical != local {} + children {:?}",
                    g.path,
                    ctl.name,
                    s.local[ii],
                    children
                        .iter()
                        .map(|k| (&k.path, k.stats[ci].hierarchical[ii]))
                        .collect::<Vec<_>>()
                );
            }
        }
    }
}

/// A snapshot's `heap*` memory stat items include the accounting
/// allocator's deltas still kept in stock slots (fewer than a batch of
/// operations, not yet added to the stat items): exact as of the start.
#[test]
fn snapshot_heap_items_include_what_the_stocks_keep() {
    let rs = Rstat::new();
    let mem = Memory::register_with(&rs, crate::alloc::heap_config()).unwrap();
    let t = rs.root().create_child("tenant").unwrap();
    // Slot 0 (any slot in range would do).
    let cpu = 0;
    // Two objects through the allocator's charge path: the first fills the
    // stock, the second is taken from it, its deltas kept in the slot.
    let objs: Vec<_> = (0..2)
        .map(|_| mem.heap_charge(&t, 100, 4, cpu).unwrap())
        .collect();
    let snap = Reporter::new(&rs).snapshot(&t).unwrap();
    let ci = snap
        .controllers
        .iter()
        .position(|c| c.name == "memory")
        .unwrap();
    let items = &snap.controllers[ci].items;
    let at = |name: &str| items.iter().position(|n| n == name).unwrap();
    let local = &snap.groups[0].stats[ci].local;
    assert_eq!(local[at("heap")], 200, "{items:?} {local:?}");
    assert_eq!(local[at("heap_allocs")], 2);
    for x in objs {
        // SAFETY: each charge's reference, given back once.
        unsafe { mem.heap_uncharge(x, 100, 4, cpu) };
    }
}
