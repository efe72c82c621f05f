//! reinforge-train's integration tests, one module per file, linked into one test binary
//! (`cargo test -p reinforge-train --test suite MODULE::`): one link of the crate and its
//! dependencies instead of one per file (docs/ci.md). `reward_deadline` has a binary of its
//! own: it bounds each step's wall time by a baseline measured at its start, which tests
//! running beside it would break.

mod common;

mod config;
mod data_evaluate;
mod in_process;
mod integrity;
mod multi_turn;
mod pairs;
mod presets;
mod rl_settings;
mod rl_step;
mod seeds;
mod sft;
mod trainer;
mod trainer_start;
mod trainer_state;
