//! reinforge-serve's hostile-client tests (`../hostile.rs`), a test binary of their own
//! (`cargo test -p reinforge-serve --test hostile`).
//!
//! Their bounds (/health and /v1/verify answer within 1 s while clients stall uploads, send
//! 4 MB prompts, fork-bomb and flood the sandbox) are acceptance criteria of the server: a
//! hostile client must not stall the others. A bound measured on a machine that other tests
//! load at the same time measures those tests too. So the bounds stay at 1 s and the tests run
//! alone: cargo runs test binaries one after another, so no test of `--test suite` runs beside
//! this binary, and every test here takes `common::exclusive()` first, so one hostile test runs
//! at a time whatever `--test-threads` is.

#[path = "../common/mod.rs"]
mod common;

#[path = "../hostile.rs"]
mod hostile;
