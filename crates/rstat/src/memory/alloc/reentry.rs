//! The allocator's re-entry flag: a `const` thread-local without a
//! destructor, set while this thread is inside the allocator's accounting
//! (or running [`untracked`] code), so that nested allocations pass
//! through. The lowest layer of `memory/`: it names nothing of it, and the
//! owner handles (`objcg`) allocate through [`untracked`].

use std::cell::Cell;

thread_local! {
    /// Whether this thread is inside the allocator's accounting. No
    /// destructor, `const`: usable in any phase of the thread's life.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// The re-entry guard: `None` if this thread is already inside.
pub(super) struct Inside;

impl Inside {
    #[inline(always)]
    pub(super) fn enter() -> Option<Inside> {
        // `try_with` cannot fail for a slot without a destructor; treat it
        // as "inside" (pass through) if it ever did.
        let was = INSIDE.try_with(|c| c.replace(true)).unwrap_or(true);
        // Not `then_some(Inside)`: that builds (and, when already inside,
        // drops) a guard either way, and the drop would clear the flag.
        if was {
            None
        } else {
            Some(Inside)
        }
    }
}

impl Drop for Inside {
    #[inline(always)]
    fn drop(&mut self) {
        let _ = INSIDE.try_with(|c| c.set(false));
    }
}

/// Whether this thread is inside the allocator (or treated so: see
/// [`Inside::enter`]).
#[inline(always)]
pub(super) fn inside() -> bool {
    INSIDE.try_with(Cell::get).unwrap_or(true)
}

/// Run `f` with this thread's allocations passing through the accounting
/// allocator uncharged (counted in
/// [`Accounted::pass_through`](super::Accounted::pass_through)): for the
/// crate's own metadata that must be freeable from inside `dealloc`
/// without charging anything (owner handles).
pub(crate) fn untracked<R>(f: impl FnOnce() -> R) -> R {
    let _inside = Inside::enter();
    f()
}
