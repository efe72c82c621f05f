//! `reinforge`: reinforcement-learning post-training of language models.

mod cli;
mod commands;
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
