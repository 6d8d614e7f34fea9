//! Async tasks: a future whose every poll runs inside a group.
//!
//! An executor polls a task on whichever worker thread is free, so a
//! thread's current group says nothing about a task. [`Scoped`] enters its
//! group around each poll of the future it wraps: the poll's CPU time is
//! charged to the group (a wall clock read on entry and on exit, as
//! for any change of the current group; nothing if the group is already
//! current),
//! and allocations made during the poll see it as the current group. This
//! works on any executor, because it only relies on `poll`.
//!
//! # Spawned tasks
//!
//! A task spawned from inside a scoped future does **not** inherit the
//! group: the executor polls it separately, outside this future's polls.
//! Give it one explicitly: `spawn(group.scope(fut))`, or
//! `spawn(fut.in_current_group())`, which captures the group that is
//! current where the future is *created* (inside a scoped poll: the
//! scope's group).

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};

use super::current::Level;
use super::{clock, throttle};
use crate::group::{Group, KillWake, Killed, PressureKind};

/// A future that runs each poll of `F` inside a group; see
/// [`Group::scope`] and the [attach module docs](crate::attach#async-tasks).
#[must_use = "futures do nothing unless polled"]
pub struct Scoped<F> {
    /// `None`: no group (made by [`FutureExt::in_current_group`] outside
    /// any group); polls run in whatever group the polling thread is in.
    group: Option<Group>,
    /// The next poll is held back until the monotonic clock reaches this
    /// (ns; 0: not held): a `memory.high` penalty or a `cpu.max` deferral
    /// (module `throttle`).
    hold_until: u64,
    /// The timer wake registered for `hold_until`, and with which waker
    /// (so a held future polled again does not register again).
    registered: Option<(u64, std::task::Waker)>,
    fut: F,
}

impl<F> Scoped<F> {
    /// Whether this poll must wait, and until when (monotonic ns): a
    /// penalty's hold not over yet, or the group's `cpu.max` quota spent.
    #[cold]
    fn held(&mut self, limited: bool) -> Option<u64> {
        let now = clock::mono_ns();
        if self.hold_until != 0 {
            if now < self.hold_until {
                return Some(self.hold_until);
            }
            self.hold_until = 0;
        }
        if limited {
            if let Some(until) = self.group.as_ref().and_then(|g| g.cpu_throttled_until(now)) {
                self.hold_until = until;
                return Some(until);
            }
        }
        None
    }

    /// The group each poll enters.
    pub fn group(&self) -> Option<&Group> {
        self.group.as_ref()
    }

    /// The wrapped future.
    pub fn into_inner(self) -> F {
        self.fut
    }
}

impl<F: std::fmt::Debug> std::fmt::Debug for Scoped<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scoped")
            .field("group", &self.group)
            .field("fut", &self.fut)
            .finish()
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    /// Enter the group, poll, leave. Cost over a bare poll: the change of
    /// the current group in and out (two wall clock reads and the
    /// segment bookkeeping; a reconciliation now and then), no reference
    /// count traffic (the wrapper holds the group).
    ///
    /// A poll may also not run the inner future at all, returning pending
    /// and waking itself later: while a `memory.high` penalty from its last
    /// poll holds it back, or while its group (or an ancestor) has spent
    /// its `cpu.max` quota for the period (module `throttle`). A group with
    /// a `cpu.max` above it costs each poll two reads of the thread's CPU
    /// clock (system calls) and one of the monotonic clock.
    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: `fut` is structurally pinned: it is never moved out of a
        // pinned `Scoped` (`into_inner` takes `self` by value, which a
        // pinned `!Unpin` value cannot give), `Scoped` has no `Drop`, and
        // it is `Unpin` only when `F` is (`Group` is `Unpin`).
        let this = unsafe { self.get_unchecked_mut() };
        let limited = this.group.as_ref().is_some_and(Group::cpu_limited);
        if this.hold_until != 0 || limited {
            if let Some(until) = this.held(limited) {
                let already = this
                    .registered
                    .as_ref()
                    .is_some_and(|(d, w)| *d == until && w.will_wake(cx.waker()));
                if already || throttle::wake_at(until, cx.waker()) {
                    if !already {
                        this.registered = Some((until, cx.waker().clone()));
                    }
                    return Poll::Pending;
                }
                // No timer thread: no hold (a hold no one would end).
                this.hold_until = 0;
            }
        }
        this.registered = None;
        let outer = throttle::take_penalty();
        // A timed poll (under a `cpu.max`, or inside one) reads the
        // thread's CPU clock around it (a system call each side): a limited
        // group is charged its poll's CPU time less what scoped polls
        // nested in it were timed for (theirs go to their own groups), so
        // preemption of the worker and nested work do not count against
        // its quota.
        let timing = throttle::timing_begin(limited);
        let level = this.group.as_ref().map(|g| {
            // SAFETY: `this.group` holds a reference for longer than the
            // level, which is dropped at the end of this poll.
            unsafe { Level::push(g.inner_ptr().as_ptr()) }
        });
        // SAFETY: as above, `fut` is structurally pinned.
        let out = unsafe { Pin::new_unchecked(&mut this.fut) }.poll(cx);
        drop(level);
        if let Some(own) = throttle::timing_end(timing) {
            if limited {
                if let Some(g) = this.group.as_ref() {
                    g.cpu_consume(own, clock::mono_ns());
                }
            }
        }
        let mine = throttle::take_penalty();
        throttle::restore_penalty(outer);
        if mine != 0 {
            if out.is_pending() {
                let now = clock::mono_ns();
                this.hold_until = now.saturating_add(mine);
                if let Some(g) = this.group.as_ref() {
                    g.record_stall(PressureKind::Memory, now, this.hold_until, false);
                }
            } else {
                // Done: whoever polled it (an enclosing scope, or the
                // thread at its next throttle point) pays.
                throttle::restore_penalty(mine);
            }
        }
        out
    }
}

impl Group {
    /// Wrap `fut` so that each of its polls runs inside this group: the
    /// group is current during the poll and the poll's CPU time is charged
    /// to it, on any executor and any worker thread. A removed group is
    /// replaced by its nearest live ancestor when the wrapper is made (as
    /// [`enter`](Self::enter) does); one removed later stays (its charges
    /// fold into its parent, nothing is lost).
    ///
    /// Tasks spawned inside do not inherit the group; see
    /// [`FutureExt::in_current_group`].
    ///
    /// ```
    /// use std::future::Future;
    /// # let rs = rstat::Rstat::new();
    /// let tenant = rs.root().create_child("tenant")?;
    /// let fut = tenant.scope(async { rstat::current_group().unwrap().path() });
    /// // Any executor; here the simplest possible one.
    /// let mut fut = std::pin::pin!(fut);
    /// let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    /// assert_eq!(fut.as_mut().poll(&mut cx), std::task::Poll::Ready("/tenant".to_string()));
    /// # Ok::<(), rstat::Error>(())
    /// ```
    pub fn scope<F: Future>(&self, fut: F) -> Scoped<F> {
        let mut g = self;
        while !g.is_online() {
            match g.parent_ref() {
                Some(p) => g = p,
                None => break,
            }
        }
        Scoped {
            group: Some(g.clone()),
            hold_until: 0,
            registered: None,
            fut,
        }
    }
}

/// A future whose polls run inside a group, as [`Scoped`], and which stops
/// when the group is killed ([`Group::kill`]): made by
/// [`Group::killable`]. Resolves to `Ok(output)`, or to
/// `Err(`[`Killed`]`)` at the first poll that finds the group (or an
/// ancestor) killed, without polling the inner future again; the executor
/// then drops it, with whatever it held.
#[must_use = "futures do nothing unless polled"]
pub struct Killable<F> {
    inner: Scoped<F>,
    /// While pending: its waker's registration with the group, which a
    /// kill wakes.
    wake: Option<KillWake>,
}

impl<F> Killable<F> {
    /// The group each poll enters.
    pub fn group(&self) -> Option<&Group> {
        self.inner.group()
    }

    /// The wrapped future.
    pub fn into_inner(mut self) -> F {
        self.unwatch();
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped (`ManuallyDrop`) nor used again,
        // so `inner` is moved out exactly once; `wake`, the only other
        // field, is `None` (taken above) and owns nothing.
        let inner = unsafe { core::ptr::read(&this.inner) };
        inner.into_inner()
    }

    /// The output of a poll that found the group killed: the waker's
    /// registration removed, `Err(Killed)` with the group's path.
    fn end_killed<T>(&mut self) -> Poll<Result<T, Killed>> {
        self.unwatch();
        let path = self
            .inner
            .group
            .as_ref()
            .map_or_else(String::new, Group::path);
        Poll::Ready(Err(Killed { path }))
    }

    /// Remove the waker's registration, if any.
    fn unwatch(&mut self) {
        if let (Some(w), Some(g)) = (self.wake.take(), self.inner.group.as_ref()) {
            g.unwatch_kill(w);
        }
    }
}

impl<F> Drop for Killable<F> {
    /// Removes the future's waker from its group (a lock, if it ever
    /// waited). Touches neither the inner future nor its pinning.
    fn drop(&mut self) {
        self.unwatch();
    }
}

impl<F: std::fmt::Debug> std::fmt::Debug for Killable<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Killable")
            .field("inner", &self.inner)
            .finish()
    }
}

impl<F: Future> Future for Killable<F> {
    type Output = Result<F::Output, Killed>;

    /// The kill check (one load), then a [`Scoped`] poll; when that is
    /// pending, the waker's registration with the group (the group's hook
    /// lock, only when the task's waker changed since the last poll).
    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `inner` is structurally pinned, as `Scoped::fut` is: it
        // is never moved out of a pinned `Killable` (`Drop` and `unwatch`
        // touch only `wake`; `into_inner` takes `self` by value, which a
        // pinned future cannot give). `wake` is not pinned.
        let this = unsafe { self.get_unchecked_mut() };
        if this.inner.group.as_ref().is_some_and(Group::is_killed) {
            return this.end_killed();
        }
        // SAFETY: as above.
        let out = unsafe { Pin::new_unchecked(&mut this.inner) }.poll(cx);
        if out.is_ready() {
            this.unwatch();
            return out.map(Ok);
        }
        if let Some(g) = this.inner.group.as_ref() {
            if !this.wake.as_ref().is_some_and(|w| w.wakes(cx.waker())) {
                this.wake = Some(g.watch_kill(this.wake.take(), cx.waker()));
                // A kill that took the wakers before this registration
                // marked first: seen here, so the future is not left
                // asleep.
                if g.is_killed() {
                    return this.end_killed();
                }
            }
        }
        Poll::Pending
    }
}

impl Group {
    /// [`scope`](Self::scope) `fut`, and stop it when this group is killed
    /// ([`Group::kill`]; the memory controller's OOM kill in
    /// [`HeapLimitMode::Kill`](crate::memory::HeapLimitMode::Kill)): the
    /// future resolves to `Err(`[`Killed`]`)` at its next poll instead of
    /// running on. The kill wakes its task if it is waiting (for a socket,
    /// a timer, a channel that never answers), so it ends without anything
    /// else waking it. Cost over [`scope`](Self::scope): the kill check per
    /// poll (one load once killed, else a walk up the group's chain), and
    /// when a poll is pending with a waker other than the last one
    /// registered, its registration with the group (the group's hook lock
    /// and a waker clone); removing it when the future ends or is dropped
    /// (the lock again).
    ///
    /// A kill reaches the futures of the groups it marks in the tree: of
    /// the killed group and its descendants. A future whose group was
    /// removed before an ancestor's kill still ends `Err(Killed)` at its
    /// next poll, but is not woken by that kill. The wakes run on the
    /// killing thread, after the kill hooks' take and with no lock of the
    /// engine held; for the memory controller's OOM kill that thread is
    /// in the middle of an allocation, as for the hooks
    /// ([`on_kill`](Self::on_kill)): an executor whose waker could block
    /// on a lock its own code holds while allocating would deadlock there
    /// (tokio's wakers only queue the task and notify a worker).
    ///
    /// ```
    /// use std::future::Future;
    /// # let rs = rstat::Rstat::new();
    /// let tenant = rs.root().create_child("tenant")?;
    /// let mut fut = std::pin::pin!(tenant.killable(std::future::pending::<()>()));
    /// let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    /// assert!(fut.as_mut().poll(&mut cx).is_pending());
    /// tenant.kill();
    /// assert_eq!(
    ///     fut.as_mut().poll(&mut cx),
    ///     std::task::Poll::Ready(Err(rstat::Killed { path: "/tenant".into() }))
    /// );
    /// # Ok::<(), rstat::Error>(())
    /// ```
    pub fn killable<F: Future>(&self, fut: F) -> Killable<F> {
        Killable {
            inner: self.scope(fut),
            wake: None,
        }
    }
}

/// Scoping for any future: `fut.in_group(&g)`, `fut.in_current_group()`.
pub trait FutureExt: Future + Sized {
    /// [`group.scope(self)`](Group::scope).
    fn in_group(self, group: &Group) -> Scoped<Self> {
        group.scope(self)
    }

    /// [`group.killable(self)`](Group::killable).
    fn in_group_killable(self, group: &Group) -> Killable<Self> {
        group.killable(self)
    }

    /// Scope `self` in the group current on this thread now
    /// ([`current_group`](crate::current_group)), or in none if the thread
    /// is in no group. The way to pass a group on to a spawned task:
    /// `spawn(fut.in_current_group())` inside a scoped future gives the
    /// task the scope's group.
    fn in_current_group(self) -> Scoped<Self> {
        match crate::attach::current_group() {
            Some(g) => g.scope(self),
            None => Scoped {
                group: None,
                hold_until: 0,
                registered: None,
                fut: self,
            },
        }
    }
}

impl<F: Future> FutureExt for F {}
