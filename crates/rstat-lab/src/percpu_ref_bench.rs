//! Seed 001 experiment. Being written.
