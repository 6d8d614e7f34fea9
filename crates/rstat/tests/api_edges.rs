//! The edges of the public API: checked stat items, overflow, path errors,
//! group identity in flushes, and controllers whose flush panics.
//!
//! Small on purpose (a few groups, a few updates): CI runs this file under
//! Miri.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use common::engine_with;
use rstat::testing::ControllerHandleExt;
use rstat::{Controller, Error, FlushCtx, FlushPolicy, ROOT_GROUP_ID};

#[test]
fn stat_items_are_checked_once_and_then_cannot_fail() {
    let rs = engine_with(2, FlushPolicy::Always);
    let io = rs.register_counters("io", &["rbytes", "wbytes"]).unwrap();
    let g = rs.root().create_child("g").unwrap();
    let h = io.stat_handle(&g).unwrap();

    let wbytes = h.item_named("wbytes").unwrap();
    assert_eq!((wbytes.index(), wbytes.name()), (1, "wbytes"));
    let rbytes = h.item(0).unwrap();
    assert_eq!(rbytes.name(), "rbytes");
    rbytes.add(4096);
    wbytes.add(512);
    wbytes.clone().add(-12);
    assert_eq!(io.read(&g).unwrap().local(), &[4096, 500]);
    assert_eq!(io.read(rs.root()).unwrap().hierarchical(), &[4096, 500]);

    assert_eq!(
        h.item(2).unwrap_err(),
        Error::UnknownStat {
            controller: "io".into(),
            index: 2,
            len: 2
        }
    );
    let e = h.item_named("rbyte").unwrap_err();
    assert_eq!(
        e,
        Error::UnknownStatName {
            controller: "io".into(),
            name: "rbyte".into(),
            items: vec!["rbytes".into(), "wbytes".into()],
        }
    );
    let msg = e.to_string();
    assert!(
        msg.contains("\"rbyte\"") && msg.contains("rbytes, wbytes"),
        "the message names the typo and the items to pick from: {msg}"
    );
}

/// The documented maximum registers and works to its last item, in a
/// group that existed before and one made after; one more is refused with
/// a reason. (Miri's arena units are smaller, so fewer items fit there.)
#[cfg_attr(miri, ignore)]
#[test]
fn a_counter_set_of_the_documented_maximum_registers_and_one_more_does_not() {
    const MAX: usize = 4096;
    let rs = engine_with(2, FlushPolicy::Always);
    let before = rs.root().create_child("before").unwrap();
    let names: Vec<String> = (0..=MAX).map(|i| format!("i{i}")).collect();
    let items: Vec<&str> = names.iter().map(String::as_str).collect();
    let big = rs.register_counters("big", &items[..MAX]).unwrap();
    let after = before.create_child("after").unwrap();
    big.add(&after, MAX - 1, 7).unwrap();
    big.add(&before, MAX - 1, 5).unwrap();
    big.add(&before, 0, 1).unwrap();
    let s = big.read_exact(&before).unwrap();
    assert_eq!(s.hierarchical().len(), MAX);
    assert_eq!(s.hierarchical()[MAX - 1], 12);
    assert_eq!(s.local()[MAX - 1], 5);
    assert_eq!(s.get(&format!("i{}", MAX - 1)), Some(12));
    assert_eq!(big.read_exact(rs.root()).unwrap().hierarchical()[0], 1);
    after.remove().unwrap();
    assert_eq!(big.read_exact(&before).unwrap().hierarchical()[MAX - 1], 12);

    let e = rs.register_counters("bigger", &items).unwrap_err();
    assert!(
        matches!(e, Error::InvalidController { .. }),
        "not a registration error: {e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("{}", MAX + 1)) && msg.contains(&format!("{MAX}")),
        "the message says how many were given and the most allowed: {msg}"
    );
}

#[test]
fn unknown_stat_name_lists_at_most_sixteen_items() {
    let e = Error::UnknownStatName {
        controller: "big".into(),
        name: "x".into(),
        items: (0..20).map(|i| format!("s{i}")).collect(),
    };
    let msg = e.to_string();
    assert!(msg.contains("s15, ... (20 in all)"), "{msg}");
    assert!(!msg.contains("s16"), "{msg}");
}

#[test]
fn a_leading_slash_is_the_root() {
    let rs = engine_with(1, FlushPolicy::Always);
    let a = rs.root().create_child("a").unwrap();
    let b = a.create_child("b").unwrap();
    assert_eq!(rs.lookup("/").unwrap(), *rs.root());
    assert_eq!(rs.lookup("").unwrap(), *rs.root());
    assert_eq!(rs.lookup("/a").unwrap(), a);
    assert_eq!(rs.lookup("/a/b").unwrap(), b);
    assert_eq!(rs.lookup("a/b").unwrap(), b);
    // From a group: relative without the slash, absolute with it.
    assert_eq!(a.lookup("b").unwrap(), b);
    assert_eq!(b.lookup("/a").unwrap(), a);
    assert_eq!(b.lookup("").unwrap(), b);
}

#[test]
fn invalid_paths_name_the_offending_component() {
    let rs = engine_with(1, FlushPolicy::Always);
    rs.root().create_child("a").unwrap();
    let cases: [(&str, &str, &str); 5] = [
        ("a//b", "", "it is empty (a doubled or trailing '/')"),
        ("a/", "", "it is empty (a doubled or trailing '/')"),
        ("//a", "", "it is empty (a doubled or trailing '/')"),
        ("/a/../b", "..", "'.' and '..' are reserved"),
        ("a/x\0y", "x\0y", "it contains a NUL byte"),
    ];
    for (path, component, reason) in cases {
        assert_eq!(
            rs.lookup(path).unwrap_err(),
            Error::InvalidPath {
                path: path.into(),
                component: component.into(),
                reason,
            },
            "{path:?}"
        );
    }
    // Checked before walking: a bad component after a missing group is
    // still reported as the malformed path it is.
    assert!(matches!(rs.lookup("zz/."), Err(Error::InvalidPath { .. })));
    let msg = rs.lookup("/a//b").unwrap_err().to_string();
    assert!(
        msg.contains("\"/a//b\"") && msg.contains("component \"\"") && msg.contains("empty"),
        "{msg}"
    );
    let long = "y".repeat(256);
    assert!(matches!(
        rs.lookup(&format!("a/{long}")),
        Err(Error::InvalidPath {
            reason: "it is longer than 255 bytes",
            ..
        })
    ));
}

#[test]
fn not_found_names_the_missing_component_and_the_root_prints_as_slash() {
    let rs = engine_with(1, FlushPolicy::Always);
    let a = rs.root().create_child("a").unwrap();
    a.create_child("b").unwrap();
    assert_eq!(
        rs.lookup("/a/zz/c").unwrap_err(),
        Error::NotFound {
            path: "/a/zz/c".into(),
            parent: "/a".into(),
            component: "zz".into(),
        }
    );
    let e = rs.lookup("nope").unwrap_err();
    assert_eq!(
        e,
        Error::NotFound {
            path: "nope".into(),
            parent: "/".into(),
            component: "nope".into(),
        }
    );
    let msg = e.to_string();
    assert!(
        msg.contains("\"/\" has no live child named \"nope\""),
        "{msg}"
    );
    // Errors about the root print "/", never "".
    let msg = rs.root().create_child("a").unwrap_err().to_string();
    assert!(msg.contains("group \"/\" already has"), "{msg}");
    assert_eq!(
        a.remove().unwrap_err(),
        Error::HasChildren {
            path: "/a".into(),
            children: 1
        }
    );
}

#[test]
fn lookups_from_a_removed_group_say_it_was_removed() {
    let rs = engine_with(1, FlushPolicy::Always);
    let a = rs.root().create_child("a").unwrap();
    a.remove().unwrap();
    assert_eq!(
        a.lookup("").unwrap_err(),
        Error::Removed { path: "/a".into() }
    );
    assert!(matches!(a.lookup("x"), Err(Error::Removed { .. })));
    // An absolute path from a removed group starts at the (live) root.
    assert_eq!(a.lookup("/").unwrap(), *rs.root());
}

#[test]
fn group_ids_are_unique_for_the_engines_lifetime() {
    let rs = engine_with(1, FlushPolicy::Always);
    assert_eq!(rs.root().id(), ROOT_GROUP_ID);
    let a = rs.root().create_child("a").unwrap();
    let b = a.create_child("b").unwrap();
    assert!(ROOT_GROUP_ID < a.id() && a.id() < b.id(), "creation order");
    assert_eq!(
        rs.lookup("a/b").unwrap().id(),
        b.id(),
        "an id is the group's"
    );
    let old = b.id();
    b.remove().unwrap();
    drop(b); // freed
    let b2 = a.create_child("b").unwrap();
    assert_ne!(b2.id(), old, "a new group under an old name gets a new id");
    assert!(b2.id() > old, "ids are never reused");
}

/// What [`PeakPerGroup`] learned, per group id: the path the flush was
/// given and the largest single-CPU delta of item 0.
type Peaks = Arc<Mutex<BTreeMap<u64, (String, i64)>>>;

/// A controller that keeps per-group state keyed by group id, as a BPF
/// rstat program keys its maps by cgroup id.
struct PeakPerGroup {
    names: Vec<String>,
    seen: Peaks,
}

impl Controller for PeakPerGroup {
    fn name(&self) -> &str {
        "peak"
    }
    fn stat_names(&self) -> &[String] {
        &self.names
    }
    fn flush(&self, ctx: &mut FlushCtx<'_>) {
        let (id, path, d) = (ctx.group_id(), ctx.group_path(), ctx.deltas()[0]);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let e = seen.entry(id).or_insert((path.clone(), 0));
        assert_eq!(e.0, path, "one id, one group");
        e.1 = e.1.max(d);
        drop(seen);
        ctx.fold();
    }
}

#[test]
fn a_flush_knows_which_group_it_is_folding() {
    let rs = engine_with(2, FlushPolicy::Always);
    let seen = Peaks::default();
    let c = rs
        .register(PeakPerGroup {
            names: vec!["n".into()],
            seen: seen.clone(),
        })
        .unwrap();
    let a = rs.root().create_child("a").unwrap();
    let b = a.create_child("b").unwrap();
    let x = rs.root().create_child("x").unwrap();
    c.add_on_cpu(&b, 0, 0, 7).unwrap();
    c.add_on_cpu(&b, 1, 0, 3).unwrap();
    c.add_on_cpu(&x, 1, 0, 5).unwrap();
    assert_eq!(c.read(rs.root()).unwrap().hierarchical(), &[15]);
    let want = BTreeMap::from([
        (ROOT_GROUP_ID, ("/".to_owned(), 0)),
        (a.id(), ("/a".to_owned(), 0)),
        (b.id(), ("/a/b".to_owned(), 7)),
        (x.id(), ("/x".to_owned(), 5)),
    ]);
    assert_eq!(*seen.lock().unwrap(), want);
}

#[test]
fn totals_saturate_and_count_each_clamp_in_the_group_it_hit() {
    let rs = engine_with(2, FlushPolicy::Always);
    let c = rs.register_counters("c", &["up", "down"]).unwrap();
    let g = rs.root().create_child("g").unwrap();
    let quiet = rs.root().create_child("quiet").unwrap();
    c.add_on_cpu(&g, 0, 0, i64::MAX).unwrap();
    c.add_on_cpu(&g, 1, 0, 1).unwrap();
    c.add_on_cpu(&g, 0, 1, i64::MIN).unwrap();
    c.add_on_cpu(&g, 1, 1, -1).unwrap();
    c.add_on_cpu(&quiet, 1, 0, 5).unwrap();
    // One flush of the whole tree. g, CPU 1: local and hierarchical of both
    // items clamp (4); the root, CPU 1: its hierarchical clamps for both
    // items (2). A wrapping fold would have shown MIN and MAX here.
    let root = c.read(rs.root()).unwrap();
    let gs = c.read(&g).unwrap();
    assert_eq!(gs.local(), &[i64::MAX, i64::MIN]);
    assert_eq!(gs.hierarchical(), &[i64::MAX, i64::MIN]);
    assert_eq!((gs.overflows(), gs.overflowed()), (4, true));
    assert_eq!(root.hierarchical(), &[i64::MAX, i64::MIN]);
    assert_eq!(root.overflows(), 2);
    let q = c.read(&quiet).unwrap();
    assert_eq!(
        (q.local(), q.overflows(), q.overflowed()),
        (&[5, 0][..], 0, false)
    );
    // A clamped total moves from the bound; the count stays.
    c.add_on_cpu(&g, 0, 0, -10).unwrap();
    let gs = c.read(&g).unwrap();
    assert_eq!(gs.local()[0], i64::MAX - 10);
    assert_eq!(gs.overflows(), 4, "nothing new clamped; never reset");
}

#[test]
fn a_clamp_of_the_parents_pending_counts_against_the_parent() {
    let rs = engine_with(1, FlushPolicy::Always);
    let c = rs.register_counters("c", &["n"]).unwrap();
    let p = rs.root().create_child("p").unwrap();
    let a = p.create_child("a").unwrap();
    let b = p.create_child("b").unwrap();
    c.add(&a, 0, i64::MAX).unwrap();
    c.add(&b, 0, i64::MAX).unwrap();
    let ps = c.read(&p).unwrap();
    assert_eq!(ps.hierarchical(), &[i64::MAX]);
    assert_eq!(
        ps.overflows(),
        1,
        "the second child's hand-up clamped p's pending"
    );
    assert_eq!(
        c.read(&a).unwrap().overflows(),
        0,
        "a's own totals are exact"
    );
    assert_eq!(
        c.read(&b).unwrap().overflows(),
        0,
        "b's own totals are exact"
    );
}

#[test]
fn lock_free_reads_see_the_overflow_count_too() {
    let rs = engine_with(2, FlushPolicy::Threshold);
    let c = rs.register_counters("c", &["n"]).unwrap();
    let g = rs.root().create_child("g").unwrap();
    c.add_on_cpu(&g, 0, 0, i64::MAX).unwrap();
    c.add_on_cpu(&g, 1, 0, 1).unwrap();
    assert_eq!(c.read_exact(&g).unwrap().overflows(), 2);
    assert_eq!(c.pending_updates(&g).unwrap(), 0, "the next read copies");
    assert_eq!(c.read(&g).unwrap().overflows(), 2);
}

#[test]
fn a_wrapping_slot_loses_nothing_while_each_change_fits() {
    // Charges on CPU 0, uncharges on CPU 1, a flush after each: CPU 0's
    // slot passes i64::MAX and wraps, yet every total stays exact.
    let rs = engine_with(2, FlushPolicy::Always);
    let c = rs.register_counters("c", &["n"]).unwrap();
    let g = rs.root().create_child("g").unwrap();
    for _ in 0..3 {
        c.add_on_cpu(&g, 0, 0, i64::MAX).unwrap();
        assert_eq!(c.read(&g).unwrap().local(), &[i64::MAX]);
        c.add_on_cpu(&g, 1, 0, -i64::MAX).unwrap();
        let s = c.read(&g).unwrap();
        assert_eq!((s.local(), s.overflows()), (&[0][..], 0));
    }
}

#[test]
fn cputime_that_does_not_fit_is_refused_not_clamped() {
    let rs = engine_with(1, FlushPolicy::Always);
    let g = rs.root().create_child("g").unwrap();
    let cpu = rs.cpu().unwrap();
    let half = i64::MAX as u64 / 2 + 1;
    for (user, system) in [(u64::MAX, 0), (0, u64::MAX), (half, half)] {
        assert_eq!(
            rs.account_cputime(&g, user, system).unwrap_err(),
            Error::CpuTimeOutOfRange {
                user_usec: user,
                system_usec: system
            }
        );
    }
    assert_eq!(
        cpu.read(&g).unwrap().local(),
        &[0, 0, 0],
        "a refused charge changes nothing"
    );
    let msg = rs.account_cputime(&g, u64::MAX, 0).unwrap_err().to_string();
    assert!(msg.contains("negative duration"), "{msg}");
    rs.account_cputime(&g, i64::MAX as u64 - 1, 1).unwrap();
    let s = cpu.read(&g).unwrap();
    assert_eq!(s.local(), &[i64::MAX, i64::MAX - 1, 1]);
    assert!(!s.overflowed());
}

/// Folds by hand: adds only positive deltas to local, clamping, and reports
/// clamps of its own and (pretending) of the parent's pending.
struct HandFold(Vec<String>);

impl Controller for HandFold {
    fn name(&self) -> &str {
        "hand"
    }
    fn stat_names(&self) -> &[String] {
        &self.0
    }
    fn flush(&self, ctx: &mut FlushCtx<'_>) {
        let d = ctx.deltas()[0];
        let local = ctx.totals_mut().local_mut();
        match local[0].checked_add(d) {
            Some(v) => local[0] = v,
            None => {
                local[0] = local[0].saturating_add(d);
                ctx.note_overflow();
                ctx.note_parent_overflow();
            }
        }
    }
}

#[test]
fn hand_folds_report_their_clamps() {
    let rs = engine_with(1, FlushPolicy::Always);
    let c = rs.register(HandFold(vec!["n".into()])).unwrap();
    let g = rs.root().create_child("g").unwrap();
    c.add(&g, 0, i64::MAX).unwrap();
    assert_eq!(c.read(&g).unwrap().overflows(), 0);
    c.add(&g, 0, 1).unwrap();
    let s = c.read(&g).unwrap();
    assert_eq!((s.local(), s.overflows()), (&[i64::MAX][..], 1));
    assert_eq!(
        c.read(rs.root()).unwrap().overflows(),
        1,
        "the parent's note"
    );
}

/// A controller whose flush folds the standard way, except that while
/// `panics_left > 0` a call on group `target` (any group if 0) first folds
/// and then panics, so a rollback that missed anything would show. Records
/// the (group id, CPU, delta of item 0) of each call that panicked.
struct Flaky {
    names: Vec<String>,
    target: Arc<std::sync::atomic::AtomicU64>,
    panics_left: Arc<std::sync::atomic::AtomicU32>,
    panicked: Arc<Mutex<Vec<(u64, usize, i64)>>>,
}

impl Flaky {
    fn new(panics: u32) -> Self {
        Flaky {
            names: vec!["n".into()],
            target: Default::default(),
            panics_left: Arc::new(panics.into()),
            panicked: Default::default(),
        }
    }
    fn handles(&self) -> Self {
        Flaky {
            names: self.names.clone(),
            target: self.target.clone(),
            panics_left: self.panics_left.clone(),
            panicked: self.panicked.clone(),
        }
    }
}

impl Controller for Flaky {
    fn name(&self) -> &str {
        "flaky"
    }
    fn stat_names(&self) -> &[String] {
        &self.names
    }
    fn flush(&self, ctx: &mut FlushCtx<'_>) {
        use std::sync::atomic::Ordering::SeqCst;
        let target = self.target.load(SeqCst);
        ctx.fold();
        if (target == 0 || target == ctx.group_id())
            && self
                .panics_left
                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            let call = (ctx.group_id(), ctx.cpu(), ctx.deltas()[0]);
            self.panicked.lock().unwrap().push(call);
            panic!("a deliberate panic from a test controller's flush, after folding");
        }
    }
}

#[test]
fn a_panicking_flush_loses_nothing_and_counts_nothing_twice() {
    let rs = engine_with(2, FlushPolicy::Always);
    let flaky = Flaky::new(1);
    let c = rs.register(flaky.handles()).unwrap();
    let a = rs.root().create_child("a").unwrap();
    let b = a.create_child("b").unwrap();
    c.add_on_cpu(&b, 0, 0, 5).unwrap();
    c.add_on_cpu(&b, 1, 0, 7).unwrap();
    c.add_on_cpu(&a, 0, 0, 1).unwrap();

    // The first call (a leaf's, children go first) panics after folding:
    // this read is as if that (group, CPU) had not been flushed yet.
    let first = c.read(rs.root()).unwrap();
    assert_eq!(c.flush_panics(), 1);
    let panicked = flaky.panicked.lock().unwrap().clone();
    let [(id, _cpu, d)] = panicked[..] else {
        panic!("one call panicked, got {panicked:?}")
    };
    assert_eq!(id, b.id(), "children are flushed first");
    assert_eq!(first.hierarchical(), &[13 - d]);

    // The next flush sees those deltas again, once.
    assert_eq!(c.read(rs.root()).unwrap().hierarchical(), &[13]);
    assert_eq!(c.read(&b).unwrap().local(), &[12]);
    assert_eq!(c.read(&a).unwrap().local(), &[1]);
    assert_eq!(c.read(&a).unwrap().hierarchical(), &[13]);
    c.add_on_cpu(&b, 0, 0, 100).unwrap();
    assert_eq!(c.read(rs.root()).unwrap().hierarchical(), &[113]);
    assert_eq!(c.flush_panics(), 1);
    assert_eq!(c.read(rs.root()).unwrap().overflows(), 0);
}

#[test]
fn a_panicking_parent_fold_keeps_what_its_children_handed_up() {
    let rs = engine_with(1, FlushPolicy::Always);
    let flaky = Flaky::new(1);
    let c = rs.register(flaky.handles()).unwrap();
    let p = rs.root().create_child("p").unwrap();
    let x = p.create_child("x").unwrap();
    let y = p.create_child("y").unwrap();
    flaky
        .target
        .store(p.id(), std::sync::atomic::Ordering::SeqCst);
    c.add(&x, 0, 2).unwrap();
    c.add(&y, 0, 3).unwrap();
    c.add(&p, 0, 4).unwrap();
    // p's fold panics: its own deltas and its children's pending stay
    // where they were.
    let s = c.read(&p).unwrap();
    assert_eq!(c.flush_panics(), 1);
    assert_eq!(*flaky.panicked.lock().unwrap(), [(p.id(), 0, 4)]);
    assert_eq!((s.local(), s.hierarchical()), (&[0][..], &[0][..]));
    assert_eq!(c.read(&x).unwrap().local(), &[2], "children were folded");
    let s = c.read(&p).unwrap();
    assert_eq!((s.local(), s.hierarchical()), (&[4][..], &[9][..]));
    assert_eq!(c.read(rs.root()).unwrap().hierarchical(), &[9]);
}

#[test]
fn a_panic_at_a_groups_final_flush_still_reaches_its_parent() {
    let rs = engine_with(1, FlushPolicy::Always);
    let flaky = Flaky::new(3);
    let c = rs.register(flaky.handles()).unwrap();
    let p = rs.root().create_child("p").unwrap();
    let leaf = p.create_child("leaf").unwrap();
    flaky
        .target
        .store(leaf.id(), std::sync::atomic::Ordering::SeqCst);
    c.add(&leaf, 0, 5).unwrap();
    // Removal flushes nothing (the zombie stays in its parent's tree)...
    leaf.remove().unwrap();
    assert_eq!(c.flush_panics(), 0);
    // ...a flush of the parent folds the zombie (its deltas count towards
    // p), and panics: left for later...
    assert_eq!(c.read(&p).unwrap().hierarchical(), &[0]);
    assert_eq!(c.flush_panics(), 1);
    // ...the next one retries it, and panics again...
    assert_eq!(c.read(&p).unwrap().hierarchical(), &[0]);
    assert_eq!(c.flush_panics(), 2);
    // ...and the final release's flush, which panics too, has no later
    // one: its deltas are folded the standard way instead.
    drop(leaf);
    assert_eq!(c.flush_panics(), 3);
    assert_eq!(c.read(&p).unwrap().hierarchical(), &[5]);
    assert_eq!(c.read(rs.root()).unwrap().hierarchical(), &[5]);
    let ids: Vec<u64> = flaky.panicked.lock().unwrap().iter().map(|c| c.0).collect();
    assert!(
        ids.len() == 3 && ids.iter().all(|&id| id == ids[0]),
        "{ids:?}"
    );
}

#[test]
fn counter_sets_never_report_flush_panics() {
    let rs = engine_with(1, FlushPolicy::Always);
    let c = rs.register_counters("c", &["n"]).unwrap();
    c.add(rs.root(), 0, 1).unwrap();
    assert_eq!(c.read(rs.root()).unwrap().local(), &[1]);
    assert_eq!(c.flush_panics(), 0);
}

/// A panic payload whose destructor panics too.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("a deliberate panic from a test panic payload's destructor");
    }
}

/// Panics with a [`Bomb`] on its first call, then folds normally.
struct Bomber(Vec<String>, std::sync::atomic::AtomicBool);

impl Controller for Bomber {
    fn name(&self) -> &str {
        "bomber"
    }
    fn stat_names(&self) -> &[String] {
        &self.0
    }
    fn flush(&self, ctx: &mut FlushCtx<'_>) {
        if !self.1.swap(true, std::sync::atomic::Ordering::SeqCst) {
            std::panic::panic_any(Bomb);
        }
        ctx.fold();
    }
}

// The destructor's own payload is leaked on purpose (dropping it could
// panic again), which Miri's leak check would report.
#[cfg_attr(miri, ignore)]
#[test]
fn a_payload_whose_destructor_panics_is_contained_too() {
    let rs = engine_with(1, FlushPolicy::Always);
    let c = rs
        .register(Bomber(vec!["n".into()], Default::default()))
        .unwrap();
    let a = rs.root().create_child("a").unwrap();
    let b = rs.root().create_child("b").unwrap();
    c.add(&a, 0, 1).unwrap();
    c.add(&b, 0, 2).unwrap();
    let first = c.read(rs.root()).unwrap().hierarchical()[0];
    assert!(
        first == 1 || first == 2,
        "one child's fold was undone: {first}"
    );
    assert_eq!(c.flush_panics(), 1);
    assert_eq!(c.read(rs.root()).unwrap().hierarchical(), &[3]);
}

#[test]
fn a_threshold_read_retries_a_fold_that_panicked() {
    let rs = engine_with(1, FlushPolicy::Threshold);
    let flaky = Flaky::new(1);
    let c = rs.register(flaky.handles()).unwrap();
    let g = rs.root().create_child("g").unwrap();
    c.add(&g, 0, 1000).unwrap(); // far past the threshold (64 x 1 CPU)
    assert_eq!(
        c.read(&g).unwrap().local(),
        &[0],
        "the panicking fold was undone"
    );
    assert_eq!(c.flush_panics(), 1);
    assert!(
        c.pending_updates(&g).unwrap() > 64,
        "an undone fold consumes no pending-update units"
    );
    // So the next plain read is still due for a flush, and gets it all.
    assert_eq!(c.read(&g).unwrap().local(), &[1000]);
    assert_eq!(c.pending_updates(&g).unwrap(), 0);
}

/// Each item says whether it is a count that only grows (a counter) or a
/// level that goes up and down (a gauge), for exporters: counter by
/// default, so counter sets declared before kinds existed keep their meaning.
#[test]
fn items_declare_counter_or_gauge_and_counter_is_the_default() {
    use rstat::{CounterSetController, StatKind};
    let rs = engine_with(2, FlushPolicy::Always);
    let plain = rs.register_counters("plain", &["a", "b"]).unwrap();
    assert_eq!(plain.stat_kinds(), [StatKind::Counter, StatKind::Counter]);
    let cpu = rs
        .controllers()
        .into_iter()
        .find(|c| c.name() == "cpu")
        .unwrap();
    assert_eq!(cpu.stat_kinds(), [StatKind::Counter; 3]);
    let pool = rs
        .register(
            CounterSetController::with_units("pool", &[("in_use_bytes", 4096), ("served", 1)])
                .with_kinds(&[StatKind::Gauge, StatKind::Counter]),
        )
        .unwrap();
    assert_eq!(pool.stat_kinds(), [StatKind::Gauge, StatKind::Counter]);
    assert_eq!(pool.stat_units(), [4096, 1]);
    let bad =
        rs.register(CounterSetController::new("bad", &["a", "b"]).with_kinds(&[StatKind::Gauge]));
    match bad {
        Err(Error::InvalidController { name, reason }) => {
            assert_eq!(name, "bad");
            assert!(reason.contains("1 stat kinds for 2 stat items"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // The memory controller's levels are gauges, its counts counters.
    let mem = rstat::memory::Memory::register(&rs).unwrap();
    let ctl = mem.stat_controller();
    let gauges: Vec<&str> = ctl
        .stat_names()
        .iter()
        .zip(ctl.stat_kinds())
        .filter(|(_, k)| *k == StatKind::Gauge)
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(gauges, ["heap", "heap_overhead"]);
}
