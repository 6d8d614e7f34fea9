//! What `rstat top` shows: rows of the group tree from two snapshots
//! (rates need two), sorted within each parent, with collapsed subtrees
//! hidden. Shared by the full-screen and the plain views.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use rstat::report::{GroupSnapshot, Snapshot};

/// A sortable column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    /// Tree order, siblings by name.
    Path,
    Cpu,
    Mem,
    Max,
    Events,
    /// A controller item's rate (index into [`View::extra`]).
    Extra(usize),
}

impl SortKey {
    /// From a `--sort` value.
    pub fn parse(s: &str) -> Result<SortKey, String> {
        Ok(match s {
            "path" | "name" => SortKey::Path,
            "cpu" => SortKey::Cpu,
            "mem" | "memory" => SortKey::Mem,
            "max" => SortKey::Max,
            "events" => SortKey::Events,
            _ => {
                return Err(format!(
                    "unknown sort column {s:?}; use path, cpu, mem, max or events"
                ))
            }
        })
    }
}

/// One group's line.
#[derive(Clone, Debug)]
pub struct Row {
    pub path: String,
    pub name: String,
    pub depth: usize,
    pub has_children: bool,
    /// Hierarchical CPU use, % of one CPU, over the sampling interval.
    /// `None` without a previous value or across a reset (see [`build`]).
    pub cpu: Option<f64>,
    pub mem: Option<u64>,
    /// `None`: no memory controller; `Some(None)`: unlimited.
    pub max: Option<Option<u64>>,
    /// `memory.events`, all kinds, hierarchical.
    pub events: Option<u64>,
    /// Per [`View::extra`] column: change per second, never negative;
    /// `None` without a previous value or across a reset (see [`build`]).
    pub extra: Vec<Option<f64>>,
}

/// Rows in tree order (siblings by name) and the extra columns.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// `controller.item` of every controller besides `cpu` and `memory`.
    pub extra: Vec<String>,
    pub rows: Vec<Row>,
}

fn item(snap: &Snapshot, ctl: &str, item: &str) -> Option<(usize, usize)> {
    let c = snap.controller_index(ctl)?;
    let i = snap.controllers[c].items.iter().position(|n| n == item)?;
    Some((c, i))
}

fn value(g: &GroupSnapshot, at: Option<(usize, usize)>) -> Option<i64> {
    let (c, i) = at?;
    g.stats.get(c)?.hierarchical.get(i).copied()
}

/// Check that a snapshot (from the network: anything may be in it) is one
/// `build` can show: groups in pre-order (each at most one level below the
/// one before it, none above the first), and per group one stats entry per
/// controller with one value per item. The error says what was wrong.
pub fn validate(snap: &Snapshot) -> Result<(), String> {
    let bad = |what: String| {
        Err(format!(
            "the exporter sent an inconsistent snapshot: {what}"
        ))
    };
    let Some(first) = snap.groups.first() else {
        return Ok(());
    };
    let mut prev = first.depth;
    for g in &snap.groups {
        if g.depth < first.depth || g.depth > prev.saturating_add(1) {
            return bad(format!(
                "group {:?} at depth {} follows one at depth {prev} (not a tree in pre-order)",
                g.path, g.depth
            ));
        }
        prev = g.depth;
        if g.stats.len() != snap.controllers.len() {
            return bad(format!(
                "group {:?} has {} controller entries, the snapshot names {} controllers",
                g.path,
                g.stats.len(),
                snap.controllers.len()
            ));
        }
        for (s, c) in g.stats.iter().zip(&snap.controllers) {
            let n = c.items.len();
            if s.local.len() != n || s.hierarchical.len() != n {
                return bad(format!(
                    "group {:?}: controller {:?} has {n} items but {} local and {} hierarchical values",
                    g.path,
                    c.name,
                    s.local.len(),
                    s.hierarchical.len()
                ));
            }
        }
    }
    Ok(())
}

/// The change per second of a counter that was `before` and is `now`,
/// `secs` later. `None` when a value is missing, no time passed, or the
/// value went down: counters only grow, so a smaller value is a new
/// series (the exporter restarted, or the group was removed and created
/// again under its path), and a rate across it would mean nothing. Like
/// Prometheus's `rate()`, a decrease is read as a reset; unlike it, the
/// frame shows no rate rather than one estimated from the new value.
fn rate(now: Option<i64>, before: Option<i64>, secs: f64) -> Option<f64> {
    match (now, before) {
        (Some(a), Some(b)) if secs > 0.0 && a >= b => Some((a as f64 - b as f64) / secs),
        _ => None,
    }
}

/// Whether `cur` comes from another process than `prev` (the exporter
/// restarted between the two fetches): the first group (the tree's root,
/// which is never removed) is the same path in both and its hierarchical
/// CPU time, which only grows within one process, went down. Then the
/// counters of the new process that have already passed their old values
/// would give rates that look right and are not, so none is computed.
fn restarted(prev: &Snapshot, cur: &Snapshot) -> bool {
    let (Some(p), Some(c)) = (prev.groups.first(), cur.groups.first()) else {
        return false;
    };
    let before = value(p, item(prev, "cpu", "usage_usec"));
    let now = value(c, item(cur, "cpu", "usage_usec"));
    p.path == c.path && matches!((before, now), (Some(b), Some(n)) if n < b)
}

/// Where an extra column's values come from.
enum Extra {
    /// A controller's item: (controller, item, controller index, item index).
    Item(String, String, usize, usize),
    /// A pressure total's `some` (memory if true, else cpu).
    Pressure(bool),
}

/// Build the rows from the previous and the current snapshot, `dt` apart.
/// Errors: `cur` fails [`validate`] (`prev` was validated as a `cur`).
///
/// Rates are never negative and never span a reset: a value below its
/// previous one has no rate in this frame (shown as `-`), and when the
/// exporter restarted (its root's CPU time went down) no value has one.
pub fn build(prev: Option<&Snapshot>, cur: &Snapshot, dt: Duration) -> Result<View, String> {
    validate(cur)?;
    let base = cur.groups.first().map_or(0, |g| g.depth);
    let usage = item(cur, "cpu", "usage_usec");
    let mut extra_at = Vec::new();
    let mut extra = Vec::new();
    for (c, ctl) in cur.controllers.iter().enumerate() {
        if ctl.name == "cpu" || ctl.name == "memory" {
            continue;
        }
        for (i, it) in ctl.items.iter().enumerate() {
            extra.push(format!("{}.{it}", ctl.name));
            extra_at.push(Extra::Item(ctl.name.clone(), it.clone(), c, i));
        }
    }
    // Pressure (µs stalled per second, "some"), once any group stalled.
    if cur
        .groups
        .iter()
        .any(|g| g.cpu_pressure.is_some() || g.memory_pressure.is_some())
    {
        extra.push("cpu.psi".to_owned());
        extra_at.push(Extra::Pressure(false));
        extra.push("mem.psi".to_owned());
        extra_at.push(Extra::Pressure(true));
    }
    // Across a restart of the exporter's process no rate is computed, not
    // even from the counters that already passed their old values.
    let prev = prev.filter(|p| !restarted(p, cur));
    let prev_by_path: HashMap<&str, &GroupSnapshot> = prev
        .map(|p| p.groups.iter().map(|g| (g.path.as_str(), g)).collect())
        .unwrap_or_default();
    let secs = dt.as_secs_f64();
    let rate = |now, before| rate(now, before, secs);
    let n = cur.groups.len();
    let rows = cur
        .groups
        .iter()
        .enumerate()
        .map(|(k, g)| {
            let p = prev_by_path.get(g.path.as_str()).copied();
            let cpu = rate(
                value(g, usage),
                p.and_then(|p| value(p, prev.and_then(|s| item(s, "cpu", "usage_usec")))),
            )
            .map(|usec_per_s| usec_per_s / 1e4);
            let extra = extra_at
                .iter()
                .map(|x| match x {
                    Extra::Item(cn, iname, c, i) => {
                        let before =
                            p.and_then(|p| value(p, prev.and_then(|s| item(s, cn, iname))));
                        rate(value(g, Some((*c, *i))), before)
                    }
                    Extra::Pressure(mem) => {
                        let some = |g: &GroupSnapshot| {
                            let t = if *mem {
                                g.memory_pressure
                            } else {
                                g.cpu_pressure
                            };
                            // A group that never stalled: 0 so far.
                            Some(t.map_or(0, |t| i64::try_from(t.some_usec).unwrap_or(i64::MAX)))
                        };
                        rate(some(g), p.and_then(some))
                    }
                })
                .collect();
            // Relative to the first group: validated to be at most the
            // row's index (the indentation shown is capped: `indent`).
            let depth = g.depth - base;
            let name = if depth == 0 {
                "/".to_owned()
            } else {
                g.path.rsplit('/').next().unwrap_or("").to_owned()
            };
            Row {
                path: g.path.clone(),
                name,
                depth,
                has_children: k + 1 < n && cur.groups[k + 1].depth > g.depth,
                cpu,
                mem: g.memory.as_ref().map(|m| m.current),
                max: g.memory.as_ref().map(|m| m.max),
                events: g.memory.as_ref().map(|m| {
                    let e = m.events;
                    [e.high, e.max, e.oom, e.oom_kill]
                        .iter()
                        .fold(e.low, |a, &b| a.saturating_add(b))
                }),
                extra,
            }
        })
        .collect();
    Ok(View { extra, rows })
}

impl View {
    /// `k` if this view has its column, else [`SortKey::Path`] (a
    /// controller column can disappear between two refreshes).
    pub fn sort_key(&self, k: SortKey) -> SortKey {
        match k {
            SortKey::Extra(i) if i >= self.extra.len() => SortKey::Path,
            k => k,
        }
    }
}

fn key(r: &Row, k: SortKey) -> f64 {
    let f = |v: Option<f64>| v.unwrap_or(-1.0);
    match k {
        SortKey::Path => 0.0,
        SortKey::Cpu => f(r.cpu),
        SortKey::Mem => f(r.mem.map(|v| v as f64)),
        SortKey::Max => match r.max {
            Some(None) => f64::INFINITY,
            Some(Some(v)) => v as f64,
            None => -1.0,
        },
        SortKey::Events => f(r.events.map(|v| v as f64)),
        SortKey::Extra(i) => f(r.extra.get(i).copied().flatten()),
    }
}

/// The rows to show: the tree with each parent's children sorted by `by`
/// (largest first; by name for [`SortKey::Path`]), and the descendants of
/// `collapsed` paths left out.
pub fn visible<'v>(view: &'v View, by: SortKey, collapsed: &HashSet<String>) -> Vec<&'v Row> {
    // Children of each row, from the pre-order depths.
    let rows = &view.rows;
    let mut kids: Vec<Vec<usize>> = vec![Vec::new(); rows.len()];
    let mut roots = Vec::new();
    let mut stack: Vec<usize> = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        while stack.last().is_some_and(|&p| rows[p].depth >= r.depth) {
            stack.pop();
        }
        match stack.last() {
            Some(&p) => kids[p].push(i),
            None => roots.push(i),
        }
        stack.push(i);
    }
    let order = |v: &mut Vec<usize>| {
        if by != SortKey::Path {
            v.sort_by(|&a, &b| {
                key(&rows[b], by)
                    .total_cmp(&key(&rows[a], by))
                    .then_with(|| rows[a].name.cmp(&rows[b].name))
            });
        }
    };
    order(&mut roots);
    let mut out = Vec::with_capacity(rows.len());
    let mut todo: Vec<usize> = roots.into_iter().rev().collect();
    while let Some(i) = todo.pop() {
        out.push(&rows[i]);
        if collapsed.contains(&rows[i].path) {
            continue;
        }
        let mut k = kids[i].clone();
        order(&mut k);
        todo.extend(k.into_iter().rev());
    }
    out
}

/// `1.5G`-style binary sizes.
pub fn bytes(v: u64) -> String {
    const UNITS: [&str; 5] = ["", "K", "M", "G", "T"];
    let mut x = v as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v}")
    } else {
        format!("{x:.1}{}", UNITS[u])
    }
}

/// Column headers (without sort markers).
pub fn headers(view: &View) -> Vec<String> {
    let mut h: Vec<String> = ["GROUP", "CPU%", "MEM", "MEM MAX", "EVENTS"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    h.extend(view.extra.iter().map(|e| format!("{e}/s")));
    h
}

/// The sort key of header column `i`.
pub fn column_key(i: usize) -> SortKey {
    match i {
        0 => SortKey::Path,
        1 => SortKey::Cpu,
        2 => SortKey::Mem,
        3 => SortKey::Max,
        4 => SortKey::Events,
        n => SortKey::Extra(n - 5),
    }
}

/// The header column of a sort key.
pub fn key_column(k: SortKey) -> usize {
    match k {
        SortKey::Path => 0,
        SortKey::Cpu => 1,
        SortKey::Mem => 2,
        SortKey::Max => 3,
        SortKey::Events => 4,
        SortKey::Extra(i) => 5 + i,
    }
}

/// The levels of a tree row indented by two spaces each; deeper rows are
/// indented that far and show their depth (`[depth 1234] `), so a deep
/// chain of groups costs each row a bounded number of bytes.
pub const MAX_INDENT: usize = 32;

fn indent(depth: usize) -> String {
    let mut s = "  ".repeat(depth.min(MAX_INDENT));
    if depth > MAX_INDENT {
        s.push_str(&format!("[depth {depth}] "));
    }
    s
}

/// A row's cells; `marker` is shown before the name (tree state).
pub fn cells(r: &Row, marker: &str) -> Vec<String> {
    let dash = || "-".to_owned();
    let mut c = vec![
        format!("{}{marker}{}", indent(r.depth), r.name),
        r.cpu.map_or_else(dash, |v| format!("{v:.1}")),
        r.mem.map_or_else(dash, bytes),
        match r.max {
            None => dash(),
            Some(None) => "max".to_owned(),
            Some(Some(v)) => bytes(v),
        },
        r.events.map_or_else(dash, |v| v.to_string()),
    ];
    c.extend(
        r.extra
            .iter()
            .map(|v| v.map_or_else(dash, |v| format!("{v:.0}"))),
    );
    c
}

/// The plain-text table (`--once`, or not on a terminal).
pub fn plain(view: &View, by: SortKey) -> String {
    let by = view.sort_key(by);
    let rows = visible(view, by, &HashSet::new());
    let mut table: Vec<Vec<String>> = vec![headers(view)];
    let sorted = key_column(by);
    table[0][sorted].push('*');
    table.extend(rows.iter().map(|r| cells(r, "")));
    let ncol = table[0].len();
    let widths: Vec<usize> = (0..ncol)
        .map(|c| {
            table
                .iter()
                .map(|r| r[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in &table {
        for (c, cell) in r.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            if c == 0 {
                out.push_str(cell);
                out.push_str(&" ".repeat(pad));
            } else {
                out.push_str("  ");
                out.push_str(&" ".repeat(pad));
                out.push_str(cell);
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstat::memory::Memory;
    use rstat::report::Reporter;
    use rstat::Rstat;

    fn snap(rs: &Rstat) -> Snapshot {
        Reporter::new(rs).snapshot_all().unwrap()
    }

    /// A deep row's name cell stays short: indentation stops at
    /// [`MAX_INDENT`] levels and the rest is shown as a number, so a
    /// chain of N groups renders in O(N), not O(N^2), bytes.
    #[test]
    fn deep_rows_are_indented_a_bounded_amount() {
        let row = |depth| Row {
            path: String::new(),
            name: "leaf".into(),
            depth,
            has_children: false,
            cpu: None,
            mem: None,
            max: None,
            events: None,
            extra: Vec::new(),
        };
        assert_eq!(cells(&row(2), "")[0], "    leaf");
        let deep = cells(&row(100_000), "")[0].clone();
        assert!(deep.len() < 2 * MAX_INDENT + 32, "{} bytes", deep.len());
        assert!(deep.contains("100000") && deep.ends_with("leaf"), "{deep}");
    }

    #[test]
    fn rates_sorting_and_collapsing() {
        let rs = Rstat::new();
        let mem = Memory::register(&rs).unwrap();
        let io = rs.register_counters("io", &["ops"]).unwrap();
        let a = rs.root().create_child("a").unwrap();
        let b = rs.root().create_child("b").unwrap();
        let a1 = a.create_child("a1").unwrap();
        let before = snap(&rs);
        rs.account_cputime(&a1, 100_000, 0).unwrap(); // 0.1 s
        rs.account_cputime(&b, 300_000, 0).unwrap();
        io.add(&a1, 0, 50).unwrap();
        let _c = mem.try_charge(&a, 1 << 20).unwrap();
        let v = build(Some(&before), &snap(&rs), Duration::from_secs(1)).unwrap();
        assert_eq!(v.extra, ["io.ops"]);
        let names = |rows: Vec<&Row>| rows.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
        let none = HashSet::new();
        assert_eq!(
            names(visible(&v, SortKey::Path, &none)),
            ["/", "a", "a1", "b"]
        );
        assert_eq!(
            names(visible(&v, SortKey::Cpu, &none)),
            ["/", "b", "a", "a1"]
        );
        assert_eq!(
            names(visible(&v, SortKey::Mem, &none)),
            ["/", "a", "a1", "b"]
        );
        let rows = visible(&v, SortKey::Path, &none);
        assert!((rows[1].cpu.unwrap() - 10.0).abs() < 1e-9, "{:?}", rows[1]);
        // The root is the process: the time charged by hand below it, plus
        // the test process's own CPU time between the two snapshots.
        assert!(rows[0].cpu.unwrap() >= 40.0 - 1e-9, "{:?}", rows[0]);
        assert_eq!(rows[2].extra, [Some(50.0)]);
        assert!(rows[1].has_children && !rows[2].has_children);
        let collapsed: HashSet<String> = ["/a".to_string()].into();
        assert_eq!(
            names(visible(&v, SortKey::Path, &collapsed)),
            ["/", "a", "b"]
        );
        let text = plain(&v, SortKey::Cpu);
        assert!(text.starts_with("GROUP"), "{text}");
        assert!(text.lines().next().unwrap().contains("CPU%*"), "{text}");
        assert!(text.contains("io.ops/s"), "{text}");
        // Without a previous sample there are no rates.
        let v = build(None, &snap(&rs), Duration::from_secs(1)).unwrap();
        assert!(v.rows.iter().all(|r| r.cpu.is_none()));
    }

    /// An exporter that restarted between two fetches: every counter of
    /// the new process starts again from zero. No rate may be computed
    /// across the restart: not from values that went down (that would be
    /// negative), nor from values of the new process that already passed
    /// the old ones (that would be a wrong positive rate).
    #[test]
    fn no_rate_is_computed_across_an_exporter_restart() {
        let process = |cpu_usec: u64, ops: i64, more_ops: i64| {
            let rs = Rstat::new();
            let io = rs.register_counters("io", &["ops", "bytes"]).unwrap();
            let a = rs.root().create_child("a").unwrap();
            let b = rs.root().create_child("b").unwrap();
            rs.account_cputime(&a, cpu_usec, 0).unwrap();
            io.add(&a, 0, ops).unwrap();
            io.add(&b, 1, more_ops).unwrap();
            snap(&rs)
        };
        let old = process(5_000_000, 40_000, 100);
        // The new process: CPU time and `io.ops` are below the old values,
        // `io.bytes` of /b is already above them.
        let new = process(1_000_000, 9_000, 1_000);
        let v = build(Some(&old), &new, Duration::from_secs(1)).unwrap();
        for r in &v.rows {
            assert_eq!(r.cpu, None, "CPU% across a restart: {r:?}");
            assert!(
                r.extra.iter().all(Option::is_none),
                "a rate across a restart: {r:?}"
            );
        }
        for r in &v.rows {
            for c in cells(r, "").iter().skip(1) {
                assert!(!c.starts_with("-") || c == "-", "a negative cell: {r:?}");
            }
        }

        // One group removed and created again under the same path: only
        // its counters restarted (a removed group's counts stay in its
        // parent's hierarchical totals), so only its row has no rates.
        let rs = Rstat::new();
        let io = rs.register_counters("io", &["ops"]).unwrap();
        let a = rs.root().create_child("a").unwrap();
        let b = rs.root().create_child("b").unwrap();
        rs.account_cputime(&a, 2_000_000, 0).unwrap();
        io.add(&a, 0, 500).unwrap();
        let before = snap(&rs);
        a.remove().unwrap();
        let a = rs.root().create_child("a").unwrap();
        rs.account_cputime(&a, 100_000, 0).unwrap();
        rs.account_cputime(&b, 300_000, 0).unwrap();
        io.add(&a, 0, 7).unwrap();
        io.add(&b, 0, 30).unwrap();
        let v = build(Some(&before), &snap(&rs), Duration::from_secs(1)).unwrap();
        let row = |p: &str| v.rows.iter().find(|r| r.path == p).unwrap();
        assert_eq!(row("/a").cpu, None, "{:?}", row("/a"));
        assert_eq!(row("/a").extra, [None]);
        assert!(
            (row("/b").cpu.unwrap() - 30.0).abs() < 1e-9,
            "{:?}",
            row("/b")
        );
        assert_eq!(row("/b").extra, [Some(30.0)]);
        // The time charged by hand, plus the process's own between the
        // snapshots (the root is the process).
        assert!(row("/").cpu.unwrap() >= 40.0 - 1e-9, "{:?}", row("/"));
        assert_eq!(row("/").extra, [Some(37.0)]);
    }

    /// A snapshot as the exporter sends it, edited as a hostile one might.
    fn hostile(edit: impl FnOnce(&mut serde_json::Value)) -> Snapshot {
        let rs = Rstat::new();
        let io = rs.register_counters("io", &["ops"]).unwrap();
        let a = rs.root().create_child("a").unwrap();
        io.add(&a, 0, 1).unwrap();
        let mut v = serde_json::to_value(snap(&rs)).unwrap();
        edit(&mut v);
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn hostile_snapshots_are_refused_with_a_reason_not_a_crash() {
        let deep = hostile(|v| v["groups"][1]["depth"] = serde_json::json!(u64::MAX));
        let e = build(None, &deep, Duration::from_secs(1)).unwrap_err();
        assert!(e.contains("depth") && e.contains("pre-order"), "{e}");
        let short = hostile(|v| v["groups"][1]["stats"] = serde_json::json!([]));
        let e = build(None, &short, Duration::from_secs(1)).unwrap_err();
        assert!(e.contains("controller entries"), "{e}");
        let items = hostile(|v| {
            let last = v["controllers"].as_array().unwrap().len() - 1;
            v["groups"][1]["stats"][last]["hierarchical"] = serde_json::json!([]);
        });
        let e = build(None, &items, Duration::from_secs(1)).unwrap_err();
        assert!(e.contains("items"), "{e}");
        // Extreme values are shown, not overflowed.
        // (`small` first: the roots' CPU time is the process's, which only
        // grows, so the later snapshot must be the current one.)
        let small = hostile(|v| {
            let last = v["controllers"].as_array().unwrap().len() - 1;
            v["groups"][1]["stats"][last]["hierarchical"] = serde_json::json!([i64::MIN]);
        });
        let big = hostile(|v| {
            let last = v["controllers"].as_array().unwrap().len() - 1;
            v["groups"][1]["stats"][last]["hierarchical"] = serde_json::json!([i64::MAX]);
        });
        let v = build(Some(&small), &big, Duration::from_secs(1)).unwrap();
        assert!(v.rows[1].extra[0].unwrap() > 1e18);
        assert!(plain(&v, SortKey::Extra(0)).contains("io.ops/s*"));
    }

    #[test]
    fn a_sort_column_that_disappears_falls_back_to_the_tree_order() {
        let v = build(None, &hostile(|_| {}), Duration::from_secs(1)).unwrap();
        assert_eq!(v.sort_key(SortKey::Extra(0)), SortKey::Extra(0));
        let gone = hostile(|v| {
            v["controllers"].as_array_mut().unwrap().pop();
            for g in v["groups"].as_array_mut().unwrap() {
                g["stats"].as_array_mut().unwrap().pop();
            }
        });
        let v = build(None, &gone, Duration::from_secs(1)).unwrap();
        assert!(v.extra.is_empty());
        assert_eq!(v.sort_key(SortKey::Extra(0)), SortKey::Path);
        assert!(plain(&v, SortKey::Extra(0)).starts_with("GROUP*"));
    }

    #[test]
    fn sizes() {
        assert_eq!(bytes(512), "512");
        assert_eq!(bytes(1536), "1.5K");
        assert_eq!(bytes(3 << 30), "3.0G");
    }
}
