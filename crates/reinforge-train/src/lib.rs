//! reinforge's training library: everything a training run is, without the command line
//! (clap lives in the binary, which turns its arguments into this crate's config) and without
//! tensors (every tensor is reinforge-torch's; the RL step calls it twice per step).
//!
//! - `config` (+ `overrides`, `presets`, `validate`): the TOML configuration, its one set of
//!   defaults, `--set` overrides, presets and checks;
//! - `trainer/`: the one trainer and run loop, checkpoints, open-or-resume, PPO's critic state;
//! - `rl/`: the RL phase and its step as five stages; `sft`: the SFT step and schedule;
//! - `env`, `rollout/`, `multi_turn`: environments, rollout engines, multi-turn episodes;
//! - `arith/`: the default experiment; `run_dir`, `seeds`, `interrupt`, `dp`, `progress`: the
//!   run directory, per-step seeds, Ctrl-C, data parallelism and progress bars.

pub mod arith;
pub mod config;
pub mod data;
pub mod derl;
pub mod dp;
pub mod env;
pub mod explain;
pub mod interrupt;
pub mod judge;
pub mod loaded;
pub mod multi_turn;
pub mod offline;
pub mod overrides;
pub mod pairs;
pub mod presets;
pub mod progress;
pub mod rl;
pub mod rollout;
pub mod run_dir;
pub mod score;
pub mod scorers;
pub mod seeds;
pub mod sft;
pub mod trainer;
pub mod validate;
