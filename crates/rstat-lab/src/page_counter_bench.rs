//! Seed 002 experiment. Being written.
