//! What a [`PercpuRef`](super::PercpuRef) refuses, and what to do instead.

use core::fmt;

use super::state::{MAX_MANY, VALUE_LIMIT};

/// A misuse of a [`PercpuRef`](super::PercpuRef).
///
/// Every variant is refused without changing the count, except where the
/// variant says otherwise ([`Underflow`](Self::Underflow) found while folding
/// per-CPU counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PercpuRefError {
    /// `kill` on a ref that is already dying.
    AlreadyDead,
    /// `get` on a ref whose count already reached zero (its release callback
    /// has run or is running).
    Released,
    /// More puts than gets. In atomic mode the offending `put` is refused and
    /// the count is unchanged. In percpu mode a single put cannot see the
    /// total, so the excess is found when the per-CPU counts are folded
    /// (`kill`, `switch_to_atomic`): the count is then set to zero and the
    /// release callback runs, ending the cycle, and the folding call reports
    /// this error.
    Underflow,
    /// `resurrect` on a ref that is not dying.
    NotDead,
    /// `reinit` while the count is not zero.
    NotZero,
    /// `switch_to_percpu`, `resurrect` or `reinit` on a ref created without
    /// [`InitFlags::ALLOW_REINIT`](super::InitFlags::ALLOW_REINIT) (and
    /// neither `ATOMIC` nor `DEAD`, which imply it).
    ReinitNotAllowed,
    /// `get_many`/`put_many` with more than [`MAX_MANY`] references at once.
    TooMany {
        /// The requested number of references.
        n: usize,
    },
    /// The count would exceed its limit (2^62): references are leaking.
    Overflow,
    /// A switch to atomic mode (`kill`, `switch_to_atomic`) of a ref on the
    /// [`Rseq`](super::FastPath::Rseq) fast path needs the `membarrier`
    /// system call, and it failed. Nothing changed: the ref is still live and
    /// in percpu mode.
    Membarrier {
        /// The system call's error number (`errno`). A `usize`, like
        /// `TooMany`'s payload, so that `Result<(), PercpuRefError>` stays
        /// two registers wide and `get`/`put` return in registers.
        errno: usize,
    },
}

impl fmt::Display for PercpuRefError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PercpuRefError::AlreadyDead => f.write_str(
                "percpu_ref: kill called on a ref that is already dying; kill once per life \
                 cycle, and resurrect or reinit the ref (created with ALLOW_REINIT) before \
                 killing it again",
            ),
            PercpuRefError::Released => f.write_str(
                "percpu_ref: get on a ref whose count already reached zero (release has run); \
                 get is only for callers that hold a reference: take new ones with \
                 tryget/tryget_live, or reinit the ref first",
            ),
            PercpuRefError::Underflow => f.write_str(
                "percpu_ref: put without a matching get (the count would go below zero); pair \
                 every put with an earlier get or successful tryget, and do not put the \
                 initial reference yourself: kill drops it",
            ),
            PercpuRefError::NotDead => f.write_str(
                "percpu_ref: resurrect called on a ref that is not dying; resurrect only undoes \
                 kill",
            ),
            PercpuRefError::NotZero => f.write_str(
                "percpu_ref: reinit called while references are still held; wait until \
                 is_zero() (release has run), or use resurrect to revive a dying ref that still \
                 has references",
            ),
            PercpuRefError::ReinitNotAllowed => f.write_str(
                "percpu_ref: this ref was created without InitFlags::ALLOW_REINIT, so it cannot \
                 return to percpu mode or a new life cycle (switch_to_percpu, resurrect, \
                 reinit); create it with InitFlags::ALLOW_REINIT",
            ),
            PercpuRefError::TooMany { n } => write!(
                f,
                "percpu_ref: {n} references in one get_many/put_many call exceeds the limit of \
                 {MAX_MANY}; split the call"
            ),
            PercpuRefError::Overflow => write!(
                f,
                "percpu_ref: the count would exceed {VALUE_LIMIT}; references are being taken \
                 and never put back"
            ),
            PercpuRefError::Membarrier { errno } => write!(
                f,
                "percpu_ref: membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ) failed with errno \
                 {errno}, so the switch to atomic mode could not be made safe and nothing \
                 changed; something (a seccomp filter?) now forbids that system call: allow it, \
                 or create refs with InitFlags::LOCKED_SLOTS, or set RSTAT_PERCPU_REF=locked"
            ),
        }
    }
}

impl std::error::Error for PercpuRefError {}
