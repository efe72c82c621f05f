//! Validation of a resolved [`TrainConfig`]: every number finite and in its range, every count
//! that 0 makes meaningless at least 1, the option names and their combinations, each error
//! naming the key at fault. The arithmetic model's own checks are [`TrainConfig::validate_arith`].

use anyhow::{bail, Context, Result};
use reinforge_rl::Estimator;
use reinforge_torch::train::loss::Tis;

use crate::config::{EngineKind, TrainConfig, GAE};

impl TrainConfig {
    /// Range and cross-field checks that serde cannot express, naming the key at fault: every
    /// number finite and in its range, every count that 0 makes meaningless at least 1, the
    /// option names and their combinations. Task-neutral: [`Self::validate_arith`] adds the
    /// checks of the built-in arithmetic model.
    pub fn validate(&self) -> Result<()> {
        self.validate_counts()?;
        self.validate_floats()?;
        if !(1..=9).contains(&self.task.digits) {
            bail!(
                "task.digits must be between 1 and 9, got {}",
                self.task.digits
            );
        }
        if self.task.attempts == 0 {
            bail!("task.attempts must be at least 1 (1 = single turn), got 0");
        }
        // ZeRO-2/3 are not built yet: a run asking for them must not run unsharded while its
        // log names the stage it asked for.
        if self.zero_stage > 1 {
            bail!(
                "zero_stage = {} is not implemented: 0 (a full optimizer state on every rank) or 1 (the AdamW moments sharded over the ranks, ZeRO-1)",
                self.zero_stage
            );
        }
        if self.grpo.top_k < 0 {
            bail!("rl.top_k must be >= 0 (0 = off), got {}", self.grpo.top_k);
        }
        if self.grpo.temperature == 0.0 {
            bail!(
                "rl.temperature = 0 samples greedily, so every completion of a group is the same, every group-relative advantage is 0 and RL learns nothing; use a temperature > 0 (e.g. 1.0)"
            );
        }
        self.validate_algorithm()?;
        self.validate_rollout()?;
        let uri = &self.logging.mlflow_uri;
        if !uri.is_empty() && !uri.starts_with("http://") && !uri.starts_with("https://") {
            bail!("logging.mlflow_uri must be an http:// or https:// URL of an MLflow tracking server (or empty: off), got {uri:?}");
        }
        let rollouts = self.grpo.prompts_per_step * self.grpo.num_generations;
        if self.grpo.mini_batches > rollouts {
            bail!(
                "rl.mini_batches = {} exceeds the rollouts per step (rl.prompts_per_step x rl.num_generations = {rollouts})",
                self.grpo.mini_batches
            );
        }
        Ok(())
    }

    /// The checks of the built-in arithmetic task's model (`[model]`, `[task]`): its vocabulary
    /// holds the task's tokens and its shape is valid. Positions are checked against the loaded
    /// model by the trainer; runs on a Hugging Face checkpoint check their own model.
    pub fn validate_arith(&self) -> Result<()> {
        let need = reinforge_tasks::ArithTask::tokenizer().vocab_size();
        if self.model.vocab_size < need {
            bail!(
                "model.vocab_size = {} is smaller than the task tokenizer's {need} ids",
                self.model.vocab_size
            );
        }
        self.model.validate().context("in [model]")?;
        for (key, v) in [
            ("model.rms_norm_eps", self.model.rms_norm_eps),
            ("model.rope_theta", self.model.rope_theta),
        ] {
            check(key, v, Range::Positive)?;
        }
        // Prompt (with `<bos>`) plus completion against the positions is checked against the
        // model actually loaded, before training starts (`trainer::check_positions`).
        Ok(())
    }

    /// Counts for which 0 means nothing, and upper bounds on every count: far above any real
    /// run, low enough that no product of them overflows or asks for an impossible allocation.
    fn validate_counts(&self) -> Result<()> {
        self.validate_count_bounds()?;
        let at_least_one = [
            ("sft.batch_size", self.sft.batch_size),
            ("rl.prompts_per_step", self.grpo.prompts_per_step),
            ("rl.num_generations", self.grpo.num_generations),
            ("rl.ppo_epochs", self.grpo.ppo_epochs),
            ("rl.mini_batches", self.grpo.mini_batches),
            ("rl.max_completion_length", self.grpo.max_completion_length),
            ("rl.max_draws", self.grpo.max_draws),
            ("eval.problems", self.eval.problems),
            ("eval.samples", self.eval.samples),
            ("eval.batch_size", self.eval.batch_size),
            ("integrity.window", self.integrity.window),
            ("integrity.canary_prompts", self.integrity.canary_prompts),
        ];
        for (key, v) in at_least_one {
            if v == 0 {
                bail!("{key} must be at least 1, got 0");
            }
        }
        Ok(())
    }

    /// Every count at most [`MAX_COUNT`] (threads at most [`MAX_THREADS`]), and the rollouts
    /// and tokens of one step within the same bound.
    fn validate_count_bounds(&self) -> Result<()> {
        let (s, g, p, e, i) = (
            &self.sft,
            &self.grpo,
            &self.ppo,
            &self.eval,
            &self.integrity,
        );
        let counts = [
            ("max_nonfinite_steps", self.max_nonfinite_steps),
            (
                "memory.max_tokens_per_microbatch",
                self.memory.max_tokens_per_microbatch,
            ),
            ("task.attempts", self.task.attempts),
            ("sft.steps", s.steps),
            ("sft.batch_size", s.batch_size),
            ("sft.warmup_steps", s.warmup_steps),
            ("sft.checkpoint_every", s.checkpoint_every),
            ("rl.steps", g.steps),
            ("rl.checkpoint_every", g.checkpoint_every),
            ("rl.prompts_per_step", g.prompts_per_step),
            ("rl.num_generations", g.num_generations),
            ("rl.max_completion_length", g.max_completion_length),
            ("rl.max_draws", g.max_draws),
            ("rl.overlong_buffer_len", g.overlong_buffer_len),
            ("rl.ppo_epochs", g.ppo_epochs),
            ("rl.mini_batches", g.mini_batches),
            ("ppo.critic_warmup", p.critic_warmup),
            ("ppo.critic_epochs", p.critic_epochs),
            ("ppo.critic_mini_batches", p.critic_mini_batches),
            ("rollout.retries", self.rollout.retries),
            ("rollout.max_staleness", self.rollout.max_staleness),
            ("eval.problems", e.problems),
            ("eval.samples", e.samples),
            ("eval.batch_size", e.batch_size),
            ("integrity.canary_every", i.canary_every),
            ("integrity.canary_prompts", i.canary_prompts),
            ("integrity.window", i.window),
            ("integrity.flagged_kept", i.flagged_kept),
        ];
        for (key, v) in counts {
            if v > MAX_COUNT {
                bail!("{key} = {v} is above the largest count this build accepts ({MAX_COUNT})");
            }
        }
        if self.threads > MAX_THREADS {
            bail!(
                "threads = {} is above {MAX_THREADS} (0 = libtorch's default, one per core)",
                self.threads
            );
        }
        let products = [
            (
                "rl.prompts_per_step x rl.num_generations (rollouts per step)",
                g.prompts_per_step as u128 * g.num_generations as u128,
            ),
            (
                "rl.prompts_per_step x rl.num_generations x rl.max_completion_length (tokens per step)",
                g.prompts_per_step as u128 * g.num_generations as u128 * g.max_completion_length as u128,
            ),
            (
                "eval.problems x eval.samples (completions per evaluation)",
                e.problems as u128 * e.samples as u128,
            ),
        ];
        for (what, v) in products {
            if v > MAX_COUNT as u128 {
                bail!("{what} = {v} is above the largest count this build accepts ({MAX_COUNT})");
            }
        }
        Ok(())
    }

    /// Every float option finite and in its range.
    fn validate_floats(&self) -> Result<()> {
        let (t, s, g, p, e) = (&self.task, &self.sft, &self.grpo, &self.ppo, &self.eval);
        let checks = [
            ("task.direct_share", t.direct_share, Range::Probability),
            ("sft.lr", s.lr, Range::Positive),
            ("sft.max_grad_norm", s.max_grad_norm, Range::Positive),
            ("sft.weight_decay", s.weight_decay, Range::NonNegative),
            ("rl.epsilon_low", g.epsilon_low, Range::Probability),
            (
                "integrity.rise_warn",
                self.integrity.rise_warn,
                Range::NonNegative,
            ),
            ("rl.epsilon_high", g.epsilon_high, Range::NonNegative),
            ("rl.beta", g.beta, Range::NonNegative),
            ("rl.entropy_coef", g.entropy_coef, Range::Finite),
            ("rl.lr", g.lr, Range::Positive),
            ("rl.max_grad_norm", g.max_grad_norm, Range::Positive),
            ("rl.weight_decay", g.weight_decay, Range::NonNegative),
            ("rl.temperature", g.temperature, Range::NonNegative),
            ("rl.top_p", g.top_p, Range::TopP),
            ("rl.advantage.epsilon", g.advantage.epsilon, Range::Positive),
            ("rl.clip_ratio_c", g.clip_ratio_c, Range::NonNegative),
            (
                "rl.overlong_penalty_factor",
                g.overlong_penalty_factor,
                Range::NonNegative,
            ),
            ("rl.tis_cap", g.tis_cap, Range::Finite),
            ("ppo.gamma", p.gamma, Range::Probability),
            ("ppo.lam", p.lam, Range::Probability),
            ("ppo.kl_coef", p.kl_coef, Range::NonNegative),
            ("ppo.critic_lr", p.critic_lr, Range::Positive),
            (
                "ppo.critic_weight_decay",
                p.critic_weight_decay,
                Range::NonNegative,
            ),
            (
                "ppo.critic_max_grad_norm",
                p.critic_max_grad_norm,
                Range::Positive,
            ),
            ("ppo.cliprange_value", p.cliprange_value, Range::Positive),
            ("eval.temperature", e.temperature, Range::NonNegative),
        ];
        for (key, v, range) in checks {
            check(key, v, range)?;
        }
        Ok(())
    }

    /// Checks `[rollout]`: engines named when remote, a usable timeout.
    fn validate_rollout(&self) -> Result<()> {
        let r = &self.rollout;
        if r.engine == EngineKind::Openai && r.base_urls.is_empty() {
            bail!("rollout.engine = \"openai\" needs rollout.base_urls, e.g. [\"http://127.0.0.1:8001\"]");
        }
        for (i, u) in r.base_urls.iter().enumerate() {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                bail!("rollout.base_urls[{i}] = {u:?} must start with http:// or https://");
            }
        }
        if !(r.timeout_s.is_finite() && r.timeout_s > 0.0 && r.timeout_s <= 86_400.0) {
            bail!(
                "rollout.timeout_s must be a number of seconds in (0, 86400], got {}",
                r.timeout_s
            );
        }
        if r.max_staleness > 0 && self.grpo.dynamic_sampling {
            bail!("rollout.max_staleness > 0 with rl.dynamic_sampling is not supported: dynamic sampling draws again within a step");
        }
        Ok(())
    }

    /// Checks the algorithm option names and their combinations.
    fn validate_algorithm(&self) -> Result<()> {
        let g = &self.grpo;
        if g.advantage_estimator == GAE {
            self.validate_ppo()?;
        } else if let Some(input) = g.advantage_estimator.extra_inputs().first() {
            bail!(
                "rl.advantage_estimator = {} needs `{}`, which the trainer does not produce; use gae (with a critic) or one of the outcome estimators: {}",
                g.advantage_estimator,
                input.name(),
                Estimator::outcome_names().join(", ")
            );
        }
        if g.advantage.batch_std && g.advantage_estimator != Estimator::TrlGrpo {
            bail!(
                "rl.advantage.batch_std (TRL scale_rewards = \"batch\") is read by rl.advantage_estimator = {} only, got {}",
                Estimator::TrlGrpo,
                g.advantage_estimator
            );
        }
        if !(g.clip_ratio_c == 0.0 || g.clip_ratio_c > 1.0) {
            bail!(
                "rl.clip_ratio_c must be 0 (off) or > 1, got {}",
                g.clip_ratio_c
            );
        }
        if g.tis != Tis::None && !g.recompute_old_logprobs {
            bail!("rl.tis = {} needs rl.recompute_old_logprobs = true", g.tis);
        }
        if g.tis_cap.is_nan() || g.tis_cap <= 1.0 {
            bail!("rl.tis_cap must be > 1, got {}", g.tis_cap);
        }
        if g.overlong_buffer_len > g.max_completion_length {
            bail!(
                "rl.overlong_buffer_len = {} exceeds rl.max_completion_length = {}",
                g.overlong_buffer_len,
                g.max_completion_length
            );
        }
        self.validate_loss_knobs()
    }

    /// Checks the per-loss knobs of `[rl]` (read by their losses only, checked always).
    fn validate_loss_knobs(&self) -> Result<()> {
        let g = &self.grpo;
        for (key, v) in [("rl.tau_pos", g.tau_pos), ("rl.tau_neg", g.tau_neg)] {
            if !(v.is_finite() && v > 0.0) {
                bail!("{key} must be a finite number > 0, got {v}");
            }
        }
        for (key, v) in [
            ("rl.dro_beta", g.dro_beta),
            ("rl.ppo_kl_coef", g.ppo_kl_coef),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                bail!("{key} must be a finite number >= 0, got {v}");
            }
        }
        for (key, v) in [
            ("rl.kl_cov_ratio", g.kl_cov_ratio),
            ("rl.clip_cov_ratio", g.clip_cov_ratio),
        ] {
            if !(v > 0.0 && v <= 1.0) {
                bail!("{key} must be in (0, 1], got {v}");
            }
        }
        if !(g.clip_cov_lb.is_finite()
            && g.clip_cov_ub.is_finite()
            && g.clip_cov_lb < g.clip_cov_ub)
        {
            bail!(
                "rl.clip_cov_lb ({}) must be finite and below rl.clip_cov_ub ({})",
                g.clip_cov_lb,
                g.clip_cov_ub
            );
        }
        Ok(())
    }

    /// Checks `[ppo]` when the critic is in use.
    fn validate_ppo(&self) -> Result<()> {
        let p = &self.ppo;
        let rollouts = self.grpo.prompts_per_step * self.grpo.num_generations;
        if rollouts < 2 {
            bail!("rl.advantage_estimator = gae whitens over the batch: rl.prompts_per_step x rl.num_generations must be at least 2");
        }
        if p.mini_batches(&self.grpo) > rollouts {
            bail!(
                "ppo.critic_mini_batches = {} exceeds the rollouts per step",
                p.critic_mini_batches
            );
        }
        Ok(())
    }
}

/// The range a float option must lie in.
/// The largest count any option (or product of options) may take: 2^26, about 67 million.
pub const MAX_COUNT: usize = 1 << 26;
/// The most CPU threads `threads` may ask for.
pub const MAX_THREADS: usize = 4096;

#[derive(Debug, Clone, Copy)]
enum Range {
    /// Any finite number.
    Finite,
    /// 0, or normal and > 0.
    NonNegative,
    /// Normal and > 0 (a subnormal such as 1e-320 overflows to infinity when divided by).
    Positive,
    /// In [0, 1].
    Probability,
    /// In (0, 1] (nucleus sampling keeps at least the top token).
    TopP,
}

/// Checks that option `key` = `v` lies in `range`; the error names the key, the range and
/// the value.
fn check(key: &str, v: f64, range: Range) -> Result<()> {
    let (ok, want) = match range {
        Range::Finite => (v.is_finite(), "a finite number"),
        Range::NonNegative => (
            v == 0.0 || (v.is_normal() && v > 0.0),
            "finite and >= 0 (0 or at least 2.2e-308)",
        ),
        Range::Positive => (
            v.is_normal() && v > 0.0,
            "finite and > 0 (at least 2.2e-308)",
        ),
        Range::Probability => ((0.0..=1.0).contains(&v), "between 0 and 1"),
        Range::TopP => (v > 0.0 && v <= 1.0, "in (0, 1]"),
    };
    if ok {
        Ok(())
    } else {
        bail!("{key} must be {want}, got {v}")
    }
}
