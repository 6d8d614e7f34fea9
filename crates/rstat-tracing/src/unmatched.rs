//! Values of the layer's field that match no group: counted (in the layer
//! and, if asked, in an engine's counter set) and logged once per
//! distinct value, remembering a bounded number of values.

use std::collections::HashSet;
use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// How many distinct unmatched values a layer remembers (and so logs).
/// Later values are still counted, but not logged: a field fed from
/// outside (a request header) cannot grow the layer's memory without
/// bound.
pub const MAX_LOGGED_VALUES: usize = 1024;

/// How many bytes of an unmatched value a layer remembers and logs: a
/// longer value is cut (at a character boundary), so two long values with
/// the same first bytes are logged once.
pub const MAX_LOGGED_VALUE_BYTES: usize = 128;

/// The counter set [`GroupLayer::count_unmatched`](crate::GroupLayer::count_unmatched)
/// registers (or reuses) on an engine: the controller `tracing`, item
/// `unmatched` (a counter).
pub const UNMATCHED_STAT: (&str, &str) = ("tracing", "unmatched");

/// A value of a layer's field that matched no group, as handed to the
/// layer's logger ([`GroupLayer::on_unmatched`](crate::GroupLayer::on_unmatched))
/// the first time it is seen. Its `Display` is the default log line.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Unmatched<'a> {
    /// The layer's field.
    pub field: &'a str,
    /// The value, as the layer read it (see the crate docs' "Field
    /// values"), cut to at most [`MAX_LOGGED_VALUE_BYTES`] bytes.
    pub value: &'a str,
    /// Whether `value` was cut.
    pub truncated: bool,
    /// Whether this is the last value the layer will log: it now
    /// remembers [`MAX_LOGGED_VALUES`] values, and only counts new ones.
    pub last: bool,
}

impl fmt::Display for Unmatched<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rstat-tracing: span field {} = {:?}{} matches no group, so its spans charge no group of their own; they are counted as unmatched (GroupLayer::unmatched_count) and this value is not logged again",
            self.field,
            self.value,
            if self.truncated { "..." } else { "" },
        )?;
        if self.last {
            write!(
                f,
                "; this is the last value logged: the layer remembers at most {MAX_LOGGED_VALUES} values, later ones are only counted"
            )?;
        }
        Ok(())
    }
}

/// The default logger: one line on standard error. Not a tracing event,
/// which would come back into the subscriber this layer is part of; a
/// failed write is ignored (never a panic).
pub(crate) fn log_to_stderr(u: &Unmatched<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{u}");
}

/// What a layer (and its clones) shares about unmatched values.
#[derive(Default)]
pub(crate) struct State {
    count: AtomicU64,
    /// The values logged so far (at most [`MAX_LOGGED_VALUES`], each cut
    /// to [`MAX_LOGGED_VALUE_BYTES`]). Held only to test and insert, never
    /// while logging, so a logger that makes spans cannot deadlock on it.
    seen: Mutex<HashSet<Box<str>>>,
}

impl State {
    /// Count one unmatched value; if it was not seen before and there is
    /// room, remember it and return it for logging.
    pub(crate) fn note<'v>(&self, field: &'v str, value: &'v str) -> Option<Unmatched<'v>> {
        self.count.fetch_add(1, Ordering::Relaxed);
        let (value, truncated) = cut(value, MAX_LOGGED_VALUE_BYTES);
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() >= MAX_LOGGED_VALUES || seen.contains(value) {
            return None;
        }
        seen.insert(value.into());
        Some(Unmatched {
            field,
            value,
            truncated,
            last: seen.len() == MAX_LOGGED_VALUES,
        })
    }

    /// Values counted so far.
    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// `s` cut to at most `max` bytes at a character boundary, and whether it
/// was cut.
fn cut(s: &str, max: usize) -> (&str, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn values_are_cut_at_a_character_boundary() {
        assert_eq!(cut("abc", 3), ("abc", false));
        assert_eq!(cut("abcd", 3), ("abc", true));
        // 'é' is two bytes: a cut inside it moves back before it.
        assert_eq!(cut("aé", 2), ("a", true));
        assert_eq!(cut("éé", 3), ("é", true));
    }
}
