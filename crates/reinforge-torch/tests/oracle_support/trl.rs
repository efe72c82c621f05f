//! TRL fixtures (advantages, `_compute_loss`) through the functions the trainer calls, the
//! overlong penalties of verl and TRL, and pass@k.
//!
//! Advantages: `reinforge_rl::advantage::trl::trl_grpo_advantages`, the function the trainer's
//! `trl_grpo` estimator runs; the cases with one reward function of weight 1 (what the trainer
//! scores) also through the RL step's own entry, `outcome_advantages(Estimator::TrlGrpo, ..)`.
//! Losses: the trainer's objective (`rl::policy_objective`) with the settings that compute TRL's
//! `loss_type` (see [`trainer_config`]); TRL's per-token loss through the same objective, one
//! token at a time; the KL through the objective's `kl_penalty`.

use reinforge_rl::advantage::outcome::outcome_advantages;
use reinforge_rl::advantage::trl::{trl_grpo_advantages, MultiObjective, TrlAdvantageConfig};
use reinforge_rl::overlong::{
    trl_soft_overlong_punishment, verl_dapo_overlong_penalty, verl_dapo_overlong_penalty_f32,
};
use reinforge_rl::{AdvantageConfig, Estimator, Groups};
use reinforge_torch::train::loss::agg::GlobalBatchInfo;
use reinforge_torch::train::loss::kl::kl_penalty;
use reinforge_torch::train::loss::policy::NO_DUAL_CLIP;
use reinforge_torch::train::loss::{AggMode, KlPenalty, PolicyLossKind};
use reinforge_torch::train::rl::{policy_objective, MiniBatchInputs, ObjectiveStats, UpdateConfig};
use serde_json::Value;
use tch::{Kind, Tensor};

use super::{flat, grpo_update, matrix, tensor, Case, Tol, R};

/// A `grpo_advantages` case: TRL's `scale_rewards` as the trainer's [`AdvantageConfig`]
/// (`none` = no `norm_by_std`, `batch` = `batch_std`, TRL's `std_epsilon` as `epsilon`), after
/// the harness's perturbation.
fn advantages(c: &mut Case) -> R<()> {
    let g = c.param_f64("num_generations", 1.0) as usize;
    let scale = c.param_str("scale_rewards")?;
    if !matches!(scale, "group" | "batch" | "none") {
        return Err(format!("{}: scale_rewards {scale}", c.id));
    }
    let mut adv = AdvantageConfig {
        norm_by_std: scale != "none",
        epsilon: c.param_f64("std_epsilon", 1e-4),
        batch_std: scale == "batch",
    };
    (c.perturb.advantage)(&mut adv);
    let aggregation = match c.param_str("multi_objective_aggregation")? {
        "sum_then_normalize" => MultiObjective::SumThenNormalize,
        "normalize_then_sum" => MultiObjective::NormalizeThenSum,
        o => return Err(format!("multi_objective_aggregation {o}")),
    };
    let rewards_per_func = matrix(c.req("rewards_per_func")?);
    let b = rewards_per_func.len();
    if g == 0 || !b.is_multiple_of(g) {
        return Err(format!("{}: {b} rows in groups of {g}", c.id));
    }
    let groups = Groups::contiguous(b / g, g);
    let cfg = TrlAdvantageConfig {
        aggregation,
        reward_weights: flat(c.param("reward_weights").ok_or("reward_weights")?),
        ..TrlAdvantageConfig::single(&adv)
    };
    let out = trl_grpo_advantages(&rewards_per_func, &groups, &cfg);
    // One reward function of weight 1, summed then normalised, is what the trainer scores: the
    // case goes through the RL step's own call too (scores on one-token completions).
    if cfg == TrlAdvantageConfig::single(&adv) {
        let scores: Vec<f64> = rewards_per_func.iter().map(|r| r[0]).collect();
        let step = outcome_advantages(Estimator::TrlGrpo, &scores, &vec![1; b], &groups, &adv)
            .map_err(|e| format!("{}: {e}", c.id))?;
        c.array("advantages", &step.per_row)?;
    }
    // The fixture shows NaN as 0 (JSON has no NaN).
    let shown = |v: &[f64]| -> Vec<f64> {
        v.iter()
            .map(|x| if x.is_nan() { 0.0 } else { *x })
            .collect()
    };
    c.array("advantages", &out.advantages)?;
    c.array("rewards", &shown(&out.rewards))?;
    c.array("std_rewards", &shown(&out.std_rewards))?;
    c.bools("is_std_zero", &out.is_std_zero)?;
    match (
        &out.mean_grouped_rewards,
        c.has_expected("mean_grouped_rewards"),
    ) {
        (Some(m), true) => c.array("mean_grouped_rewards", &shown(m))?,
        (None, false) => {}
        (got, _) => {
            return Err(format!(
                "{}: mean_grouped_rewards presence {:?}",
                c.id,
                got.is_some()
            ))
        }
    }
    c.through_trainer = true;
    Ok(())
}

/// The tensors of a TRL loss case.
struct LossInputs {
    /// The current policy, a leaf that takes the gradient.
    lp: Tensor,
    /// TRL's `old_per_token_logps`, or `per_token_logps.detach()` when not given.
    old: Tensor,
    ref_logp: Option<Tensor>,
    /// The advantage of each row on each of its tokens, `B x T`.
    advantages: Tensor,
    mask: Tensor,
}

impl LossInputs {
    fn of(c: &Case) -> R<Self> {
        let lp = tensor(c.req("per_token_logps")?).set_requires_grad(true);
        let old = c
            .input("old_per_token_logps")
            .map_or_else(|| lp.detach(), tensor);
        let a = tensor(c.req("advantages")?);
        Ok(Self {
            advantages: a.unsqueeze(1).expand_as(&lp).contiguous(),
            old,
            ref_logp: c.input("ref_per_token_logps").map(tensor),
            mask: tensor(c.req("completion_mask")?),
            lp,
        })
    }

    /// The trainer's objective on these rows with `mask`, the current policy `lp`.
    fn objective(
        &self,
        lp: &Tensor,
        mask: &Tensor,
        cfg: &UpdateConfig,
        info: &GlobalBatchInfo,
    ) -> (Tensor, ObjectiveStats) {
        let inputs = MiniBatchInputs {
            old_logp: &self.old,
            advantages: &self.advantages,
            mask,
            ref_logp: self.ref_logp.as_ref(),
            is_weights: None,
        };
        policy_objective(lp, None, &inputs, cfg, info)
    }
}

/// The trainer's settings that compute TRL's `_compute_loss` for a case: its update config, the
/// denominators of the returned `loss`, and those of TRL's `policy_loss` (before the division
/// by the accumulation steps).
///
/// The mapping: TRL's ratio is unclamped (`clamp_log_ratio = false`), its KL is `k3_unclamped`,
/// it has no dual clip, and its `delta` (two-sided clip, `-min(min(r, δ)·A, clip(r)·A)`) is
/// verl's dual clip `c = δ`, equal whenever `δ >= 1 + ε_high`. `grpo`/`sapo` = seq-mean-token-mean
/// over `B·GA` rows; `bnpo` = token-mean over `GA·` the local tokens; `dr_grpo` =
/// seq-mean-token-sum-norm over `B·GA` rows with `S = max_completion_length`; `dapo`/`cispo` =
/// token-mean over `num_items_in_batch / num_processes` tokens; TRL's CISPO cap `min(r, ε_high)`
/// = verl's `clip(r, 1 - 1, 1 + (ε_high - 1))`; sequence level = verl `gspo` (with `grpo`).
fn trainer_config(c: &Case, x: &LossInputs) -> R<(UpdateConfig, GlobalBatchInfo, GlobalBatchInfo)> {
    if c.param("use_bias_correction_kl").and_then(Value::as_bool) == Some(true) {
        return Err(format!(
            "{}: use_bias_correction_kl is not reproduced",
            c.id
        ));
    }
    let loss_type = c.param_str("loss_type")?;
    let (el, eh) = (
        c.param_f64("epsilon_low", 0.2),
        c.param_f64("epsilon_high", 0.2),
    );
    let beta = c.param_f64("beta", 0.0);
    let sequence = match c.param_str("importance_sampling_level")? {
        "token" => false,
        "sequence" => true,
        o => return Err(format!("{}: importance_sampling_level {o}", c.id)),
    };
    let mut u = grpo_update(el, eh);
    u.skip_zero_advantage = false;
    u.beta = beta;
    u.kl = KlPenalty::K3Unclamped;
    u.loss.clamp_log_ratio = false;
    u.loss.clip_ratio_c = NO_DUAL_CLIP;
    u.loss.tau_pos = c.param_f64("sapo_temperature_pos", 1.0);
    u.loss.tau_neg = c.param_f64("sapo_temperature_neg", 1.05);
    let rows = x.lp.size()[0] as f64;
    let tokens = x.mask.sum(Kind::Double).double_value(&[]);
    let ga = c.param_f64("gradient_accumulation_steps", 1.0);
    let max_len = c.param_f64("max_completion_length", 0.0);
    let items = || -> R<f64> {
        let n = c
            .input("num_items_in_batch")
            .and_then(Value::as_f64)
            .ok_or_else(|| format!("{}: {loss_type} needs num_items_in_batch", c.id))?;
        Ok(n / c.param_f64("num_processes", 1.0))
    };
    let rows_info = |ga: f64| GlobalBatchInfo {
        global_batch_size: Some(rows * ga),
        ..GlobalBatchInfo::default()
    };
    let tokens_info = |n: f64| GlobalBatchInfo {
        batch_num_tokens: Some(n),
        ..GlobalBatchInfo::default()
    };
    let (info, local) = match loss_type {
        "grpo" | "sapo" => {
            u.agg = AggMode::SeqMeanTokenMean;
            if loss_type == "sapo" {
                u.policy_loss = PolicyLossKind::Sapo;
            }
            (rows_info(ga), rows_info(1.0))
        }
        "bnpo" => (
            tokens_info(tokens.max(1.0) * ga),
            tokens_info(tokens.max(1.0)),
        ),
        "dr_grpo" => {
            u.agg = AggMode::SeqMeanTokenSumNorm;
            let norm = |ga| GlobalBatchInfo {
                loss_scale_factor: Some(max_len),
                ..rows_info(ga)
            };
            (norm(ga), norm(1.0))
        }
        "dapo" => (tokens_info(items()?), tokens_info(items()?)),
        "cispo" => {
            u.policy_loss = PolicyLossKind::Cispo;
            u.loss.clip_ratio_low = Some(1.0);
            u.loss.clip_ratio_high = Some(eh - 1.0);
            (tokens_info(items()?), tokens_info(items()?))
        }
        o => return Err(format!("{}: unknown TRL loss_type {o}", c.id)),
    };
    // TRL caps the ratio at `delta` in the clipped losses only (not CISPO or SAPO).
    if let Some(d) = c.param("delta").and_then(Value::as_f64) {
        if u.policy_loss == PolicyLossKind::Vanilla && !sequence {
            if d < 1.0 + eh {
                return Err(format!(
                    "{}: delta {d} < 1 + epsilon_high: not the trainer's dual clip",
                    c.id
                ));
            }
            u.loss.clip_ratio_c = d;
        } else if sequence {
            return Err(format!(
                "{}: delta at sequence level is not reproduced",
                c.id
            ));
        }
    }
    if sequence {
        if loss_type != "grpo" || beta != 0.0 {
            return Err(format!(
                "{}: sequence level with {loss_type} (beta {beta}) is not reproduced",
                c.id
            ));
        }
        u.policy_loss = PolicyLossKind::Gspo;
    }
    Ok((u, info, local))
}

/// TRL's logged metrics the trainer does not compute (its own are verl's): compared nowhere.
/// `clip_ratio/region_mean` is the trainer's `actor/pg_clipfrac` at token level, and `kl` its
/// KL statistic; both are compared.
const TRL_ONLY_METRICS: &[&str] = &[
    "entropy",
    "clip_ratio/low_mean",
    "clip_ratio/low_min",
    "clip_ratio/high_mean",
    "clip_ratio/high_max",
    "cispo_clip_ratio",
];

/// A TRL loss case through the trainer's objective, after the harness's perturbation: the
/// loss and its gradient, TRL's `policy_loss` (the objective with one accumulation step's
/// denominators), the per-token loss (the objective on one token at a time, token-sum), the KL
/// (`kl_penalty`, the objective's) and the metrics the trainer shares with TRL. `coef_1` and
/// `coef_2` (TRL's ratio and clipped ratio, locals the objective does not return) and
/// [`TRL_ONLY_METRICS`] are consumed unchecked.
fn loss(c: &mut Case) -> R<()> {
    let x = LossInputs::of(c)?;
    let (mut u, info, local) = trainer_config(c, &x)?;
    (c.perturb.policy)(&mut u);
    let default_tol = c.tol;
    let seq_mean = u.agg == AggMode::SeqMeanTokenMean
        || matches!(u.policy_loss, PolicyLossKind::Gspo | PolicyLossKind::Sapo);
    if seq_mean {
        c.tol = seq_mean_tol(c, &x.mask, &info)?;
    }
    let (loss, stats) = x.objective(&x.lp, &x.mask, &u, &info);
    c.scalar("loss", loss.double_value(&[]))?;
    loss.backward();
    c.tensor("grad_per_token_logps", &x.lp.grad())?;
    let lp = x.lp.detach();
    if seq_mean {
        c.tol = seq_mean_tol(c, &x.mask, &local)?;
    }
    let (policy_loss, _) = x.objective(&lp, &x.mask, &u, &local);
    c.scalar("policy_loss", policy_loss.double_value(&[]))?;
    // One token (GSPO: one row) at a time: the per-token loss, `verl`'s `len + 1e-8` once.
    c.tol = if seq_mean {
        Tol::Mixed {
            rtol: 1e-9 + 1e-8,
            atol: 1e-9,
        }
    } else {
        default_tol
    };
    let per_token = per_token_loss(&x, &lp, &u);
    c.array("per_token_loss", &per_token)?;
    c.tol = default_tol;
    if u.beta != 0.0 {
        let r = x
            .ref_logp
            .as_ref()
            .ok_or("beta != 0 needs ref_per_token_logps")?;
        c.tensor("per_token_kl", &kl_penalty(&lp, r, u.kl))?;
    }
    for key in ["coef_1", "coef_2"] {
        if c.has_expected(key) {
            c.consume(key)?;
        }
    }
    metrics(c, &x.mask, &u, &stats)?;
    c.through_trainer = true;
    Ok(())
}

/// TRL's per-token loss (`B x T`; GSPO's `B x 1`) from the trainer's objective: each token alone
/// in the mask, token-sum, gives its `ℓ + β·kl` (SAPO's seq-mean-token-mean of one token: `ℓ /
/// (1 + 1e-8)`); GSPO's sequence ratio needs the row, so each row alone, `ℓ_i·len/(len + 1e-8)`.
fn per_token_loss(x: &LossInputs, lp: &Tensor, u: &UpdateConfig) -> Vec<f64> {
    let cfg = UpdateConfig {
        agg: AggMode::TokenSum,
        ..u.clone()
    };
    let (b, t) = (x.mask.size()[0], x.mask.size()[1]);
    let mut out = vec![];
    for i in 0..b {
        if u.policy_loss == PolicyLossKind::Gspo {
            let only = x.mask.zeros_like();
            only.get(i).copy_(&x.mask.get(i));
            let (l, _) = x.objective(lp, &only, &cfg, &GlobalBatchInfo::default());
            out.push(l.double_value(&[]));
            continue;
        }
        for j in 0..t {
            let only = x.mask.zeros_like();
            let _ = only.get(i).get(j).fill_(1.0);
            let (l, _) = x.objective(lp, &only, &cfg, &GlobalBatchInfo::default());
            out.push(l.double_value(&[]));
        }
    }
    out
}

/// TRL's metrics: `kl` = the objective's KL statistic, `clip_ratio/region_mean` = its
/// `actor/pg_clipfrac` (token level; TRL's sequence-level mean runs over rows, verl's over
/// tokens, so it is not compared there); verl's masked means divide by `N + 1e-8` where TRL
/// divides by `N`, a relative `1e-8/N` added to the tolerance.
fn metrics(c: &mut Case, mask: &Tensor, u: &UpdateConfig, stats: &ObjectiveStats) -> R<()> {
    let e = c
        .consume("metrics")?
        .as_object()
        .ok_or_else(|| format!("{}: metrics is not an object", c.id))?;
    let n = mask.sum(Kind::Double).double_value(&[]).max(1.0);
    let default_tol = c.tol;
    c.tol = Tol::Mixed {
        rtol: 1e-9 + 1e-8 / n,
        atol: 1e-9,
    };
    for (k, v) in e {
        let exp = v
            .as_f64()
            .ok_or_else(|| format!("{}: metric {k} not a number", c.id))?;
        let got = match k.as_str() {
            "kl" => stats.kl,
            "clip_ratio/region_mean" if u.policy_loss == PolicyLossKind::Gspo => continue,
            "clip_ratio/region_mean" => stats.metrics.get("actor/pg_clipfrac").copied(),
            other if TRL_ONLY_METRICS.contains(&other) => continue,
            other => return Err(format!("{}: unknown TRL metric {other}", c.id)),
        };
        let got = got.ok_or_else(|| format!("{}: metric {k} not produced", c.id))?;
        c.close(&format!("metrics.{k}"), got, exp)?;
    }
    c.tol = default_tol;
    Ok(())
}

/// The tolerance of a TRL per-sequence mean replayed through verl's seq-mean-token-mean: verl
/// divides each row by `len + 1e-8` where TRL divides by `len`, so the loss moves by at most
/// `1e-8·Σ_i |row mean_i| / G` and each gradient entry by a relative 1e-8. That bound, from
/// TRL's own `per_token_loss`, is added to the fixture's tolerance.
fn seq_mean_tol(c: &mut Case, mask: &Tensor, info: &GlobalBatchInfo) -> R<Tol> {
    let per_token = tensor(c.consume("per_token_loss")?);
    let rows = (per_token * mask).sum_dim_intlist(-1i64, false, Kind::Double)
        / mask
            .sum_dim_intlist(-1i64, false, Kind::Double)
            .clamp_min(1.0);
    let g = info.global_batch_size.unwrap_or(mask.size()[0] as f64);
    let row_scale = rows.abs().sum(Kind::Double).double_value(&[]) / g;
    Ok(Tol::Mixed {
        rtol: 1e-9 + 1e-8,
        atol: 1e-9 + 1e-8 * row_scale,
    })
}

fn lengths(c: &Case, key: &str) -> R<Vec<usize>> {
    Ok(flat(c.req(key)?).iter().map(|&x| x as usize).collect())
}

fn overlong(c: &mut Case, function: &str) -> R<()> {
    if function == "verl_dapo_overlong_penalty" {
        let (max, buf) = (
            c.param_f64("max_resp_len", 0.0) as usize,
            c.param_f64("overlong_buffer.len", 0.0) as usize,
        );
        let factor = c.param_f64("overlong_buffer.penalty_factor", 1.0);
        let score = c.param_f64("score", 0.0);
        let lens = lengths(c, "valid_response_length")?;
        let pen: Vec<f64> = lens
            .iter()
            .map(|&l| verl_dapo_overlong_penalty(l, max, buf, factor))
            .collect();
        let pen32: Vec<f64> = lens
            .iter()
            .map(|&l| verl_dapo_overlong_penalty_f32(l, max, buf, factor) as f64)
            .collect();
        c.array("overlong_reward", &pen)?;
        c.array("reward", &pen.iter().map(|p| score + p).collect::<Vec<_>>())?;
        c.array("overlong_reward_runtime_float32", &pen32)
    } else {
        let (max, cache) = (
            c.param_f64("max_completion_len", 0.0) as usize,
            c.param_f64("soft_punish_cache", 0.0) as usize,
        );
        let r: Vec<f64> = lengths(c, "completion_lengths")?
            .iter()
            .map(|&l| trl_soft_overlong_punishment(l, max, cache))
            .collect();
        c.array("rewards", &r)
    }
}

fn pass_at_k(c: &mut Case) -> R<()> {
    let (n, k, cc) = (
        c.param_f64("n", 0.0) as u64,
        c.param_f64("k", 0.0) as u64,
        c.param_f64("c", 0.0) as u64,
    );
    let got = reinforge_eval::passk::pass_at_k(n, cc, k);
    c.scalar("pass_at_k", got)?;
    // `exact` is the rational p/q when short: its value must agree too.
    let exact = if c.has_expected("exact") {
        c.consume("exact")?.as_str()
    } else {
        None
    };
    if let Some(s) = exact {
        let (p, q) = s.split_once('/').unwrap_or((s, "1"));
        let exact = p.trim().parse::<f64>().map_err(|e| e.to_string())?
            / q.trim().parse::<f64>().map_err(|e| e.to_string())?;
        if (exact - got).abs() > 1e-12 * exact.abs().max(1.0) {
            return Err(format!("{}: exact {s} = {exact:e}, got {got:e}", c.id));
        }
    }
    Ok(())
}

/// Checks `c` if `function` is a TRL, overlong or pass@k function; `Ok(false)` otherwise.
pub fn dispatch(c: &mut Case, function: &str) -> R<bool> {
    match function {
        "grpo_advantages" => advantages(c)?,
        "grpo_loss_grpo" | "grpo_loss_bnpo" | "grpo_loss_dr_grpo" | "grpo_loss_dapo"
        | "grpo_loss_cispo" | "grpo_loss_sapo" => loss(c)?,
        "verl_dapo_overlong_penalty" | "trl_soft_overlong_punishment" => overlong(c, function)?,
        "pass_at_k" => pass_at_k(c)?,
        _ => return Ok(false),
    }
    Ok(true)
}
