//! The training configuration: a TOML file whose every key has a default, overridable from the
//! command line with `--set section.key=value`. The resolved config is written into each run
//! directory, so `--config runs/NAME/config.toml` repeats a run.

use reinforge_rl::{AdvantageConfig, Estimator};
use reinforge_torch::train::loss::{AggMode, KlPenalty, PolicyLossKind, Tis};
use reinforge_torch::{Memory, ModelConfig};
use serde::{Deserialize, Serialize};

use crate::presets::Preset;

mod ppo;
mod rollout;

pub use ppo::PpoConfig;
pub use reinforge_reward::integrity::MonitorConfig;
pub use rollout::{EngineKind, RolloutConfig, RolloutRng};

/// The RL section's old name: `[grpo]` in a file and `--set grpo.KEY` are read as `[rl]` and
/// `rl.KEY`, with a note.
pub const RL_ALIAS: &str = "grpo";

/// Everything `reinforge train` needs. Unknown keys are errors, so a typo never goes unnoticed;
/// absent keys take [`TrainConfig::default`]'s values (the one place defaults are written).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    /// Seeds weights, data and sampling; the same seed repeats a CPU run exactly.
    pub seed: u64,
    /// Where runs are written: the run directory is `<runs_dir>/<name>`.
    pub runs_dir: String,
    /// Run name (default: `default-seed<seed>`).
    pub name: Option<String>,
    /// `cpu`, `cuda` or `cuda:N` (under torchrun a bare `cuda` means `cuda:LOCAL_RANK`).
    pub device: String,
    /// Mixed precision as TRL's `bf16 = True`: float32 weights, gradients and optimizer state;
    /// model forwards under bfloat16 autocast; log-probs, losses and advantages in float32
    /// (`reinforge_torch::precision`, docs/gpu.md). Meant for CUDA; on CPU it measures the policy.
    #[serde(default)]
    pub bf16: bool,
    /// CPU threads for libtorch intra-op parallelism (0 = libtorch's default, one per core).
    /// The default 1 is fastest for the tiny default model: its ops are too small to split,
    /// and OpenMP threads spin badly when the cores are shared.
    pub threads: usize,
    /// Stop a run, after saving `checkpoints/latest`, when this many consecutive steps had a
    /// NaN or infinite gradient norm (their optimizer steps are skipped); 0 = never stop.
    pub max_nonfinite_steps: usize,
    /// Data-parallel runs: 1 shards the optimizer state over the ranks (ZeRO stage 1), 0
    /// keeps a full copy on every rank. A single process ignores it.
    pub zero_stage: u8,
    /// A vision-language model's tower (`visual.*`) stays frozen (TRL's and verl's default);
    /// `false` trains it too (full fine-tuning only; refused with LoRA and on text-only models).
    pub vision_freeze: bool,
    /// Memory of the training passes (SFT, log-probs, the policy update):
    /// `max_tokens_per_microbatch` (verl's `ppo_max_token_len_per_gpu`: rows x longest row of
    /// one forward pass; 0 = one pass per mini-batch) and `gradient_checkpointing` (TRL's
    /// name: recompute each layer in the backward pass). Neither changes the result.
    pub memory: Memory,
    pub task: TaskConfig,
    /// The transformer, with HF `config.json` field names.
    pub model: ModelConfig,
    pub sft: SftConfig,
    /// `[rl]` (`[grpo]`, its old name, is read as it with a note: [`RL_ALIAS`]).
    #[serde(rename = "rl", alias = "grpo")]
    pub grpo: RlConfig,
    /// PPO with a learned critic: read when `rl.advantage_estimator = "gae"` (the `ppo`
    /// preset). Absent from older config files, hence the default.
    pub ppo: PpoConfig,
    /// Where rollouts are generated: in this process or on OpenAI-compatible engines, in lock
    /// step or ahead of the update. Absent from older config files, hence the default.
    pub rollout: RolloutConfig,
    pub eval: EvalConfig,
    /// The reward-hacking monitor of every RL phase (on by default; docs/integrity.md):
    /// canaries scored every `canary_every` steps, the shares of credited answers found in the
    /// prompt or cut off, the reward–length correlation over `window` steps.
    pub integrity: MonitorConfig,
    /// Experiment tracking of every phase's metrics (`[logging]`): TensorBoard event files
    /// and an MLflow server. Absent from older config files, hence the default (off).
    pub logging: LoggingConfig,
}

/// Where a run's metrics go besides `metrics.jsonl` (reinforge-track). A sink that fails
/// warns once and never stops the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoggingConfig {
    /// Write `<run>/tensorboard/events.out.tfevents.*` (every scalar of each metrics line).
    pub tensorboard: bool,
    /// MLflow tracking server (`http://host:port`); empty: off. Logs the resolved config as
    /// parameters, the metrics per step and, at a phase's end, the run's report files.
    pub mlflow_uri: String,
    /// MLflow experiment the runs go into (created when the server has none).
    pub mlflow_experiment: String,
}

/// Tracking off; MLflow runs in the experiment `reinforge`.
impl Default for LoggingConfig {
    fn default() -> Self {
        Self {
            tensorboard: false,
            mlflow_uri: String::new(),
            mlflow_experiment: "reinforge".into(),
        }
    }
}

/// The built-in arithmetic task and the SFT data mixture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaskConfig {
    /// Digits of each operand.
    pub digits: u32,
    /// Share of SFT examples written in the direct pattern; the rest use the columns pattern.
    pub direct_share: f64,
    /// Attempts per RL episode: after a wrong answer the problem is posed again (a multi-turn
    /// episode with feedback, reinforge-recipes' `arith::retry`); an answer right at attempt `k`
    /// (0-based) scores `1 / (k + 1)`. 1 = single turn. Absent from older configs.
    pub attempts: usize,
}

/// Supervised warm-start on reference solutions (loss on completion tokens only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SftConfig {
    pub steps: usize,
    pub batch_size: usize,
    pub lr: f64,
    /// Linear warm-up steps, then cosine decay to 10% of `lr`.
    pub warmup_steps: usize,
    pub max_grad_norm: f64,
    pub weight_decay: f64,
    /// Save a resumable checkpoint every this many steps (0 = only at the end and on Ctrl-C).
    pub checkpoint_every: usize,
}

/// The RL phase of every preset, PPO's policy side included (`[rl]`; `[rl]` is read as it). Every key has a default ([`RlConfig::default`], the toy experiment's); the fields
/// are grouped as TRL's `GRPOConfig` groups its parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RlConfig {
    // ── Schedule ──
    /// Policy iterations (sample, score, update).
    pub steps: usize,
    /// Save a checkpoint every this many iterations (0 = only at the end and on Ctrl-C).
    pub checkpoint_every: usize,
    // ── Sampling: prompts, completions and the sampler ──
    /// Distinct prompts per iteration.
    pub prompts_per_step: usize,
    /// Completions per prompt, G (TRL `num_generations`).
    pub num_generations: usize,
    pub temperature: f64,
    pub top_p: f64,
    pub top_k: i64,
    /// Longest completion; longer ones are cut and score 0.
    pub max_completion_length: usize,
    /// Keep generating past `<eos>` until `max_completion_length` (vLLM's `ignore_eos`): gives
    /// every completion the same length, for benchmarks on fixed shapes.
    pub ignore_eos: bool,
    /// DAPO dynamic sampling (verl `algorithm.filter_groups`): drop groups whose rewards all
    /// agree and draw more prompts until `prompts_per_step` groups are kept.
    pub dynamic_sampling: bool,
    /// Most prompt batches drawn per step under dynamic sampling (verl `max_num_gen_batches`).
    pub max_draws: usize,
    // ── Rewards and advantages ──
    /// Named preset (`grpo`, `dr_grpo`, `dapo`, `gspo`, `rloo`, `reinforce_pp`, `ppo`): at config
    /// resolution it fills every option of [`Preset::options`] that the file or `--set` leaves unset, so
    /// the run directory's `config.toml` records explicit values.
    pub algorithm: Preset,
    /// verl `algorithm.adv_estimator` name ([`Estimator::names`]; `grpo` uses `advantage`,
    /// `dr_grpo` drops its std, `gae` is PPO with a critic, see `[ppo]`).
    pub advantage_estimator: Estimator,
    /// Group normalisation of rewards.
    pub advantage: AdvantageConfig,
    /// DAPO soft overlong punishment buffer (verl `overlong_buffer.len`); 0 disables it.
    pub overlong_buffer_len: usize,
    /// DAPO overlong penalty factor (verl `overlong_buffer.penalty_factor`).
    pub overlong_penalty_factor: f64,
    // ── The policy loss ──
    /// The policy loss, by verl's registered name (`actor.policy_loss.loss_mode`): vanilla,
    /// gspo, cispo, sapo, dppo_tv, dppo_kl, geo_mean, gpg, dro, kl_cov, clip_cov, reinforce
    /// (docs/algorithms.md has their TRL/OpenRLHF names).
    pub policy_loss: PolicyLossKind,
    /// verl `loss_agg_mode`: token-mean, seq-mean-token-mean, seq-mean-token-sum,
    /// seq-mean-token-sum-norm (divides by `max_completion_length`), token-sum. gspo, sapo and
    /// geo_mean fix their own, as in verl.
    pub loss_agg_mode: AggMode,
    /// Lower clip of the ratio, 1 - epsilon_low (TRL `epsilon`, verl `clip_ratio_low`).
    pub epsilon_low: f64,
    /// Upper clip of the ratio, 1 + epsilon_high (DAPO clip-higher).
    pub epsilon_high: f64,
    /// Dual-clip bound for A < 0 (verl `clip_ratio_c`, > 1); 0 disables dual clip. DPPO reads
    /// it as its ratio truncation `min(r, c)` (0: none; verl's default is 3). TRL's `delta`
    /// (two-sided GRPO) is this bound whenever `delta >= 1 + epsilon_high`.
    pub clip_ratio_c: f64,
    /// Clamp the log-ratio before `exp` as verl does (±20; GSPO's sequence log-ratio at 10).
    /// `false`: TRL's unclamped ratio (grpo_trainer.py @ f2cd577), which can overflow in float32.
    pub clamp_log_ratio: bool,
    /// Weight of the k3 KL to the frozen SFT model (0 = no reference model is kept).
    pub beta: f64,
    /// KL estimator used when `beta > 0` (verl `kl_loss_type`: kl/k1, abs, mse/k2,
    /// low_var_kl/k3, each also with `+`; `k3_unclamped` is TRL's `beta` term).
    pub kl_estimator: KlPenalty,
    /// Entropy bonus weight.
    pub entropy_coef: f64,
    // ── Parameters of particular losses (verl `actor.policy_loss.*`) ──
    /// SAPO gate temperature where A > 0 (verl `tau_pos`).
    pub tau_pos: f64,
    /// SAPO gate temperature where A <= 0 (verl `tau_neg`).
    pub tau_neg: f64,
    /// DRO: weight of the `½β(logp - logp_old)²` penalty (verl `policy_loss.dro_beta`).
    pub dro_beta: f64,
    /// KL-Cov: fraction of valid tokens, those of highest covariance, that get the `|log r|`
    /// penalty (verl `policy_loss.kl_cov_ratio`).
    pub kl_cov_ratio: f64,
    /// KL-Cov: weight of that penalty (verl `policy_loss.ppo_kl_coef`).
    pub ppo_kl_coef: f64,
    /// Clip-Cov: fraction of valid tokens whose gradient may be cut (verl
    /// `policy_loss.clip_cov_ratio`).
    pub clip_cov_ratio: f64,
    /// Clip-Cov: lower bound of the covariance window of the candidate tokens (verl
    /// `policy_loss.clip_cov_lb`).
    pub clip_cov_lb: f64,
    /// Clip-Cov: upper bound of that window (verl `policy_loss.clip_cov_ub`).
    pub clip_cov_ub: f64,
    // ── Off-policy correction ──
    /// Leave truncated completions out of the loss (TRL `mask_truncated_completions`).
    pub mask_truncated: bool,
    /// Recompute the old log-probs with the trainer's forward pass instead of the sampler's.
    pub recompute_old_logprobs: bool,
    /// Truncated importance sampling between sampler and trainer: `none`, `token`, `sequence`
    /// (weights capped at `tis_cap`), `token_mask`, `sequence_mask` (ratios above the cap are
    /// masked out of the loss). Needs `recompute_old_logprobs`.
    pub tis: Tis,
    /// The cap (verl `rollout_is_threshold`).
    pub tis_cap: f64,
    // ── Optimisation ──
    /// Optimisation passes over each batch against the stored old log-probs.
    pub ppo_epochs: usize,
    /// Optimizer steps per pass (the batch is split into this many mini-batches).
    pub mini_batches: usize,
    pub lr: f64,
    pub max_grad_norm: f64,
    pub weight_decay: f64,
    /// Leave rows with a zero advantage out of the update when no KL or entropy term needs
    /// them: exact (their gradient is zero) and cheaper. `false` runs every row.
    pub skip_zero_advantage: bool,
}

/// The advantage estimator that needs a critic (verl `gae`).
pub const GAE: Estimator = Estimator::Gae;

/// Held-out evaluation before and after RL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvalConfig {
    /// Held-out problems (never seen in SFT or RL).
    pub problems: usize,
    /// Samples per problem, n: pass@k is reported for k = 1, 2, 4, ... up to n.
    pub samples: usize,
    pub temperature: f64,
    /// Sequences decoded together.
    pub batch_size: usize,
}

impl Default for TrainConfig {
    fn default() -> Self {
        let tokenizer_vocab = reinforge_tasks::ArithTask::tokenizer().vocab_size();
        Self {
            seed: 0,
            runs_dir: "runs".into(),
            name: None,
            device: "cpu".into(),
            bf16: false,
            threads: 1,
            max_nonfinite_steps: 5,
            zero_stage: 0,
            vision_freeze: true,
            memory: Memory::recommended(),
            integrity: MonitorConfig::default(),
            logging: LoggingConfig::default(),
            task: TaskConfig::default(),
            model: ModelConfig {
                model_type: "llama".into(),
                vocab_size: tokenizer_vocab,
                hidden_size: 64,
                intermediate_size: 192,
                num_hidden_layers: 3,
                num_attention_heads: 4,
                num_key_value_heads: Some(2),
                head_dim: None,
                max_position_embeddings: 64,
                rms_norm_eps: 1e-6,
                rope_theta: 10_000.0,
                tie_word_embeddings: true,
                attention_bias: false,
                hidden_act: "silu".into(),
                bos_token_id: Some(reinforge_tasks::tokenizer::BOS),
                eos_token_id: Some(reinforge_tasks::tokenizer::EOS),
                pad_token_id: Some(reinforge_tasks::tokenizer::PAD),
                ..ModelConfig::default()
            },
            sft: SftConfig::default(),
            grpo: RlConfig::default(),
            ppo: PpoConfig::default(),
            rollout: RolloutConfig::default(),
            eval: EvalConfig::default(),
        }
    }
}

/// Three-digit problems, half of SFT in each pattern, single-turn episodes.
impl Default for TaskConfig {
    fn default() -> Self {
        Self {
            digits: 3,
            direct_share: 0.5,
            attempts: 1,
        }
    }
}

/// The toy experiment's warm-start.
impl Default for SftConfig {
    fn default() -> Self {
        Self {
            steps: 1500,
            batch_size: 64,
            lr: 3e-3,
            warmup_steps: 30,
            max_grad_norm: 1.0,
            weight_decay: 0.0,
            checkpoint_every: 500,
        }
    }
}

/// The toy experiment's RL phase: GRPO with DAPO's clip-higher; the per-loss parameters are
/// verl's defaults (SAPO `tau_neg` 1.05, KL-Cov and Clip-Cov ratios 0.0002, `clip_cov_ub` 5).
impl Default for RlConfig {
    fn default() -> Self {
        Self {
            steps: 30,
            prompts_per_step: 32,
            num_generations: 8,
            epsilon_low: 0.2,
            epsilon_high: 0.28,
            beta: 0.0,
            entropy_coef: 0.0,
            ppo_epochs: 2,
            mini_batches: 2,
            lr: 1e-4,
            max_grad_norm: 1.0,
            weight_decay: 0.0,
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            max_completion_length: 48,
            advantage: AdvantageConfig::default(),
            checkpoint_every: 10,
            ignore_eos: false,
            skip_zero_advantage: true,
            algorithm: Preset::Grpo,
            advantage_estimator: Estimator::Grpo,
            policy_loss: PolicyLossKind::Vanilla,
            loss_agg_mode: AggMode::TokenMean,
            clip_ratio_c: 0.0,
            clamp_log_ratio: true,
            kl_estimator: KlPenalty::K3,
            tau_pos: 1.0,
            tau_neg: 1.05,
            dro_beta: 1.0,
            kl_cov_ratio: 0.0002,
            ppo_kl_coef: 1.0,
            clip_cov_ratio: 0.0002,
            clip_cov_lb: 1.0,
            clip_cov_ub: 5.0,
            dynamic_sampling: false,
            max_draws: 4,
            overlong_buffer_len: 0,
            overlong_penalty_factor: 1.0,
            mask_truncated: false,
            recompute_old_logprobs: false,
            tis: Tis::None,
            tis_cap: 2.0,
        }
    }
}

/// 200 held-out problems, 64 samples each.
impl Default for EvalConfig {
    fn default() -> Self {
        Self {
            problems: 200,
            samples: 64,
            temperature: 1.0,
            batch_size: 1024,
        }
    }
}

impl TrainConfig {
    /// The run's name.
    pub fn run_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("default-seed{}", self.seed))
    }

    /// The resolved config as TOML (what `config.toml` in a run directory holds).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("config serialises")
    }

    /// Defaults of a run on a pretrained checkpoint (`train --model/--data`): TRL's
    /// `GRPOConfig` choices where the toy experiment's would be wrong for a real model
    /// (learning rate 1e-6, one update per generated batch, 256 completion tokens); the
    /// rest as [`Self::default`].
    pub fn data_run_defaults() -> Self {
        let mut cfg = Self::default();
        cfg.grpo.lr = 1e-6;
        cfg.grpo.ppo_epochs = 1;
        cfg.grpo.mini_batches = 1;
        cfg.grpo.max_completion_length = 256;
        // Held-out evaluation (`--heldout`): 32 samples per prompt for pass@k up to k = 32.
        cfg.eval.problems = 96;
        cfg.eval.samples = 32;
        cfg.eval.batch_size = 256;
        cfg
    }

    /// [`Self::to_toml`] without the sections a dataset run does not use (the toy model, its
    /// task and SFT), so its `config.toml` lists only what applies.
    pub fn to_data_run_toml(&self) -> String {
        let mut value = toml::Value::try_from(self).expect("config serialises");
        if let Some(table) = value.as_table_mut() {
            for unused in ["task", "model", "sft"] {
                table.remove(unused);
            }
        }
        toml::to_string_pretty(&value).expect("config serialises")
    }
}
