//! `reinforge`: reinforcement-learning post-training of language models.

use reinforge_recipes::arith;

use reinforge_train::{config, env, interrupt, overrides, progress, rl, run_dir, seeds, trainer};

mod bench;
mod cli;
mod commands;
mod launch;
mod tools;

fn main() -> std::process::ExitCode {
    match cli::main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
