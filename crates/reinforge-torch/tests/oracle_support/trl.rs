//! TRL fixtures (advantages, `_compute_loss`), the overlong penalties of verl and TRL, and pass@k.

use reinforge_rl::overlong::{
    trl_soft_overlong_punishment, verl_dapo_overlong_penalty, verl_dapo_overlong_penalty_f32,
};
use reinforge_rl::trl::{trl_grpo_advantages, MultiObjective, ScaleRewards, TrlAdvantageConfig};
use reinforge_torch::loss::trl::{trl_compute_loss, IsLevel, TrlLossConfig, TrlLossInputs};
use serde_json::Value;

use super::{flat, matrix, tensor, Case, R};

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
    c.tensor("grad_per_token_logps", &lp.grad())
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
