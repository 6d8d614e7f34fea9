//! Fuzz target: random call sequences through the `extern "C"` functions,
//! with handles drawn from everything ever issued (live, released, freed
//! with their rstat, of every kind, from other rstats), NULL and made-up
//! values, against a model of which handles are valid and what the counter
//! totals must be.
//!
//! Checked after every call: a handle the model says is NULL or dead gives
//! exactly `RSTAT_EBADF`, a live one of the wrong kind `RSTAT_EPROTOTYPE`,
//! live ones of two rstats `RSTAT_EXDEV`; no call ever returns
//! `RSTAT_ENOTRECOVERABLE` (a caught panic) or a code outside the header's
//! or outside the ones the function's `Errors:` paragraph lists;
//! every exact read equals the sum of the adds in the group's subtree
//! (removed groups' history included).
//!
//! Bounded: `PROPTEST_CASES` cases (default 64; CI sets it) of up to 60 calls.

mod common;

use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::ptr;

use common::{doc_codes, options};
use proptest::prelude::*;
use rstat_capi::*;

#[derive(Clone, Debug)]
enum Op {
    New,
    Free(usize),
    Root(usize),
    Create(usize, u8),
    Lookup(usize, u8),
    Remove(usize),
    Get(usize),
    Put(usize),
    Register(usize, u8),
    Add(usize, usize, u32, i32),
    ReadExact(usize, usize, bool, u8),
    Charge(usize, u16, bool),
    Uncharge(usize, u16),
    SetLimit(usize, u32, u8),
    Enter(usize),
    Exit(usize),
    Read(usize, u8),
}

fn op() -> impl Strategy<Value = Op> {
    let h = any::<usize>();
    prop_oneof![
        1 => Just(Op::New),
        1 => h.prop_map(Op::Free),
        2 => h.prop_map(Op::Root),
        6 => (h, any::<u8>()).prop_map(|(a, n)| Op::Create(a, n)),
        2 => (h, any::<u8>()).prop_map(|(a, n)| Op::Lookup(a, n)),
        3 => h.prop_map(Op::Remove),
        1 => h.prop_map(Op::Get),
        3 => h.prop_map(Op::Put),
        2 => (h, any::<u8>()).prop_map(|(a, n)| Op::Register(a, n)),
        8 => (h, h, 0u32..4, -1000i32..1000).prop_map(|(a, b, i, d)| Op::Add(a, b, i, d)),
        4 => (h, h, any::<bool>(), 0u8..4).prop_map(|(a, b, l, n)| Op::ReadExact(a, b, l, n)),
        2 => (h, any::<u16>(), any::<bool>()).prop_map(|(a, n, f)| Op::Charge(a, n, f)),
        2 => (h, any::<u16>()).prop_map(|(a, n)| Op::Uncharge(a, n)),
        2 => (h, 0u32..6, any::<u8>()).prop_map(|(a, w, t)| Op::SetLimit(a, w, t)),
        1 => h.prop_map(Op::Enter),
        1 => h.prop_map(Op::Exit),
        1 => (h, any::<u8>()).prop_map(|(a, f)| Op::Read(a, f)),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Engine,
    Group,
    Counters,
}

#[derive(Debug)]
struct Handle {
    kind: Kind,
    engine: usize,
    /// Group handles: owners left (0: released).
    refs: u64,
    /// Group handles: the group's model id.
    group: u64,
    /// Counter handles: number of items.
    items: usize,
}

#[derive(Default)]
struct Model {
    /// Every handle value ever issued, in issue order, with its model.
    handles: Vec<(usize, Handle)>,
    /// Engines alive, by model id.
    engines_alive: Vec<bool>,
    /// (engine, group id) -> parent group id.
    parent: HashMap<(usize, u64), u64>,
    /// (engine, counter handle, group id, item) -> sum of adds made to
    /// exactly that group.
    adds: HashMap<(usize, usize, u64, u32), i64>,
    /// Handles entered on this thread, innermost last.
    entered: Vec<usize>,
    /// Handle indices of engines' cpu sets (`rstat_cpu_counters`).
    cpu_sets: std::collections::HashSet<usize>,
    /// Engines (model ids) with a group this thread entered at some point:
    /// their cpu sets hold this thread's CPU time since, an amount no model
    /// can predict (it crosses a microsecond boundary or not).
    entered_engines: std::collections::HashSet<usize>,
    /// A clock of calls, for the order of removals and registrations.
    tick: u64,
    /// (engine, group id) -> when it was removed.
    removed_at: HashMap<(usize, u64), u64>,
    /// Counter handle index -> when it was registered.
    registered_at: HashMap<usize, u64>,
}

const KNOWN_CODES: [i32; 20] = [
    RSTAT_OK,
    RSTAT_EPERM,
    RSTAT_ENOENT,
    RSTAT_E2BIG,
    RSTAT_EBADF,
    RSTAT_EAGAIN,
    RSTAT_ENOMEM,
    RSTAT_EFAULT,
    RSTAT_EBUSY,
    RSTAT_EEXIST,
    RSTAT_EXDEV,
    RSTAT_ENODEV,
    RSTAT_EINVAL,
    RSTAT_EMFILE,
    RSTAT_ENOSPC,
    RSTAT_ERANGE,
    RSTAT_EOVERFLOW,
    RSTAT_EPROTOTYPE,
    RSTAT_EOPNOTSUPP,
    RSTAT_ENOTRECOVERABLE,
];

const NAMES: [&str; 6] = ["a", "b", "c", "", "x/y", ".."];
const LIMITS: [&str; 6] = ["max", "200M", "1K", "-5", "1.5", "12Q"];
const FILES: [&str; 5] = [
    "memory.stat",
    "cpu.stat",
    "memory.events",
    "nope",
    "c0.stat",
];

impl Model {
    fn live(&self, i: usize) -> bool {
        let h = &self.handles[i].1;
        self.engines_alive[h.engine] && (h.kind != Kind::Group || h.refs > 0)
    }

    /// Pick a handle: mostly from the pool, sometimes NULL or made up.
    /// Returns the value and its pool index (None for NULL / made up).
    fn pick(&self, seed: usize) -> (usize, Option<usize>) {
        match seed % 16 {
            0 => (0, None),
            1 => ((seed | 1) << 4 | 2, None), // a made-up "group" value
            // A pool handle with one generation bit flipped: the same slot
            // and kind, another generation (stale, unless that value was
            // issued too).
            2 if !self.handles.is_empty() => {
                let v = self.handles[(seed >> 4) % self.handles.len()].0
                    ^ (1 << (32 + (seed >> 8) % 32));
                (v, self.handles.iter().position(|(h, _)| *h == v))
            }
            _ if self.handles.is_empty() => (0, None),
            _ => {
                let i = (seed >> 4) % self.handles.len();
                (self.handles[i].0, Some(i))
            }
        }
    }

    /// The code a call must return for handle `idx` expected of kind
    /// `want`, if the handle alone decides it.
    fn handle_error(&self, idx: Option<usize>, want: Kind) -> Option<i32> {
        let Some(i) = idx else {
            return Some(RSTAT_EBADF);
        };
        if !self.live(i) {
            return Some(RSTAT_EBADF);
        }
        (self.handles[i].1.kind != want).then_some(RSTAT_EPROTOTYPE)
    }

    fn issue(&mut self, value: usize, h: Handle) -> usize {
        assert!(
            self.handles.iter().all(|(v, _)| *v != value),
            "handle value {value:#x} issued twice"
        );
        self.handles.push((value, h));
        self.handles.len() - 1
    }

    fn group_id(&self, i: usize) -> (usize, u64) {
        let h = &self.handles[i].1;
        (h.engine, h.group)
    }

    /// The group whose state a counter set uses for group `g`: a group
    /// removed before the set was registered has none, and its nearest
    /// ancestor's is used (rstat's rule).
    fn effective(&self, engine: usize, cs: usize, mut g: u64) -> u64 {
        let reg = self.registered_at[&cs];
        while self.removed_at.get(&(engine, g)).is_some_and(|&r| r < reg) {
            g = self.parent[&(engine, g)];
        }
        g
    }

    fn in_subtree(&self, engine: usize, mut g: u64, top: u64) -> bool {
        loop {
            if g == top {
                return true;
            }
            match self.parent.get(&(engine, g)) {
                Some(&p) => g = p,
                None => return false,
            }
        }
    }

    fn expected_total(&self, engine: usize, cs: usize, top: u64, item: u32, local: bool) -> i64 {
        self.adds
            .iter()
            .filter(|((e, c, g, it), _)| {
                *e == engine
                    && *c == cs
                    && *it == item
                    && if local {
                        *g == top
                    } else {
                        self.in_subtree(engine, *g, top)
                    }
            })
            .map(|(_, v)| *v)
            .sum()
    }
}

/// The C function behind each `check` label.
fn function(what: &str) -> String {
    match what {
        "add" | "free" | "new" | "read" | "read_exact" | "root" => format!("rstat_{what}"),
        "create" | "enter" | "exit" | "get" | "lookup" | "put" | "remove" => {
            format!("rstat_group_{what}")
        }
        "charge" => "rstat_memory_try_charge".into(),
        "uncharge" | "set_limit" => format!("rstat_memory_{what}"),
        "cpu" => "rstat_cpu_counters".into(),
        "register" => "rstat_counters_register".into(),
        _ => panic!("no C function known for check label {what:?}"),
    }
}

fn check(rc: i32, want: Option<i32>, what: &str) -> Result<(), TestCaseError> {
    prop_assert!(KNOWN_CODES.contains(&rc), "{what}: unknown code {rc}");
    prop_assert_ne!(rc, RSTAT_ENOTRECOVERABLE, "{}: a panic was caught", what);
    if rc != 0 {
        let func = function(what);
        let listed = doc_codes::documented()
            .get(&func)
            .is_some_and(|c| c.contains(&rc));
        prop_assert!(
            listed,
            "{} returned {}, which its `Errors:` paragraph in rstat.h does not list",
            func,
            doc_codes::name(rc)
        );
    }
    if let Some(w) = want {
        prop_assert_eq!(rc, w, "{}", what);
    }
    Ok(())
}

fn new_group_handle(m: &mut Model, value: usize, engine: usize) -> Result<usize, TestCaseError> {
    let mut id = 0u64;
    // SAFETY: a valid out-pointer.
    let rc = unsafe { rstat_group_id(ptr::without_provenance_mut::<rstat_group>(value), &mut id) };
    prop_assert_eq!(rc, 0);
    Ok(m.issue(
        value,
        Handle {
            kind: Kind::Group,
            engine,
            refs: 1,
            group: id,
            items: 0,
        },
    ))
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut m = Model::default();
    let mut out: *mut rstat_group = ptr::null_mut();
    // Fewer per-CPU slots keep Miri's run short.
    let opts = options(RSTAT_OPT_NO_PERIODIC_FLUSH, if cfg!(miri) { 2 } else { 0 });
    for op in std::iter::once(Op::New).chain(ops) {
        m.tick += 1;
        match op {
            Op::New => {
                if m.engines_alive.iter().filter(|a| **a).count() >= 3 {
                    continue;
                }
                let mut rs: *mut rstat = ptr::null_mut();
                // SAFETY: valid pointers.
                let rc = unsafe { rstat_new(&opts, &mut rs) };
                check(rc, Some(0), "new")?;
                m.engines_alive.push(true);
                let e = m.engines_alive.len() - 1;
                m.issue(
                    rs as usize,
                    Handle {
                        kind: Kind::Engine,
                        engine: e,
                        refs: 0,
                        group: 0,
                        items: 0,
                    },
                );
                let mut cpu: *mut rstat_counters = ptr::null_mut();
                // SAFETY: valid pointers.
                check(unsafe { rstat_cpu_counters(rs, &mut cpu) }, Some(0), "cpu")?;
                let c = m.issue(
                    cpu as usize,
                    Handle {
                        kind: Kind::Counters,
                        engine: e,
                        refs: 0,
                        group: 0,
                        items: 3,
                    },
                );
                m.registered_at.insert(c, m.tick);
                m.cpu_sets.insert(c);
            }
            Op::Free(s) => {
                let (v, idx) = m.pick(s);
                let want = m.handle_error(idx, Kind::Engine);
                let rc = rstat_free(ptr::without_provenance_mut::<rstat>(v));
                check(rc, want.or(Some(0)), "free")?;
                if rc == 0 {
                    let e = m.handles[idx.unwrap()].1.engine;
                    m.engines_alive[e] = false;
                }
            }
            Op::Root(s) => {
                let (v, idx) = m.pick(s);
                let want = m.handle_error(idx, Kind::Engine);
                // SAFETY: valid out-pointer.
                let rc = unsafe { rstat_root(ptr::without_provenance_mut::<rstat>(v), &mut out) };
                check(rc, want.or(Some(0)), "root")?;
                if rc == 0 {
                    let e = m.handles[idx.unwrap()].1.engine;
                    new_group_handle(&mut m, out as usize, e)?;
                }
            }
            Op::Create(s, n) => {
                let (v, idx) = m.pick(s);
                let want = m.handle_error(idx, Kind::Group);
                let name = CString::new(NAMES[n as usize % NAMES.len()]).unwrap();
                // SAFETY: valid pointers.
                let rc = unsafe {
                    rstat_group_create(
                        ptr::without_provenance_mut::<rstat_group>(v),
                        name.as_ptr(),
                        &mut out,
                    )
                };
                check(rc, want, "create")?;
                if want.is_none() {
                    prop_assert!(
                        [0, RSTAT_EEXIST, RSTAT_EINVAL, RSTAT_ENODEV].contains(&rc),
                        "create: {rc}"
                    );
                }
                if rc == 0 {
                    let (e, parent) = m.group_id(idx.unwrap());
                    let c = new_group_handle(&mut m, out as usize, e)?;
                    let child = m.handles[c].1.group;
                    m.parent.insert((e, child), parent);
                }
            }
            Op::Lookup(s, n) => {
                let (v, idx) = m.pick(s);
                let want = m.handle_error(idx, Kind::Engine);
                let paths = ["a", "/a/b", "/", "a//b", "nope", "b/c"];
                let path = CString::new(paths[n as usize % paths.len()]).unwrap();
                // SAFETY: valid pointers.
                let rc = unsafe {
                    rstat_group_lookup(
                        ptr::without_provenance_mut::<rstat>(v),
                        path.as_ptr(),
                        &mut out,
                    )
                };
                check(rc, want, "lookup")?;
                if want.is_none() {
                    prop_assert!(
                        [0, RSTAT_ENOENT, RSTAT_EINVAL].contains(&rc),
                        "lookup: {rc}"
                    );
                }
                if rc == 0 {
                    let e = m.handles[idx.unwrap()].1.engine;
                    new_group_handle(&mut m, out as usize, e)?;
                }
            }
            Op::Remove(s) => {
                let (v, idx) = m.pick(s);
                let want = m.handle_error(idx, Kind::Group);
                let rc = rstat_group_remove(ptr::without_provenance_mut::<rstat_group>(v));
                check(rc, want, "remove")?;
                if rc == 0 {
                    let key = m.group_id(idx.unwrap());
                    m.removed_at.insert(key, m.tick);
                }
                if want.is_none() {
                    prop_assert!(
                        [0, RSTAT_EBUSY, RSTAT_EPERM, RSTAT_ENODEV].contains(&rc),
                        "remove: {rc}"
                    );
                }
            }
            Op::Get(s) => {
                let (v, idx) = m.pick(s);
                let want = m.handle_error(idx, Kind::Group);
                let rc = rstat_group_get(ptr::without_provenance_mut::<rstat_group>(v));
                check(rc, want.or(Some(0)), "get")?;
                if rc == 0 {
                    m.handles[idx.unwrap()].1.refs += 1;
                }
            }
            Op::Put(s) => {
                let (v, idx) = m.pick(s);
                let want = m.handle_error(idx, Kind::Group);
                let rc = rstat_group_put(ptr::without_provenance_mut::<rstat_group>(v));
                check(rc, want.or(Some(0)), "put")?;
                if rc == 0 {
                    m.handles[idx.unwrap()].1.refs -= 1;
                }
            }
            Op::Register(s, n) => {
                let (v, idx) = m.pick(s);
                let want = m.handle_error(idx, Kind::Engine);
                let name = CString::new(format!("c{}", n % 3)).unwrap();
                let items = [c"i0".as_ptr(), c"i1".as_ptr()];
                let mut cs: *mut rstat_counters = ptr::null_mut();
                // SAFETY: valid pointers and NUL-terminated strings.
                let rc = unsafe {
                    rstat_counters_register(
                        ptr::without_provenance_mut::<rstat>(v),
                        name.as_ptr(),
                        items.as_ptr(),
                        ptr::null(),
                        2,
                        &mut cs,
                    )
                };
                check(rc, want, "register")?;
                if want.is_none() {
                    prop_assert!([0, RSTAT_EEXIST].contains(&rc), "register: {rc}");
                }
                if rc == 0 {
                    let e = m.handles[idx.unwrap()].1.engine;
                    let c = m.issue(
                        cs as usize,
                        Handle {
                            kind: Kind::Counters,
                            engine: e,
                            refs: 0,
                            group: 0,
                            items: 2,
                        },
                    );
                    m.registered_at.insert(c, m.tick);
                }
            }
            Op::Add(a, b, item, delta) => {
                let (cv, ci) = m.pick(a);
                let (gv, gi) = m.pick(b);
                let mut want = m
                    .handle_error(ci, Kind::Counters)
                    .or(m.handle_error(gi, Kind::Group));
                if want.is_none() {
                    let (ce, ge) = (
                        m.handles[ci.unwrap()].1.engine,
                        m.handles[gi.unwrap()].1.engine,
                    );
                    if ce != ge {
                        want = Some(RSTAT_EXDEV);
                    } else if item as usize >= m.handles[ci.unwrap()].1.items {
                        want = Some(RSTAT_EINVAL);
                    } else {
                        want = Some(0);
                    }
                }
                let rc = rstat_add(
                    ptr::without_provenance_mut::<rstat_counters>(cv),
                    ptr::without_provenance_mut::<rstat_group>(gv),
                    item,
                    i64::from(delta),
                );
                check(rc, want, "add")?;
                if rc == 0 {
                    let (e, g) = m.group_id(gi.unwrap());
                    let g = m.effective(e, ci.unwrap(), g);
                    *m.adds.entry((e, ci.unwrap(), g, item)).or_default() += i64::from(delta);
                }
            }
            Op::ReadExact(a, b, local, len) => {
                let (cv, ci) = m.pick(a);
                let (gv, gi) = m.pick(b);
                let mut want = m
                    .handle_error(ci, Kind::Counters)
                    .or(m.handle_error(gi, Kind::Group));
                if want.is_none() {
                    let (ce, ge) = (
                        m.handles[ci.unwrap()].1.engine,
                        m.handles[gi.unwrap()].1.engine,
                    );
                    want = Some(if ce != ge {
                        RSTAT_EXDEV
                    } else if (len as usize) < m.handles[ci.unwrap()].1.items {
                        RSTAT_ERANGE
                    } else {
                        0
                    });
                }
                let mut vals = [0i64; 4];
                let flags = if local { RSTAT_READ_LOCAL } else { 0 };
                // SAFETY: `vals` holds `len` <= 4 values.
                let rc = unsafe {
                    rstat_read_exact(
                        ptr::without_provenance_mut::<rstat_counters>(cv),
                        ptr::without_provenance_mut::<rstat_group>(gv),
                        flags,
                        vals.as_mut_ptr(),
                        len as usize,
                    )
                };
                check(rc, want, "read_exact")?;
                if rc == 0 {
                    let c = ci.unwrap();
                    let (e, g) = m.group_id(gi.unwrap());
                    let g = m.effective(e, c, g);
                    // A cpu set also holds the CPU time of this thread
                    // while it was inside groups of its engine: at least
                    // the adds then, exactly them if it never entered one.
                    // Its root is the process: the process's CPU time
                    // plus the adds, at least the adds.
                    let is_root = !m.parent.contains_key(&(e, g));
                    let timed =
                        m.cpu_sets.contains(&c) && (m.entered_engines.contains(&e) || is_root);
                    for item in 0..m.handles[c].1.items as u32 {
                        let want = m.expected_total(e, c, g, item, local);
                        let got = vals[item as usize];
                        if timed {
                            prop_assert!(
                                got >= want,
                                "cpu item {} of group {} (local {}): {} below the {} added",
                                item,
                                g,
                                local,
                                got,
                                want
                            );
                        } else {
                            prop_assert_eq!(
                                got,
                                want,
                                "item {} of group {} (local {})",
                                item,
                                g,
                                local
                            );
                        }
                    }
                }
            }
            Op::Charge(s, n, force) => {
                let (v, idx) = m.pick(s);
                let want = m.handle_error(idx, Kind::Group);
                let mut fl = 0u32;
                let flags = if force { RSTAT_CHARGE_FORCE } else { 0 };
                // SAFETY: valid out-pointer.
                let rc = unsafe {
                    rstat_memory_try_charge(
                        ptr::without_provenance_mut::<rstat_group>(v),
                        u64::from(n),
                        flags,
                        &mut fl,
                    )
                };
                check(rc, want, "charge")?;
                if want.is_none() {
                    prop_assert!([0, RSTAT_ENOMEM].contains(&rc), "charge: {rc}");
                }
            }
            Op::Uncharge(s, n) => {
                let (v, idx) = m.pick(s);
                let want = m.handle_error(idx, Kind::Group);
                let rc = rstat_memory_uncharge(
                    ptr::without_provenance_mut::<rstat_group>(v),
                    u64::from(n),
                );
                check(rc, want, "uncharge")?;
                if want.is_none() {
                    prop_assert!([0, RSTAT_EINVAL].contains(&rc), "uncharge: {rc}");
                }
            }
            Op::SetLimit(s, which, t) => {
                let (v, idx) = m.pick(s);
                let want = m.handle_error(idx, Kind::Group);
                let text = CString::new(LIMITS[t as usize % LIMITS.len()]).unwrap();
                // SAFETY: NUL-terminated.
                let rc = unsafe {
                    rstat_memory_set_limit(
                        ptr::without_provenance_mut::<rstat_group>(v),
                        which,
                        text.as_ptr(),
                    )
                };
                check(rc, want, "set_limit")?;
                if want.is_none() {
                    prop_assert!(
                        [0, RSTAT_EINVAL, RSTAT_ENODEV].contains(&rc),
                        "set_limit: {rc}"
                    );
                    if which > 3 || t as usize % LIMITS.len() >= 3 {
                        prop_assert_eq!(rc, RSTAT_EINVAL);
                    }
                }
            }
            Op::Enter(s) => {
                let (v, idx) = m.pick(s);
                let want = m.handle_error(idx, Kind::Group);
                let rc = rstat_group_enter(ptr::without_provenance_mut::<rstat_group>(v));
                check(rc, want.or(Some(0)), "enter")?;
                if rc == 0 {
                    m.entered.push(v);
                    if let Some(i) = idx {
                        m.entered_engines.insert(m.handles[i].1.engine);
                    }
                }
            }
            Op::Exit(s) => {
                let (v, _) = m.pick(s);
                let pos = m.entered.iter().rposition(|&e| e == v);
                let want = if v == 0 {
                    RSTAT_EBADF
                } else if pos.is_some() {
                    0
                } else {
                    RSTAT_EINVAL
                };
                let rc = rstat_group_exit(ptr::without_provenance_mut::<rstat_group>(v));
                check(rc, Some(want), "exit")?;
                if let Some(p) = pos {
                    m.entered.remove(p);
                }
            }
            Op::Read(s, f) => {
                let (v, idx) = m.pick(s);
                let want = m.handle_error(idx, Kind::Group);
                let file = CString::new(FILES[f as usize % FILES.len()]).unwrap();
                let mut buf = [0 as c_char; 256];
                let mut n = 0usize;
                // SAFETY: `buf` holds 256 bytes.
                let rc = unsafe {
                    rstat_read(
                        ptr::without_provenance_mut::<rstat_group>(v),
                        file.as_ptr(),
                        buf.as_mut_ptr(),
                        buf.len(),
                        &mut n,
                    )
                };
                check(rc, want, "read")?;
                if want.is_none() {
                    prop_assert!([0, RSTAT_ENOENT, RSTAT_ERANGE].contains(&rc), "read: {rc}");
                }
            }
        }
    }
    // Leave nothing behind: exit what is entered, free every live engine.
    for v in m.entered.drain(..).rev() {
        prop_assert_eq!(
            rstat_group_exit(ptr::without_provenance_mut::<rstat_group>(v)),
            0
        );
    }
    for (v, h) in &m.handles {
        if h.kind == Kind::Engine && m.engines_alive[h.engine] {
            prop_assert_eq!(rstat_free(ptr::without_provenance_mut::<rstat>(*v)), 0);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(64),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_call_sequences(ops in prop::collection::vec(op(), 1..60)) {
        run(ops)?;
    }
}
