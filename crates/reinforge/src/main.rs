//! `reinforge`: reinforcement-learning post-training of language models.

mod bench;
mod cli;
mod config;
mod critic;
mod env;
mod evaluate;
mod experiment;
mod grpo;
mod hf;
mod overrides;
mod presets;
mod progress;
mod report;
mod rollout;
mod run_dir;
mod seeds;
mod sft;
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
