//! Sequential semantics (the kernel's, mode by mode) and a small
//! multi-threaded check. The kill-vs-everything stress test is in
//! `tests/percpu_ref_stress.rs`; the interleavings are in `loom_tests`.
//!
//! Every test runs twice: on the locked fast path, and on the default one
//! (restartable sections where the machine has them; simulated under Miri).

mod locked {
    use crate::percpu_ref::InitFlags;
    const KIND: InitFlags = InitFlags::LOCKED_SLOTS;
    include!("suite.rs");
}

mod default_path {
    use crate::percpu_ref::InitFlags;
    const KIND: InitFlags = InitFlags::PERCPU;
    include!("suite.rs");
}
