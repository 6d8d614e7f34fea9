//! However a field is recorded (`"lit"`, `%display`, `?debug`, a number,
//! a value recorded later), the same text selects the same group.

use rstat::{current_group, Group, Rstat};
use rstat_tracing::GroupLayer;
use tracing::info_span;
use tracing_subscriber::prelude::*;

fn engine() -> Rstat {
    Rstat::builder().periodic_flush(None).build().unwrap()
}

fn dispatch(layer: GroupLayer) -> tracing::Dispatch {
    tracing::Dispatch::new(tracing_subscriber::registry().with(layer))
}

fn path_in(span: &tracing::Span) -> Option<String> {
    span.in_scope(|| current_group().map(|g| g.path()))
}

#[test]
fn str_display_and_debug_values_select_the_same_group() {
    let rs = engine();
    let tenants = rs.root().create_child("tenants").unwrap();
    let d = dispatch(GroupLayer::children_of("tenant", tenants.clone()));
    let name = String::from("acme");
    tracing::dispatcher::with_default(&d, || {
        let plain = info_span!("req", tenant = "acme");
        let display = info_span!("req", tenant = %name);
        let debug = info_span!("req", tenant = ?name);
        let debug_str = info_span!("req", tenant = ?"acme");
        for s in [&plain, &display, &debug, &debug_str] {
            assert_eq!(path_in(s).as_deref(), Some("/tenants/acme"));
        }
        let later = info_span!("req", tenant = tracing::field::Empty);
        later.record("tenant", tracing::field::debug(&name));
        assert_eq!(path_in(&later).as_deref(), Some("/tenants/acme"));
    });
    assert_eq!(children(&tenants), ["acme"]);
}

#[test]
fn debug_escapes_are_undone() {
    let rs = engine();
    let tenants = rs.root().create_child("tenants").unwrap();
    let d = dispatch(GroupLayer::children_of("tenant", tenants.clone()));
    // A quote, a backslash, a tab, a combining accent and a zero-width
    // space: each is escaped by `str`'s Debug.
    let name = String::from("o\"brien\\co\tx\u{301}\u{200b}");
    tracing::dispatcher::with_default(&d, || {
        let debug = info_span!("req", tenant = ?name);
        let display = info_span!("req", tenant = %name);
        let plain = info_span!("req", tenant = name.as_str());
        for s in [&debug, &display, &plain] {
            assert_eq!(
                path_in(s).as_deref(),
                Some(format!("/tenants/{name}").as_str())
            );
        }
    });
    assert_eq!(children(&tenants), [name.as_str()]);
}

#[derive(Debug)]
struct TenantId(#[allow(dead_code)] u32);

/// Text that only looks quoted at its ends.
struct TwoQuoted;

impl std::fmt::Debug for TwoQuoted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"a\" \"b\"")
    }
}

#[test]
fn other_debug_values_are_taken_as_written() {
    let rs = engine();
    let tenants = rs.root().create_child("tenants").unwrap();
    let d = dispatch(GroupLayer::children_of("tenant", tenants.clone()));
    tracing::dispatcher::with_default(&d, || {
        let id = info_span!("req", tenant = ?TenantId(7));
        assert_eq!(path_in(&id).as_deref(), Some("/tenants/TenantId(7)"));
        let n = info_span!("req", tenant = 42u64);
        assert_eq!(path_in(&n).as_deref(), Some("/tenants/42"));
        let neg = info_span!("req", tenant = -3i64);
        assert_eq!(path_in(&neg).as_deref(), Some("/tenants/-3"));
        let opt = info_span!("req", tenant = ?Some("x"));
        assert_eq!(path_in(&opt).as_deref(), Some("/tenants/Some(\"x\")"));
        let two = info_span!("req", tenant = ?TwoQuoted);
        assert_eq!(path_in(&two).as_deref(), Some("/tenants/\"a\" \"b\""));
    });
}

/// A `Display` that fails after writing part of its text (a bug in the
/// value's type, but the value is the user's).
struct FailingDisplay;

impl std::fmt::Display for FailingDisplay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("acme")?;
        Err(std::fmt::Error)
    }
}

#[test]
fn a_value_whose_formatting_fails_is_read_as_far_as_it_was_written() {
    let rs = engine();
    let tenants = rs.root().create_child("tenants").unwrap();
    let d = dispatch(GroupLayer::children_of("tenant", tenants.clone()));
    tracing::dispatcher::with_default(&d, || {
        // No panic in the subscriber: the text written is the value.
        let s = info_span!("req", tenant = %FailingDisplay);
        assert_eq!(path_in(&s).as_deref(), Some("/tenants/acme"));
    });
}

#[test]
fn long_debug_values_are_read_whole() {
    let rs = engine();
    let tenants = rs.root().create_child("tenants").unwrap();
    let d = dispatch(GroupLayer::children_of("tenant", tenants.clone()));
    // Longer than what is formatted on the stack, with escapes.
    let name: String = "tenant-\"x\"-".repeat(20);
    assert!(name.len() > 200 && name.len() <= rstat::group::MAX_NAME_LEN);
    tracing::dispatcher::with_default(&d, || {
        for s in [
            info_span!("req", tenant = ?name),
            info_span!("req", tenant = %name),
        ] {
            assert_eq!(
                path_in(&s).as_deref(),
                Some(format!("/tenants/{name}").as_str())
            );
        }
    });
    assert_eq!(children(&tenants), [name.as_str()]);
}

fn children(g: &Group) -> Vec<String> {
    let mut v: Vec<String> = g.children().iter().map(|c| c.name().to_owned()).collect();
    v.sort();
    v
}
