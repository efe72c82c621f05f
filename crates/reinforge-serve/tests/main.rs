//! reinforge-serve's integration tests, one module per file, linked into one test binary
//! (`cargo test -p reinforge-serve --test suite MODULE::`): one link of the crate and its
//! dependencies instead of one per file (docs/ci.md). The hostile-client tests (`hostile.rs`)
//! are a binary of their own (`--test hostile`, `hostile/main.rs`): their time bounds must not
//! share the machine with other tests.

mod common;

mod limits;
mod policy;
mod policy_engine;
mod protocols;
#[cfg(feature = "cli")]
mod shutdown;
mod stream_detok;
mod tinker_routes;
