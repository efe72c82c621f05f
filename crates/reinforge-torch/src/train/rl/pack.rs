//! The RL step's first call into this crate, [`pack`]: one iteration's scored rollouts become
//! the update's [`RolloutBatch`], and every forward pass before the update runs here (old and
//! reference log-probs, TIS weights, the sampler-trainer gap, PPO's critic values and the
//! reference KL of its reward). The trainer hands token ids and sampler log-probs in and gets
//! plain numbers back, so it never touches a tensor.

use anyhow::{Context, Result};
use tch::{Kind, Tensor};

use crate::model::batch::SequenceBatch;
use crate::model::images::Image;
use crate::model::logprobs::{token_logprobs_in_microbatches, Entropy};
use crate::model::memory::Memory;
use crate::model::policy::Policy;
use crate::model::value::Critic;
use crate::train::loss::kl::{kl_penalty, KlPenalty};
use crate::train::loss::tis::{tis_weights, Tis};

/// Ragged rows of numbers, one per rollout, one entry per completion token.
pub type Rows = Vec<Vec<f64>>;

/// One sampled completion as the packer needs it.
#[derive(Debug, Clone, Copy)]
pub struct RolloutRef<'a> {
    /// Prompt ids (non-empty: they start with `<bos>` or the chat template's first token).
    pub prompt: &'a [i64],
    pub completion: &'a [i64],
    /// The sampler's log-prob of each completion token.
    pub logprobs: &'a [f32],
    /// Cut at the length limit.
    pub truncated: bool,
    /// Which completion tokens the policy produced (`true`) rather than the environment (a
    /// multi-turn environment's replies and tool results): only those are trained on.
    /// `None`: all of them.
    pub trained: Option<&'a [bool]>,
    /// The images the prompt's placeholders hold, in order (vision-language rollouts).
    pub images: &'a [Image],
}

/// What packing computes besides the sequences.
#[derive(Debug, Clone, PartialEq)]
pub struct PackOptions {
    pub pad_id: i64,
    /// Sampling temperature (applied to logits when log-probs are recomputed).
    pub temperature: f64,
    /// Old log-probs from the trainer's forward pass instead of the sampler's.
    pub recompute_old_logprobs: bool,
    /// Truncated importance sampling between sampler and trainer.
    pub tis: Tis,
    pub tis_cap: f64,
    /// Leave truncated completions out of the loss.
    pub mask_truncated: bool,
    /// Run the trainer's forward pass on the rollouts even when old log-probs come from the
    /// sampler, to measure the sampler-trainer log-prob gap (a remote engine's tokens).
    pub measure_gap: bool,
    /// With PPO's critic and a KL in its reward: the estimator of the per-token KL(old ‖
    /// reference) to compute (needs the reference model).
    pub reference_kl: Option<KlPenalty>,
    /// Micro-batches of the log-prob passes (old and reference log-probs).
    pub memory: Memory,
}

/// How far the sampler's log-probs are from the trainer's on the same tokens, over the
/// trained completion tokens (an inference engine's numerics, stale or mismatched weights).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogprobGap {
    /// Mean |sampler − trainer|.
    pub mean_abs: f64,
    /// Largest |sampler − trainer|.
    pub max_abs: f64,
    /// Mean (sampler − trainer).
    pub mean: f64,
    /// Mean entropy of the trainer's distributions at those tokens (nats).
    pub trainer_entropy: f64,
    /// Mean and largest importance weight `exp(trainer − sampler)` per token (how off-policy
    /// the batch is: stale weights in asynchronous training, engine numerics).
    pub is_weight_mean: f64,
    pub is_weight_max: f64,
}

/// The rollouts of one iteration, packed for the update.
pub struct RolloutBatch {
    pub seqs: SequenceBatch,
    /// Sampler log-probs at target positions `[N, L-1]`.
    pub old_logp: Tensor,
    /// Reference-model log-probs `[N, L-1]` when `beta > 0`.
    pub ref_logp: Option<Tensor>,
    /// One advantage per sequence. With `token_advantages`, the row's largest |advantage|
    /// (only its being zero is read: such a row may be skipped).
    pub advantages: Vec<f32>,
    /// Per-token advantages `[N, L-1]` (REINFORCE++ whitening); `None`: `advantages` per row.
    pub token_advantages: Option<Tensor>,
    /// Rollout-correction weights `[N, L-1]` multiplied into the policy loss (TIS).
    pub is_weights: Option<Tensor>,
    /// Multiplies the loss mask `[N, L-1]`: 0 removes a token from the loss and from the
    /// aggregation denominators (truncated completions, rejection sampling).
    pub keep: Option<Tensor>,
}

impl RolloutBatch {
    /// A batch with per-row advantages and no correction or extra mask.
    pub fn new(
        seqs: SequenceBatch,
        old_logp: Tensor,
        ref_logp: Option<Tensor>,
        advantages: Vec<f32>,
    ) -> Self {
        Self {
            seqs,
            old_logp,
            ref_logp,
            advantages,
            token_advantages: None,
            is_weights: None,
            keep: None,
        }
    }

    /// Tokens each row contributes to the loss (the row sums of the effective mask).
    pub fn row_tokens(&self) -> Vec<f64> {
        match &self.keep {
            None => self
                .seqs
                .target_counts()
                .iter()
                .map(|&c| c as f64)
                .collect(),
            Some(keep) => Vec::<f64>::try_from(
                (&self.seqs.loss_mask * keep)
                    .sum_dim_intlist(-1i64, false, Kind::Double)
                    // host: per-row token counts read back as numbers at the step boundary.
                    .to_device(tch::Device::Cpu),
            )
            .expect("row sums"),
        }
    }
}

/// What the advantage stage hands the update: plain numbers, one row per rollout this process
/// holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Advantages {
    /// An outcome estimator's: one per row, and per token when it has them.
    Outcome {
        per_row: Vec<f64>,
        per_token: Option<Rows>,
    },
    /// GAE with PPO's critic: per-token advantages, and the critic's targets (the values the
    /// rollouts were scored with, the returns).
    Gae {
        advantages: Rows,
        values: Rows,
        returns: Rows,
    },
}

/// The models whose forward passes packing runs.
#[derive(Clone, Copy)]
pub struct PackModels<'a> {
    pub policy: &'a Policy,
    /// The frozen reference (KL terms).
    pub reference: Option<&'a Policy>,
    /// PPO's critic: its values of the rollouts come back as [`Packed::values`].
    pub critic: Option<&'a Critic>,
}

/// The packed rollouts of one iteration, what the forward passes measured, and the row
/// lengths (to read per-token tensors back as [`Rows`]).
pub struct Packed {
    pub batch: RolloutBatch,
    /// With `recompute_old_logprobs` or `measure_gap`: the sampler-trainer gap.
    pub gap: Option<LogprobGap>,
    /// With a critic: its value of each completion token's prefix (no gradient).
    pub values: Option<Rows>,
    /// With [`PackOptions::reference_kl`] and a reference model: per-token KL(old ‖ reference).
    pub reference_kl: Option<Rows>,
    prompt_lens: Vec<usize>,
    completion_lens: Vec<usize>,
}

/// The RL step's first call: packs rollouts into the update's tensors (advantages are set by
/// [`super::update`], all zero until then) and runs every forward pass the advantages and the
/// update need, once: reference log-probs, the trainer's old log-probs with
/// `recompute_old_logprobs`, the TIS weights and the keep mask (truncated completions,
/// rejected tokens), the critic's values and the reference KL of PPO's reward.
/// Errors name a rollout whose prompt placeholders do not match its images.
pub fn pack(models: PackModels, rollouts: &[RolloutRef], opts: &PackOptions) -> Result<Packed> {
    super::count_call();
    let mut packed = pack_batch(models.policy, models.reference, rollouts, opts)?;
    if let Some(critic) = models.critic {
        let values = {
            let _guard = tch::no_grad_guard();
            critic.values_in_microbatches(&packed.batch.seqs, &opts.memory)
        };
        packed.values = Some(packed.completion_rows(&values));
    }
    if let (Some(estimator), Some(reference)) = (opts.reference_kl, &packed.batch.ref_logp) {
        let kl = kl_penalty(&packed.batch.old_logp, reference, estimator);
        packed.reference_kl = Some(packed.completion_rows(&kl));
    }
    Ok(packed)
}

/// The batch, the reference and trainer log-probs, TIS weights and keep mask.
fn pack_batch(
    policy: &Policy,
    reference: Option<&Policy>,
    rollouts: &[RolloutRef],
    opts: &PackOptions,
) -> Result<Packed> {
    let seqs = sequences(rollouts, opts.pad_id, policy)?;
    let logprobs: Vec<Vec<f32>> = rollouts.iter().map(|r| r.logprobs.to_vec()).collect();
    let rollout_logp = seqs.completion_values(&logprobs);
    let forward = |p: &Policy, entropy: Entropy| {
        let _guard = tch::no_grad_guard();
        token_logprobs_in_microbatches(&p.model, &seqs, (opts.temperature, entropy), &opts.memory)
    };
    let ref_logp = reference.map(|r| forward(r, Entropy::Skip).0);
    let trainer = (opts.recompute_old_logprobs || opts.measure_gap)
        .then(|| forward(policy, Entropy::Detached));
    let gap = trainer
        .as_ref()
        .map(|(logp, entropy)| logprob_gap(&rollout_logp, logp, entropy, &seqs.loss_mask));
    let old_logp = match trainer {
        Some((logp, _)) if opts.recompute_old_logprobs => logp * &seqs.loss_mask,
        _ => rollout_logp.shallow_clone(),
    };
    let (is_weights, keep) = corrections(rollouts, opts, &seqs, &old_logp, &rollout_logp);
    let mut batch = RolloutBatch::new(seqs, old_logp, ref_logp, vec![0.0; rollouts.len()]);
    batch.is_weights = is_weights;
    batch.keep = keep;
    Ok(Packed {
        batch,
        gap,
        values: None,
        reference_kl: None,
        prompt_lens: rollouts.iter().map(|r| r.prompt.len()).collect(),
        completion_lens: rollouts.iter().map(|r| r.completion.len()).collect(),
    })
}

/// `prompt ++ completion` rows on `policy`'s device, with the prompts' images when any has
/// some; tokens the environment produced leave the loss mask.
fn sequences(rollouts: &[RolloutRef], pad_id: i64, policy: &Policy) -> Result<SequenceBatch> {
    let prompts: Vec<&[i64]> = rollouts.iter().map(|r| r.prompt).collect();
    let completions: Vec<&[i64]> = rollouts.iter().map(|r| r.completion).collect();
    let mut seqs = SequenceBatch::new(&prompts, &completions, pad_id, policy.device());
    if rollouts.iter().any(|r| !r.images.is_empty()) {
        let images = rollouts.iter().map(|r| r.images.to_vec()).collect();
        seqs = seqs
            .with_images(policy.model.config(), images)
            .context("the rollouts' images")?;
    }
    if rollouts.iter().any(|r| r.trained.is_some()) {
        let trained: Vec<Vec<f32>> = rollouts
            .iter()
            .map(|r| match r.trained {
                Some(m) => m.iter().map(|&t| f32::from(t as u8)).collect(),
                None => vec![1.0; r.completion.len()],
            })
            .collect();
        seqs.loss_mask = &seqs.loss_mask * seqs.completion_values(&trained);
    }
    Ok(seqs)
}

/// TIS weights, and the keep mask of TIS's rejections and truncated completions.
fn corrections(
    rollouts: &[RolloutRef],
    opts: &PackOptions,
    seqs: &SequenceBatch,
    old_logp: &Tensor,
    rollout_logp: &Tensor,
) -> (Option<Tensor>, Option<Tensor>) {
    let (is_weights, tis_keep) = match opts.tis {
        Tis::None => (None, None),
        mode => {
            let (w, k) = tis_weights(old_logp, rollout_logp, &seqs.loss_mask, mode, opts.tis_cap);
            (Some(w), Some(k))
        }
    };
    let truncated_keep = opts.mask_truncated.then(|| {
        let keep: Vec<f32> = rollouts
            .iter()
            .map(|r| f32::from(!r.truncated as u8))
            .collect();
        seqs.row_values(&keep)
    });
    let keep = match (tis_keep, truncated_keep) {
        (Some(a), Some(b)) => Some(a * b),
        (a, b) => a.or(b),
    };
    (is_weights, keep)
}

/// The gap between the sampler's and the trainer's log-probs at the `mask`ed tokens.
fn logprob_gap(sampler: &Tensor, trainer: &Tensor, entropy: &Tensor, mask: &Tensor) -> LogprobGap {
    let n = mask.sum(Kind::Double).double_value(&[]).max(1.0);
    let diff = (sampler - trainer) * mask;
    let masked_mean = |t: &Tensor| (t * mask).sum(Kind::Double).double_value(&[]) / n;
    let weight = (-&diff).exp() * mask;
    LogprobGap {
        is_weight_mean: masked_mean(&weight),
        is_weight_max: weight.max().double_value(&[]),
        mean_abs: masked_mean(&diff.abs()),
        max_abs: diff.abs().max().double_value(&[]),
        mean: masked_mean(&diff),
        trainer_entropy: masked_mean(entropy),
    }
}

pub(super) fn f32_rows(m: &[Vec<f64>]) -> Vec<Vec<f32>> {
    m.iter()
        .map(|r| r.iter().map(|&x| x as f32).collect())
        .collect()
}

impl Packed {
    /// Rows in the batch.
    pub fn len(&self) -> usize {
        self.prompt_lens.len()
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.prompt_lens.is_empty()
    }

    /// Sets the step's advantages: an outcome estimator's one per row (and per token when it
    /// has them), or GAE's per token, each row's advantage then being its largest |advantage|
    /// (only its being zero is read: such a row may be skipped).
    pub fn set_advantages(&mut self, advantages: &Advantages) {
        let b = &mut self.batch;
        match advantages {
            Advantages::Outcome { per_row, per_token } => {
                b.token_advantages = per_token
                    .as_deref()
                    .map(|t| b.seqs.completion_values(&f32_rows(t)));
                b.advantages = per_row.iter().map(|&a| a as f32).collect();
            }
            Advantages::Gae { advantages, .. } => {
                b.token_advantages = Some(b.seqs.completion_values(&f32_rows(advantages)));
                b.advantages = advantages
                    .iter()
                    .map(|r| r.iter().fold(0.0f32, |m, a| m.max(a.abs() as f32)))
                    .collect();
            }
        }
    }

    /// The completion-token entries of a target-aligned `[N, L-1]` tensor, one row per
    /// rollout (the inverse of `SequenceBatch::completion_values` for non-empty prompts).
    pub(super) fn completion_rows(&self, t: &Tensor) -> Rows {
        let w = t.size()[1] as usize;
        let flat: Vec<f64> = Vec::<f64>::try_from(
            t.detach()
                .to_kind(Kind::Double)
                // host: values back as rows for the advantage stage (plain Rust).
                .to_device(tch::Device::Cpu)
                .flatten(0, -1),
        )
        .unwrap_or_default();
        self.prompt_lens
            .iter()
            .zip(&self.completion_lens)
            .enumerate()
            .map(|(i, (&p, &c))| {
                let start = i * w + p.max(1) - 1;
                flat.get(start..start + c)
                    .map_or_else(Vec::new, <[f64]>::to_vec)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::ModelConfig;

    fn tiny() -> Policy {
        let cfg = ModelConfig {
            vocab_size: 16,
            hidden_size: 16,
            intermediate_size: 32,
            num_hidden_layers: 1,
            num_attention_heads: 2,
            num_key_value_heads: Some(1),
            max_position_embeddings: 32,
            ..ModelConfig::default()
        };
        Policy::new(&cfg, tch::Device::Cpu, 0).unwrap()
    }

    fn opts() -> PackOptions {
        PackOptions {
            pad_id: 0,
            temperature: 1.0,
            recompute_old_logprobs: false,
            tis: Tis::None,
            tis_cap: 2.0,
            mask_truncated: true,
            measure_gap: false,
            reference_kl: None,
            memory: Memory::default(),
        }
    }

    fn alone(policy: &Policy) -> PackModels<'_> {
        PackModels {
            policy,
            reference: None,
            critic: None,
        }
    }

    #[test]
    fn environment_tokens_leave_the_loss_and_the_gap_is_measured() {
        let policy = tiny();
        let trained = [true, false, false, true];
        let rows = [RolloutRef {
            prompt: &[1, 5],
            completion: &[3, 4, 2, 6],
            logprobs: &[-0.5, 0.0, 0.0, -1.0],
            truncated: false,
            trained: Some(&trained),
            images: &[],
        }];
        let o = PackOptions {
            measure_gap: true,
            ..opts()
        };
        let p = pack(alone(&policy), &rows, &o).unwrap();
        assert_eq!(
            p.completion_rows(&p.batch.seqs.loss_mask),
            vec![vec![1.0, 0.0, 0.0, 1.0]]
        );
        // The gap is over the two trained tokens only: recompute it from the trainer's own
        // log-probs.
        let o2 = PackOptions {
            recompute_old_logprobs: true,
            ..opts()
        };
        let q = pack(alone(&policy), &rows, &o2).unwrap();
        let trainer = q.completion_rows(&q.batch.old_logp);
        let want = ((-0.5 - trainer[0][0]).abs() + (-1.0 - trainer[0][3]).abs()) / 2.0;
        let gap = p.gap.expect("measured");
        assert!((gap.mean_abs - want).abs() < 1e-5, "{gap:?} vs {want}");
        assert!(gap.max_abs >= gap.mean_abs && gap.trainer_entropy > 0.0);
        assert_eq!(
            trainer[0][1], 0.0,
            "environment tokens have no old log-prob"
        );
    }

    #[test]
    fn rows_round_trip_and_truncated_rows_are_masked() {
        let policy = tiny();
        let rows = [
            RolloutRef {
                prompt: &[1, 5],
                completion: &[3, 4, 2],
                logprobs: &[-0.5, -1.0, -1.5],
                truncated: false,
                trained: None,
                images: &[],
            },
            RolloutRef {
                prompt: &[1, 6, 7],
                completion: &[8],
                logprobs: &[-2.0],
                truncated: true,
                trained: None,
                images: &[],
            },
        ];
        let o = PackOptions {
            reference_kl: Some("k3".parse().unwrap()),
            ..opts()
        };
        let mut p = pack(alone(&policy), &rows, &o).unwrap();
        assert_eq!(p.len(), 2);
        // The sampler's log-probs come back at their completion tokens.
        assert_eq!(
            p.completion_rows(&p.batch.old_logp),
            vec![vec![-0.5, -1.0, -1.5], vec![-2.0]]
        );
        let keep = p.batch.keep.as_ref().expect("mask_truncated keeps a mask");
        assert_eq!(p.completion_rows(keep), vec![vec![1.0; 3], vec![0.0]]);
        p.set_advantages(&Advantages::Gae {
            advantages: vec![vec![0.5, -2.0, 1.0], vec![0.0]],
            values: vec![],
            returns: vec![],
        });
        assert_eq!(p.batch.advantages, vec![2.0, 0.0]);
        let back = p.completion_rows(p.batch.token_advantages.as_ref().unwrap());
        assert_eq!(back, vec![vec![0.5, -2.0, 1.0], vec![0.0]]);
        assert!(
            p.reference_kl.is_none() && p.values.is_none(),
            "no reference, no critic"
        );
    }
}
