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
//! # Filters: filter your other layers, not the subscriber
//!
//! A filter added as a layer of its own (`.with(LevelFilter::WARN)`,
//! `.with(EnvFilter::from_default_env())`, the `fmt().with_env_filter(..)`
//! builder, `tracing_subscriber::fmt::init()` reading `RUST_LOG`) is
//! *global*: the registry does not create the spans it disables, for any
//! layer. An `info_span!(tenant = "acme")` under a global `warn` filter
//! does not exist, so nothing can account it: its work is charged to the
//! enclosing span's group, or to none, and `RUST_LOG=warn` in production
//! would turn the accounting off. No layer can change that from inside.
//!
//! So filter **per layer**: give the fmt layer (and any other) its filter
//! with [`with_filter`](tracing_subscriber::Layer::with_filter), and add
//! the `GroupLayer` with no filter. It then sees every span, at every
//! level, whatever the other layers' filters say, in either order:
//!
//! ```
//! use rstat_tracing::GroupLayer;
//! use tracing_subscriber::{fmt, prelude::*, EnvFilter};
//!
//! let rs = rstat::Rstat::new();
//! let tenants = rs.root().create_child("tenants")?;
//! let subscriber = tracing_subscriber::registry()
//!     // What is logged: in production, `EnvFilter::from_default_env()`.
//!     .with(fmt::layer().with_filter(EnvFilter::new("warn")))
//!     // What is accounted: every span, unfiltered.
//!     .with(GroupLayer::children_of("tenant", tenants));
//! tracing::subscriber::with_default(subscriber, || {
//!     let _in = tracing::info_span!("request", tenant = "acme").entered();
//!     // Not logged (below warn), accounted all the same.
//!     assert_eq!(rstat::current_group().map(|g| g.path()), Some("/tenants/acme".into()));
//! });
//! # Ok::<(), rstat::Error>(())
//! ```
//!
//! The layer never filters anything itself: it is interested in every
//! callsite, enables every span and event, and gives no level hint, so
//! it neither hides events from the other layers nor lowers the level
//! tracing computes from their filters (a per-layer filter on the fmt
//! layer then only decides what the fmt layer sees).
//!
//! # Field values
//!
//! The rule gets the field's value as text, the same however the span
//! recorded it: `tenant = "acme"`, `tenant = %name` (its `Display` text),
//! `tenant = ?name` (its `Debug` text) and `span.record("tenant", ..)` of
//! any of these select the same group. `Debug` text that is one quoted
//! string literal (what `Debug` of a `str` or `String` writes) is read
//! back to the string, escapes undone (`?"o\"brien"` is `o"brien`); other
//! `Debug` text (`TenantId(7)`, `Some("x")`), numbers and booleans are
//! taken as written (`tenant = 42` is `"42"`). So a `Display` text that is
//! itself a quoted literal is unquoted too.
//!
//! # Values that match no group
//!
//! A span whose field has a value the rule answers `None` for (an unknown
//! tenant, a name that is not a valid group name) gets no group of its
//! own; the value is *unmatched*. Unmatched values are not silent:
//!
//! - each is counted: [`GroupLayer::unmatched_count`], and, after
//!   [`GroupLayer::count_unmatched`], in the engine, as the counter
//!   [`UNMATCHED_STAT`] (`tracing.unmatched`) of the layer's base group
//!   (the parent of [`children_of`](GroupLayer::children_of), the base of
//!   [`by_path`](GroupLayer::by_path), the root for a rule of your own).
//!   It is a stat like any other: the Prometheus exporter shows it as the
//!   series `rstat_tracing_unmatched_total{group="/tenants"}`, and `rstat
//!   top` as the column `tracing.unmatched`;
//! - each distinct value is logged once, on standard error (not as a
//!   tracing event, which would come back into this subscriber), or
//!   handed to your function ([`GroupLayer::on_unmatched`]). The layer
//!   remembers at most [`MAX_LOGGED_VALUES`] values of at most
//!   [`MAX_LOGGED_VALUE_BYTES`] bytes each; past that, values are counted
//!   and not logged, and the last value logged says so.
//!
//! ```
//! use rstat_tracing::GroupLayer;
//! use tracing_subscriber::prelude::*;
//!
//! let rs = rstat::Rstat::new();
//! let tenants = rs.root().create_child("tenants")?;
//! let layer = GroupLayer::by_path("tenant", tenants.clone()) // known tenants only
//!     .count_unmatched(&rs)?
//!     .on_unmatched(|u| eprintln!("{u}"));
//! let counts = layer.clone(); // clones share the count
//! tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
//!     let _in = tracing::info_span!("request", tenant = "nobody").entered();
//! });
//! assert_eq!(counts.unmatched_count(), 1);
//! let tracing_stats = rs.controllers().into_iter().find(|c| c.name() == "tracing").unwrap();
//! assert_eq!(tracing_stats.read_exact(&tenants)?.get("unmatched"), Some(1));
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
//! span without a group of its own (see "Values that match no group").
//!
//! # Cost
//!
//! What each callback of the layer does, per span:
//!
//! 1. **Creation** (`on_new_span`): the new span's registry entry is
//!    looked up once. If the span has the field, its value is read (a
//!    `str` in place, a `%` or `?` value formatted on the stack, on the
//!    heap only past 128 bytes) and resolved to a group:
//!    - [`children_of`](GroupLayer::children_of) and
//!      [`by_path`](GroupLayer::by_path) first look in the calling
//!      thread's cache of values (a hash of the value, a lock no other
//!      thread takes on its span path, one load to check the group is
//!      still online, a reference taken): no lock shared between
//!      threads, no string search of the parent's children. A miss runs
//!      the rule (the parent's children lock and a child lookup, the
//!      group made on first sight; for a path, one lookup per component)
//!      and stores its answer. See "The value cache" below;
//!    - a rule of your own ([`new`](GroupLayer::new)) runs at each span.
//!
//!    A span without the field reads its parent's extensions instead.
//!    The group, if any, is stored in the span's extensions (the
//!    registry's: one small allocation).
//! 2. **Enter** (`on_enter`): a registry lookup of the span and a read of
//!    its extensions (a read lock), then
//!    [`Group::enter`](rstat::Group::enter): a group reference taken, a
//!    push on rstat's per-thread stack, and, only when the thread's
//!    current group changes, one read of the monotonic clock (no system
//!    call) and the segment bookkeeping of [`rstat::attach`]; the thread's
//!    CPU clock (a system call) is read only at reconciliations: once per
//!    [`RECONCILE_PERIOD`](rstat::attach::RECONCILE_PERIOD) while the
//!    thread goes through at most 32 groups in that time and stays in
//!    each for less than [`LONG_SEGMENT`](rstat::attach::LONG_SEGMENT)
//!    at a time (see [`rstat::attach`] for the other cases). Entering the
//!    group that is already current (a nested span of the same tenant)
//!    reads no clock.
//!    The guard goes on this crate's per-thread stack (one push).
//! 3. **Exit** (`on_exit`): the guard is taken off that stack (a pop; a
//!    search when spans exit out of order) and dropped: a clock read when
//!    the current group changes back, the reference put.
//! 4. **Close**: the extension's group reference is put.
//!
//! A future made with `.instrument(span)` (or an `#[instrument]`ed async
//! function) enters and exits its span around each poll, and once more
//! to drop the inner future, after which the span closes: a request
//! served in `n` polls costs one creation, `n + 1` enters and exits (two
//! clock reads each, as its thread goes in and out of the group) and a
//! close.
//!
//! Per unmatched value: an atomic add, a lock and a set lookup (an insert
//! and a log line the first time), and an add to the engine's counter if
//! counted there; unmatched values are not cached, so each such span runs
//! the rule.
//!
//! # The value cache
//!
//! [`children_of`](GroupLayer::children_of) and
//! [`by_path`](GroupLayer::by_path) layers (and their clones) keep, per
//! thread, the groups of the last [`CACHED_VALUES`] values resolved. A
//! cached group is used only while it is online: the answer of both rules
//! for a value cannot change while the group it named is live, and a
//! removed group's entry is dropped and the value resolved anew, so a
//! tenant removed and made again is charged in its new group, and a span
//! never gets a removed group from the cache. `children_of` still makes
//! exactly one group per value (the cache stores what the rule answered).
//! Values past the bound, and values longer than 256 bytes, resolve
//! through the rule as before.
//!
//! An entry holds a reference on its group, so a removed group stays
//! allocated (a zombie, [`Rstat::zombie_count`]) while an entry names it:
//! entries of removed groups are dropped when a lookup meets them, and
//! every [`CACHE_SWEEP_PERIOD`] lookups on a thread every thread's cache
//! is swept of them (an idle thread's too); dropping the layer (its last
//! clone) empties every thread's cache.
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

mod cache;
mod unmatched;
mod value;

use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rstat::{EnterGuard, Error, Group, ItemHandle, Rstat};
use tracing_core::field::Visit;
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::subscriber::Interest;
use tracing_core::{Metadata, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

pub use cache::{CACHED_VALUES, CACHE_SWEEP_PERIOD};
pub use unmatched::{Unmatched, MAX_LOGGED_VALUES, MAX_LOGGED_VALUE_BYTES, UNMATCHED_STAT};
use value::FieldValue;

/// The mapping from a field value to a group.
type Rule = dyn Fn(&str) -> Option<Group> + Send + Sync;

/// What is told of an unmatched value, once per value.
type Logger = dyn Fn(&Unmatched<'_>) + Send + Sync;

/// A [`Layer`] that makes a span's group current while the span is
/// entered; see the [crate docs](crate).
///
/// Add it without a filter of its own and filter the other layers (see
/// the crate docs' "Filters"). Clones share the unmatched-value count and
/// memory.
#[derive(Clone)]
pub struct GroupLayer {
    field: &'static str,
    rule: Arc<Rule>,
    /// Distinguishes layers on the per-thread guard stack (span ids are
    /// per subscriber).
    id: usize,
    /// The group of [`children_of`](Self::children_of) and
    /// [`by_path`](Self::by_path), where unmatched values are counted.
    base: Option<Group>,
    /// The per-thread value -> group cache, for the rules whose answer
    /// for a value stays right while the group is live (module `cache`).
    cache: Option<Arc<cache::Cache>>,
    unmatched: Arc<unmatched::State>,
    log: Arc<Logger>,
    /// The engine counter unmatched values are added to, and the group.
    stat: Option<(ItemHandle, Group)>,
}

impl fmt::Debug for GroupLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupLayer")
            .field("field", &self.field)
            .field("unmatched", &self.unmatched.count())
            .finish()
    }
}

static NEXT_LAYER: AtomicUsize = AtomicUsize::new(0);

impl GroupLayer {
    /// A layer that maps the value of span field `field` to a group with
    /// `rule` (`None`: the span gets no group of its own, and the value is
    /// unmatched). The rule runs once per span that has the field, at its
    /// creation (and at each `record` of the field): keep it cheap and do
    /// not enter spans in it.
    pub fn new(
        field: &'static str,
        rule: impl Fn(&str) -> Option<Group> + Send + Sync + 'static,
    ) -> Self {
        GroupLayer {
            field,
            rule: Arc::new(rule),
            id: NEXT_LAYER.fetch_add(1, Ordering::Relaxed),
            base: None,
            cache: None,
            unmatched: Arc::default(),
            log: Arc::new(unmatched::log_to_stderr),
            stat: None,
        }
    }

    /// Values are paths under `base` ([`Group::lookup`]): `"acme"` is
    /// `base`'s child `acme`, `"acme/batch"` its grandchild. A value that
    /// names no live group gives no group (it is unmatched). Answers are
    /// cached per thread (see the crate docs' "The value cache").
    pub fn by_path(field: &'static str, base: Group) -> Self {
        let b = base.clone();
        Self::new(field, move |v| b.lookup(v).ok()).with_base(base)
    }

    /// Values name children of `parent`, created on first sight. A value
    /// that is not a valid group name (empty, with `/`, too long) gives no
    /// group (it is unmatched). Every distinct value makes a group that
    /// lives until someone removes it: where values come from outside
    /// (request headers), use [`by_path`](Self::by_path) over groups you
    /// create, or a rule that bounds them. Answers are cached per thread
    /// (see the crate docs' "The value cache").
    pub fn children_of(field: &'static str, parent: Group) -> Self {
        let p = parent.clone();
        Self::new(field, move |v| match p.child(v) {
            Some(g) => Some(g),
            None => match p.create_child(v) {
                Ok(g) => Some(g),
                // Another thread created it first.
                Err(Error::NameExists { .. }) => p.child(v),
                Err(_) => None,
            },
        })
        .with_base(parent)
    }

    /// Set the base group, and cache the rule's answers (it is
    /// `children_of`'s or `by_path`'s).
    fn with_base(mut self, base: Group) -> Self {
        self.base = Some(base);
        self.cache = Some(Arc::default());
        self
    }

    /// Also count unmatched values in `rs`: the counter set
    /// [`UNMATCHED_STAT`] (controller `tracing`, item `unmatched`),
    /// registered on first use and shared by every layer on `rs`, gets +1
    /// in this layer's base group (the parent of
    /// [`children_of`](Self::children_of), the base of
    /// [`by_path`](Self::by_path), `rs`'s root for [`new`](Self::new))
    /// per unmatched value. The exporter and `rstat top` then show it
    /// (see the crate docs).
    ///
    /// Errors: [`Error::ForeignGroup`] if the base group is not one of
    /// `rs`'s; those of [`Rstat::register_counters`] (e.g. no room for
    /// another controller); [`Error::UnknownStatName`] if `rs` already has
    /// a controller named `tracing` without an `unmatched` item (it is not
    /// this crate's: rename it).
    pub fn count_unmatched(mut self, rs: &Rstat) -> Result<Self, Error> {
        let group = self.base.clone().unwrap_or_else(|| rs.root().clone());
        if !group.belongs_to(rs) {
            return Err(Error::ForeignGroup);
        }
        let (name, item) = UNMATCHED_STAT;
        let ctl = match rs.register_counters(name, &[item]) {
            Ok(c) => c,
            // Registered by another layer (controllers are never
            // unregistered, so it is still there).
            Err(Error::ControllerExists { .. }) => rs
                .controllers()
                .into_iter()
                .find(|c| c.name() == name)
                .ok_or(Error::ControllerExists {
                    name: name.to_owned(),
                })?,
            Err(e) => return Err(e),
        };
        self.stat = Some((ctl.item(item)?, group));
        Ok(self)
    }

    /// Tell `log` of each distinct unmatched value, once, instead of
    /// writing a line to standard error (the default, which is
    /// [`Unmatched`]'s `Display`). It runs inside the subscriber's span
    /// callbacks, with no lock of the layer held: a tracing event it
    /// emits goes to whatever dispatcher is current there (a scoped one
    /// drops it), and a span it makes with this layer's field and an
    /// unmatched value is counted but, already remembered, not logged
    /// again.
    pub fn on_unmatched(mut self, log: impl Fn(&Unmatched<'_>) + Send + Sync + 'static) -> Self {
        self.log = Arc::new(log);
        self
    }

    /// How many values of the field matched no group so far, in every
    /// clone of this layer: at span creation and at each `record` of the
    /// field. Cost: one load.
    pub fn unmatched_count(&self) -> u64 {
        self.unmatched.count()
    }

    /// The span field this layer reads.
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// The group for the field's value among what `visit` records, if the
    /// field is there and the rule has one (else the value is counted and
    /// maybe logged as unmatched).
    fn group_for(&self, visit: impl FnOnce(&mut dyn Visit)) -> Option<Group> {
        let mut found = None;
        let mut v = FieldValue {
            field: self.field,
            with: |value: &str| found = self.resolve(value),
        };
        visit(&mut v);
        found
    }

    /// The group for `value`, or `None` (then counted and maybe logged as
    /// unmatched).
    fn resolve(&self, value: &str) -> Option<Group> {
        let found = match &self.cache {
            Some(c) => c.get_or(value, |v| (self.rule)(v)),
            None => (self.rule)(value),
        };
        if found.is_some() {
            return found;
        }
        if let Some((item, group)) = &self.stat {
            // Cannot fail: `count_unmatched` checked the group's engine.
            let _ = item.add(group, 1);
        }
        if let Some(u) = self.unmatched.note(self.field, value) {
            (self.log)(&u);
        }
        None
    }
}

/// The group of a span, in its extensions.
struct SpanGroup {
    group: Group,
    /// The layer that stored it.
    layer: usize,
}

thread_local! {
    /// Guards of the spans this thread has entered: (layer, span, guard).
    static GUARDS: RefCell<Vec<(usize, Id, EnterGuard)>> = const { RefCell::new(Vec::new()) };
}

impl<S> Layer<S> for GroupLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    // The three filtering hooks, spelled out because accounting depends on
    // them: this layer must see every span, and, added without a filter of
    // its own, whatever it answered here would filter every other layer
    // too (a `never` or a `false` from an unfiltered layer disables the
    // callsite for the whole subscriber).

    /// Every callsite: spans of any level, and events (which this layer
    /// ignores, but must not hide from the others).
    fn register_callsite(&self, _metadata: &'static Metadata<'static>) -> Interest {
        Interest::always()
    }

    /// Everything, for the same reason.
    fn enabled(&self, _metadata: &Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        true
    }

    /// No hint. Beside layers filtered per layer, tracing then lets every
    /// level through to the per-layer filters, each deciding for its own
    /// layer only; under a global filter, that filter's hint stands. A
    /// hint of `TRACE` would lift a global filter's cap too, for nothing:
    /// the registry creates no span a global filter disables.
    fn max_level_hint(&self) -> Option<LevelFilter> {
        None
    }

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
                // From the innermost, usually this span's: one comparison,
                // and removing the last element is a pop.
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
