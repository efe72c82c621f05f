//! reinforge-verify's integration tests, one module per file, linked into one test binary
//! (`cargo test -p reinforge-verify --test suite MODULE::`): one link of the crate and its
//! dependencies instead of one per file (docs/ci.md).

mod bounded;
mod cli;
mod fixtures;
mod free_text;
mod policies;
mod restated;
