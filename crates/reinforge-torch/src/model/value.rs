//! PPO's critic: the policy's transformer backbone with a scalar value head on its final hidden
//! states, predicting the return of each completion token's state.
//!
//! Follows OpenRLHF `openrlhf/models/model.py` `get_llm_for_sequence_regression` (v0.8, the
//! critic built with `value_head_prefix="value_head"`): the backbone without its LM head, a
//! `Linear(hidden, 1, bias=False)` named `value_head` initialised from `N(0, 1/(H+1))`, and
//! values read as `value_head(hidden)[:, :-1]`, i.e. the value of the state *before* each target
//! token. verl's critic (`dp_critic.py` `_forward_micro_batch`, 0.10) reads the same positions
//! (`values[:, -response_length - 1 : -1]`); both start the backbone from the actor's (SFT)
//! weights.

use std::path::Path;

use anyhow::{bail, Context, Result};
use tch::nn::{Init, VarStore};
use tch::{Device, Kind, Tensor};

use crate::model::batch::SequenceBatch;
use crate::model::config::ModelConfig;
use crate::model::memory::Memory;
use crate::model::policy::Policy;
use crate::model::transformer::Transformer;

/// File name of the critic's weights inside a checkpoint directory (backbone with HF names, plus
/// `value_head.weight`).
pub const CRITIC_WEIGHTS_FILE: &str = "critic.safetensors";

/// The value head's parameter name.
pub const VALUE_HEAD: &str = "value_head.weight";

/// Freezes the LM head of `vs`: a model read through its hidden states (a critic, a P2L
/// model) never uses logits.
pub(crate) fn freeze_lm_head(vs: &VarStore) {
    for (name, t) in vs.variables() {
        if name.starts_with("lm_head") {
            let _ = t.set_requires_grad(false);
        }
    }
}

/// A value model: its own var store, a [`Transformer`] backbone and the value head.
pub struct Critic {
    pub vs: VarStore,
    pub model: Transformer,
    /// `[1, H]`.
    value_head: Tensor,
}

impl Critic {
    /// A critic with random backbone and head on `device`; `seed` fixes the initial weights.
    /// The LM head of an untied model is frozen: the critic never reads logits.
    pub fn new(cfg: &ModelConfig, device: Device, seed: i64) -> Result<Self> {
        cfg.validate()?;
        Ok(crate::runtime::with_seed(seed, || {
            let vs = VarStore::new(device);
            let model = Transformer::new(&vs.root(), cfg);
            let h = cfg.hidden_size as i64;
            // OpenRLHF `init_value_head`: normal(0, 1/(hidden_size + 1)).
            let value_head = (&vs.root() / "value_head").var(
                "weight",
                &[1, h],
                Init::Randn {
                    mean: 0.0,
                    stdev: 1.0 / (h as f64 + 1.0),
                },
            );
            freeze_lm_head(&vs);
            Self {
                vs,
                model,
                value_head,
            }
        }))
    }

    /// A critic whose backbone is a copy of `policy`'s weights and whose value head is freshly
    /// initialised from `seed` (how verl and OpenRLHF start the critic from the SFT model).
    pub fn from_policy(policy: &Policy, seed: i64) -> Result<Self> {
        let critic = Self::new(policy.model.config(), policy.device(), seed)?;
        let source = policy.vs.variables();
        let _guard = tch::no_grad_guard();
        for (name, mut t) in critic.vs.variables() {
            match source.get(&name) {
                Some(s) => t.copy_(s),
                None if name == VALUE_HEAD => {}
                None => bail!("the policy has no parameter `{name}` for the critic's backbone"),
            }
        }
        Ok(critic)
    }

    /// Values `[N, L-1]` aligned like [`crate::model::logprobs::token_logprobs`]: index `j` holds the
    /// value of the prefix `ids[..=j]`, the state in which token `j + 1` is emitted. Only
    /// positions where `batch.loss_mask` is 1 (completion tokens) are meaningful.
    pub fn values(&self, batch: &SequenceBatch) -> Tensor {
        self.values_as(batch, false)
    }

    /// [`Self::values`] from padded rows, or packed ones with `padding_free`.
    pub fn values_as(&self, batch: &SequenceBatch, padding_free: bool) -> Tensor {
        let hidden = batch.hidden(&self.model, padding_free);
        let l = hidden.size()[1];
        hidden
            .narrow(1, 0, l - 1)
            .linear::<Tensor>(&self.value_head, None)
            .squeeze_dim(-1)
            .to_kind(Kind::Float)
    }

    /// [`Self::values`] over the micro-batches of `memory` (packed with its `padding_free`),
    /// zeros beyond each row's length: the scoring pass before an update.
    pub fn values_in_microbatches(&self, batch: &SequenceBatch, memory: &Memory) -> Tensor {
        let mut parts =
            batch.in_microbatches(memory, |sub| vec![self.values_as(sub, memory.padding_free)]);
        parts.pop().expect("values")
    }

    /// Writes the critic's weights to `path` (safetensors).
    pub fn save(&self, path: &Path) -> Result<()> {
        self.vs
            .save(path)
            .with_context(|| format!("writing critic weights {}", path.display()))
    }

    /// Loads weights written by [`Critic::save`].
    pub fn load(&mut self, path: &Path) -> Result<()> {
        self.vs
            .load(path)
            .with_context(|| format!("loading critic weights {}", path.display()))
    }

    /// The device the parameters live on.
    pub fn device(&self) -> Device {
        self.vs.device()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn tiny(tie: bool) -> ModelConfig {
        ModelConfig {
            vocab_size: 16,
            hidden_size: 16,
            intermediate_size: 32,
            num_hidden_layers: 2,
            num_attention_heads: 2,
            num_key_value_heads: Some(1),
            max_position_embeddings: 32,
            tie_word_embeddings: tie,
            ..ModelConfig::default()
        }
    }

    pub(crate) fn rows() -> (Vec<Vec<i64>>, Vec<Vec<i64>>) {
        (
            vec![vec![1, 5, 6], vec![1, 7], vec![1, 8, 9, 10]],
            vec![vec![3, 4, 11, 2], vec![12, 2], vec![13, 14, 15, 3, 4, 2]],
        )
    }

    pub(crate) fn batch(p: &[Vec<i64>], c: &[Vec<i64>]) -> SequenceBatch {
        let p: Vec<&[i64]> = p.iter().map(Vec::as_slice).collect();
        let c: Vec<&[i64]> = c.iter().map(Vec::as_slice).collect();
        SequenceBatch::new(&p, &c, 0, Device::Cpu)
    }

    /// Values at the completion tokens of row `i` of `b`, in order.
    fn completion_values(critic: &Critic, b: &SequenceBatch, i: i64) -> Vec<f32> {
        let v = critic.values(b).get(i);
        let m = b.loss_mask.get(i);
        Vec::<f32>::try_from(v.masked_select(&m.gt(0.5))).unwrap()
    }

    #[test]
    fn padded_batch_values_equal_per_row_values() {
        let critic = Critic::new(&tiny(true), Device::Cpu, 3).unwrap();
        let (p, c) = rows();
        let all = batch(&p, &c);
        assert_eq!(critic.values(&all).size(), vec![3, 9]);
        for i in 0..p.len() {
            let alone = batch(&p[i..=i], &c[i..=i]);
            let a = completion_values(&critic, &all, i as i64);
            let b = completion_values(&critic, &alone, 0);
            assert_eq!(a.len(), c[i].len(), "one value per completion token");
            for (x, y) in a.iter().zip(&b) {
                assert!((x - y).abs() < 1e-5, "row {i}: padded {a:?} vs alone {b:?}");
            }
        }
    }

    #[test]
    fn value_of_a_token_is_read_before_the_token() {
        // The value at completion token k is V(prompt ++ completion[..k]): changing token k
        // leaves it unchanged, changing token k - 1 changes it.
        let critic = Critic::new(&tiny(false), Device::Cpu, 4).unwrap();
        let (p, c) = rows();
        let base = completion_values(&critic, &batch(&p[2..], &c[2..]), 0);
        let k = 3;
        let mut changed = c[2].clone();
        changed[k] = 7;
        let same_prefix = completion_values(&critic, &batch(&p[2..], &[changed.clone()]), 0);
        assert_eq!(base[..=k], same_prefix[..=k]);
        assert_ne!(base[k + 1], same_prefix[k + 1]);
        // The first completion token's value is that of the prompt alone.
        let mut first = c[2].clone();
        first[0] = 9;
        let v = completion_values(&critic, &batch(&p[2..], &[first]), 0);
        assert_eq!(v[0], base[0]);
        assert_ne!(v[1], base[1]);
    }

    #[test]
    fn from_policy_copies_the_backbone_and_adds_a_head() {
        let policy = Policy::new(&tiny(false), Device::Cpu, 11).unwrap();
        let critic = Critic::from_policy(&policy, 5).unwrap();
        let pv = policy.vs.variables();
        let cv = critic.vs.variables();
        assert_eq!(cv.len(), pv.len() + 1);
        for (name, t) in &pv {
            assert!(t.equal(&cv[name]), "{name} copied");
        }
        assert!(!cv["lm_head.weight"].requires_grad(), "LM head frozen");
        let head = &cv[VALUE_HEAD];
        assert_eq!(head.size(), vec![1, 16]);
        // Changing the critic leaves the policy alone (separate storage).
        let _guard = tch::no_grad_guard();
        let mut e = cv["model.embed_tokens.weight"].shallow_clone();
        let _ = e.fill_(0.0);
        assert!(
            pv["model.embed_tokens.weight"]
                .abs()
                .sum(Kind::Float)
                .double_value(&[])
                > 0.0
        );
    }

    #[test]
    fn save_and_load_round_trip() {
        let a = Critic::new(&tiny(true), Device::Cpu, 1).unwrap();
        let mut b = Critic::new(&tiny(true), Device::Cpu, 2).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CRITIC_WEIGHTS_FILE);
        a.save(&path).unwrap();
        b.load(&path).unwrap();
        let (p, c) = rows();
        let x = batch(&p, &c);
        assert!(a.values(&x).equal(&b.values(&x)));
    }
}
