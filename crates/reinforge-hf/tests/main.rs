//! reinforge-hf's integration tests, one module per file, linked into one test binary
//! (`cargo test -p reinforge-hf --test suite MODULE::`): one link of the crate and its
//! dependencies instead of one per file (docs/ci.md).

mod errors;
mod placeholders;
mod transformers_parity;
mod vision;
