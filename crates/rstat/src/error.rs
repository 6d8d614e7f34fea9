//! The error type: every variant says what was wrong and what to do.

use std::fmt;

use crate::percpu::arena::ArenaError;

/// Everything that can go wrong through rstat's API.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A group name broke a naming rule.
    InvalidName {
        /// The offending name (lossily printable).
        name: String,
        /// Which rule it broke.
        reason: &'static str,
    },
    /// A sibling with this name already exists.
    NameExists {
        /// Path of the parent, absolute (`/` for the root).
        parent: String,
        /// The duplicate name.
        name: String,
    },
    /// A path with a component that is not a valid group name.
    InvalidPath {
        /// The path given (cut to 4096 bytes).
        path: String,
        /// The first offending component (cut to 64 characters).
        component: String,
        /// Which naming rule it broke.
        reason: &'static str,
    },
    /// No live group at this path.
    NotFound {
        /// The path looked up, as given (cut to 4096 bytes).
        path: String,
        /// The deepest live group on the way, absolute (`/` for the root).
        parent: String,
        /// The name `parent` has no live child by.
        component: String,
    },
    /// The group still has live children.
    HasChildren {
        /// Path of the group, absolute.
        path: String,
        /// How many live children it has.
        children: usize,
    },
    /// A `cpu.max` value is malformed or out of range.
    InvalidCpuMax {
        /// The text given (at most 64 characters of it).
        input: String,
        /// What is wrong, and the format.
        reason: String,
    },
    /// The group's work was killed ([`Group::kill`](crate::Group::kill)):
    /// it takes no new work ([`Group::try_enter`](crate::Group::try_enter)).
    Killed {
        /// Path of the group.
        path: String,
    },
    /// The group has been removed (it is offline).
    Removed {
        /// Path the group had, absolute (`/` for the root).
        path: String,
    },
    /// The root group cannot be removed.
    RootNotRemovable,
    /// A controller with this name is already registered.
    ControllerExists {
        /// The duplicate name.
        name: String,
    },
    /// The engine's controller table is full.
    TooManyControllers {
        /// The table size.
        max: usize,
    },
    /// A controller definition is unusable.
    InvalidController {
        /// Controller name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A group extension with this name is already registered.
    ExtensionExists {
        /// The duplicate name.
        name: String,
    },
    /// The engine's extension table is full.
    TooManyExtensions {
        /// The table size.
        max: usize,
    },
    /// A group extension's name is unusable.
    InvalidExtension {
        /// Extension name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A stat index beyond the controller's item list.
    UnknownStat {
        /// Controller name.
        controller: String,
        /// The index given.
        index: usize,
        /// Number of items the controller has.
        len: usize,
    },
    /// A stat item name the controller does not declare.
    UnknownStatName {
        /// Controller name.
        controller: String,
        /// The name given.
        name: String,
        /// The controller's items, in index order.
        items: Vec<String>,
    },
    /// CPU time too large to account: `user + system` microseconds do not
    /// fit an `i64`.
    CpuTimeOutOfRange {
        /// The user time given, in microseconds.
        user_usec: u64,
        /// The system time given, in microseconds.
        system_usec: u64,
    },
    /// A group handle from a different `Rstat` instance.
    ForeignGroup,
    /// A flush policy name that does not exist.
    UnknownPolicy {
        /// The name given.
        name: String,
    },
    /// More per-CPU slots asked for than
    /// [`MAX_NR_CPUS`](crate::MAX_NR_CPUS).
    TooManyCpus {
        /// The count given.
        nr_cpus: usize,
        /// The most accepted.
        max: usize,
    },
    /// A periodic-flush period out of range.
    InvalidPeriod {
        /// The period given.
        period: std::time::Duration,
    },
    /// A `Threshold` read pace out of range
    /// ([`Builder::read_pace`](crate::Builder::read_pace)).
    InvalidReadPace {
        /// The pace given.
        pace: std::time::Duration,
    },
    /// A periodic CPU-time charger period out of range
    /// ([`attach::set_charge_period`](crate::attach::set_charge_period)).
    InvalidChargePeriod {
        /// The period given.
        period: std::time::Duration,
    },
    /// A background thread could not be started.
    Thread {
        /// The system's reason.
        reason: String,
    },
    /// The per-CPU arena could not allocate.
    Arena(ArenaError),
    /// A [`report`](crate::report) file name that this engine does not
    /// have.
    UnknownFile {
        /// The name given.
        file: String,
        /// Why it is not there.
        reason: String,
        /// The files this engine has, in [`Reporter::files`](crate::report::Reporter::files) order.
        files: Vec<String>,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidName { name, reason } => write!(
                f,
                "invalid group name {name:?}: {reason}; names must be 1-255 bytes with no '/' and no NUL"
            ),
            Error::NameExists { parent, name } => write!(
                f,
                "group {parent:?} already has a child named {name:?}; pick another name or look the existing one up"
            ),
            Error::InvalidPath {
                path,
                component,
                reason,
            } => write!(
                f,
                "invalid group path {path:?}: component {component:?} is not a group name ({reason}); write paths as \"a/b/c\" or, from the root, \"/a/b/c\""
            ),
            Error::NotFound {
                path,
                parent,
                component,
            } => write!(
                f,
                "no live group at path {path:?}: {parent:?} has no live child named {component:?}; check the spelling, or create it first (removed groups cannot be looked up)"
            ),
            Error::HasChildren { path, children } => write!(
                f,
                "group {path:?} still has {children} live child group(s); remove them first (bottom-up)"
            ),
            Error::InvalidCpuMax { input, reason } => {
                write!(f, "invalid cpu.max {input:?}: {reason}")
            }
            Error::Killed { path } => write!(
                f,
                "group {path:?} was killed (an OOM kill, or Group::kill) and takes no new work; run new work in a new group"
            ),
            Error::Removed { path } => write!(
                f,
                "group {path:?} has been removed; its handle can still be read and updated, but it cannot gain children, be looked up from, or be removed again"
            ),
            Error::RootNotRemovable => {
                write!(f, "the root group cannot be removed; drop the Rstat instance instead")
            }
            Error::ControllerExists { name } => write!(
                f,
                "a controller named {name:?} is already registered; reuse its handle or choose another name"
            ),
            Error::TooManyControllers { max } => write!(
                f,
                "at most {max} controllers can be registered; merge related stats into one controller's item list"
            ),
            Error::InvalidController { name, reason } => {
                let name = shown(name);
                write!(f, "controller {name:?} cannot be registered: {reason}")
            }
            Error::ExtensionExists { name } => write!(
                f,
                "a group extension named {name:?} is already registered; reuse its handle or choose another name"
            ),
            Error::TooManyExtensions { max } => write!(
                f,
                "at most {max} group extensions can be registered; keep related per-group state in one extension"
            ),
            Error::InvalidExtension { name, reason } => {
                write!(f, "group extension {name:?} cannot be registered: {reason}")
            }
            Error::UnknownStat { controller, index, len } => write!(
                f,
                "controller {controller:?} has {len} stat items, so index {index} is out of range; use the index of a registered item"
            ),
            Error::UnknownStatName {
                controller,
                name,
                items,
            } => {
                let name = shown(name);
                write!(
                    f,
                    "controller {controller:?} has no stat item named {name:?}; its items are: "
                )?;
                const SHOWN: usize = 16;
                for (i, it) in items.iter().take(SHOWN).enumerate() {
                    write!(f, "{}{it}", if i > 0 { ", " } else { "" })?;
                }
                if items.len() > SHOWN {
                    write!(f, ", ... ({} in all)", items.len())?;
                }
                write!(f, " (names are case-sensitive)")
            }
            Error::CpuTimeOutOfRange {
                user_usec,
                system_usec,
            } => write!(
                f,
                "cannot account {user_usec} us user + {system_usec} us system CPU time: the sum must be at most {} us (i64::MAX); a value this large is usually a negative duration cast to u64, so check the subtraction that produced it",
                i64::MAX
            ),
            Error::ForeignGroup => write!(
                f,
                "this group belongs to a different Rstat instance; use handles from the instance the controller was registered on"
            ),
            Error::UnknownPolicy { name } => write!(
                f,
                "unknown flush policy {name:?}; use one of: always, threshold, unified-root, coalesced"
            ),
            Error::InvalidChargePeriod { period } => write!(
                f,
                "CPU-time charge period {period:?} is out of range; give 1 ms to 24 h, or None to stop the periodic charger"
            ),
            Error::TooManyCpus { nr_cpus, max } => write!(
                f,
                "{nr_cpus} per-CPU slots asked for; at most {max} are supported (leave the count unset for the machine's possible CPUs)"
            ),
            Error::InvalidPeriod { period } => write!(
                f,
                "periodic flush period {period:?} is out of range; give 1 ms to 24 h, or turn the periodic flusher off"
            ),
            Error::InvalidReadPace { pace } => write!(
                f,
                "read pace {pace:?} is out of range; give 1 ms to 24 h, or None for threshold reads bounded in units only"
            ),
            Error::Thread { reason } => write!(
                f,
                "could not start the periodic flush thread ({reason}); raise the thread limit or turn periodic flushing off"
            ),
            Error::Arena(e) => write!(f, "{e}"),
            Error::UnknownFile {
                file,
                reason,
                files,
            } => {
                write!(f, "no report file {file:?}: {reason}; the files are: ")?;
                for (i, n) in files.iter().enumerate() {
                    write!(f, "{}{n}", if i > 0 { ", " } else { "" })?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for Error {}

impl From<ArenaError> for Error {
    fn from(e: ArenaError) -> Self {
        Error::Arena(e)
    }
}

/// `Result` with rstat's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A user-given name, cut to 64 characters for an error message (a name
/// that breaks the rules may be of any length).
pub(crate) fn shown(name: &str) -> String {
    name.chars().take(64).collect()
}
