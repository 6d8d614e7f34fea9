//! Unit tests of the css layout.

use super::css::Css;
use core::mem::{align_of, offset_of, size_of};

/// What every update reads is on the css's first line; what any CPU's
/// crossing writes is on another (see `Css`).
#[test]
fn css_keeps_the_updates_line_apart_from_the_counters_folds_write() {
    assert_eq!(align_of::<Css>(), 64);
    assert_eq!(size_of::<Css>(), 192, "three lines");
    for (field, at) in [
        ("stats", offset_of!(Css, stats)),
        ("links", offset_of!(Css, links)),
        ("backlog", offset_of!(Css, backlog)),
        ("unit_shifts", offset_of!(Css, unit_shifts)),
        ("section_limit", offset_of!(Css, section_limit)),
        ("rseq_off", offset_of!(Css, rseq_off)),
    ] {
        assert!(at < 64, "{field} at {at}: off the updates' line");
    }
    let at = offset_of!(Css, totals);
    assert!(at >= 64, "totals at {at}: on the updates' line");
}
