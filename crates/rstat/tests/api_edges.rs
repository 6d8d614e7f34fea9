//! The edges of the public API: checked stat items, overflow, path errors,
//! group identity in flushes, and controllers whose flush panics.
//!
//! Small on purpose (a few groups, a few updates): CI runs this file under
//! Miri.

use rstat::{Error, FlushPolicy, Rstat};

/// An engine whose reads are all exact, with no background flusher.
fn engine(nr_cpus: usize) -> Rstat {
    Rstat::builder()
        .nr_cpus(nr_cpus)
        .flush_policy(FlushPolicy::Always)
        .periodic_flush(None)
        .build()
        .unwrap()
}

#[test]
fn stat_items_are_checked_once_and_then_cannot_fail() {
    let rs = engine(2);
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
