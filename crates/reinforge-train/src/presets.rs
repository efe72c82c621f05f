//! `rl.algorithm` presets: a named algorithm expands into explicit `[rl]` options (the
//! catalogue and its sources are in docs/algorithms.md); keys the user sets win.

use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};

use reinforge_rl::Estimator;
use reinforge_torch::train::loss::{AggMode, KlPenalty, PolicyLossKind, Tis};

/// A named algorithm, the value of `rl.algorithm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Preset {
    /// verl GRPO as the trainer ran it before presets (clip 0.2/0.28, token-mean).
    #[default]
    Grpo,
    /// Dr.GRPO (Liu et al. 2025): no std normalisation, seq-mean-token-sum-norm (verl
    /// `norm_adv_by_std_in_grpo=False`, TRL `loss_type="dr_grpo"`).
    DrGrpo,
    /// DAPO (Yu et al. 2025): clip-higher 0.2/0.28, token-mean, no KL, dynamic sampling, soft
    /// overlong punishment (buffer 4, factor 1), truncated completions masked.
    Dapo,
    /// GSPO (Zheng et al. 2025): sequence ratio, clip 3e-4/4e-4, seq-mean-token-mean.
    Gspo,
    /// RLOO leave-one-out baseline, PPO-clip 0.2/0.2, token-mean.
    Rloo,
    /// REINFORCE++-baseline (group mean, whitened over the batch), clip 0.2/0.2.
    ReinforcePp,
    /// PPO with a learned critic (`[ppo]`): GAE advantages, PPO-clip 0.2/0.2 (verl `clip_ratio`
    /// 0.2, OpenRLHF `--eps_clip` 0.2), token-mean.
    Ppo,
}

/// The `[rl]` options a preset sets. Every preset sets every one of them, so switching
/// presets never inherits another preset's choice. Serialised, the field names are the
/// `[rl]` keys. (The estimator, loss, aggregation, KL and TIS options are the registries' own
/// types, serialised by their registered names.)
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PresetOptions {
    pub advantage_estimator: Estimator,
    pub policy_loss: PolicyLossKind,
    pub loss_agg_mode: AggMode,
    pub epsilon_low: f64,
    pub epsilon_high: f64,
    pub clip_ratio_c: f64,
    pub beta: f64,
    pub kl_estimator: KlPenalty,
    pub dynamic_sampling: bool,
    pub max_draws: usize,
    pub overlong_buffer_len: usize,
    pub overlong_penalty_factor: f64,
    pub mask_truncated: bool,
    pub recompute_old_logprobs: bool,
    pub tis: Tis,
    pub tis_cap: f64,
}

/// The `grpo` preset; the others change a few of its options.
const GRPO: PresetOptions = PresetOptions {
    advantage_estimator: Estimator::Grpo,
    policy_loss: PolicyLossKind::Vanilla,
    loss_agg_mode: AggMode::TokenMean,
    epsilon_low: 0.2,
    epsilon_high: 0.28,
    clip_ratio_c: 0.0,
    beta: 0.0,
    kl_estimator: KlPenalty::K3,
    dynamic_sampling: false,
    max_draws: 4,
    overlong_buffer_len: 0,
    overlong_penalty_factor: 1.0,
    mask_truncated: false,
    recompute_old_logprobs: false,
    tis: Tis::None,
    tis_cap: 2.0,
};

impl Preset {
    /// Every preset, in the order `--help` and the docs list them.
    pub const ALL: [Self; 7] = [
        Self::Grpo,
        Self::DrGrpo,
        Self::Dapo,
        Self::Gspo,
        Self::Rloo,
        Self::ReinforcePp,
        Self::Ppo,
    ];

    /// The name `rl.algorithm` takes.
    pub fn name(self) -> String {
        toml::Value::try_from(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }

    /// The explicit options this preset sets.
    pub fn options(self) -> PresetOptions {
        match self {
            Self::Grpo => GRPO,
            Self::DrGrpo => PresetOptions {
                advantage_estimator: Estimator::DrGrpo,
                loss_agg_mode: AggMode::SeqMeanTokenSumNorm,
                ..GRPO
            },
            Self::Dapo => PresetOptions {
                dynamic_sampling: true,
                overlong_buffer_len: 4,
                mask_truncated: true,
                ..GRPO
            },
            Self::Gspo => PresetOptions {
                policy_loss: PolicyLossKind::Gspo,
                loss_agg_mode: AggMode::SeqMeanTokenMean,
                epsilon_low: 3e-4,
                epsilon_high: 4e-4,
                ..GRPO
            },
            Self::Rloo => PresetOptions {
                advantage_estimator: Estimator::Rloo,
                epsilon_high: 0.2,
                ..GRPO
            },
            Self::ReinforcePp => PresetOptions {
                advantage_estimator: Estimator::ReinforcePlusPlusBaseline,
                epsilon_high: 0.2,
                ..GRPO
            },
            Self::Ppo => PresetOptions {
                advantage_estimator: Estimator::Gae,
                epsilon_high: 0.2,
                ..GRPO
            },
        }
    }

    /// The options as `[rl]` keys and TOML values.
    pub fn table(self) -> Result<toml::Table> {
        match toml::Value::try_from(self.options())? {
            toml::Value::Table(t) => Ok(t),
            other => Err(anyhow!(
                "preset options serialise to a {}",
                other.type_str()
            )),
        }
    }
}

/// The names of every preset, for error messages and `--help`: `grpo, dr_grpo, ...`.
pub fn preset_names() -> String {
    Preset::ALL.map(Preset::name).join(", ")
}

/// `[rl]` keys set by the config file or by `--set rl.KEY=...` (both after the alias is
/// resolved): presets leave them alone.
pub(crate) fn explicit_rl_keys(file: Option<&toml::Value>, overrides: &[String]) -> Vec<String> {
    let mut keys: Vec<String> = file
        .and_then(|f| f.get("rl"))
        .and_then(toml::Value::as_table)
        .map(|t| t.keys().cloned().collect())
        .unwrap_or_default();
    for o in overrides {
        let key = o.split_once('=').map_or(o.as_str(), |(k, _)| k).trim();
        if let Some(k) = key.strip_prefix("rl.") {
            keys.push(k.split('.').next().unwrap_or(k).to_string());
        }
    }
    keys
}

/// Fills the options of the preset `rl.algorithm` names that are not in `explicit`.
pub(crate) fn apply_preset(root: &mut toml::Value, explicit: &[String]) -> Result<()> {
    let grpo = root
        .get_mut("rl")
        .and_then(toml::Value::as_table_mut)
        .ok_or_else(|| anyhow!("config has no [rl] section"))?;
    let preset = match grpo.get("algorithm") {
        None => Preset::default(),
        Some(v) => Preset::deserialize(v.clone())
            .map_err(|_| anyhow!("rl.algorithm = {v}: expected one of {}", preset_names()))?,
    };
    for (key, value) in preset.table()? {
        if !explicit.contains(&key) {
            grpo.insert(key, value);
        }
    }
    Ok(())
}
