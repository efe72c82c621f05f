//! Reward models in transformers' `*ForSequenceClassification` layout with one label: the
//! transformer backbone (`model.*`), a bias-free `score` head `[1, H]` on its final hidden
//! states, and the score read at the last token that is not `pad_token_id`, exactly as
//! transformers 5.x `GenericForSequenceClassification.forward` pools (the rightmost
//! non-pad position). TRL's `RewardTrainer` trains this class (`num_labels = 1`); saved here,
//! `AutoModelForSequenceClassification.from_pretrained` loads it back with the same scores.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use tch::nn::Init;
use tch::{Device, Kind, Tensor};

use crate::model::checkpoint::{self, config_json, LoadOptions};
use crate::model::lora::LoraConfig;
use crate::model::policy::Policy;
use crate::model::transformer::Transformer;

/// The score head's parameter name (transformers' `score = nn.Linear(H, 1, bias=False)`).
pub const SCORE_WEIGHT: &str = "score.weight";

/// transformers' `initializer_range` default: the score head starts at `N(0, 0.02)`, as
/// `from_pretrained` initialises a head missing from a causal checkpoint.
const SCORE_INIT_STD: f64 = 0.02;

/// A scalar reward model: a policy's backbone plus the score head, in one var store.
pub struct RewardModel {
    /// The backbone (its LM head is frozen and never saved).
    pub policy: Policy,
    /// Token id whose positions are not read (`config.json`'s `pad_token_id`).
    pub pad_id: i64,
    score: Tensor,
}

impl RewardModel {
    /// A reward model on `policy`'s backbone with a fresh score head (seeded through torch's
    /// generator by the caller). With `lora`, the backbone is frozen behind fresh adapters and
    /// the head stays trainable (PEFT's `modules_to_save = ["score"]`).
    pub fn from_policy(mut policy: Policy, pad_id: i64, lora: Option<&LoraConfig>) -> Result<Self> {
        if let Some(cfg) = lora {
            policy.enable_lora(cfg)?;
        }
        // transformers' sequence classifiers pad (and leave untrained) the tokenizer's pad id.
        policy.model.set_pad_token_id(Some(pad_id));
        crate::model::value::freeze_lm_head(&policy.vs);
        let h = policy.model.config().hidden_size as i64;
        let score = crate::runtime::with_generator(|| {
            (&policy.vs.root() / "score").var(
                "weight",
                &[1, h],
                Init::Randn {
                    mean: 0.0,
                    stdev: SCORE_INIT_STD,
                },
            )
        });
        Ok(Self {
            policy,
            pad_id,
            score,
        })
    }

    /// Loads a `*ForSequenceClassification` checkpoint with one label (written by
    /// [`Self::save`] or transformers). Its `pad_token_id` must be set.
    pub fn load(dir: &Path, opts: &LoadOptions) -> Result<Self> {
        let path = dir.join(checkpoint::CONFIG_FILE);
        let (cfg, pad_id) = read_config(&path)?;
        let mut vs = tch::nn::VarStore::new(opts.device);
        vs.set_kind(opts.kind);
        let model = Transformer::new_for_loading(&vs.root(), &cfg);
        let score = (&vs.root() / "score").zeros("weight", &[1, cfg.hidden_size as i64]);
        let mut params = vs.variables();
        params.remove("lm_head.weight");
        checkpoint::weights::load_into(dir, &params, cfg.tie_word_embeddings)?;
        let policy = Policy { vs, model };
        crate::model::value::freeze_lm_head(&policy.vs);
        Ok(Self {
            policy,
            pad_id,
            score,
        })
    }

    /// Loads the score head (only) from a checkpoint written by [`Self::save`]: how a LoRA
    /// run resumes, its adapters coming from their own files.
    pub fn load_score(&mut self, dir: &Path) -> Result<()> {
        let params = HashMap::from([(SCORE_WEIGHT.to_string(), self.score.shallow_clone())]);
        checkpoint::weights::load_into_subset(dir, &params)
    }

    /// Writes `config.json` (the causal config turned into the sequence-classification one)
    /// and the weights: backbone with LoRA folded in, no LM head, `score.weight`.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let kind = self.policy.kind();
        let path = dir.join(checkpoint::CONFIG_FILE);
        self.policy
            .model
            .config()
            .save(&path, checkpoint::dtype_name(kind)?)?;
        let mut value: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
        let obj = value.as_object_mut().expect("config.json is an object");
        let arch = self.policy.model.config().family()?.architecture();
        obj.insert(
            "architectures".into(),
            json!([arch.replace("ForCausalLM", "ForSequenceClassification")]),
        );
        obj.insert("id2label".into(), json!({"0": "LABEL_0"}));
        obj.insert("label2id".into(), json!({"LABEL_0": 0}));
        obj.insert("pad_token_id".into(), json!(self.pad_id));
        std::fs::write(&path, serde_json::to_string_pretty(&value)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        let mut weights = self.policy.full_weights();
        weights.remove("lm_head.weight");
        checkpoint::weights::save(dir, &weights, kind, checkpoint::DEFAULT_MAX_SHARD_BYTES)
    }

    /// Rewards `[B]` (float32) of token sequences, each read at its last non-pad token.
    pub fn scores(&self, seqs: &[Vec<i64>]) -> Tensor {
        let model = &self.policy.model;
        self.scores_with(seqs, |batch| model.hidden(&batch.input(), None))
    }

    /// [`Self::scores`] from the final hidden states `hidden` gives the sequences' batch
    /// (padded, or packed and put back in place: the last non-pad token is a real one).
    pub(crate) fn scores_with(
        &self,
        seqs: &[Vec<i64>],
        hidden: impl FnOnce(&crate::model::batch::SequenceBatch) -> Tensor,
    ) -> Tensor {
        let pad = self.pad_id;
        let device = self.policy.device();
        crate::model::logprobs::hidden_at_with(device, seqs, pad, |s| last_non_pad(s, pad), hidden)
            .linear::<Tensor>(&self.score, None)
            .squeeze_dim(-1)
            .to_kind(Kind::Float)
    }
}

impl RewardModel {
    /// Rewards of token sequences on the host, without gradients (scoring, not training).
    pub fn score_rows(&self, seqs: &[Vec<i64>]) -> Result<Vec<f32>> {
        let _guard = tch::no_grad_guard();
        let scores = self.scores(seqs);
        // host: the rewards read back as numbers.
        Ok(Vec::<f32>::try_from(&scores.to_device(Device::Cpu))?)
    }
}

/// The position transformers reads: the last token that is not `pad`, 0 when all are.
pub fn last_non_pad(ids: &[i64], pad: i64) -> i64 {
    ids.iter().rposition(|&t| t != pad).unwrap_or(0) as i64
}

/// The backbone's config and `pad_token_id` of a one-label sequence-classification
/// `config.json`; errors name the file and key.
fn read_config(path: &Path) -> Result<(crate::ModelConfig, i64)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut value: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let obj = value
        .as_object_mut()
        .with_context(|| format!("{}: not a JSON object", path.display()))?;
    let arch = obj
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let Some(base) = arch.strip_suffix("ForSequenceClassification") else {
        bail!(
            "{}: `architectures` is [{arch:?}], not a *ForSequenceClassification reward model \
             (train one with `reinforge train-rm`)",
            path.display()
        );
    };
    let labels = obj.get("id2label").and_then(Value::as_object).map_or(
        obj.get("num_labels").and_then(Value::as_u64).unwrap_or(2),
        |m| m.len() as u64,
    );
    if labels != 1 {
        bail!(
            "{}: a reward model has one label, this config has {labels} (`id2label`)",
            path.display()
        );
    }
    let Some(pad_id) = obj.get("pad_token_id").and_then(Value::as_i64) else {
        bail!(
            "{}: `pad_token_id` must be set: the score is read at the last token that is not padding",
            path.display()
        );
    };
    for key in ["id2label", "label2id", "num_labels", "problem_type"] {
        obj.remove(key);
    }
    obj.insert(
        "architectures".into(),
        json!([format!("{base}ForCausalLM")]),
    );
    let cfg = config_json::parse(&value, false)
        .with_context(|| format!("invalid model config {}", path.display()))?;
    Ok((cfg, pad_id))
}
