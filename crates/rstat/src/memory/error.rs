//! What can go wrong in the memory controller, and the parser for limits
//! written as text (`"max"`, `"512M"`).

use core::fmt;

use crate::error::Error;
use crate::page_counter::PAGE_COUNTER_MAX;

/// A charge refused after the whole reclaim sequence (drain the stocks,
/// reclaim, retry, OOM handler): the group whose `memory.max` refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverLimit {
    /// Path of the group whose limit refused (the charged group or an
    /// ancestor), as [`Group::path`](crate::Group::path) gives it: `/a/b`,
    /// `/` for the root.
    pub path: String,
    /// The amount asked for.
    pub amount: u64,
    /// That group's usage when the charge gave up.
    pub usage: u64,
    /// That group's `memory.max`.
    pub max: u64,
}

/// A refused memory-controller operation. Every variant's `Display` says
/// what to do next. Group paths in it are absolute, the root `/`, as the
/// engine's [`Error`]s print them (what [`Rstat::lookup`] accepts back).
///
/// [`Rstat::lookup`]: crate::Rstat::lookup
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemoryError {
    /// The charge would exceed a `memory.max` and reclaim could not make
    /// room. Nothing was charged; an `oom` event was counted.
    OverLimit(OverLimit),
    /// An amount above [`PAGE_COUNTER_MAX`] was passed. Nothing changed.
    TooLarge {
        /// The amount passed.
        amount: u64,
    },
    /// A forced charge would take a usage past [`PAGE_COUNTER_MAX`].
    /// Nothing was charged.
    Overflow {
        /// The amount passed.
        amount: u64,
        /// The group charged.
        path: String,
    },
    /// An uncharge of more than the group holds (its usage less the units
    /// pre-charged in the stocks). Nothing was uncharged.
    Underflow {
        /// The group (or, for a removed group, the live ancestor that holds
        /// its charges) that would have gone negative.
        path: String,
        /// The amount passed.
        amount: u64,
        /// What it held: its usage less its stocked units.
        usage: u64,
    },
    /// A limit written as text did not parse.
    InvalidLimit {
        /// The text (at most 64 characters of it).
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Limits of a removed group cannot be changed.
    Removed {
        /// The path the group had.
        path: String,
    },
    /// A [`MemoryConfig`](super::MemoryConfig) value is out of range.
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// The group's work was killed ([`Group::kill`](crate::Group::kill),
    /// e.g. by an OOM kill in
    /// [`HeapLimitMode::Kill`](super::HeapLimitMode::Kill)): fallible
    /// charges to it fail. Nothing was charged.
    Killed {
        /// The group charged.
        path: String,
    },
    /// An engine error (a group of another engine, the controller already
    /// registered, ...).
    Engine(Error),
}

impl From<Error> for MemoryError {
    fn from(e: Error) -> Self {
        MemoryError::Engine(e)
    }
}

impl fmt::Display for MemoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryError::OverLimit(o) => write!(
                f,
                "charging {} would exceed memory.max ({}) of group {:?} (usage {}), and draining \
                 the stocks and reclaiming did not make room; free memory in that group, raise its \
                 memory.max, register reclaimers for it, or charge with OnOom::Force",
                o.amount, o.max, o.path, o.usage
            ),
            MemoryError::TooLarge { amount } => write!(
                f,
                "amount {amount} exceeds PAGE_COUNTER_MAX ({PAGE_COUNTER_MAX}); a charge this \
                 large is a bug in the caller's accounting: check the units"
            ),
            MemoryError::Overflow { amount, path } => write!(
                f,
                "force-charging {amount} to group {path:?} would take a usage past \
                 PAGE_COUNTER_MAX ({PAGE_COUNTER_MAX}); check the units of the charges"
            ),
            MemoryError::Underflow {
                path,
                amount,
                usage,
            } => write!(
                f,
                "uncharging {amount} from group {path:?}, which holds {usage}; nothing \
                 was uncharged. Uncharge exactly what was charged (a Charge guard does it for you)"
            ),
            MemoryError::InvalidLimit { input, reason } => write!(
                f,
                "invalid limit {input:?}: {reason}. Write a whole number of units, optionally \
                 with a suffix K, M, G, T, P or E (powers of 1024), or \"max\" for no limit"
            ),
            MemoryError::Removed { path } => write!(
                f,
                "group {path:?} has been removed; its limits can no longer change (set them on \
                 a live group)"
            ),
            MemoryError::InvalidConfig { reason } => {
                write!(f, "invalid memory controller configuration: {reason}")
            }
            MemoryError::Killed { path } => write!(
                f,
                "group {path:?} was killed (an OOM kill, or Group::kill): it takes no new charges; \
                 end its work and remove it, or run new work in a new group"
            ),
            MemoryError::Engine(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for MemoryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MemoryError::Engine(e) => Some(e),
            _ => None,
        }
    }
}

/// Parse a limit as cgroup v2 writes it (the text that
/// [`Memory::write_limit`](super::Memory::write_limit) takes): `"max"`
/// (no limit: [`PAGE_COUNTER_MAX`]) or a whole number of units with an
/// optional binary suffix `K`, `M`, `G`, `T`, `P`, `E` (either case; ×1024ⁿ).
/// Surrounding whitespace is ignored. Values above [`PAGE_COUNTER_MAX`]
/// mean "no limit" and are clamped to it, as the kernel does.
///
/// Refused with [`MemoryError::InvalidLimit`]: empty text, a sign
/// (`"-5"`, `"+5"`), fractions (`"1.5"`), anything else that is not a
/// number (`"abc"`, `"5X"`), and numbers that overflow 64 bits
/// (`"99999999999999999999"`, `"16E"`).
///
/// ```
/// use rstat::memory::parse_limit;
/// use rstat::page_counter::PAGE_COUNTER_MAX;
/// assert_eq!(parse_limit("max").unwrap(), PAGE_COUNTER_MAX);
/// assert_eq!(parse_limit(" 4K\n").unwrap(), 4096);
/// assert!(parse_limit("-5").is_err() && parse_limit("1.5").is_err());
/// ```
pub fn parse_limit(input: &str) -> Result<u64, MemoryError> {
    let bad = |reason: &'static str| {
        Err(MemoryError::InvalidLimit {
            input: input.chars().take(64).collect(),
            reason,
        })
    };
    let s = input.trim();
    if s == "max" {
        return Ok(PAGE_COUNTER_MAX);
    }
    if s.is_empty() {
        return bad("it is empty");
    }
    if s.starts_with('-') {
        return bad("limits cannot be negative (0 is the smallest)");
    }
    if s.starts_with('+') {
        return bad("a sign is not allowed");
    }
    let shift = match s.as_bytes()[s.len() - 1] {
        b'k' | b'K' => 10,
        b'm' | b'M' => 20,
        b'g' | b'G' => 30,
        b't' | b'T' => 40,
        b'p' | b'P' => 50,
        b'e' | b'E' => 60,
        _ => 0,
    };
    // The suffix, when there is one, is a single ASCII byte: slicing it
    // off stays on a character boundary.
    let digits = if shift == 0 { s } else { &s[..s.len() - 1] };
    if digits.is_empty() {
        return bad("there is no number before the suffix");
    }
    if digits.contains('.') || digits.contains(',') {
        return bad("fractions are not allowed");
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return bad("it is not a whole number");
    }
    let Ok(v) = digits.parse::<u64>() else {
        return bad("it does not fit in 64 bits");
    };
    let Some(v) = v.checked_mul(1u64 << shift) else {
        return bad("it does not fit in 64 bits once the suffix is applied");
    };
    Ok(v.min(PAGE_COUNTER_MAX))
}
