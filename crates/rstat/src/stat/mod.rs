//! The rstat mechanism: groups' per-CPU stats, lazily aggregated on the
//! read side. This is the kernel's `kernel/cgroup/rstat.c`, in the shape
//! upstream reached by v6.17, as one layer: it knows nothing of the
//! hierarchy's API, the controllers' handles or the facade above it, and
//! calls a controller only through its op table ([`ops`]).
//!
//! - **Update** ([`update`]): one atomic add (or restartable section) on
//!   this CPU's slot of (group, controller), then a racy on-list check;
//!   the first update since the last flush pushes the group's node on a
//!   lock-free (domain, CPU) backlog ([`backlog`]). No lock, no
//!   allocation, no shared line written in the common case.
//! - **Flush** (on read): under the domain's own lock, for each CPU,
//!   drain the backlog into that CPU's *updated tree* (insert bottom-up,
//!   stop at the first linked ancestor), cut out the subtree being read and
//!   fold each changed group's per-CPU deltas into its totals, children
//!   before parents ([`tree`], [`fold`]). Cost ∝ groups that changed, not
//!   tree size.
//! - **Per-group stat state** ([`css`]): the per-CPU slots, the totals,
//!   and the `Threshold` policy's pending-update counters; the
//!   [`policy`] decides when a read flushes.
//! - **Paced reads** ([`pace`]): each flush stamps the subtree it flushed
//!   with the time it started, so a `Threshold` read past its threshold
//!   can copy a flush younger than the read pace instead of flushing, and
//!   ask the periodic flusher for the next root flush.
//! - **Separate trees** (kernel v6.16): each controller has its own
//!   updated trees and lock (a *domain*), so reading `cpu` stats never
//!   pays for a busy memory controller. [`Builder::unified`] rebuilds the
//!   old single tree for comparison.
//! - **Exact reads**, stronger than the kernel: any update that completed
//!   before a read began is in that read's result; see [`backlog`]'s
//!   `# Synchronization`.
//!
//! loom models of these protocols drive this layer's own types (a domain,
//! nodes, css and a test controller; no engine above): `tests_loom`.
//!
//! Layers, bottom up: `backlog` and `pace` → `tree` (nodes, domains, the
//! flush's walk) → `css` (per-group state) → `update` and `fold` → `policy`; `ops`
//! is the op table they call up through.
//!
//! [`Builder::unified`]: crate::Builder::unified

pub(crate) mod backlog;
pub(crate) mod css;
pub(crate) mod fold;
pub(crate) mod ops;
pub(crate) mod pace;
pub mod policy;
pub(crate) mod tree;
pub(crate) mod update;

#[cfg(test)]
mod tests;
#[cfg(all(test, rstat_loom))]
mod tests_loom;
