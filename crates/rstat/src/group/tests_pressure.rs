//! Unit tests of `pressure`: the union of stalls, counted up the tree, and
//! the file format.

use super::{Group, PressureKind, PressureTotals};
use crate::engine::Rstat;

const MS: u64 = 1_000_000;

#[test]
fn totals_are_the_union_of_stalls_counted_up_the_tree() {
    let rs = Rstat::builder().periodic_flush(None).build().unwrap();
    let t = rs.root().create_child("t").unwrap();
    let a = t.create_child("a").unwrap();
    let b = t.create_child("b").unwrap();
    assert!(!t.has_pressure());
    assert_eq!(
        t.pressure(PressureKind::Memory),
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    );
    // Two children stalled over overlapping intervals: each its own,
    // their parent and the root the union.
    a.record_stall(PressureKind::Memory, 1000 * MS, 1100 * MS, false);
    b.record_stall(PressureKind::Memory, 1050 * MS, 1150 * MS, false);
    b.record_stall(PressureKind::Memory, 1060 * MS, 1070 * MS, false); // inside: nothing new
    let tot = |g: &Group, k| g.pressure_totals(k);
    assert_eq!(tot(&a, PressureKind::Memory).some_usec, 100_000);
    assert_eq!(tot(&b, PressureKind::Memory).some_usec, 100_000);
    assert_eq!(tot(&t, PressureKind::Memory).some_usec, 150_000);
    assert_eq!(tot(rs.root(), PressureKind::Memory).some_usec, 150_000);
    assert_eq!(tot(&t, PressureKind::Memory).full_usec, 0);
    assert_eq!(tot(&t, PressureKind::Cpu), PressureTotals::default());
    a.record_stall(PressureKind::Cpu, 2000 * MS, 2010 * MS, true);
    assert_eq!(
        tot(&t, PressureKind::Cpu),
        PressureTotals {
            some_usec: 10_000,
            full_usec: 10_000
        }
    );
    let text = t.pressure(PressureKind::Memory);
    assert!(
        text.starts_with("some avg10=") && text.contains(" total=150000\nfull avg10="),
        "{text}"
    );
}
