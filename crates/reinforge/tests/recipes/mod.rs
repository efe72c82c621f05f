//! reinforge-recipes' own tests (the default experiment in-process, dataset runs and their
//! integrity monitor, preference rows, held-out evaluation), in this suite rather than a binary
//! of their own: one link of libtorch fewer (docs/ci.md). reinforge-recipes keeps one binary,
//! `reward_deadline`, whose step bounds must not share the machine with other tests.

#[path = "../../../reinforge-recipes/tests/common/mod.rs"]
mod common;

mod data_evaluate;
mod in_process;
mod integrity;
mod pairs;
