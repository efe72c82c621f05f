//! Command-line interface.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use reinforge_torch::runtime::{resolve_device, set_threads};
use reinforge_torch::Policy;

use crate::tools::ByName;
use reinforge_recipes::arith::evaluate::{evaluate_checkpoint, pattern_line};
use reinforge_recipes::arith::{self, Outcome};
use reinforge_recipes::data::env::ToolKind;
use reinforge_train::config::{EvalConfig, TrainConfig};
use reinforge_train::flag_config::{Flag, FlagKind};
use reinforge_train::interrupt;
use reinforge_train::run_dir::{read_json, RunDir};

/// reinforge: RL post-training of language models with verifiable rewards.
///
/// `reinforge train` with no arguments runs the default experiment on CPU in minutes: a tiny
/// Llama-family model is SFT'd on 3-digit addition written in two solution patterns, evaluated
/// on held-out problems, trained with GRPO against an exact answer verifier, and evaluated
/// again. The report shows pass@k before and after RL and how RL shifts the model towards the
/// pattern that succeeds more often.
#[derive(Parser)]
#[command(name = "reinforge", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the SFT -> evaluate -> GRPO -> evaluate pipeline into runs/<name>/, or with
    /// --model/--data train a Hugging Face checkpoint on a prompt dataset.
    Train(TrainArgs),
    /// Evaluate a checkpoint on held-out problems: pass@k and pattern statistics.
    Eval(EvalArgs),
    /// Time full GRPO iterations of the default model (fixed shapes, or real ones from a checkpoint); prints JSON.
    Bench(BenchArgs),
    /// Check math answers: jsonl of {id, gold, pred[, options]} to verdicts (exact, bounded);
    /// --probe: stress a verifier or reward spec with known-wrong canaries.
    Verify(crate::commands::verify::VerifyCommand),
    /// Leaderboard from pairwise battles (Chatbot Arena format): Bradley-Terry, Elo, intervals.
    Rank(crate::tools::rank::RankArgs),
    /// Project MPG: Goodness and Fastness per benchmark category and overall; agreement with an arena.
    Mpg(crate::tools::mpg::MpgArgs),
    /// pass@k and maj@k curves with bootstrap intervals from per-problem samples.
    Passk(crate::tools::passk::PassKArgs),
    /// Swiss / single-elimination / round-robin tournaments, from battles or simulated.
    Tournament(crate::tools::tournament::TournamentArgs),
    /// rliable statistics over runs x tasks: IQM, mean, median, optimality gap, P(improvement).
    Stats(crate::tools::stats::StatsArgs),
    /// Reward-model evaluation from scores: PPE's correctness and preference metrics,
    /// RewardBench 2's scoring.
    RmEval(crate::tools::rm_eval::RmEvalArgs),
    /// Supervised fine-tuning of a checkpoint on chat, prompt-completion or text rows (TRL's
    /// SFTTrainer formats; loss on completions / assistant turns).
    TrainSft(crate::commands::sft::TrainSftArgs),
    /// Preference optimisation of a checkpoint on chosen/rejected pairs (TRL's DPO loss types).
    TrainDpo(crate::commands::dpo::TrainDpoArgs),
    /// Reference-free preference optimisation on pairs: TRL's ORPO (odds ratio plus the chosen
    /// NLL).
    TrainOrpo(crate::commands::orpo::TrainOrpoArgs),
    /// Preference optimisation on unpaired good/bad completions: TRL's KTO.
    TrainKto(crate::commands::kto::TrainKtoArgs),
    /// On-policy distillation of a checkpoint towards a teacher with the same tokenizer (TRL's
    /// GKD / DistillationTrainer losses).
    TrainDistill(crate::commands::distill::TrainDistillArgs),
    /// Train a reward model on preference pairs (TRL's RewardTrainer loss), saved in
    /// transformers' *ForSequenceClassification layout.
    TrainRm(crate::commands::rm::TrainRmArgs),
    /// Score prompt/response rows with a reward model.
    ScoreRm(crate::commands::rm::ScoreRmArgs),
    /// Judge responses with a local LLM: pairwise (position-swapped, battles for `rank`) or
    /// pointwise ratings.
    Judge(crate::commands::judge::JudgeArgs),
    /// Train a Prompt-to-Leaderboard model (lmarena/p2l losses) on battles with prompts.
    TrainP2l(crate::commands::p2l::TrainP2lArgs),
    /// A prompt's (or a prompt set's) leaderboard from a P2L model, and routing under a budget.
    P2l(crate::commands::p2l::P2lArgs),
    /// Sample completions from a Hugging Face checkpoint (one prompt or a jsonl/parquet file).
    Generate(crate::commands::generate::GenerateArgs),
    /// Per-token and total log-probs of completions given prompts, under a checkpoint.
    Score(crate::commands::score::ScoreArgs),
    /// HTTP server: rewards (OpenRLHF /get_reward, SandboxFusion /run_code, /v1/verify) and,
    /// with --model, an OpenAI-compatible policy (/v1/completions, /v1/chat/completions) with
    /// SGLang/vLLM weight-update routes.
    Serve(crate::commands::serve::ServeCommand),
    /// What a training config means before any compute: batch sizes per step and rank, optimizer steps, memory, TRL/verl keys.
    Explain(crate::commands::explain::ExplainArgs),
    /// DERL: evolve the default experiment's reward from atomic primitives with a meta-policy
    /// trained on the held-out pass@1 of short GRPO runs; compare the best with the default.
    Derl(crate::commands::derl::DerlArgs),
}

#[derive(Args)]
#[command(after_help = "\
EXAMPLES:
  reinforge train                                  the default experiment (seed 0)
  reinforge train --set seed=1                     the same with another seed (runs/default-seed1)
  reinforge train --set grpo.steps=80 --set grpo.beta=0.04 --set name=kl
  reinforge train --set grpo.algorithm=dapo --set name=dapo
  reinforge train --config runs/default-seed0/config.toml --set name=again
  reinforge train --resume runs/default-seed0      continue after Ctrl-C
  reinforge train --model Qwen2.5-0.5B-Instruct --data math.jsonl --reward crates/reinforge-reward/specs/math.toml \\
      --set grpo.algorithm=dr_grpo --set grpo.max_completion_length=512 --lora-r 16
                                                   train a checkpoint (HF layout in runs/<name>/checkpoints/final)")]
struct TrainArgs {
    /// Run N data-parallel ranks on this machine (Gloo, one process each): a local stand-in
    /// for `torchrun --nproc-per-node N reinforge train ...`, which works too, as does any
    /// launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (docs/distributed.md).
    #[arg(long, value_name = "N")]
    nproc: Option<usize>,
    /// TOML config to start from (defaults fill every key it leaves out).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Override one key, e.g. `--set rl.steps=20` (repeatable; applied after --config).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Continue the run in DIR from its latest checkpoint (its config.toml is used as is).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["config", "set", "model"])]
    resume: Option<PathBuf>,
    /// Train this Hugging Face checkpoint on --data instead of running the default
    /// experiment (every preset, PPO with its critic included: the `grpo.*` and `ppo.*` keys
    /// apply; `task`, `sft`, `eval` and `model` keys do not). Defaults for a pretrained model follow TRL's GRPOConfig:
    /// rl.lr=1e-6, one update per batch (rl.ppo_epochs=1, rl.mini_batches=1),
    /// rl.max_completion_length=256.
    #[arg(long, value_name = "DIR", requires = "data")]
    model: Option<PathBuf>,
    /// Prompts with answers, .jsonl or .parquet (see --prompt-column, --answer-column).
    #[arg(long, value_name = "FILE", requires = "model")]
    data: Option<PathBuf>,
    /// Reward specification (TOML, shared with `reinforge serve`); default: the math
    /// verifier, 1 for an answer equivalent to the row's answer, else 0.
    #[arg(long, value_name = "FILE", requires = "model")]
    reward: Option<PathBuf>,
    /// Column of --data holding the prompt (text, or a list of {role, content} messages).
    #[arg(long, default_value = "prompt", value_name = "NAME")]
    prompt_column: String,
    /// Column of --data holding the reference answer (the reward's label).
    #[arg(long, default_value = "answer", value_name = "NAME")]
    answer_column: String,
    /// Use text prompts as they are, without the chat template.
    #[arg(long)]
    raw: bool,
    /// System message put first when a conversation has none.
    #[arg(long, value_name = "TEXT")]
    system: Option<String>,
    /// Train LoRA adapters of this rank instead of every weight (--model runs); the adapter
    /// is also saved in the PEFT layout (checkpoints/final-adapter).
    #[arg(long, value_name = "R", requires = "model", value_parser = crate::tools::count)]
    lora_r: Option<usize>,
    /// LoRA scale numerator, > 0: updates are scaled by alpha / r (default 2r).
    #[arg(long, value_name = "ALPHA", requires = "lora_r", value_parser = crate::tools::positive)]
    lora_alpha: Option<f64>,
    /// Projections that get adapters.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
        value_name = "NAMES"
    )]
    lora_targets: Vec<String>,
    /// Held-out prompts with answers (same columns as --data, optional `task` column):
    /// evaluated before and after training (pass@k up to k = eval.samples, accuracy per task,
    /// response length) into eval_base.json, eval_rl.json, summary.json and report.md
    #[arg(long, value_name = "FILE", requires = "model")]
    heldout: Option<PathBuf>,
    /// Tools the policy may call (--model runs): `calculator` makes episodes multi-turn, with
    /// Hermes-format tool calls run in the sandbox and a system message that describes the
    /// tool (unless --system gives one)
    #[arg(long, value_parser = ByName(&ToolKind::ALL), requires = "model")]
    tools: Option<ToolKind>,
    /// Policy turns per episode with --tools (each up to rl.max_completion_length tokens)
    #[arg(long, default_value_t = 3, value_parser = crate::tools::count)]
    max_turns: usize,
}

#[derive(Args)]
struct BenchArgs {
    /// Timed iterations (at least 1).
    #[arg(long, default_value_t = 10, value_parser = crate::tools::count)]
    iterations: usize,
    /// Untimed iterations first (allocator and kernel warm-up).
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Config overrides, as for `train` (e.g. `--set threads=2`).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Start from this checkpoint and stop completions at <eos>, as in training (a real
    /// iteration). Without it: a random model and fixed-length completions.
    #[arg(long, value_name = "DIR")]
    checkpoint: Option<PathBuf>,
}

#[derive(Args)]
struct EvalArgs {
    /// Checkpoint directory of a run (with config.json, model.safetensors), e.g.
    /// runs/default-seed0/checkpoints/final. The run's config.toml (two directories up) gives
    /// the task, the completion length and every default below.
    #[arg(long, value_name = "DIR")]
    checkpoint: PathBuf,
    /// Held-out problems to evaluate on (default: the run's eval.problems).
    #[arg(long, value_parser = crate::tools::count)]
    problems: Option<usize>,
    /// Samples per problem, pass@k is reported up to k = samples (default: eval.samples).
    #[arg(long, value_parser = crate::tools::count)]
    samples: Option<usize>,
    /// Sampling temperature, >= 0, 0 is greedy (default: eval.temperature).
    #[arg(long, value_parser = crate::tools::non_negative)]
    temperature: Option<f64>,
    /// Seed of the problem draw and sampling (default: the run's seed, i.e. the problems its
    /// own evaluation used).
    #[arg(long)]
    seed: Option<u64>,
    /// cpu, cuda or cuda:N (default: the run's device).
    #[arg(long)]
    device: Option<String>,
    /// Also write the evaluation as JSON here.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// The `KEYS` section of `reinforge train --help`, generated from the config schema.
fn train_keys_help() -> String {
    format!(
        "KEYS (`--set KEY=VALUE`; the value is read as the key's type; default and type shown):\n{}",
        reinforge_train::overrides::keys_help()
    )
}

/// Only `reinforge train` and the preference trainers (`train-dpo`, `train-orpo`, `train-kto`,
/// `train-rm`) run data-parallel: any other command started as one rank of a
/// multi-process job (torchrun's `WORLD_SIZE` > 1) would run N independent copies writing the
/// same files, so it stops and says so.
fn refuse_ranks(command: &str) -> Result<()> {
    let var = |k: &str| std::env::var(k).ok();
    let world = var("WORLD_SIZE").and_then(|w| w.trim().parse::<usize>().ok());
    if let Some(world) = world.filter(|&w| w > 1) {
        anyhow::bail!(
            "`reinforge {command}` runs in one process, but it was started as rank {} of \
             {world} (WORLD_SIZE is set, as torchrun sets it); only `train`, `train-dpo`, \
             `train-orpo`, `train-kto` and `train-rm` run data-parallel. Start it without torchrun",
            var("RANK").unwrap_or_else(|| "?".into())
        );
    }
    Ok(())
}

/// A command's result as the exit code: 130 after Ctrl-C saved a checkpoint (the message says
/// how to continue), as `reinforge train` exits.
fn stopped_is_130(r: Result<()>) -> Result<ExitCode> {
    match r {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) if e.is::<reinforge_train::interrupt::Stopped>() => {
            eprintln!("{e}");
            Ok(ExitCode::from(130))
        }
        Err(e) => Err(e),
    }
}

pub fn main() -> Result<ExitCode> {
    // Decoding and micro-batches reuse freed memory instead of faulting it in again each step
    // (docs/memory.md); `reinforge train` may choose `memory.heap = "compact"`.
    reinforge_torch::heap::set_policy(reinforge_torch::heap::HeapPolicy::Reuse);
    let command = Cli::command().mut_subcommand("train", |c| {
        let help = format!(
            "{}\n\n{}",
            c.get_after_help()
                .map(|h| h.to_string())
                .unwrap_or_default(),
            train_keys_help()
        );
        c.after_long_help(help)
    });
    let command = TRAINERS.iter().fold(command, |c, name| {
        c.mut_subcommand(name, |s| s.args_override_self(true))
    });
    let argv = with_config_files(&command, std::env::args_os().collect())?;
    let cli = Cli::from_arg_matches(&command.get_matches_from(argv)).unwrap_or_else(|e| e.exit());
    if !matches!(
        cli.command,
        Command::Train(_)
            | Command::TrainSft(_)
            | Command::TrainDpo(_)
            | Command::TrainOrpo(_)
            | Command::TrainKto(_)
            | Command::TrainRm(_)
    ) {
        let name = std::env::args().skip(1).find(|a| !a.starts_with('-'));
        refuse_ranks(&name.unwrap_or_default())?;
    }
    match cli.command {
        Command::Train(args) => train(args),
        Command::Eval(args) => eval(args),
        Command::Bench(args) => {
            let cfg = TrainConfig::resolve(None, &args.set)?;
            let report = reinforge_recipes::arith::bench::run(
                &cfg,
                args.iterations,
                args.warmup,
                args.checkpoint.as_deref(),
            )?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Verify(args) => crate::commands::verify::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Rank(args) => crate::tools::rank::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Mpg(args) => crate::tools::mpg::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Passk(args) => crate::tools::passk::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Tournament(args) => {
            crate::tools::tournament::run(&args).map(|()| ExitCode::SUCCESS)
        }
        Command::Stats(args) => crate::tools::stats::run(&args).map(|()| ExitCode::SUCCESS),
        Command::RmEval(args) => crate::tools::rm_eval::run(&args).map(|()| ExitCode::SUCCESS),
        Command::TrainSft(args) => stopped_is_130(crate::commands::sft::train(&args)),
        Command::TrainDpo(args) => stopped_is_130(crate::commands::dpo::train(&args)),
        Command::TrainOrpo(args) => stopped_is_130(crate::commands::orpo::train(&args)),
        Command::TrainKto(args) => stopped_is_130(crate::commands::kto::train(&args)),
        Command::TrainRm(args) => stopped_is_130(crate::commands::rm::train(&args)),
        Command::TrainDistill(args) => stopped_is_130(crate::commands::distill::train(&args)),
        Command::ScoreRm(args) => crate::commands::rm::score(&args).map(|()| ExitCode::SUCCESS),
        Command::Judge(args) => crate::commands::judge::run(&args).map(|()| ExitCode::SUCCESS),
        Command::TrainP2l(args) => stopped_is_130(crate::commands::p2l::train(&args)),
        Command::P2l(args) => crate::commands::p2l::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Generate(args) => {
            crate::commands::generate::run(&args).map(|()| ExitCode::SUCCESS)
        }
        Command::Score(args) => crate::commands::score::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Serve(args) => crate::commands::serve::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Explain(args) => crate::commands::explain::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Derl(args) => crate::commands::derl::run(&args),
    }
}

/// The trainers whose settings are flags: each also reads `--config FILE` and `--set`.
const TRAINERS: [&str; 7] = [
    "train-sft",
    "train-dpo",
    "train-orpo",
    "train-kto",
    "train-rm",
    "train-distill",
    "train-p2l",
];

/// `argv` with a trainer's `--config` and `--set` read as its own flags
/// (`reinforge_train::flag_config`); other commands' (and non-UTF-8) arguments as they are.
fn with_config_files(command: &clap::Command, argv: Vec<OsString>) -> Result<Vec<OsString>> {
    let name = argv.get(1).and_then(|a| a.to_str()).unwrap_or_default();
    let (Some(sub), Some(rest)) = (
        command
            .find_subcommand(name)
            .filter(|_| TRAINERS.contains(&name)),
        argv.get(2..).and_then(|r| {
            r.iter()
                .map(|a| a.to_str().map(String::from))
                .collect::<Option<Vec<String>>>()
        }),
    ) else {
        return Ok(argv);
    };
    let flags: Vec<Flag> = sub
        .get_arguments()
        .filter_map(|a| {
            let kind = match a.get_action() {
                clap::ArgAction::SetTrue => FlagKind::Switch,
                clap::ArgAction::Append => FlagKind::Many,
                _ => FlagKind::One,
            };
            let id = a.get_id().to_string();
            let long = a.get_long()?.to_string();
            (id != "config" && id != "set").then_some(Flag { id, long, kind })
        })
        .collect::<Vec<Flag>>();
    let expanded = reinforge_train::flag_config::expand(&rest, &flags)?;
    Ok(argv[..2]
        .iter()
        .cloned()
        .chain(expanded.into_iter().map(OsString::from))
        .collect())
}

fn train(args: TrainArgs) -> Result<ExitCode> {
    if let Some(n) = args.nproc.filter(|&n| n > 1) {
        return reinforge_train::launch::local_ranks(n);
    }
    if let (Some(model), Some(data)) = (&args.model, &args.data) {
        return train_on_data(&args, model, data);
    }
    let (run, cfg) = match &args.resume {
        Some(dir) => {
            let (run, cfg) = RunDir::open(dir)?;
            if reinforge_recipes::data::is_data_run(&run) {
                return resume_data_run(&run, &cfg);
            }
            cfg.validate_arith()
                .with_context(|| format!("{}", run.path("config.toml").display()))?;
            (run, cfg)
        }
        None => {
            let cfg = TrainConfig::resolve(args.config.as_deref(), &args.set)?;
            cfg.validate_arith()?;
            check_device(&cfg)?;
            (RunDir::create(&cfg)?, cfg)
        }
    };
    interrupt::install()?;
    eprintln!("run directory: {}", run.root.display());
    match arith::run(&cfg, &run)? {
        Outcome::Finished(s) => {
            println!(
                "pass@1 {:.3} -> {:.3} ({:+.3}); share of `{}` {:.1}% -> {:.1}%; report: {}",
                s.pass_at_1_sft,
                s.pass_at_1_rl,
                s.pass_at_1_gain,
                s.best_pattern,
                100.0 * s.best_pattern_share_sft,
                100.0 * s.best_pattern_share_rl,
                run.path("report.md").display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Outcome::Interrupted => {
            eprintln!(
                "stopped; continue with: reinforge train --resume {}",
                run.root.display()
            );
            Ok(ExitCode::from(130))
        }
        Outcome::Rank => Ok(ExitCode::SUCCESS),
    }
}

/// `reinforge train --model DIR --data FILE`: GRPO-family training of a checkpoint.
fn train_on_data(
    args: &TrainArgs,
    model: &std::path::Path,
    data: &std::path::Path,
) -> Result<ExitCode> {
    let mut cfg = TrainConfig::resolve_data_run(args.config.as_deref(), &args.set)?;
    if cfg.name.is_none() {
        let stem = model
            .file_name()
            .map_or("model".into(), |n| n.to_string_lossy().into_owned());
        cfg.name = Some(format!("{stem}-seed{}", cfg.seed));
    }
    check_device(&cfg)?;
    let run = RunDir::create_data_run(&cfg)?;
    interrupt::install()?;
    eprintln!("run directory: {}", run.root.display());
    let spec = reinforge_recipes::data::env::DataRun {
        model: model.to_path_buf(),
        data: data.to_path_buf(),
        reward: args.reward.clone(),
        prompt_column: args.prompt_column.clone(),
        answer_column: args.answer_column.clone(),
        raw: args.raw,
        lora: args.lora_r.map(|r| reinforge_torch::LoraConfig {
            r,
            alpha: args.lora_alpha.unwrap_or(2.0 * r as f64),
            target_modules: args.lora_targets.clone(),
            dropout: 0.0,
        }),
        heldout: args.heldout.clone(),
        tools: args.tools,
        max_turns: args.max_turns,
        system: match (&args.system, args.tools) {
            (Some(s), _) => Some(s.clone()),
            (None, Some(_)) => {
                Some(reinforge_recipes::data::calculator::CALCULATOR_SYSTEM.to_string())
            }
            (None, None) => None,
        },
    };
    data_outcome(
        reinforge_recipes::data::run(&cfg, &spec, &run, &reinforge_recipes::scorers::load_scorer)?,
        &run,
    )
}

/// Checks the run's device before a run directory is created: a run that cannot start leaves
/// nothing behind. The run itself resolves the same value again when it builds its models.
fn check_device(cfg: &TrainConfig) -> Result<()> {
    resolve_device(&cfg.device, "config key `device`").map(drop)
}

/// `reinforge train --resume DIR` of a dataset run: its config.toml and data_run.json.
fn resume_data_run(run: &RunDir, cfg: &TrainConfig) -> Result<ExitCode> {
    let spec: reinforge_recipes::data::env::DataRun =
        read_json(&run.path(reinforge_recipes::data::DATA_RUN_FILE))?;
    interrupt::install()?;
    eprintln!("run directory: {}", run.root.display());
    data_outcome(
        reinforge_recipes::data::run(cfg, &spec, run, &reinforge_recipes::scorers::load_scorer)?,
        run,
    )
}

fn data_outcome(outcome: reinforge_recipes::data::DataOutcome, run: &RunDir) -> Result<ExitCode> {
    match outcome {
        reinforge_recipes::data::DataOutcome::Finished(out) => {
            println!("trained checkpoint: {}", out.display());
            Ok(ExitCode::SUCCESS)
        }
        reinforge_recipes::data::DataOutcome::Interrupted => {
            eprintln!(
                "stopped; continue with: reinforge train --resume {}",
                run.root.display()
            );
            Ok(ExitCode::from(130))
        }
    }
}

fn eval(args: EvalArgs) -> Result<ExitCode> {
    let run_cfg = reinforge_recipes::arith::evaluate::run_config_of(&args.checkpoint)?;
    let device = match &args.device {
        Some(d) => resolve_device(d, "--device")?,
        None => resolve_device(&run_cfg.device, "the run's config key `device`")?,
    };
    set_threads(run_cfg.threads);
    let cfg = EvalConfig {
        problems: args.problems.unwrap_or(run_cfg.eval.problems),
        samples: args.samples.unwrap_or(run_cfg.eval.samples),
        temperature: args.temperature.unwrap_or(run_cfg.eval.temperature),
        batch_size: run_cfg.eval.batch_size,
    };
    let seed = args.seed.unwrap_or(run_cfg.seed);
    let policy = Policy::load(&args.checkpoint, device)?;
    let report = evaluate_checkpoint(&policy, &run_cfg, &cfg, seed);
    println!("pass@1 {:.3}", report.pass_at_1);
    for (k, v) in &report.pass_at_k {
        println!("pass@{k:<3} {v:.3}");
    }
    println!("patterns: {}", pattern_line(&report));
    if let Some(out) = &args.output {
        reinforge_train::run_dir::write_json(out, &report)?;
    }
    Ok(ExitCode::SUCCESS)
}
