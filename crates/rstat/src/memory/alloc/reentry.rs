//! The allocator's re-entry flag: set while this thread is inside the
//! allocator's accounting (or running [`untracked`] code), so that nested
//! allocations pass through. It lives at the crate's lowest layer
//! (`sync`), so that any module can run [`untracked`]; the owner handles
//! (`objcg`) allocate through it.

pub(crate) use crate::sync::{inside, untracked, Inside};
