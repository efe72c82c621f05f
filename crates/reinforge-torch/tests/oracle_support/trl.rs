//! TRL fixtures (advantages, `_compute_loss`), the overlong penalties of verl and TRL, and pass@k.

use super::trl_advantages::{
    trl_grpo_advantages, MultiObjective, ScaleRewards, TrlAdvantageConfig,
};
use super::trl_loss::{trl_compute_loss, IsLevel, TrlLossConfig, TrlLossInputs, TrlLossType};
use reinforge_rl::overlong::{
    trl_soft_overlong_punishment, verl_dapo_overlong_penalty, verl_dapo_overlong_penalty_f32,
};
use reinforge_torch::loss::agg::GlobalBatchInfo;
use reinforge_torch::loss::policy::NO_DUAL_CLIP;
use reinforge_torch::loss::{AggMode, PolicyLossKind};
use reinforge_torch::rl::{policy_objective, MiniBatchInputs, UpdateConfig};
use serde_json::Value;
use tch::{Kind, Tensor};

use super::{flat, grpo_update, matrix, tensor, Case, Tol, R};

fn advantages(c: &mut Case) -> R<()> {
    let cfg = TrlAdvantageConfig {
        num_generations: c.param_f64("num_generations", 1.0) as usize,
        scale_rewards: match c.param_str("scale_rewards")? {
            "group" => ScaleRewards::Group,
            "batch" => ScaleRewards::Batch,
            "none" => ScaleRewards::None,
            o => return Err(format!("scale_rewards {o}")),
        },
        aggregation: match c.param_str("multi_objective_aggregation")? {
            "sum_then_normalize" => MultiObjective::SumThenNormalize,
            "normalize_then_sum" => MultiObjective::NormalizeThenSum,
            o => return Err(format!("multi_objective_aggregation {o}")),
        },
        reward_weights: flat(c.param("reward_weights").ok_or("reward_weights")?),
        std_epsilon: c.param_f64("std_epsilon", 1e-4),
    };
    let out = trl_grpo_advantages(&matrix(c.req("rewards_per_func")?), &cfg);
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
    Ok(())
}

fn loss(c: &mut Case) -> R<()> {
    let cfg = TrlLossConfig {
        loss_type: c.param_str("loss_type")?.parse()?,
        beta: c.param_f64("beta", 0.0),
        epsilon_low: c.param_f64("epsilon_low", 0.2),
        epsilon_high: c.param_f64("epsilon_high", 0.2),
        delta: c.param("delta").and_then(Value::as_f64),
        importance_sampling_level: match c.param_str("importance_sampling_level")? {
            "token" => IsLevel::Token,
            "sequence" => IsLevel::Sequence,
            o => return Err(format!("importance_sampling_level {o}")),
        },
        max_completion_length: c.param_f64("max_completion_length", 0.0) as usize,
        gradient_accumulation_steps: c.param_f64("gradient_accumulation_steps", 1.0) as usize,
        num_processes: c.param_f64("num_processes", 1.0) as usize,
        sapo_temperature_pos: c.param_f64("sapo_temperature_pos", 1.0),
        sapo_temperature_neg: c.param_f64("sapo_temperature_neg", 1.05),
    };
    if c.param("use_bias_correction_kl").and_then(Value::as_bool) == Some(true) {
        return Err(format!(
            "{}: use_bias_correction_kl is not reproduced",
            c.id
        ));
    }
    let lp = tensor(c.req("per_token_logps")?).set_requires_grad(true);
    let old = c.input("old_per_token_logps").map(tensor);
    let rf = c.input("ref_per_token_logps").map(tensor);
    let a = tensor(c.req("advantages")?);
    let m = tensor(c.req("completion_mask")?);
    let e = c.input("entropies").map(tensor);
    let x = TrlLossInputs {
        per_token_logps: &lp,
        old_per_token_logps: old.as_ref(),
        ref_per_token_logps: rf.as_ref(),
        advantages: &a,
        completion_mask: &m,
        entropies: e.as_ref(),
        num_items_in_batch: c.input("num_items_in_batch").and_then(Value::as_f64),
    };
    let out = trl_compute_loss(&x, &cfg);
    c.scalar("loss", out.loss.double_value(&[]))?;
    c.scalar("policy_loss", out.policy_loss.double_value(&[]))?;
    c.tensor("per_token_loss", &out.per_token_loss)?;
    c.tensor("coef_1", &out.coef_1)?;
    for (key, t) in [("coef_2", &out.coef_2), ("per_token_kl", &out.per_token_kl)] {
        match (t, c.has_expected(key)) {
            (Some(t), true) => c.tensor(key, t)?,
            (None, false) => {}
            (t, _) => return Err(format!("{}: {key} presence {}", c.id, t.is_some())),
        }
    }
    c.metrics("metrics", &out.metrics)?;
    out.loss.backward();
    c.tensor("grad_per_token_logps", &lp.grad())?;
    let lp = tensor(c.req("per_token_logps")?).set_requires_grad(true);
    let x = TrlLossInputs {
        per_token_logps: &lp,
        ..x
    };
    if let Some((update, info)) = as_trainer(&x, &cfg) {
        replay_through_trainer(c, &x, update, &info)?;
    }
    Ok(())
}

/// The largest `|v|` over the valid tokens.
fn max_abs(v: &Tensor, mask: &Tensor) -> f64 {
    (v.abs() * mask)
        .max()
        .to_kind(Kind::Double)
        .double_value(&[])
}

/// The verl loss, aggregation and denominators that compute what TRL's `_compute_loss` does,
/// or `None` where they cannot: a KL term (TRL's k3 has no clamp, verl's clamps at 10: used only
/// where no valid token reaches the clamp), `delta` (TRL's two-sided clip), sequence-level
/// ratios outside `grpo` (verl's GSPO always aggregates seq-mean-token-mean), and log-ratios
/// beyond verl's ±20 clamp (GSPO: a sequence log-ratio above its clamp at 10).
///
/// The mapping: `grpo`/`sapo` = seq-mean-token-mean over `B·GA` rows; `bnpo` = token-mean over
/// `GA·` the local tokens; `dr_grpo` = seq-mean-token-sum-norm over `B·GA` rows with
/// `S = max_completion_length`; `dapo`/`cispo` = token-mean over `num_items_in_batch /
/// num_processes` tokens; TRL's CISPO cap `min(r, ε_high)` = verl's `clip(r, 1 - 1,
/// 1 + (ε_high - 1))`; sequence level = verl `gspo`.
fn as_trainer(x: &TrlLossInputs, cfg: &TrlLossConfig) -> Option<(UpdateConfig, GlobalBatchInfo)> {
    let (lp, mask) = (x.per_token_logps, x.completion_mask);
    let old = x
        .old_per_token_logps
        .map_or_else(|| lp.detach(), Tensor::shallow_clone);
    let log_ratio = lp.detach() - &old;
    if cfg.delta.is_some() || max_abs(&log_ratio, mask) > 20.0 {
        return None;
    }
    if cfg.beta != 0.0 {
        let d = x.ref_per_token_logps? - lp.detach();
        let k3 = d.exp() - &d - 1.0;
        if max_abs(&d, mask) > 20.0 || max_abs(&k3, mask) > 10.0 {
            return None;
        }
    }
    let rows = lp.size()[0] as f64;
    let ga = cfg.gradient_accumulation_steps as f64;
    let tokens = mask.sum(Kind::Double).double_value(&[]);
    let mut u = grpo_update(cfg.epsilon_low, cfg.epsilon_high);
    u.skip_zero_advantage = false;
    u.beta = cfg.beta;
    u.kl = reinforge_torch::loss::KlPenalty::K3;
    u.loss.clip_ratio_c = NO_DUAL_CLIP;
    u.loss.tau_pos = cfg.sapo_temperature_pos;
    u.loss.tau_neg = cfg.sapo_temperature_neg;
    let mut info = GlobalBatchInfo::default();
    let per_row = || GlobalBatchInfo {
        global_batch_size: Some(rows * ga),
        ..GlobalBatchInfo::default()
    };
    match cfg.loss_type {
        TrlLossType::Grpo => {
            u.agg = AggMode::SeqMeanTokenMean;
            info = per_row();
        }
        TrlLossType::Sapo => {
            u.policy_loss = PolicyLossKind::Sapo;
            u.agg = AggMode::SeqMeanTokenMean;
            info = per_row();
        }
        TrlLossType::Bnpo => info.batch_num_tokens = Some(tokens.max(1.0) * ga),
        TrlLossType::DrGrpo => {
            u.agg = AggMode::SeqMeanTokenSumNorm;
            info = per_row();
            info.loss_scale_factor = Some(cfg.max_completion_length as f64);
        }
        TrlLossType::Dapo => {
            info.batch_num_tokens = Some(x.num_items_in_batch? / cfg.num_processes as f64)
        }
        TrlLossType::Cispo => {
            u.policy_loss = PolicyLossKind::Cispo;
            u.loss.clip_ratio_low = Some(1.0);
            u.loss.clip_ratio_high = Some(cfg.epsilon_high - 1.0);
            info.batch_num_tokens = Some(x.num_items_in_batch? / cfg.num_processes as f64);
        }
    }
    if cfg.importance_sampling_level == IsLevel::Sequence {
        if cfg.loss_type != TrlLossType::Grpo {
            return None;
        }
        let seq = (&log_ratio * mask).sum_dim_intlist(-1i64, false, Kind::Double)
            / mask
                .sum_dim_intlist(-1i64, false, Kind::Double)
                .clamp_min(1.0);
        if seq.max().double_value(&[]) > 10.0 {
            return None;
        }
        u.policy_loss = PolicyLossKind::Gspo;
    }
    Some((u, info))
}

/// Replays a TRL loss case through the trainer's objective and compares the loss and its
/// gradient (TRL's metrics are TRL's own, checked above).
fn replay_through_trainer(
    c: &mut Case,
    x: &TrlLossInputs,
    mut cfg: UpdateConfig,
    info: &GlobalBatchInfo,
) -> R<()> {
    (c.perturb.policy)(&mut cfg);
    let lp = x.per_token_logps;
    let old = x
        .old_per_token_logps
        .map_or_else(|| lp.detach(), Tensor::shallow_clone);
    let a = x.advantages.unsqueeze(1).expand_as(lp).contiguous();
    let inputs = MiniBatchInputs {
        old_logp: &old,
        advantages: &a,
        mask: x.completion_mask,
        ref_logp: x.ref_per_token_logps,
        is_weights: None,
    };
    let (loss, _) = policy_objective(lp, None, &inputs, &cfg, info);
    let default_tol = c.tol;
    if cfg.agg == AggMode::SeqMeanTokenMean
        || matches!(cfg.policy_loss, PolicyLossKind::Gspo | PolicyLossKind::Sapo)
    {
        c.tol = seq_mean_tol(c, x.completion_mask, info)?;
    }
    c.scalar("loss", loss.double_value(&[]))?;
    loss.backward();
    c.tensor("grad_per_token_logps", &lp.grad())?;
    c.tol = default_tol;
    c.through_trainer = true;
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
