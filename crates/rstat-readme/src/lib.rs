//! The README's Rust snippets, compiled and run as doc-tests of this
//! crate (`cargo test -p rstat-readme --doc`), so none can drift from the
//! library: every snippet is a whole program whose claims are assertions.
//! The crate has no code of its own.

#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct Readme;
