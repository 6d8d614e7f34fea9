//! Per-CPU reference counts (seed 001). Being written.
