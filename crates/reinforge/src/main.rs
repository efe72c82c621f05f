//! `reinforge`: reinforcement-learning post-training of language models.

mod arith;
mod bench;
mod cli;
mod config;
mod dp;
mod env;
mod hf;
mod interrupt;
mod launch;
mod multi_turn;
mod overrides;
mod presets;
mod progress;
mod rl;
mod rollout;
mod run_dir;
mod seeds;
mod sft;
mod tools;
mod trainer;
mod validate;

fn main() -> std::process::ExitCode {
    match cli::main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
