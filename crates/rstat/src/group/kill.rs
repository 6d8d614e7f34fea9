//! Killing a group's work: the analog of the kernel's `memory.oom.group`
//! kill, for work that is not a process.
//!
//! A group is *killed* by [`Group::kill`] (the memory controller calls it
//! when a group in [`HeapLimitMode::Kill`](crate::memory::HeapLimitMode::Kill)
//! cannot be brought under its `memory.max`; a program may call it to
//! cancel a tenant's or a query's work). Killing marks the group and every
//! descendant, present and created later, and runs each one's kill hooks
//! once. It does not stop anything by force, since rstat cannot stop a
//! thread or drop a task: the work stops at its next check.
//!
//! - A future wrapped by [`Group::killable`](crate::Group::killable)
//!   checks at each poll and resolves to `Err(`[`Killed`]`)` instead of
//!   polling its inner future again; the executor then drops it, and the
//!   memory it held is freed (and uncharged). A kill wakes such futures
//!   that are waiting, so one waiting for an event that never comes ends
//!   too.
//! - A thread checks [`Group::is_killed`] or
//!   [`attach::current_killed`](crate::attach::current_killed) (one load)
//!   where it can stop, or registers a hook ([`Group::on_kill`]).
//! - The memory controller refuses further fallible charges to a killed
//!   group; allocations of its work still succeed, so the work can unwind.
//!
//! A kill is final: a killed group stays killed (remove it when its work
//! is gone, and create a new one to start over).
//!
//! # Synchronization
//!
//! The mark is an atomic flag per group, set with `Release` and read with
//! `Acquire` (a reader that sees it also sees what the killer did before,
//! e.g. the event counts). Killing a subtree marks a group, then takes its
//! children lock to list the children; [`Group::create_child`] reads the
//! parent's mark under the same lock when it links the child. So a child
//! linked before the killer's listing is in the list, and one linked after
//! it reads the mark: no descendant escapes. Hooks are taken out of their
//! group under its hook lock, so each runs once, on the killing thread,
//! after the marks are set and with no lock of the engine held. A pending
//! killable future registers its waker under the same lock and then
//! checks the mark; the kill marks, then takes the wakers under that lock
//! (waking them after releasing it): a future registered before the take
//! is woken, one registered after it sees the mark.

use std::fmt;
use std::task::Waker;

use super::{Group, GroupInner};
use crate::sync::{self, Ordering};

/// The outcome of work whose group was killed ([`Group::kill`]): what a
/// [`killable`](crate::Group::killable) future resolves to instead of its
/// output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Killed {
    /// The path of the group the work ran in.
    pub path: String,
}

impl fmt::Display for Killed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the work of group {:?} was killed (Group::kill; the memory controller kills a group in HeapLimitMode::Kill that it cannot bring under memory.max)",
            self.path
        )
    }
}

impl std::error::Error for Killed {}

/// A kill hook: called once, with the group, when it is killed.
pub(crate) type KillHook = Box<dyn FnOnce(&Group) + Send>;

/// What a group's kill reaches besides the mark: the hooks to run once,
/// and the wakers of its pending [`killable`](crate::Group::killable)
/// futures, to wake. Made on first use (a group nobody watches has none).
#[derive(Default)]
pub(crate) struct KillWatch {
    hooks: Vec<KillHook>,
    /// Registered wakers by key (a free key holds `None`); `free` lists
    /// the free keys. A future keeps its key until it is dropped or ends.
    wakers: Vec<Option<Waker>>,
    free: Vec<usize>,
}

/// A pending killable future's registration with its group's
/// [`KillWatch`]: its key, and a clone of the waker registered there, to
/// tell without the lock whether a later poll's waker is the same.
pub(crate) struct KillWake {
    key: usize,
    waker: Waker,
}

impl KillWake {
    /// Whether `w` wakes the same task as the registered waker.
    #[inline]
    pub(crate) fn wakes(&self, w: &Waker) -> bool {
        self.waker.will_wake(w)
    }
}

impl GroupInner {
    /// Killed: this group or an ancestor. One load when marked (the
    /// common case after a kill), else a walk up the chain.
    ///
    /// The ancestors are checked too: a group removed from its parent's
    /// children before the parent was killed is not in the marked subtree
    /// (its work may still run, charged up the chain).
    #[inline]
    pub(crate) fn is_killed(&self) -> bool {
        if self.killed.load(Ordering::Acquire) {
            return true;
        }
        let mut g = self.parent.as_ref();
        while let Some(p) = g {
            if p.inner().killed.load(Ordering::Acquire) {
                return true;
            }
            g = p.inner().parent.as_ref();
        }
        false
    }
}

impl Group {
    /// Kill this group's work and its descendants' (module docs): mark
    /// each one killed and run its kill hooks once. Returns how many
    /// groups were newly killed (0 if all already were).
    ///
    /// Cost: a walk of the subtree (each group's children lock in turn,
    /// a reference taken per child), plus the hooks.
    pub fn kill(&self) -> usize {
        let mut killed = Vec::new();
        let mut todo = vec![self.clone()];
        while let Some(g) = todo.pop() {
            let inner = g.inner();
            // Release: whoever sees the mark sees what came before it.
            let was = inner.killed.swap(true, Ordering::AcqRel);
            {
                // After the mark (see the module's "Synchronization").
                let children = sync::lock(&inner.children);
                todo.extend(children.values().copied().filter_map(Group::from_map));
            }
            if was {
                g.drop_deferred();
            } else {
                killed.push(g);
            }
        }
        // Between the marks and the look at the hook lists: `on_kill` makes
        // its list then looks at the mark, so with a full fence on both
        // sides one of the two sees the other (no hook is left unrun).
        sync::fence(Ordering::SeqCst);
        for g in &killed {
            let (hooks, wakers) = match g.inner().kill_hooks.get() {
                Some(h) => {
                    let mut w = sync::lock(h);
                    // The wakers stay registered (their futures remove them
                    // when dropped); woken outside the lock.
                    let wakers: Vec<Waker> = w.wakers.iter().flatten().cloned().collect();
                    (core::mem::take(&mut w.hooks), wakers)
                }
                None => (Vec::new(), Vec::new()),
            };
            for w in wakers {
                w.wake();
            }
            for hook in hooks {
                // The memory controller kills from inside the global
                // allocator, where an unwind must not escape: a hook that
                // panics is reported and the others still run.
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(g))).is_err() {
                    eprintln!(
                        "rstat: a kill hook of group {:?} panicked; the kill went on",
                        g.path()
                    );
                }
            }
        }
        let n = killed.len();
        // Possibly the last references of groups being removed meanwhile:
        // their release waits for a safe place (the kill may run inside
        // the allocator).
        for g in killed {
            g.drop_deferred();
        }
        n
    }

    /// Whether this group's work was killed ([`kill`](Self::kill), of it
    /// or of an ancestor, also one killed after this group was removed).
    /// One load once marked, else a walk up the chain.
    #[inline]
    pub fn is_killed(&self) -> bool {
        self.inner().is_killed()
    }

    /// Call `hook` once when this group is killed, on the thread that
    /// kills it, with no lock of the engine held; at once if it already
    /// was. Meant for a thread to learn it should stop (set a flag, wake a
    /// task, cancel a query): keep it short. When the memory controller
    /// kills, that thread is in the middle of an allocation: what the hook
    /// allocates is not charged, it must not wait for the killed work, and
    /// it should not drop the last handle of a group (a panic is caught and
    /// reported). A hook of a group killed through an ancestor runs when
    /// the ancestor's kill reaches it in the subtree; a group removed
    /// before that is killed (see [`is_killed`](Self::is_killed)) but its
    /// hooks do not run.
    ///
    /// Hooks of a group removed before any kill are dropped with it.
    pub fn on_kill(&self, hook: impl FnOnce(&Group) + Send + 'static) {
        {
            let mut watch = sync::lock(self.kill_watch());
            // See `kill`: the list exists before the mark is looked at.
            sync::fence(Ordering::SeqCst);
            // Checked under the hook lock: a kill marks first, then takes
            // the hooks under this lock, so a hook added after that take
            // sees the mark and runs here instead.
            if !self.is_killed() {
                watch.hooks.push(Box::new(hook));
                return;
            }
        }
        hook(self);
    }

    /// This group's kill watch, made at the first hook or waker.
    fn kill_watch(&self) -> &sync::Mutex<KillWatch> {
        self.inner()
            .kill_hooks
            .get_or_init(|| Box::new(sync::Mutex::new(KillWatch::default())))
    }

    /// Register (or update, for `prev`) the waker of a pending killable
    /// future of this group, for a kill to wake. The caller checks the
    /// mark *after* this returns: a kill marks before it takes the wakers
    /// under this lock, so a registration that comes after that take sees
    /// the mark (the same order as [`on_kill`](Self::on_kill)'s).
    /// Cost: the group's hook lock, a waker clone.
    pub(crate) fn watch_kill(&self, prev: Option<KillWake>, waker: &Waker) -> KillWake {
        let mut watch = sync::lock(self.kill_watch());
        let key = match prev {
            Some(p) if watch.wakers.get(p.key).is_some_and(Option::is_some) => p.key,
            _ => match watch.free.pop() {
                Some(k) => k,
                None => {
                    watch.wakers.push(None);
                    watch.wakers.len() - 1
                }
            },
        };
        watch.wakers[key] = Some(waker.clone());
        drop(watch);
        // As in `on_kill`: a kill that found no watch yet (and so took no
        // waker) marked before its fence; the caller's mark check comes
        // after this one.
        sync::fence(Ordering::SeqCst);
        KillWake {
            key,
            waker: waker.clone(),
        }
    }

    /// Remove a killable future's registration (it ended or was dropped).
    pub(crate) fn unwatch_kill(&self, w: KillWake) {
        if let Some(cell) = self.inner().kill_hooks.get() {
            let mut watch = sync::lock(cell);
            if let Some(slot) = watch.wakers.get_mut(w.key) {
                if slot.take().is_some() {
                    watch.free.push(w.key);
                }
            }
        }
    }

    /// `Err(`[`Killed`]`)` if this group was killed.
    pub fn check_killed(&self) -> Result<(), Killed> {
        if self.is_killed() {
            Err(Killed { path: self.path() })
        } else {
            Ok(())
        }
    }
}
