//! Which group a request belongs to: the [`MapRequest`] rule and the
//! ready-made ones (a header, a path segment, an extension), over
//! [`Children`] of a parent group.
//!
//! # Untrusted names
//!
//! A header or a path segment comes from the client. The ready-made rules
//! take a name from it only if it is a *tenant name*
//! ([`is_tenant_name`]): 1 to [`MAX_TENANT_NAME_LEN`] bytes of ASCII
//! letters, digits, `-`, `_` and `.`, and not `.` or `..`. Anything else
//! (empty, longer, not UTF-8, with `/`, spaces, `%`-escapes or control
//! characters) maps the request to no group, before any lookup: the
//! length is checked first, so a huge value costs one comparison. And a
//! rule that creates groups ([`Children::create`]) creates at most the
//! number you give over its lifetime; past that, unknown names map to no
//! group. So clients cannot make arbitrary groups, nor unboundedly many.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http::header::HeaderName;
use http::Request;
use rstat::{Error, Group};

/// The longest name the ready-made rules accept, in bytes.
pub const MAX_TENANT_NAME_LEN: usize = 64;

/// Whether `name` may name a group when it comes from a request: 1 to
/// [`MAX_TENANT_NAME_LEN`] bytes, each an ASCII letter, digit, `-`, `_` or
/// `.`, and not `.` or `..`. Cost: the length check, then one pass over at
/// most [`MAX_TENANT_NAME_LEN`] bytes.
pub fn is_tenant_name(name: &str) -> bool {
    (1..=MAX_TENANT_NAME_LEN).contains(&name.len())
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The rule that maps a request to its group: `None` for a request with
/// no group of its own (the layer's [`Unmatched`](crate::Unmatched)
/// setting decides what happens to it).
///
/// Any `Fn(&Request<B>) -> Option<Group>` is one. It runs once per
/// request, on the thread that calls the service, before the request is
/// counted: keep it cheap, and do not block in it.
pub trait MapRequest<B> {
    /// The group of `req`, if it has one.
    fn group_for(&self, req: &Request<B>) -> Option<Group>;
}

impl<B, F> MapRequest<B> for F
where
    F: Fn(&Request<B>) -> Option<Group>,
{
    fn group_for(&self, req: &Request<B>) -> Option<Group> {
        self(req)
    }
}

/// Names to children of a parent group: found among the live children,
/// and, if so configured, created on first sight up to a cap.
///
/// Cheap to clone (one reference count); clones share the cap.
#[derive(Clone)]
pub struct Children {
    inner: Arc<ChildrenInner>,
}

struct ChildrenInner {
    parent: Group,
    /// `None`: lookup only.
    max_created: Option<usize>,
    /// Groups this rule created (never decreases).
    created: AtomicUsize,
}

impl std::fmt::Debug for Children {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Children")
            .field("parent", &self.inner.parent)
            .field("max_created", &self.inner.max_created)
            .field("created", &self.created())
            .finish()
    }
}

impl Children {
    /// Names map to `parent`'s live children of that name only; an unknown
    /// name maps to no group. For tenants you create yourself.
    pub fn lookup(parent: Group) -> Self {
        Self::with(parent, None)
    }

    /// Names map to `parent`'s children of that name, created on first
    /// sight, at most `max_created` of them over this rule's lifetime
    /// (shared by its clones): once that many were created, a name that
    /// names no live child maps to no group. Removing a created group does
    /// not give its slot back (make a new rule to start over), so the
    /// bound holds however clients choose names. A name that names a live
    /// child always maps to it, created by this rule or not.
    pub fn create(parent: Group, max_created: usize) -> Self {
        Self::with(parent, Some(max_created))
    }

    fn with(parent: Group, max_created: Option<usize>) -> Self {
        Children {
            inner: Arc::new(ChildrenInner {
                parent,
                max_created,
                created: AtomicUsize::new(0),
            }),
        }
    }

    /// The parent group.
    pub fn parent(&self) -> &Group {
        &self.inner.parent
    }

    /// How many groups this rule (and its clones) created so far.
    pub fn created(&self) -> usize {
        self.inner.created.load(Ordering::Relaxed)
    }

    /// The group for `name`: `None` if `name` is not a tenant name
    /// ([`is_tenant_name`]), if it names no live child and this rule does
    /// not create, or creates no more (its cap is reached, or the parent
    /// was removed).
    ///
    /// Cost: the name check, then [`Group::child`] (the parent's children
    /// lock, a map lookup, one reference taken); a creation is
    /// [`Group::create_child`] (the engine's topology lock and per-CPU
    /// allocations), once per new name.
    pub fn group_for(&self, name: &str) -> Option<Group> {
        if !is_tenant_name(name) {
            return None;
        }
        let parent = &self.inner.parent;
        if let Some(g) = parent.child(name) {
            return Some(g);
        }
        let max = self.inner.max_created?;
        // Take a slot before creating, so concurrent first sights of many
        // names cannot overshoot the cap.
        let created = &self.inner.created;
        created
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                (c < max).then_some(c + 1)
            })
            .ok()?;
        match parent.create_child(name) {
            Ok(g) => Some(g),
            Err(e) => {
                // Nothing created: give the slot back.
                created.fetch_sub(1, Ordering::Relaxed);
                match e {
                    // Another request created it first.
                    Error::NameExists { .. } => parent.child(name),
                    // The parent was removed, or the engine is out of
                    // per-CPU memory: no group.
                    _ => None,
                }
            }
        }
    }
}

/// Maps a request to a child of a parent by the value of one header: the
/// first value of that header, if it is a tenant name ([`is_tenant_name`];
/// a value that is not visible ASCII, e.g. not UTF-8, is not).
#[derive(Clone, Debug)]
pub struct ByHeader {
    name: HeaderName,
    children: Children,
}

impl ByHeader {
    /// Map by header `name`'s value under `children`.
    pub fn new(name: HeaderName, children: Children) -> Self {
        ByHeader { name, children }
    }

    /// The header read.
    pub fn header(&self) -> &HeaderName {
        &self.name
    }

    /// The children rule.
    pub fn children(&self) -> &Children {
        &self.children
    }
}

impl<B> MapRequest<B> for ByHeader {
    /// Cost: one header lookup (a hash of the name), the length check, a
    /// scan of at most [`MAX_TENANT_NAME_LEN`] bytes, then
    /// [`Children::group_for`].
    fn group_for(&self, req: &Request<B>) -> Option<Group> {
        let v = req.headers().get(&self.name)?;
        if v.len() > MAX_TENANT_NAME_LEN {
            return None;
        }
        self.children.group_for(v.to_str().ok()?)
    }
}

/// Maps a request to a child of a parent by one segment of its URI path:
/// segment `index` (0 is the first) of the path's non-empty segments,
/// taken as it stands in the URI (not percent-decoded, so an escaped
/// character makes it no tenant name). `/t/acme/orders` with index 1 maps
/// to the child `acme`.
#[derive(Clone, Debug)]
pub struct ByPathSegment {
    index: usize,
    children: Children,
}

impl ByPathSegment {
    /// Map by the path's non-empty segment `index` under `children`.
    pub fn new(index: usize, children: Children) -> Self {
        ByPathSegment { index, children }
    }
}

impl<B> MapRequest<B> for ByPathSegment {
    /// Cost: a scan of the path up to the segment, then
    /// [`Children::group_for`].
    fn group_for(&self, req: &Request<B>) -> Option<Group> {
        let seg = req
            .uri()
            .path()
            .split('/')
            .filter(|s| !s.is_empty())
            .nth(self.index)?;
        self.children.group_for(seg)
    }
}

/// Maps a request to the [`Group`] an earlier layer put in its extensions
/// (`req.extensions_mut().insert(group)`, e.g. after authenticating the
/// tenant), if any. Cost: one extensions lookup and one reference taken.
#[derive(Clone, Copy, Debug, Default)]
pub struct FromExtension;

impl<B> MapRequest<B> for FromExtension {
    fn group_for(&self, req: &Request<B>) -> Option<Group> {
        req.extensions().get::<Group>().cloned()
    }
}
