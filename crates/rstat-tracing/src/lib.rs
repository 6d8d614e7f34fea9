//! Per-tenant accounting for a service already instrumented with
//! `tracing`: add one [`GroupLayer`].
//!
//! The layer reads one field of each new span (say `tenant`), maps its
//! value to an [`rstat::Group`] with a rule you give, and makes that group
//! the thread's current group while the span is entered
//! ([`Group::enter`](rstat::Group::enter)). So the CPU time a thread
//! spends inside the span is charged to the tenant's group (see
//! [`rstat::attach`]), and so is whatever else charges the current group.
//! An `#[instrument]`ed async function's span is entered around every poll
//! of its future, on whichever worker polls it, so async code is covered
//! with no further change.
//!
//! ```
//! use rstat_tracing::GroupLayer;
//! use tracing_subscriber::prelude::*;
//!
//! let rs = rstat::Rstat::new();
//! let tenants = rs.root().create_child("tenants")?;
//! // `tenant = "acme"` -> /tenants/acme, created on first sight.
//! let layer = GroupLayer::children_of("tenant", tenants.clone());
//! let subscriber = tracing_subscriber::registry().with(layer);
//! tracing::subscriber::with_default(subscriber, || {
//!     let span = tracing::info_span!("request", tenant = "acme");
//!     let _in = span.enter();
//!     assert_eq!(rstat::current_group().map(|g| g.path()), Some("/tenants/acme".into()));
//! });
//! assert_eq!(rstat::current_group(), None);
//! # Ok::<(), rstat::Error>(())
//! ```
//!
//! # Which group a span gets
//!
//! At the span's creation: the rule's answer for the field's value if the
//! span has the field (recorded at creation or later with
//! `Span::record`), else its parent span's group (tracing's own
//! parentage: the span that was current where it was created, or the
//! explicit `parent:`), else none. A span with no group changes nothing
//! when entered. A rule that answers `None` (an unknown tenant) leaves the
//! span without a group of its own.
//!
//! # Cost
//!
//! Per span creation: one field visit, and for a span with the field one
//! call of the rule (for [`GroupLayer::children_of`]: a child lookup, a
//! lock) and a handle stored in the span's extensions. Per enter and exit:
//! an extensions lookup and [`Group::enter`](rstat::Group::enter) / the
//! guard's drop, i.e. two thread CPU clock reads when the group changes
//! and none when it is already current (a nested span of the same
//! tenant); a per-thread stack of guards (one push, one pop).
//!
//! # Spans entered on several threads
//!
//! A span can be entered on many threads at once (a shared span, or a
//! future moving between workers). Each enter makes the group current on
//! the entering thread only, with a guard kept on that thread's stack and
//! dropped by the matching exit on the same thread, so each thread charges
//! its own time. Exits out of order are handled as
//! [`rstat::attach`] defines.

#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rstat::{EnterGuard, Error, Group};
use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::Subscriber;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// The mapping from a field value to a group.
type Rule = dyn Fn(&str) -> Option<Group> + Send + Sync;

/// A [`Layer`] that makes a span's group current while the span is
/// entered; see the [crate docs](crate).
#[derive(Clone)]
pub struct GroupLayer {
    field: &'static str,
    rule: Arc<Rule>,
    /// Distinguishes layers on the per-thread guard stack (span ids are
    /// per subscriber).
    id: usize,
}

impl fmt::Debug for GroupLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupLayer")
            .field("field", &self.field)
            .finish()
    }
}

static NEXT_LAYER: AtomicUsize = AtomicUsize::new(0);

impl GroupLayer {
    /// A layer that maps the value of span field `field` to a group with
    /// `rule` (`None`: the span gets no group of its own). The rule runs
    /// once per span that has the field, at its creation (and at each
    /// `record` of the field): keep it cheap and do not enter spans in it.
    pub fn new(
        field: &'static str,
        rule: impl Fn(&str) -> Option<Group> + Send + Sync + 'static,
    ) -> Self {
        GroupLayer {
            field,
            rule: Arc::new(rule),
            id: NEXT_LAYER.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Values are paths under `base` ([`Group::lookup`]): `"acme"` is
    /// `base`'s child `acme`, `"acme/batch"` its grandchild. A value that
    /// names no live group gives no group.
    pub fn by_path(field: &'static str, base: Group) -> Self {
        Self::new(field, move |v| base.lookup(v).ok())
    }

    /// Values name children of `parent`, created on first sight. A value
    /// that is not a valid group name (empty, with `/`, too long) gives no
    /// group. Every distinct value makes a group that lives until someone
    /// removes it: where values come from outside (request headers), use
    /// [`by_path`](Self::by_path) over groups you create, or a rule that
    /// bounds them.
    pub fn children_of(field: &'static str, parent: Group) -> Self {
        Self::new(field, move |v| match parent.child(v) {
            Some(g) => Some(g),
            None => match parent.create_child(v) {
                Ok(g) => Some(g),
                // Another thread created it first.
                Err(Error::NameExists { .. }) => parent.child(v),
                Err(_) => None,
            },
        })
    }

    /// The span field this layer reads.
    pub fn field(&self) -> &'static str {
        self.field
    }

    fn group_for(&self, visit: impl FnOnce(&mut FieldValue)) -> Option<Group> {
        let mut v = FieldValue {
            field: self.field,
            value: None,
        };
        visit(&mut v);
        v.value.and_then(|s| (self.rule)(&s))
    }
}

/// The group of a span, in its extensions.
struct SpanGroup {
    group: Group,
    /// The layer that stored it.
    layer: usize,
}

/// Collects the value of one field as text.
struct FieldValue {
    field: &'static str,
    value: Option<String>,
}

impl Visit for FieldValue {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == self.field {
            self.value = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == self.field {
            // `%x` fields arrive here as their Display text.
            self.value = Some(format!("{value:?}"));
        }
    }
}

thread_local! {
    /// Guards of the spans this thread has entered: (layer, span, guard).
    static GUARDS: RefCell<Vec<(usize, Id, EnterGuard)>> = const { RefCell::new(Vec::new()) };
}

impl<S> Layer<S> for GroupLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let own = if attrs.fields().field(self.field).is_some() {
            self.group_for(|v| attrs.record(v))
        } else {
            None
        };
        let group = own.or_else(|| {
            let parent = span.parent()?;
            let ext = parent.extensions();
            ext.get::<SpanGroup>()
                .filter(|s| s.layer == self.id)
                .map(|s| s.group.clone())
        });
        if let Some(group) = group {
            span.extensions_mut().insert(SpanGroup {
                group,
                layer: self.id,
            });
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        // `None` when this record does not carry the field.
        let Some(group) = self.group_for(|v| values.record(v)) else {
            return;
        };
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        // Replaces the group for later enters; an enter in progress keeps
        // the group it entered.
        ext.replace(SpanGroup {
            group,
            layer: self.id,
        });
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let guard = {
            let ext = span.extensions();
            match ext.get::<SpanGroup>() {
                Some(s) if s.layer == self.id => s.group.enter(),
                _ => return,
            }
        };
        // A thread whose thread-locals are being destroyed drops the guard
        // at once (the span is then not attributed there).
        let _ = GUARDS.try_with(|g| g.borrow_mut().push((self.id, id.clone(), guard)));
    }

    fn on_exit(&self, id: &Id, _ctx: Context<'_, S>) {
        let guard = GUARDS
            .try_with(|g| {
                let mut g = g.borrow_mut();
                let i = g
                    .iter()
                    .rposition(|(layer, span, _)| *layer == self.id && span == id)?;
                Some(g.remove(i).2)
            })
            .ok()
            .flatten();
        // Dropped outside the borrow.
        drop(guard);
    }
}
