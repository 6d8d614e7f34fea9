//! `LineBox`: aligned, intact, dropped once, round-trips through raw.

use std::cell::Cell;
use std::rc::Rc;

use super::cache_padded::{CachePadded, LineBox, CACHE_LINE};

#[repr(align(64))]
struct Line64([u8; 100]);

struct Counted(Rc<Cell<u32>>, u64);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

#[test]
fn values_start_their_alignment_and_keep_their_contents() {
    let boxes: Vec<LineBox<Line64>> = (0..64u8).map(|i| LineBox::new(Line64([i; 100]))).collect();
    for (i, b) in boxes.iter().enumerate() {
        let p = core::ptr::from_ref::<Line64>(b) as usize;
        assert_eq!(p % 64, 0, "box {i} at {p:#x}");
        assert!(b.0.iter().all(|&x| usize::from(x) == i));
    }
    let padded: Vec<LineBox<CachePadded<u64>>> = (0..64u64)
        .map(|i| LineBox::new(CachePadded::new(i)))
        .collect();
    for (i, b) in padded.iter().enumerate() {
        let p = core::ptr::from_ref::<CachePadded<u64>>(b) as usize;
        assert_eq!(p % CACHE_LINE, 0, "padded box {i} at {p:#x}");
        assert_eq!(***b, i as u64);
    }
}

#[test]
fn a_value_is_dropped_once_also_after_a_raw_round_trip() {
    let drops = Rc::new(Cell::new(0));
    drop(LineBox::new(Counted(Rc::clone(&drops), 1)));
    assert_eq!(drops.get(), 1);
    let raw = LineBox::into_raw(LineBox::new(Counted(Rc::clone(&drops), 7)));
    assert_eq!(drops.get(), 1, "into_raw does not drop");
    // SAFETY: from `into_raw` just above, taken back once.
    let back = unsafe { LineBox::from_raw(raw) };
    assert_eq!(back.1, 7);
    drop(back);
    assert_eq!(drops.get(), 2);
}
