//! One GRPO iteration: sample G completions per prompt, score them with the task verifier,
//! normalise rewards within each group, and update the policy with the clipped surrogate
//! against the sampler's log-probs (the stored "old" policy).

use std::time::Instant;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use reinforge_rl::{grpo_advantages, GroupStats, Groups};
use reinforge_tasks::{ArithTask, Pattern, Split};
use reinforge_torch::logprobs::token_logprobs;
use reinforge_torch::loss::PpoClip;
use reinforge_torch::train::{policy_update, RolloutBatch, UpdateConfig};
use reinforge_torch::{AdamW, Policy, SequenceBatch};
use serde::{Deserialize, Serialize};

use crate::config::GrpoConfig;
use crate::rollout::{sample_and_score, sampling, Rollout};
use crate::seeds::{seed_torch, step_seed, PHASE_GRPO};

/// One line of `metrics.jsonl`. Keys under `timing/` measure wall time and so differ between
/// runs; every other key is a deterministic function of the seed on CPU.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepMetrics {
    pub step: usize,
    #[serde(rename = "reward/mean")]
    pub reward_mean: f64,
    #[serde(rename = "reward/std")]
    pub reward_std: f64,
    /// Fraction of groups whose rewards are all equal (no learning signal).
    #[serde(rename = "reward/zero_std_frac")]
    pub zero_std_frac: f64,
    pub loss: f64,
    pub pg_loss: f64,
    /// Mean k3 KL to the reference model (0 without one).
    pub kl: f64,
    /// Mean entropy of the sampling distribution over the step's completion tokens.
    pub entropy: f64,
    #[serde(rename = "clipfrac/high")]
    pub clipfrac_high: f64,
    #[serde(rename = "clipfrac/low")]
    pub clipfrac_low: f64,
    pub ppo_kl: f64,
    pub grad_norm: f64,
    /// Fraction of rollout rows the update skipped: their advantage is exactly zero, so they
    /// add nothing to the loss or its gradient.
    #[serde(rename = "update/rows_skipped_frac")]
    pub rows_skipped_frac: f64,
    #[serde(rename = "response_length/mean")]
    pub response_length: f64,
    #[serde(rename = "response/truncated_frac")]
    pub truncated_frac: f64,
    /// Share of this step's completions in the columns pattern.
    #[serde(rename = "pattern/columns_share")]
    pub columns_share: f64,
    #[serde(rename = "pattern/direct_share")]
    pub direct_share: f64,
    #[serde(rename = "timing/step_s")]
    pub step_seconds: f64,
    #[serde(rename = "timing/sample_s")]
    pub sample_seconds: f64,
    #[serde(rename = "timing/update_s")]
    pub update_seconds: f64,
    /// Completion tokens generated and trained on per second of the whole step.
    #[serde(rename = "timing/tokens_per_s")]
    pub tokens_per_second: f64,
}

/// The update settings of a GRPO config.
pub fn update_config(cfg: &GrpoConfig) -> UpdateConfig {
    UpdateConfig {
        clip: PpoClip {
            epsilon_low: cfg.epsilon_low,
            epsilon_high: cfg.epsilon_high,
        },
        beta: cfg.beta,
        entropy_coef: cfg.entropy_coef,
        epochs: cfg.ppo_epochs,
        mini_batches: cfg.mini_batches,
        lr: cfg.lr,
        max_grad_norm: cfg.max_grad_norm,
        temperature: cfg.temperature,
        skip_zero_advantage: cfg.skip_zero_advantage,
    }
}

/// Runs GRPO iteration `step`.
pub fn run_step(
    policy: &Policy,
    reference: Option<&Policy>,
    opt: &mut AdamW,
    task: &ArithTask,
    cfg: &GrpoConfig,
    seed: u64,
    step: usize,
) -> StepMetrics {
    let start = Instant::now();
    let s = step_seed(seed, PHASE_GRPO, step as u64);
    seed_torch(s);
    let problems = task.problems(s, cfg.prompts_per_step, Split::Train);
    let mut params = sampling(
        cfg.temperature,
        cfg.top_p,
        cfg.top_k,
        cfg.max_completion_length,
    );
    if cfg.ignore_eos {
        params.stop_tokens.clear();
    }
    let g = cfg.num_generations;
    let rollouts = sample_and_score(
        policy,
        task,
        &problems,
        g,
        &params,
        usize::MAX,
        policy.device(),
        |_| {},
    );
    let sample_seconds = start.elapsed().as_secs_f64();

    let rewards: Vec<f64> = rollouts.iter().map(Rollout::reward).collect();
    let groups = Groups::contiguous(problems.len(), g);
    let stats = GroupStats::of(&rewards, &groups);
    let advantages: Vec<f32> = grpo_advantages(&rewards, &groups, &cfg.advantage)
        .into_iter()
        .map(|a| a as f32)
        .collect();

    let update_start = Instant::now();
    let batch = pack(policy, reference, &rollouts, &advantages, cfg);
    let mut rng = ChaCha8Rng::seed_from_u64(s);
    let orders: Vec<Vec<i64>> = (0..cfg.ppo_epochs)
        .map(|_| {
            let mut o: Vec<i64> = (0..rollouts.len() as i64).collect();
            o.shuffle(&mut rng);
            o
        })
        .collect();
    let u = policy_update(policy, opt, &batch, &update_config(cfg), &orders);
    let update_seconds = update_start.elapsed().as_secs_f64();

    let n = rollouts.len() as f64;
    let tokens: usize = rollouts.iter().map(|r| r.tokens.len()).sum();
    let share = |p: Pattern| rollouts.iter().filter(|r| r.pattern == p).count() as f64 / n;
    let step_seconds = start.elapsed().as_secs_f64();
    StepMetrics {
        step,
        reward_mean: stats.mean,
        reward_std: stats.std,
        zero_std_frac: stats.zero_variance_frac,
        loss: u.loss,
        pg_loss: u.pg_loss,
        kl: u.kl,
        entropy: rollouts
            .iter()
            .flat_map(|r| &r.entropies)
            .map(|&e| e as f64)
            .sum::<f64>()
            / tokens.max(1) as f64,
        clipfrac_high: u.clipfrac_high,
        clipfrac_low: u.clipfrac_low,
        ppo_kl: u.ppo_kl,
        grad_norm: u.grad_norm,
        rows_skipped_frac: u.rows_skipped as f64 / (n * cfg.ppo_epochs as f64),
        response_length: tokens as f64 / n,
        truncated_frac: rollouts.iter().filter(|r| r.truncated).count() as f64 / n,
        columns_share: share(Pattern::Columns),
        direct_share: share(Pattern::Direct),
        step_seconds,
        sample_seconds,
        update_seconds,
        tokens_per_second: tokens as f64 / step_seconds,
    }
}

/// Packs rollouts into the update's tensors; reference log-probs are computed here, once.
fn pack(
    policy: &Policy,
    reference: Option<&Policy>,
    rollouts: &[Rollout],
    advantages: &[f32],
    cfg: &GrpoConfig,
) -> RolloutBatch {
    let prompts: Vec<&[i64]> = rollouts.iter().map(|r| r.prompt.as_slice()).collect();
    let completions: Vec<&[i64]> = rollouts.iter().map(|r| r.tokens.as_slice()).collect();
    let seqs = SequenceBatch::new(
        &prompts,
        &completions,
        reinforge_tasks::tokenizer::PAD,
        policy.device(),
    );
    let logprobs: Vec<Vec<f32>> = rollouts.iter().map(|r| r.logprobs.clone()).collect();
    let old_logp = seqs.completion_values(&logprobs);
    let ref_logp = reference.map(|r| {
        let _guard = reinforge_torch::tch::no_grad_guard();
        token_logprobs(&r.model, &seqs, cfg.temperature).0
    });
    let advantages = advantages.to_vec();
    RolloutBatch {
        seqs,
        old_logp,
        ref_logp,
        advantages,
    }
}
