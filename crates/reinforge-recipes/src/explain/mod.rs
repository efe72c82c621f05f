//! What a training config means before any compute (`reinforge explain`): the rows of a step
//! and of each data-parallel rank, the mini-batches and optimizer steps of a rollout, the
//! forward passes' token budget, a memory estimate for the model, and each key's TRL/verl
//! counterpart ([`keys::EQUIVALENTS`]). Plain arithmetic on the resolved config: no model is
//! built and no weights are read.

pub mod keys;
mod memory;

use anyhow::{bail, Result};
use reinforge_torch::ModelConfig;
use serde::Serialize;

pub use memory::{parameter_count, MemoryEstimate};
use reinforge_train::config::{TrainConfig, GAE};

/// Where the model's shape came from and how long its rows are.
#[derive(Debug, Clone)]
pub struct ModelShape {
    /// `config.toml [model]` (the built-in toy model) or a checkpoint's `config.json`.
    pub source: String,
    pub config: ModelConfig,
    /// Tokens of the longest prompt, special tokens included.
    pub longest_prompt: usize,
}

/// One config key's value and its counterparts.
#[derive(Debug, Clone, Serialize)]
pub struct KeyLine {
    pub key: String,
    pub value: String,
    pub trl: Option<&'static str>,
    pub verl: Option<&'static str>,
    pub note: &'static str,
}

/// The figures `reinforge explain` prints (and writes with `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    pub model_source: String,
    /// Data-parallel ranks.
    pub world: usize,
    pub prompts_per_step: usize,
    pub num_generations: usize,
    /// Rollouts (rows) of one RL step: prompts_per_step x num_generations.
    pub rows_per_step: usize,
    /// This rank's rows: rows_per_step / world.
    pub rows_per_rank: usize,
    /// Rows of one mini-batch over all ranks (the last may be shorter).
    pub rows_per_mini_batch: usize,
    /// Mini-batches of one pass over the rollouts (rows split in chunks of rows_per_mini_batch).
    pub mini_batches_per_epoch: usize,
    pub ppo_epochs: usize,
    /// Optimizer steps of the policy per RL step: ppo_epochs x mini_batches_per_epoch.
    pub optimizer_steps_per_step: usize,
    /// Over the whole RL phase (rl.steps).
    pub optimizer_steps_total: usize,
    pub longest_prompt_tokens: usize,
    /// Longest row: longest prompt + rl.max_completion_length.
    pub longest_row_tokens: usize,
    /// memory.max_tokens_per_microbatch (0: one forward pass per rank's mini-batch).
    pub max_tokens_per_microbatch: usize,
    /// Tokens of one forward pass at the longest rows (padded).
    pub tokens_per_microbatch: usize,
    /// Rows of one forward pass at the longest rows.
    pub rows_per_microbatch: usize,
    /// Forward/backward passes per mini-batch on one rank.
    pub microbatches_per_mini_batch: usize,
    pub memory: MemoryEstimate,
    pub keys: Vec<KeyLine>,
    /// Keys shown above that neither TRL nor verl has.
    pub no_equivalent: Vec<String>,
}

/// Explains `cfg` on `world` ranks for `model`; an impossible split is an error naming the key,
/// as the run would fail.
pub fn explain(cfg: &TrainConfig, world: usize, model: &ModelShape) -> Result<Explanation> {
    cfg.validate()?;
    model.config.validate()?;
    let world = world.max(1);
    let g = &cfg.grpo;
    let rows = g.prompts_per_step * g.num_generations;
    if !rows.is_multiple_of(world) {
        bail!("rl.prompts_per_step x rl.num_generations = {rows} must be a multiple of the {world} ranks (groups are never split across ranks)");
    }
    if world > 1 && g.dynamic_sampling {
        bail!("rl.dynamic_sampling is not supported with data-parallel ranks yet");
    }
    let rows_per_rank = rows / world;
    // As the policy update splits them (reinforge-torch `policy_update`): chunks of
    // ceil(rows / mini_batches) over the whole batch.
    let per = rows.div_ceil(g.mini_batches.max(1));
    let mini_batches_per_epoch = rows.div_ceil(per);
    let optimizer_steps_per_step = g.ppo_epochs * mini_batches_per_epoch;
    let longest_row = model.longest_prompt + g.max_completion_length;
    let local_mini_batch = per.div_ceil(world);
    let budget = cfg.memory.max_tokens_per_microbatch;
    let rows_per_microbatch = if budget == 0 {
        local_mini_batch
    } else {
        (budget / longest_row).clamp(1, local_mini_batch)
    };
    let memory = MemoryEstimate::new(cfg, world, &model.config, rows_per_microbatch * longest_row);
    let (keys, no_equivalent) = key_lines(cfg)?;
    Ok(Explanation {
        model_source: model.source.clone(),
        world,
        prompts_per_step: g.prompts_per_step,
        num_generations: g.num_generations,
        rows_per_step: rows,
        rows_per_rank,
        rows_per_mini_batch: per,
        mini_batches_per_epoch,
        ppo_epochs: g.ppo_epochs,
        optimizer_steps_per_step,
        optimizer_steps_total: optimizer_steps_per_step * g.steps,
        longest_prompt_tokens: model.longest_prompt,
        longest_row_tokens: longest_row,
        max_tokens_per_microbatch: budget,
        tokens_per_microbatch: rows_per_microbatch * longest_row,
        rows_per_microbatch,
        microbatches_per_mini_batch: local_mini_batch.div_ceil(rows_per_microbatch),
        memory,
        keys,
        no_equivalent,
    })
}

/// The keys explained: the top-level training keys, `[memory]` and `[rl]` (the RL phase),
/// each with its value and counterparts.
fn key_lines(cfg: &TrainConfig) -> Result<(Vec<KeyLine>, Vec<String>)> {
    let value = toml::Value::try_from(cfg)?;
    let mut leaves = Vec::new();
    reinforge_train::overrides::flat_keys(&value, "", &mut leaves);
    let shown = |k: &str| {
        k.starts_with("rl.")
            || k.starts_with("memory.")
            || ["seed", "bf16", "zero_stage", "device"].contains(&k)
    };
    let mut lines = Vec::new();
    let mut none = Vec::new();
    for (key, v) in leaves.into_iter().filter(|(k, _)| shown(k)) {
        let e = keys::equivalent(&key);
        let (trl, verl, note) = e.map_or((None, None, ""), |e| (e.trl, e.verl, e.note));
        if trl.is_none() && verl.is_none() {
            none.push(key.clone());
        }
        lines.push(KeyLine {
            key,
            value: v,
            trl,
            verl,
            note,
        });
    }
    Ok((lines, none))
}

impl Explanation {
    /// The human-readable report.
    pub fn text(&self, cfg: &TrainConfig) -> String {
        let mut s = String::new();
        let mut line = |l: String| {
            s.push_str(&l);
            s.push('\n');
        };
        let g = &cfg.grpo;
        line(format!("model: {}", self.model_source));
        line(format!("data-parallel ranks: {}", self.world));
        line(String::new());
        line("BATCH (one RL step)".into());
        line(format!(
            "  rows per step        {} = rl.prompts_per_step {} x rl.num_generations {}   (TRL generation_batch_size; verl data.train_batch_size x rollout.n)",
            self.rows_per_step, self.prompts_per_step, self.num_generations
        ));
        line(format!(
            "  rows per rank        {} = {} / {} ranks   (TRL per_device_train_batch_size x steps_per_generation)",
            self.rows_per_rank, self.rows_per_step, self.world
        ));
        line(format!(
            "  mini-batches         {} of {} rows (rl.mini_batches {}; verl actor.ppo_mini_batch_size = {} prompts)",
            self.mini_batches_per_epoch,
            self.rows_per_mini_batch,
            g.mini_batches,
            self.rows_per_mini_batch / self.num_generations.max(1)
        ));
        line(format!(
            "  optimizer steps      {} per step = rl.ppo_epochs {} x {} mini-batches; {} over rl.steps {}",
            self.optimizer_steps_per_step, self.ppo_epochs, self.mini_batches_per_epoch, self.optimizer_steps_total, g.steps
        ));
        if g.advantage_estimator == GAE {
            line("  critic               PPO's critic takes its own steps (ppo.critic_mini_batches x ppo.critic_epochs)".into());
        }
        line(String::new());
        line("FORWARD PASSES (per rank)".into());
        line(format!(
            "  longest row          {} tokens = prompt {} + rl.max_completion_length {}",
            self.longest_row_tokens, self.longest_prompt_tokens, g.max_completion_length
        ));
        let budget = if self.max_tokens_per_microbatch == 0 {
            "0 (no limit: one pass per mini-batch)".to_string()
        } else {
            self.max_tokens_per_microbatch.to_string()
        };
        line(format!("  token budget         memory.max_tokens_per_microbatch = {budget}   (verl actor.ppo_max_token_len_per_gpu)"));
        line(format!(
            "  micro-batch          {} rows, {} tokens at the longest rows; {} passes per mini-batch",
            self.rows_per_microbatch, self.tokens_per_microbatch, self.microbatches_per_mini_batch
        ));
        line(String::new());
        line(self.memory.text());
        line("KEYS (value; TRL GRPOConfig; verl)".into());
        let width = self.keys.iter().map(|k| k.key.len()).max().unwrap_or(0);
        for k in &self.keys {
            let or = |x: Option<&str>| x.unwrap_or("—").to_string();
            let note = if k.note.is_empty() {
                String::new()
            } else {
                format!("   ({})", k.note)
            };
            line(format!(
                "  {:width$} = {:<12} TRL {:<28} verl {}{note}",
                k.key,
                k.value,
                or(k.trl),
                or(k.verl)
            ));
        }
        line(String::new());
        line(format!(
            "no TRL or verl equivalent: {}",
            self.no_equivalent.join(", ")
        ));
        s
    }
}

/// The built-in toy model of `cfg` (`[model]`) with the arithmetic task's longest prompt.
pub fn toy_model(cfg: &TrainConfig) -> ModelShape {
    use reinforge_train::env::Environment;
    let env = crate::arith::env::ArithEnv::new(cfg.task.digits)
        .with_attempts(cfg.task.attempts, cfg.grpo.max_completion_length);
    ModelShape {
        source: "the built-in toy model ([model] of the config)".into(),
        config: cfg.model.clone(),
        longest_prompt: env.max_prompt_len(),
    }
}
