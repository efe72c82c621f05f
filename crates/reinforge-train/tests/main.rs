//! reinforge-train's integration tests, one module per file, linked into one test binary
//! (`cargo test -p reinforge-train --test suite MODULE::`): one link of the crate and its
//! dependencies instead of one per file (docs/ci.md). Tests that run a recipe (the default
//! experiment, a dataset run) live in reinforge-recipes.

mod config;
mod multi_turn;
mod presets;
mod rl_settings;
mod rl_step;
mod seeds;
mod sft;
mod trainer;
mod trainer_start;
mod trainer_state;
