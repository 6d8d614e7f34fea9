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

/// A value with a tail of `n` words right after it, in its own allocation:
/// the value starts its line, the tail starts where the value ends, holds
/// what the maker wrote through the pointer it was given, and both are
/// freed with the box (Miri checks the layout the drop frees with).
#[test]
fn a_tail_follows_its_value_in_one_allocation() {
    struct WithTail {
        line: Line64,
        tail: *const u64,
        len: usize,
    }
    for n in [0usize, 1, 7, 64] {
        let b = LineBox::new_with_tail(n * 8, |tail: *mut u8| {
            let tail = tail.cast::<u64>();
            for i in 0..n {
                // SAFETY: `new_with_tail` gives `n * 8` writable bytes,
                // aligned for the value's alignment (64), so for `u64`.
                unsafe { tail.add(i).write(i as u64 * 3) };
            }
            WithTail {
                line: Line64([n as u8; 100]),
                tail,
                len: n,
            }
        });
        let at = core::ptr::from_ref::<WithTail>(&b) as usize;
        assert_eq!(at % 64, 0, "n {n}: value at {at:#x}");
        assert_eq!(
            b.tail as usize,
            at + core::mem::size_of::<WithTail>(),
            "n {n}"
        );
        assert!(b.line.0.iter().all(|&x| usize::from(x) == n));
        // SAFETY: the tail lives as long as the box and holds `len` words.
        let tail = unsafe { core::slice::from_raw_parts(b.tail, b.len) };
        assert!(
            tail.iter().enumerate().all(|(i, &v)| v == i as u64 * 3),
            "n {n}"
        );
        let raw = LineBox::into_raw(b);
        // SAFETY: from `into_raw` just above, taken back once.
        drop(unsafe { LineBox::from_raw(raw) });
    }
}
