//! reinforge's training core: everything a training run is, without its recipes (the default
//! experiment, dataset environments, DERL, the offline trainers: reinforge-recipes, which
//! builds on this crate and which this crate never imports), without the command line (clap
//! lives in the binary, which turns its arguments into this crate's config) and without
//! tensors (every tensor is reinforge-torch's; the RL step calls it twice per step).
//!
//! - `config` (+ `overrides`, `presets`, `validate`): the TOML configuration, its one set of
//!   defaults, `--set` overrides, presets and checks; `flag_config`: the config files and
//!   `--set` of the commands whose settings are flags (the offline trainers);
//! - `trainer/`: the one trainer and run loop, checkpoints, open-or-resume, PPO's critic state;
//! - `rl/`: the RL phase and its step as five stages; `sft`: the SFT step and schedule;
//! - `env`, `rollout/`, `multi_turn`: environments, rollout engines, multi-turn episodes;
//! - `run_dir`, `seeds`, `interrupt`, `dp`, `launch`, `progress`: the run directory, per-step
//!   seeds, Ctrl-C, data parallelism and `--nproc`'s local ranks, progress bars.

pub mod config;
pub mod dp;
pub mod env;
pub mod flag_config;
pub mod interrupt;
pub mod launch;
pub mod multi_turn;
pub mod overrides;
pub mod presets;
pub mod progress;
pub mod rl;
pub mod rollout;
pub mod run_dir;
pub mod seeds;
pub mod sft;
pub mod trainer;
pub mod validate;
