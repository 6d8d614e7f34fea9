//! What can go wrong when charging, uncharging or limiting a page counter.

use core::fmt;

use super::range::PAGE_COUNTER_MAX;

/// A refused page counter operation. Every variant says what to do next in
/// its `Display` message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PageCounterError {
    /// [`try_charge`](super::PageCounter::try_charge) would have taken a
    /// counter above its `max`. Nothing was charged anywhere. `level` names
    /// the counter that refused: 0 is the charged counter itself, 1 its
    /// parent, and so on; [`ancestor`](super::PageCounter::ancestor) turns it
    /// into a reference. That counter's `failcnt` was incremented.
    OverLimit {
        /// Ancestor distance of the counter that refused (0 = itself).
        level: usize,
        /// The amount that was asked for.
        amount: u64,
        /// The refusing counter's `max` when it refused.
        max: u64,
    },
    /// A forced [`charge`](super::PageCounter::charge) would have taken a
    /// counter's usage above [`PAGE_COUNTER_MAX`]. Nothing was charged.
    Overflow {
        /// Ancestor distance of the counter that would have overflowed.
        level: usize,
        /// The amount that was asked for.
        amount: u64,
    },
    /// An amount above [`PAGE_COUNTER_MAX`] was passed. Nothing changed.
    TooLarge {
        /// The amount that was passed.
        amount: u64,
    },
    /// An uncharge or cancel removed more than was charged. The counter was
    /// clamped at zero (it never wraps or goes negative) and its
    /// `cancel_underflows` was incremented; the ancestors above it were
    /// still uncharged. `level` is the first counter that underflowed.
    Underflow {
        /// Ancestor distance of the first counter that underflowed.
        level: usize,
        /// The amount that was asked for.
        amount: u64,
        /// How much that counter actually held, all of which was removed.
        charged: u64,
    },
    /// [`set_max`](super::PageCounter::set_max) was asked for a limit below
    /// the counter's current usage. The limit was not changed.
    Busy {
        /// Usage when the limit was refused.
        usage: u64,
        /// The limit that was asked for.
        max: u64,
    },
    /// [`set_recursive_protection`](super::PageCounter::set_recursive_protection)
    /// was called on a counter that has a parent; the flag belongs to the
    /// hierarchy's root.
    NotRoot,
}

impl fmt::Display for PageCounterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PageCounterError::OverLimit { level, amount, max } => write!(
                f,
                "charging {amount} would exceed the max of {max} of {}; free (uncharge or \
                 reclaim) usage under that counter, raise its max, or use a forced charge",
                Level(level)
            ),
            PageCounterError::Overflow { level, amount } => write!(
                f,
                "charging {amount} would take the usage of {} past PAGE_COUNTER_MAX \
                 ({PAGE_COUNTER_MAX}); a charge this large is a bug in the caller's accounting: \
                 check the units",
                Level(level)
            ),
            PageCounterError::TooLarge { amount } => write!(
                f,
                "amount {amount} exceeds PAGE_COUNTER_MAX ({PAGE_COUNTER_MAX}); pass at most \
                 PAGE_COUNTER_MAX (to mean 'unlimited' in a limit, pass PAGE_COUNTER_MAX or \
                 u64::MAX to a setter, which clamps)"
            ),
            PageCounterError::Underflow {
                level,
                amount,
                charged,
            } => write!(
                f,
                "uncharging {amount} from {}, which held only {charged}; it was clamped at zero. \
                 Uncharge exactly what was charged, from the counter it was charged to",
                Level(level)
            ),
            PageCounterError::Busy { usage, max } => write!(
                f,
                "usage {usage} is above the requested max {max}; uncharge or reclaim down to the \
                 new limit and retry, or use set_max_forced to lower the limit anyway"
            ),
            PageCounterError::NotRoot => f.write_str(
                "recursive protection is a property of the whole hierarchy: set it on the root \
                 counter (the one without a parent)",
            ),
        }
    }
}

impl std::error::Error for PageCounterError {}

/// Names a counter by its distance from the one operated on.
struct Level(usize);

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            0 => f.write_str("the counter itself"),
            1 => f.write_str("its parent (level 1)"),
            n => write!(f, "its ancestor at level {n}"),
        }
    }
}
