//! reinforge-recipes' integration tests, one module per file, linked into one test binary
//! (`cargo test -p reinforge-recipes --test suite MODULE::`): one link of the crate and its
//! dependencies instead of one per file (docs/ci.md). `reward_deadline` has a binary of its
//! own: it bounds each step's wall time by a baseline measured at its start, which tests
//! running beside it would break.

mod common;

mod data_evaluate;
mod in_process;
mod integrity;
mod pairs;
