//! `reinforge derl`: evolve the default experiment's reward (reinforge-train's `derl`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use reinforge_recipes::derl::{self, DerlDir, DerlOptions, DerlOutcome};
use reinforge_train::config::TrainConfig;

/// Arguments of `reinforge derl`.
#[derive(Args)]
#[command(after_help = "\
DERL (Differentiable Evolutionary Reinforcement Learning) evolves the reward itself. Six atomic
primitives score a completion of the arithmetic task: exact (the answer is the sum), digits
(per-digit partial credit), carries (column steps written correctly), pattern (the columns
pattern), length (no longer than a columns solution), format (one `>` and digits+1 digits).
A meta-policy samples which primitives are on and their weights (0.25, 0.5, 1, 2); each such
reward trains the same SFT checkpoint for --inner-steps GRPO steps, the held-out pass@1 is its
score, and the meta-policy takes a REINFORCE step (baseline: the population's mean).
Finally the best evolved reward and the default (exact answer) train with --final-seeds seeds
and are compared on held-out problems with a paired bootstrap interval.

Every inner run is an ordinary run directory; the outer loop writes state.json after each
generation; Ctrl-C, then `reinforge derl --resume DIR`, continues where it stopped.

OUTPUT (DIR): derl.json, base.toml, state.json, sft/, inner/gGGG-cCC-sS/, final/{best,default}-sS/,
  comparison.json, report.md (the outer loop's table and the final comparison)

EXAMPLES:
  reinforge derl                     the defaults (11 min measured on 2 CPU cores)
  reinforge derl --population 2 --generations 1 --inner-steps 2 --set sft.steps=50   a smoke run
  reinforge derl --resume runs/derl")]
pub struct DerlArgs {
    /// The DERL directory (created; refused if it already holds a DERL run).
    #[arg(
        long,
        value_name = "DIR",
        default_value = "runs/derl",
        conflicts_with = "resume"
    )]
    pub out: PathBuf,
    /// Continue the DERL run in DIR with its stored options and base.toml
    /// (no other option may be given with it).
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// Candidate rewards sampled per generation (at least 2: the baseline is their mean).
    #[arg(long, value_name = "N", default_value_t = 6, conflicts_with = "resume", value_parser = crate::tools::count)]
    pub population: usize,
    /// Generations of the outer loop.
    #[arg(long, value_name = "N", default_value_t = 8, conflicts_with = "resume", value_parser = crate::tools::count)]
    pub generations: usize,
    /// GRPO steps of every inner run (and of each final-comparison run).
    #[arg(long, value_name = "N", default_value_t = 10, conflicts_with = "resume", value_parser = crate::tools::count)]
    pub inner_steps: usize,
    /// Inner runs per candidate, seeds SEED, SEED+1, ...; the candidate's score is their mean.
    #[arg(long, value_name = "N", default_value_t = 1, conflicts_with = "resume", value_parser = crate::tools::count)]
    pub seeds: usize,
    /// Seeds of the final comparison (each trains the best and the default reward).
    #[arg(long, value_name = "N", default_value_t = 5, conflicts_with = "resume", value_parser = crate::tools::count)]
    pub final_seeds: usize,
    /// Learning rate of the meta-policy's REINFORCE step (on its logits).
    #[arg(
        long,
        value_name = "X",
        default_value_t = 2.0,
        conflicts_with = "resume"
    )]
    pub lr: f64,
    /// Held-out problems of each inner run's validation.
    #[arg(long, value_name = "N", default_value_t = 64, conflicts_with = "resume", value_parser = crate::tools::count)]
    pub val_problems: usize,
    /// Held-out problems of each final-comparison run (each seed draws its own).
    #[arg(long, value_name = "N", default_value_t = 100, conflicts_with = "resume", value_parser = crate::tools::count)]
    pub test_problems: usize,
    /// Samples per problem in every evaluation (pass@1 is their mean).
    #[arg(long, value_name = "N", default_value_t = 8, conflicts_with = "resume", value_parser = crate::tools::count)]
    pub eval_samples: usize,
    /// TOML config of the runs (the default experiment's keys), as for `train`.
    #[arg(long, value_name = "FILE", conflicts_with = "resume")]
    pub config: Option<PathBuf>,
    /// Override one config key of the runs, as for `train` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", conflicts_with = "resume")]
    pub set: Vec<String>,
}

impl DerlArgs {
    /// The outer loop's options.
    fn options(&self) -> DerlOptions {
        DerlOptions {
            population: self.population,
            generations: self.generations,
            inner_steps: self.inner_steps,
            seeds: self.seeds,
            final_seeds: self.final_seeds,
            lr: self.lr,
            val_problems: self.val_problems,
            test_problems: self.test_problems,
            eval_samples: self.eval_samples,
        }
    }
}

/// Creates or resumes the DERL directory and runs it; 130 after Ctrl-C.
pub fn run(args: &DerlArgs) -> Result<ExitCode> {
    let dir = match &args.resume {
        Some(root) => DerlDir::open(root)?,
        None => {
            let base = TrainConfig::resolve(args.config.as_deref(), &args.set)?;
            DerlDir::create(&args.out, args.options(), base)?
        }
    };
    reinforge_train::interrupt::install()?;
    eprintln!("DERL directory: {}", dir.root.display());
    match derl::run(&dir)? {
        DerlOutcome::Finished(c) => {
            println!(
                "best evolved reward `{}`: pass@1 {:.3} vs default {:.3}; {}; report: {}",
                c.best_reward,
                c.best_pass_at_1,
                c.default_pass_at_1,
                c.verdict,
                dir.root.join("report.md").display()
            );
            Ok(ExitCode::SUCCESS)
        }
        DerlOutcome::Interrupted => {
            eprintln!(
                "stopped; continue with `reinforge derl --resume {}`",
                dir.root.display()
            );
            Ok(ExitCode::from(130))
        }
    }
}
