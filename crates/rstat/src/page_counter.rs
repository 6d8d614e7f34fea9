//! Hierarchical page counter (seed 002). Being written.
