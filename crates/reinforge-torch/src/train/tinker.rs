//! The tensor side of the Tinker API (`reinforge serve --model DIR --tinker`): token ids in,
//! numbers out, so reinforge-serve and the binary never build a tensor.
//!
//! A [`TinkerModel`] is one client's training model (LoRA adapters on the server's shared base,
//! or every weight of its own copy): [`TinkerModel::forward_backward`] computes the log-probs
//! of each datum's `target_tokens` under the model (position `i` of `model_input` predicts
//! `target_tokens[i]`, Tinker's alignment) in padding-free packed passes, and the built-in loss, summed over tokens and data, and accumulates the
//! gradients; [`TinkerModel::optim_step`] applies them with the Adam parameters the client sent
//! (reinforge's AdamW: PyTorch's `torch.optim.AdamW`, which the SDK's `optim_step` documents)
//! and clears them. The losses follow the formulas of Tinker's documentation
//! (tinker-docs.thinkingmachines.ai/tinker/losses: `cross_entropy` = `-Σ weights·logp`,
//! `importance_sampling` = `-Σ exp(logp - sampling_logp)·advantages`, `ppo` = `-Σ min(r·A,
//! clamp(r, clip_low_threshold, clip_high_threshold)·A)` with thresholds 0.8 and 1.2 unless
//! `loss_fn_config` sets them).

use std::path::Path;

use anyhow::{ensure, Context, Result};
use tch::{Kind, Tensor};

use crate::model::batch::SequenceBatch;
use crate::model::checkpoint::LoadOptions;
use crate::model::lora::{LoraConfig, TARGET_MODULES};
use crate::model::memory::Memory;
use crate::model::policy::{Policy, SharedPolicy};
use crate::sample::{generate, SamplingParams};
use crate::train::optim::{AdamW, AdamWConfig};

/// One training example, Tinker's `Datum` restricted to token chunks.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Datum {
    /// `model_input`: the tokens the model reads.
    pub input: Vec<i64>,
    /// `loss_fn_inputs.target_tokens`: the token position `i` predicts, one per input token.
    pub targets: Vec<i64>,
    /// `loss_fn_inputs.weights` (cross_entropy); empty means 1 everywhere.
    pub weights: Vec<f32>,
    /// `loss_fn_inputs.logprobs`: the sampler's log-probs of the targets (policy losses).
    pub sampling_logprobs: Vec<f32>,
    /// `loss_fn_inputs.advantages` (policy losses).
    pub advantages: Vec<f32>,
}

/// A built-in loss of `forward_backward`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Loss {
    CrossEntropy,
    ImportanceSampling,
    /// Clipped ratio bounds (Tinker's `clip_low_threshold`, `clip_high_threshold`).
    Ppo {
        low: f64,
        high: f64,
    },
}

/// What `forward_backward` measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Forward {
    /// Per datum, the log-prob of each target token (the `logprobs` output).
    pub logprobs: Vec<Vec<f32>>,
    /// The loss summed over every token of every datum (`loss:sum`).
    pub loss_sum: f64,
}

/// One optimizer step's hyper-parameters (Tinker's `AdamParams`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamStep {
    pub learning_rate: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Global gradient-norm clipping; 0 means none.
    pub grad_clip_norm: f64,
}

/// What an optimizer step did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepReport {
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
    /// False when the norm was not finite (the step was skipped).
    pub stepped: bool,
}

/// Where Tinker's `create_model` puts LoRA: its flags mapped onto reinforge's projections
/// (`train_attn`: q/k/v/o, `train_mlp`: gate/up/down). reinforge has no adapter on the LM
/// head, so `train_unembed` is ignored (documented in docs/tinker.md).
pub fn lora_config(rank: usize, train_attn: bool, train_mlp: bool) -> LoraConfig {
    let attn = ["q_proj", "k_proj", "v_proj", "o_proj"];
    let target_modules = TARGET_MODULES
        .iter()
        .filter(|m| {
            if attn.contains(m) {
                train_attn
            } else {
                train_mlp
            }
        })
        .map(|m| m.to_string())
        .collect();
    // alpha = 32 as SkyRL's Tinker server (the Tinker default, thinkingmachines.ai/blog/lora).
    LoraConfig {
        r: rank,
        alpha: 32.0,
        target_modules,
        dropout: 0.0,
    }
}

/// The optimizer state's file in a checkpoint written by `save_state`.
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";

/// One client's training model and its optimizer.
pub struct TinkerModel {
    pub policy: Policy,
    optim: Option<AdamW>,
}

impl TinkerModel {
    /// A LoRA model: fresh adapters drawn from torch's generator seeded with `seed` over the
    /// weights of `base` (loaded once by the server), which every LoRA model shares
    /// ([`Policy::sharing_frozen_weights`]: one copy of the base in memory). The adapters' `B`
    /// starts at zero, so the model computes the base model's log-probs until it is trained.
    pub fn create_lora(base: &Policy, lora: &LoraConfig, seed: i64) -> Result<Self> {
        let mut policy = base.sharing_frozen_weights()?;
        crate::runtime::with_seed(seed, || policy.enable_lora(lora))?;
        Ok(Self {
            policy,
            optim: None,
        })
    }

    /// A model to fine-tune in full: its own copy of the checkpoint `dir`.
    pub fn create_full(dir: &Path, opts: &LoadOptions) -> Result<Self> {
        let policy = Policy::load_with(dir, opts)
            .with_context(|| format!("loading the base model in {}", dir.display()))?;
        Ok(Self {
            policy,
            optim: None,
        })
    }

    /// Replaces the weights with a checkpoint written by [`Self::save`]: the adapter over
    /// `base`'s shared weights when `dir` holds one, else the full weights of `dir` (read with
    /// `opts`). With `optimizer`, the AdamW moments and step count saved with it are restored
    /// (Tinker's `load_state_with_optimizer`), so training continues as if never stopped;
    /// without, the optimizer restarts from zero moments (`load_state`).
    pub fn load(
        &mut self,
        base: &Policy,
        opts: &LoadOptions,
        dir: &Path,
        optimizer: bool,
    ) -> Result<()> {
        let adapter = dir.join(crate::model::lora::ADAPTER_CONFIG_FILE);
        let policy = if adapter.is_file() {
            let mut p = base.sharing_frozen_weights()?;
            p.load_adapter(dir)
                .with_context(|| format!("loading the adapter in {}", dir.display()))?;
            p
        } else {
            ensure!(
                self.policy.model.lora_config().is_none(),
                "{} holds no LoRA adapter, and this model trains LoRA adapters",
                dir.display()
            );
            Policy::load_with(dir, opts)
                .with_context(|| format!("loading the weights in {}", dir.display()))?
        };
        let optim = if optimizer {
            let file = dir.join(OPTIMIZER_FILE);
            ensure!(
                file.is_file(),
                "{} holds no optimizer state ({OPTIMIZER_FILE}): save_state writes it, save_weights_for_sampler does not",
                dir.display()
            );
            let mut o = AdamW::new(&policy.vs, AdamWConfig::default());
            o.load(&file)?;
            Some(o)
        } else {
            None
        };
        self.policy = policy;
        self.optim = optim;
        Ok(())
    }

    /// Writes the model into `dir`: the full (merged) Hugging Face checkpoint that `reinforge
    /// score` and transformers load, plus the PEFT adapter when LoRA is on, and with
    /// `optimizer` the AdamW moments and step count ([`OPTIMIZER_FILE`]; zero moments before
    /// the first step), which [`Self::load`] restores.
    pub fn save(&self, dir: &Path, base_name: &str, optimizer: bool) -> Result<()> {
        self.policy.save(dir)?;
        if self.policy.model.lora_config().is_some() {
            self.policy.save_adapter(dir, base_name)?;
        }
        if optimizer {
            let file = dir.join(OPTIMIZER_FILE);
            match &self.optim {
                Some(o) => o.save(&file)?,
                None => AdamW::new(&self.policy.vs, AdamWConfig::default()).save(&file)?,
            }
        }
        Ok(())
    }

    /// Log-probs of every datum's targets and the loss; with `backward`, the loss's gradients
    /// are added to those already accumulated (Tinker's `forward_backward`; without it,
    /// `forward`). The data run packed, padding-free (the trainer's `SequenceBatch` packing,
    /// docs/memory.md): each pass concatenates the inputs of as many data as fit in
    /// `max_tokens` (0: all of them), each attending only to itself, so a request costs a few
    /// passes, not one per datum, and no pad token is computed. Per-token results equal the
    /// one-pass-per-datum path ([`Self::forward_backward_per_datum`]). The server has checked
    /// the inputs (lengths, token ids, the loss's inputs).
    pub fn forward_backward(
        &mut self,
        data: &[Datum],
        loss: Loss,
        backward: bool,
        max_tokens: usize,
    ) -> Forward {
        let memory = Memory {
            max_tokens_per_microbatch: max_tokens,
            padding_free: true,
            ..Memory::default()
        };
        let lens: Vec<usize> = data.iter().map(|d| d.input.len()).collect();
        let rows: Vec<i64> = (0..data.len() as i64).collect();
        let mut out = Forward {
            logprobs: vec![vec![]; data.len()],
            loss_sum: 0.0,
        };
        for pass in memory.microbatches(&rows, &lens) {
            let part: Vec<&Datum> = pass.iter().map(|&i| &data[i as usize]).collect();
            let device = self.policy.device();
            let run = || {
                let logps = packed_target_logprobs(&self.policy, &part);
                let term = logps
                    .iter()
                    .zip(&part)
                    .map(|(lp, d)| loss_terms(lp, d, loss, device).sum(Kind::Float))
                    .fold(Tensor::zeros([], (Kind::Float, device)), |a, b| a + b);
                (logps, term)
            };
            let (logps, term) = if backward {
                let (logps, term) = run();
                term.backward();
                (logps, term)
            } else {
                tch::no_grad(run)
            };
            out.loss_sum += term.double_value(&[]);
            for (&i, lp) in pass.iter().zip(logps) {
                out.logprobs[i as usize] = host_values(&lp);
            }
        }
        out
    }

    /// [`Self::forward_backward`] with one forward pass per datum: the reference the packed
    /// path is tested against.
    pub fn forward_backward_per_datum(
        &mut self,
        data: &[Datum],
        loss: Loss,
        backward: bool,
    ) -> Forward {
        let mut out = Forward {
            logprobs: Vec::with_capacity(data.len()),
            loss_sum: 0.0,
        };
        for d in data {
            let run = || {
                let logp = target_logprobs(&self.policy, &d.input, &d.targets);
                let term = loss_terms(&logp, d, loss, self.policy.device()).sum(Kind::Float);
                (logp, term)
            };
            let (logp, term) = if backward {
                let (logp, term) = run();
                term.backward();
                (logp, term)
            } else {
                tch::no_grad(run)
            };
            out.loss_sum += term.double_value(&[]);
            out.logprobs.push(host_values(&logp));
        }
        out
    }

    /// One AdamW step over the accumulated gradients with `p`, then clears them. A step whose
    /// gradient norm is not finite is skipped (and reported).
    pub fn optim_step(&mut self, p: &AdamStep) -> StepReport {
        let cfg = AdamWConfig {
            beta1: p.beta1,
            beta2: p.beta2,
            eps: p.eps,
            weight_decay: p.weight_decay,
        };
        let optim = self
            .optim
            .get_or_insert_with(|| AdamW::new(&self.policy.vs, cfg.clone()));
        optim.cfg = cfg;
        let step = optim.clip_and_step(p.grad_clip_norm, p.learning_rate);
        optim.zero_grad();
        StepReport {
            grad_norm: step.grad_norm,
            stepped: step.stepped,
        }
    }

    /// A frozen copy of the current weights (LoRA folded in) for a sampling client
    /// (`save_weights_for_sampler`), readable from the sampling thread.
    pub fn snapshot(&self) -> Result<SharedPolicy> {
        self.policy.shared_copy()
    }
}

/// The values of `t` on the host, for the client.
fn host_values(t: &Tensor) -> Vec<f32> {
    // host: the numbers go back to the client.
    let host = t.detach().to_device(tch::Device::Cpu);
    Vec::<f32>::try_from(host).unwrap_or_default()
}

/// Log-probs of each datum's targets (`[len]` each, float32), from one forward pass over the
/// data's inputs packed padding-free ([`SequenceBatch::packed`]: concatenated, each with its
/// own positions, attending only to itself); the LM head runs on real tokens only.
fn packed_target_logprobs(policy: &Policy, data: &[&Datum]) -> Vec<Tensor> {
    let device = policy.device();
    let inputs: Vec<&[i64]> = data.iter().map(|d| d.input.as_slice()).collect();
    let none: Vec<&[i64]> = vec![&[]; data.len()];
    let Some(packed) = SequenceBatch::new(&inputs, &none, 0, device).packed() else {
        return data
            .iter()
            .map(|_| Tensor::zeros([0], (Kind::Float, device)))
            .collect();
    };
    let hidden = policy.model.hidden(&packed.input(), None).squeeze_dim(0);
    let logits = policy.model.logits(&hidden).to_kind(Kind::Float);
    let targets: Vec<i64> = data
        .iter()
        .flat_map(|d| d.targets.iter().copied())
        .collect();
    let targets = Tensor::from_slice(&targets).to_device(device);
    let logp = logits
        .gather(-1, &targets.unsqueeze(-1), false)
        .squeeze_dim(-1)
        - logits.logsumexp([-1], false);
    let lens: Vec<i64> = data.iter().map(|d| d.input.len() as i64).collect();
    logp.split_with_sizes(lens.as_slice(), 0)
}

/// Log-probs `[N]` of `targets` at each position of `input` (one sequence, no padding), in
/// float32 whatever the compute dtype.
fn target_logprobs(policy: &Policy, input: &[i64], targets: &[i64]) -> Tensor {
    let device = policy.device();
    let n = input.len() as i64;
    let ids = Tensor::from_slice(input).view([1, n]).to_device(device);
    let positions = Tensor::arange(n, (Kind::Int64, device)).view([1, n]);
    let key_mask = Tensor::ones([1, n], (Kind::Bool, device));
    let input = crate::model::transformer::ForwardInput {
        ids: &ids,
        positions: &positions,
        key_mask: &key_mask,
        segments: &[],
        images: None,
    };
    let hidden = policy.model.hidden(&input, None).squeeze_dim(0);
    let logits = policy.model.logits(&hidden).to_kind(Kind::Float);
    let targets = Tensor::from_slice(targets).to_device(device);
    logits
        .gather(-1, &targets.unsqueeze(-1), false)
        .squeeze_dim(-1)
        - logits.logsumexp([-1], false)
}

/// The per-token loss terms `[N]` of `loss` for log-probs `logp`.
fn loss_terms(logp: &Tensor, d: &Datum, loss: Loss, device: tch::Device) -> Tensor {
    let values = |v: &[f32]| Tensor::from_slice(v).to_device(device);
    match loss {
        Loss::CrossEntropy if d.weights.is_empty() => -logp,
        Loss::CrossEntropy => -(logp * values(&d.weights)),
        Loss::ImportanceSampling => {
            let ratio = (logp - values(&d.sampling_logprobs)).exp();
            -(ratio * values(&d.advantages))
        }
        Loss::Ppo { low, high } => {
            let ratio = (logp - values(&d.sampling_logprobs)).exp();
            let adv = values(&d.advantages);
            let unclipped = &ratio * &adv;
            let clipped = ratio.clamp(low, high) * &adv;
            -unclipped.minimum(&clipped)
        }
    }
}

/// A sampled sequence (Tinker's `SampledSequence`).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub tokens: Vec<i64>,
    pub logprobs: Vec<f32>,
    /// False when `max_tokens` ended it.
    pub stopped: bool,
}

/// Draws `n` completions of `prompt` from `policy` with reinforge's KV-cache sampler, seeding
/// torch's generator with `seed` first when given (the same seed, prompt and weights give the
/// same tokens). The server samples through its batching engine (the binary's
/// `TinkerSampler`); this one-request draw is the reference its seeded batches reproduce.
pub fn sample(
    policy: &Policy,
    prompt: &[i64],
    n: usize,
    params: &SamplingParams,
    seed: Option<i64>,
) -> Vec<Sample> {
    let prompts = vec![prompt.to_vec(); n];
    let draw = || generate(&policy.model, &prompts, params, 0, policy.device());
    let completions = match seed {
        Some(s) => crate::runtime::with_seed(s, draw),
        None => draw(),
    };
    completions
        .into_iter()
        .map(|c| Sample {
            stopped: !c.truncated,
            tokens: c.tokens,
            logprobs: c.logprobs,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(logp: &[f32], d: &Datum, loss: Loss) -> Vec<f32> {
        let t = Tensor::from_slice(logp).to_device(tch::Device::Cpu);
        Vec::<f32>::try_from(loss_terms(&t, d, loss, tch::Device::Cpu)).unwrap()
    }

    /// Each loss term against Tinker's formula computed by hand, with ratios inside and
    /// outside PPO's clip range and advantages of both signs.
    #[test]
    fn loss_terms_follow_tinkers_formulas() {
        let logp = [-1.0f32, -2.0, -0.5, -3.0];
        let d = Datum {
            weights: vec![1.0, 0.0, 2.0, 0.5],
            // Ratios exp(logp - old): e^0.5 (1.65), e^-0.5 (0.61), 1, e^0.1 (1.105).
            sampling_logprobs: vec![-1.5, -1.5, -0.5, -3.1],
            advantages: vec![1.0, 1.0, -2.0, -1.0],
            ..Datum::default()
        };
        let ce = terms(&logp, &d, Loss::CrossEntropy);
        assert_eq!(ce, vec![1.0, 0.0, 1.0, 1.5]);
        let ratio: Vec<f32> = logp
            .iter()
            .zip(&d.sampling_logprobs)
            .map(|(a, b)| (a - b).exp())
            .collect();
        let is = terms(&logp, &d, Loss::ImportanceSampling);
        for i in 0..4 {
            assert!((is[i] + ratio[i] * d.advantages[i]).abs() < 1e-6);
        }
        let ppo = terms(
            &logp,
            &d,
            Loss::Ppo {
                low: 0.8,
                high: 1.2,
            },
        );
        // Positive advantage, ratio 1.65: clipped to 1.2. Positive advantage, ratio 0.61:
        // min(0.61, 0.8) keeps 0.61. Negative advantage, ratio 1: unchanged. Negative
        // advantage, ratio 1.105 inside the range: unchanged.
        let want = [-1.2f32, -ratio[1], 2.0, ratio[3]];
        for i in 0..4 {
            assert!(
                (ppo[i] - want[i]).abs() < 1e-6,
                "{i}: {} vs {}",
                ppo[i],
                want[i]
            );
        }
        let unweighted = Datum::default();
        assert_eq!(
            terms(&logp, &unweighted, Loss::CrossEntropy),
            vec![1.0, 2.0, 0.5, 3.0]
        );
    }
}

#[cfg(test)]
mod shared_base_tests {
    use super::*;
    use crate::model::value::tests::tiny;

    fn datum() -> Datum {
        Datum {
            input: vec![1, 5, 6, 7],
            targets: vec![5, 6, 7, 2],
            ..Datum::default()
        }
    }

    fn loss(m: &mut TinkerModel) -> f64 {
        m.forward_backward(&[datum()], Loss::CrossEntropy, false, 0)
            .loss_sum
    }

    /// LoRA models share the base's weights (one copy in memory): the same storage, and
    /// training one model's adapters changes neither the other model nor the base.
    #[test]
    fn lora_models_share_the_base_and_train_apart() {
        let base = Policy::new(&tiny(false), tch::Device::Cpu, 3).unwrap();
        let cfg = lora_config(4, true, true);
        let mut a = TinkerModel::create_lora(&base, &cfg, 1).unwrap();
        let mut b = TinkerModel::create_lora(&base, &cfg, 2).unwrap();
        let name = "model.layers.0.mlp.up_proj.weight";
        let ptr = |p: &Policy| p.vs.variables()[name].data_ptr();
        assert_eq!(ptr(&a.policy), ptr(&base));
        assert_eq!(ptr(&b.policy), ptr(&base));
        let before = base.vs.variables()[name].copy();
        let (a0, b0) = (loss(&mut a), loss(&mut b));
        for _ in 0..3 {
            a.forward_backward(&[datum()], Loss::CrossEntropy, true, 0);
            a.optim_step(&AdamStep {
                learning_rate: 1e-2,
                beta1: 0.9,
                beta2: 0.95,
                eps: 1e-8,
                weight_decay: 0.1,
                grad_clip_norm: 0.0,
            });
        }
        assert!(loss(&mut a) < a0 - 1e-3, "the adapters trained");
        assert_eq!(loss(&mut b), b0, "the other model is unchanged");
        let after = &base.vs.variables()[name];
        assert_eq!(f64::try_from((after - &before).abs().max()).unwrap(), 0.0);
    }
}

#[cfg(test)]
mod packed_tests {
    use super::*;

    fn fixture() -> Policy {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hf/models/llama");
        Policy::load(&dir, tch::Device::Cpu).unwrap()
    }

    /// Data of different lengths (the fixture's vocabulary is 512), with weights and the
    /// policy losses' inputs.
    fn data() -> Vec<Datum> {
        [
            vec![1i64, 5, 9, 300, 7],
            vec![1, 40, 41, 42, 43, 44, 45, 46, 47],
            vec![2, 3, 4],
        ]
        .into_iter()
        .enumerate()
        .map(|(k, input)| {
            let n = input.len();
            let targets: Vec<i64> = input[1..].iter().copied().chain([11]).collect();
            Datum {
                weights: (0..n).map(|i| (i % 3) as f32 * 0.5).collect(),
                sampling_logprobs: (0..n).map(|i| -6.0 - 0.1 * i as f32).collect(),
                advantages: (0..n)
                    .map(|i| if (i + k) % 2 == 0 { 1.0 } else { -0.5 })
                    .collect(),
                input,
                targets,
            }
        })
        .collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-5 * a.abs().max(b.abs()).max(1.0)
    }

    fn adam() -> AdamStep {
        AdamStep {
            learning_rate: 1e-2,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.0,
            grad_clip_norm: 0.0,
        }
    }

    /// Packed passes (one for the request, or several under a small token budget) give the
    /// per-datum path's log-probs and loss within 1e-5 for every loss, and the same
    /// gradients: after an optimizer step from the same adapters, the adapters and the next
    /// losses agree too.
    #[test]
    fn packed_passes_equal_one_pass_per_datum() {
        let base = fixture();
        let cfg = lora_config(4, true, true);
        let data = data();
        let losses = [
            Loss::CrossEntropy,
            Loss::ImportanceSampling,
            Loss::Ppo {
                low: 0.8,
                high: 1.2,
            },
        ];
        // 0: one pass; 12: the 5-token datum alone, the 9- and 3-token data together.
        for budget in [0, 12] {
            for loss in losses {
                let mut one = TinkerModel::create_lora(&base, &cfg, 5).unwrap();
                let mut packed = TinkerModel::create_lora(&base, &cfg, 5).unwrap();
                // B starts at zero: one step first, so the adapters change the outputs.
                for m in [&mut one, &mut packed] {
                    m.forward_backward_per_datum(&data, Loss::CrossEntropy, true);
                    m.optim_step(&adam());
                }
                let a = one.forward_backward_per_datum(&data, loss, true);
                let b = packed.forward_backward(&data, loss, true, budget);
                assert!(
                    close(a.loss_sum, b.loss_sum),
                    "{loss:?} {budget}: {} vs {}",
                    a.loss_sum,
                    b.loss_sum
                );
                assert_eq!(a.logprobs.len(), b.logprobs.len());
                for (x, y) in a.logprobs.iter().zip(&b.logprobs) {
                    assert_eq!(x.len(), y.len());
                    for (p, q) in x.iter().zip(y) {
                        assert!(close(*p as f64, *q as f64), "{loss:?} {budget}: {p} vs {q}");
                    }
                }
                one.optim_step(&adam());
                packed.optim_step(&adam());
                let (va, vb) = (one.policy.vs.variables(), packed.policy.vs.variables());
                let mut adapters = 0;
                for (name, t) in &va {
                    if crate::model::lora::is_lora_param(name) {
                        adapters += 1;
                        let d = f64::try_from((t - &vb[name]).abs().max()).unwrap();
                        assert!(d <= 1e-5, "{loss:?} {budget}: {name} differs by {d}");
                    }
                }
                assert!(adapters > 0);
                let next_a = one.forward_backward_per_datum(&data, loss, false).loss_sum;
                let next_b = packed.forward_backward(&data, loss, false, budget).loss_sum;
                assert!(
                    close(next_a, next_b),
                    "{loss:?} {budget}: {next_a} vs {next_b}"
                );
                assert!(!close(next_a, a.loss_sum), "the step changed the model");
            }
        }
    }
}
