//! `grpo.algorithm` presets: a named algorithm expands into explicit `[grpo]` options (the
//! catalogue and its sources are in docs/algorithms.md); keys the user sets win.

use anyhow::{anyhow, bail, Result};

use crate::config::GAE;

/// The options a named preset sets, as `(key under [grpo], value)`. Every preset names every
/// key, so switching presets never inherits another preset's choice.
///
/// - `grpo`: verl GRPO as the trainer ran it before presets (clip 0.2/0.28, token-mean).
/// - `dr_grpo`: Dr.GRPO (Liu et al. 2025): no std normalisation, seq-mean-token-sum-norm
///   (verl `norm_adv_by_std_in_grpo=False`, TRL `loss_type="dr_grpo"`).
/// - `dapo`: DAPO (Yu et al. 2025): clip-higher 0.2/0.28, token-mean, no KL, dynamic sampling,
///   soft overlong punishment (buffer 4, factor 1), truncated completions masked.
/// - `gspo`: GSPO (Zheng et al. 2025): sequence ratio, clip 3e-4/4e-4, seq-mean-token-mean.
/// - `rloo`: RLOO leave-one-out baseline, PPO-clip 0.2/0.2, token-mean.
/// - `reinforce_pp`: REINFORCE++-baseline (group mean, whitened over the batch), clip 0.2/0.2.
/// - `ppo`: PPO with a learned critic (`[ppo]`): GAE advantages, PPO-clip 0.2/0.2 (verl
///   `clip_ratio` 0.2, OpenRLHF `--eps_clip` 0.2), token-mean.
pub fn preset(name: &str) -> Result<Vec<(&'static str, toml::Value)>> {
    use toml::Value::{Boolean as B, Float as F, Integer as I, String as S};
    let s = |v: &str| S(v.to_string());
    let (est, loss, agg, lo, hi, dynamic, buffer, mask) = match name {
        "grpo" => ("grpo", "vanilla", "token-mean", 0.2, 0.28, false, 0, false),
        "dr_grpo" => (
            "dr_grpo",
            "vanilla",
            "seq-mean-token-sum-norm",
            0.2,
            0.28,
            false,
            0,
            false,
        ),
        "dapo" => ("grpo", "vanilla", "token-mean", 0.2, 0.28, true, 4, true),
        "gspo" => (
            "grpo",
            "gspo",
            "seq-mean-token-mean",
            3e-4,
            4e-4,
            false,
            0,
            false,
        ),
        "rloo" => ("rloo", "vanilla", "token-mean", 0.2, 0.2, false, 0, false),
        "reinforce_pp" => (
            "reinforce_pp_baseline",
            "vanilla",
            "token-mean",
            0.2,
            0.2,
            false,
            0,
            false,
        ),
        "ppo" => (GAE.name(), "vanilla", "token-mean", 0.2, 0.2, false, 0, false),
        other => bail!(
            "grpo.algorithm = {other:?}: expected grpo, dr_grpo, dapo, gspo, rloo, reinforce_pp or ppo"
        ),
    };
    Ok(vec![
        ("advantage_estimator", s(est)),
        ("policy_loss", s(loss)),
        ("loss_agg_mode", s(agg)),
        ("epsilon_low", F(lo)),
        ("epsilon_high", F(hi)),
        ("clip_ratio_c", F(0.0)),
        ("beta", F(0.0)),
        ("kl_estimator", s("k3")),
        ("dynamic_sampling", B(dynamic)),
        ("max_draws", I(4)),
        ("overlong_buffer_len", I(buffer)),
        ("overlong_penalty_factor", F(1.0)),
        ("mask_truncated", B(mask)),
        ("recompute_old_logprobs", B(false)),
        ("tis", s("none")),
        ("tis_cap", F(2.0)),
    ])
}

/// `[grpo]` keys set by the config file or by `--set grpo.KEY=...`: presets leave them alone.
pub(crate) fn explicit_grpo_keys(file: Option<&toml::Value>, overrides: &[String]) -> Vec<String> {
    let mut keys: Vec<String> = file
        .and_then(|f| f.get("grpo"))
        .and_then(toml::Value::as_table)
        .map(|t| t.keys().cloned().collect())
        .unwrap_or_default();
    for o in overrides {
        let key = o.split_once('=').map_or(o.as_str(), |(k, _)| k).trim();
        if let Some(k) = key.strip_prefix("grpo.") {
            keys.push(k.split('.').next().unwrap_or(k).to_string());
        }
    }
    keys
}

/// Fills the options of the preset `grpo.algorithm` names that are not in `explicit`.
pub(crate) fn apply_preset(root: &mut toml::Value, explicit: &[String]) -> Result<()> {
    let grpo = root
        .get_mut("grpo")
        .and_then(toml::Value::as_table_mut)
        .ok_or_else(|| anyhow!("config has no [grpo] section"))?;
    let name = grpo
        .get("algorithm")
        .and_then(toml::Value::as_str)
        .unwrap_or("grpo")
        .to_string();
    for (key, value) in preset(&name)? {
        if !explicit.iter().any(|k| k == key) {
            grpo.insert(key.to_string(), value);
        }
    }
    Ok(())
}
