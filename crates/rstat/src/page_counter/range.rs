//! The range of values a page counter holds: [`PAGE_COUNTER_MAX`], and the
//! reading of a raw usage word into that range.
//!
//! Below every other file of the module: the counter (`mod.rs`), its
//! charge and protection paths and its errors all name the bound, and
//! this file names none of them.

/// The largest usage, limit or amount a counter holds: `i64::MAX / 2`
/// (2⁶² − 1, about 4.6 × 10¹⁸). A limit of `PAGE_COUNTER_MAX` means
/// "unlimited".
///
/// Like the kernel's (`LONG_MAX / PAGE_SIZE`), it leaves headroom in the
/// signed 64-bit usage word: committed usage is at most `PAGE_COUNTER_MAX`,
/// and the transient overshoot of speculative charges in flight (at most
/// 2³² per thread) can never carry the word past `i64::MAX`. Uncharges stop
/// at zero, so the word is never negative.
pub const PAGE_COUNTER_MAX: u64 = (i64::MAX / 2) as u64;

/// A raw usage word as a value in `0..=PAGE_COUNTER_MAX`. The word is never
/// negative (uncharges stop at zero); the clamp keeps readers sound should
/// that ever break.
#[inline(always)]
pub(super) fn clamp(raw: i64) -> u64 {
    raw.max(0) as u64
}
