//! reinforge's integration tests, one module per file, linked into one test binary
//! (`cargo test -p reinforge --test suite MODULE::`): one link of the crate and its
//! dependencies instead of one per file (docs/ci.md).

mod common;

mod arena_tools;
mod bad_input;
mod config_files;
mod derl;
mod device_check;
mod distill;
mod distributed;
mod dpo;
mod estimators;
mod explain;
mod gpu_check;
mod hf_commands;
mod hf_train;
mod integrity;
mod invariants;
mod judge;
mod losses;
mod p2l;
mod pipeline;
mod preference_memory;
mod real_model_train;
mod recipes;
mod rm;
mod rollouts;
mod serve_hostile;
mod sft;
mod tinker;
mod tinker_cookbook;
mod tools;
mod tracking;
mod vlm_commands;
