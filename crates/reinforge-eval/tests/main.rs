//! reinforge-eval's integration tests, one module per file, linked into one test binary
//! (`cargo test -p reinforge-eval --test suite MODULE::`): one link of the crate and its
//! dependencies instead of one per file (docs/ci.md).

mod common;

mod arena_sandwich;
mod covariates;
mod llmfao;
mod mpg;
mod passk_oracle;
mod ppe_ordering;
mod rewardbench2_reference;
mod tournament;
