//! One form for every group path a user sees: absolute, `/a/b` below the
//! root and `/` for the root itself, whether it comes from
//! [`Group::path`], a flush ([`FlushCtx::group_path`]), an engine error, a
//! memory error or a report snapshot.
//!
//! Small on purpose (a few groups, no threads).

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use common::engine_with;
use rstat::memory::{Memory, MemoryError};
use rstat::report::Reporter;
use rstat::testing::ControllerHandleExt;
use rstat::{Controller, Error, FlushCtx, FlushPolicy, Group};

/// Records [`FlushCtx::group_path`] per group id.
struct Paths {
    names: Vec<String>,
    seen: Arc<Mutex<BTreeMap<u64, String>>>,
}

impl Controller for Paths {
    fn name(&self) -> &str {
        "paths"
    }
    fn stat_names(&self) -> &[String] {
        &self.names
    }
    fn flush(&self, ctx: &mut FlushCtx<'_>) {
        let (id, path) = (ctx.group_id(), ctx.group_path());
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.insert(id, path);
        drop(seen);
        ctx.fold();
    }
}

/// The path an engine error names.
fn engine_error_path(e: Error) -> String {
    match e {
        Error::HasChildren { path, .. } | Error::Removed { path } => path,
        Error::NameExists { parent, .. } => parent,
        other => panic!("not an error about one group: {other:?}"),
    }
}

#[test]
fn every_path_a_user_sees_is_absolute_with_the_root_as_slash() {
    let rs = engine_with(1, FlushPolicy::Always);
    let mem = Memory::register(&rs).unwrap();
    let seen = Arc::default();
    let c = rs
        .register(Paths {
            names: vec!["n".into()],
            seen: Arc::clone(&seen),
        })
        .unwrap();
    let root = rs.root().clone();
    let a = root.create_child("a").unwrap();
    let b = a.create_child("b").unwrap();
    b.create_child("c").unwrap();

    // Group::path.
    assert_eq!(root.path(), "/");
    assert_eq!(a.path(), "/a");
    assert_eq!(b.path(), "/a/b");

    // What a flush is told.
    c.add_on_cpu(&b, 0, 0, 1).unwrap();
    c.add_on_cpu(&root, 0, 0, 1).unwrap();
    assert_eq!(c.read(&root).unwrap().hierarchical(), &[2]);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.get(&b.id()).map(String::as_str), Some("/a/b"));
    assert_eq!(seen.get(&root.id()).map(String::as_str), Some("/"));

    // An engine error, and its message.
    let e = b.remove().unwrap_err();
    assert!(e.to_string().contains("\"/a/b\""), "{e}");
    assert_eq!(engine_error_path(e), b.path());
    let e = root.create_child("a").unwrap_err();
    assert!(e.to_string().contains("\"/\""), "{e}");
    assert_eq!(engine_error_path(e), root.path());

    // A memory error, and its message.
    for (g, want) in [(&root, "/"), (&b, "/a/b")] {
        match mem.uncharge_raw(g, 1) {
            Err(e @ MemoryError::Underflow { .. }) => {
                assert!(e.to_string().contains(&format!("{want:?}")), "{e}");
                let MemoryError::Underflow { path, .. } = e else {
                    unreachable!()
                };
                assert_eq!(path, want);
                assert_eq!(path, g.path());
            }
            other => panic!("{other:?}"),
        }
    }

    // A snapshot.
    let snap = Reporter::new(&rs).snapshot(&root).unwrap();
    let paths: Vec<&str> = snap.groups.iter().map(|g| g.path.as_str()).collect();
    assert_eq!(paths, ["/", "/a", "/a/b", "/a/b/c"]);
    let path_of = |g: &Group| {
        snap.groups
            .iter()
            .find(|s| s.id == g.id())
            .map(|s| s.path.clone())
    };
    assert_eq!(path_of(&root), Some(root.path()));
    assert_eq!(path_of(&b), Some(b.path()));

    // And what `path` gives, `lookup` takes back, from any group.
    for g in [&root, &a, &b] {
        assert_eq!(rs.lookup(&g.path()).unwrap(), *g);
        assert_eq!(b.lookup(&g.path()).unwrap(), *g);
    }

    // A removed group keeps the path it had.
    let leaf = rs.lookup("/a/b/c").unwrap();
    leaf.remove().unwrap();
    assert_eq!(leaf.path(), "/a/b/c");
    let e = leaf.create_child("d").unwrap_err();
    assert_eq!(engine_error_path(e), "/a/b/c");
}
