//! verl fixtures: advantage estimators (`reinforge_rl`), `agg_loss`, KL / entropy and the policy
//! losses (`reinforge_torch::train::loss`). Gradients come from tch autograd on f64 tensors.

use reinforge_rl::{estimate, AdvantageConfig, Estimator, EstimatorInputs, EstimatorParams};
use reinforge_torch::train::loss::agg::{agg_loss, agg_normalisation, AggMode, GlobalBatchInfo};
use reinforge_torch::train::loss::kl::{
    compute_entropy_loss, compute_rewards, entropy_from_logits, kl_penalty, KlPenalty,
};
use reinforge_torch::train::loss::policy::VerlPolicyConfig;
use reinforge_torch::train::loss::PolicyLossKind;
use reinforge_torch::train::rl::{
    policy_objective, value_objective, MiniBatchInputs, UpdateConfig, ValueConfig, ValueInputs,
};
use std::collections::BTreeMap;

use serde_json::Value;
use tch::Tensor;

use super::{grpo_update, matrix, tensor, Case, Perturb, R};

fn index(c: &Case) -> R<Vec<i64>> {
    Ok(c.req("index")?
        .as_array()
        .ok_or("index is not a list")?
        .iter()
        .map(|x| x.as_i64().expect("integer group id"))
        .collect())
}

fn flat_matrix(m: &[Vec<f64>]) -> Vec<f64> {
    m.iter().flatten().copied().collect()
}

/// The verl estimator cases through the registry's dispatch (`reinforge_rl::estimate`), the
/// function the trainer calls; `function` picks the estimator whose `verl_function` it is.
fn advantages(c: &mut Case, function: &str) -> R<bool> {
    let Some(estimator) = Estimator::ALL
        .into_iter()
        .find(|e| e.verl_function() == Some(function))
    else {
        return Ok(false);
    };
    let d = EstimatorParams::default();
    let params = EstimatorParams {
        advantage: AdvantageConfig {
            norm_by_std: c
                .param("norm_adv_by_std_in_grpo")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            epsilon: c.param_f64("epsilon", d.advantage.epsilon),
            batch_std: false,
        },
        gamma: c.param_f64("gamma", d.gamma),
        lam: c.param_f64("lam", d.lam),
        f_norm: c.param_f64("f_norm", d.f_norm),
        handle_zero_tail: c
            .param("handle_zero_tail")
            .and_then(Value::as_bool)
            .unwrap_or(d.handle_zero_tail),
        otb_epsilon: c.param_f64("epsilon", d.otb_epsilon),
        ..d
    };
    let r = matrix(c.req("token_level_rewards")?);
    let m = matrix(c.req("response_mask")?);
    let index = match c.input("index") {
        Some(_) => index(c)?,
        None => (0..r.len() as i64).collect(),
    };
    let opt = |k: &str| c.input(k).map(matrix);
    let (values, old_lp, sum_pi2) = (opt("values"), opt("old_log_probs"), opt("sum_pi_squared"));
    let baselines: Option<Vec<f64>> = c.input("reward_baselines").map(super::flat);
    let inputs = EstimatorInputs {
        values: values.as_ref(),
        reward_baselines: baselines.as_deref(),
        old_log_probs: old_lp.as_ref(),
        sum_pi_squared: sum_pi2.as_ref(),
        ..EstimatorInputs::new(&r, &m, &index)
    };
    let out = estimate(estimator, &inputs, &params).map_err(|e| format!("{}: {e}", c.id))?;
    c.array("advantages", &flat_matrix(&out.advantages))?;
    c.array("returns", &flat_matrix(&out.returns))?;
    Ok(true)
}

fn mode(c: &Case, default: AggMode) -> R<AggMode> {
    match c.param("loss_agg_mode").and_then(Value::as_str) {
        Some(s) => s.parse(),
        None => Ok(default),
    }
}

fn batch_info(v: Option<&Value>) -> GlobalBatchInfo {
    let get = |k: &str| v.and_then(|v| v.get(k)).and_then(Value::as_f64);
    GlobalBatchInfo {
        dp_size: get("dp_size").unwrap_or(1.0) as usize,
        batch_num_tokens: get("batch_num_tokens"),
        global_batch_size: get("global_batch_size"),
        loss_scale_factor: get("loss_scale_factor"),
    }
}

fn agg(c: &mut Case) -> R<()> {
    let info = batch_info(Some(&c.v["params"]));
    let (l, m) = (tensor(c.req("loss_mat")?), tensor(c.req("loss_mask")?));
    let md = mode(c, AggMode::TokenMean)?;
    c.scalar("loss", agg_loss(&l, &m, md, &info).double_value(&[]))?;
    let norm = agg_normalisation(&m, md, &info);
    let e = c.consume("normalisation")?.clone();
    let c2 = |k: &str, got: Option<f64>| -> R<()> {
        match (e.get(k).and_then(Value::as_f64), got) {
            (None, None) => Ok(()),
            (Some(x), Some(g)) if (x - g).abs() <= 1e-12 * x.abs().max(1.0) => Ok(()),
            (x, g) => Err(format!(
                "{}: normalisation.{k}: got {g:?}, expected {x:?}",
                c.id
            )),
        }
    };
    c2("dp_size", Some(info.dp_size as f64))?;
    c2("batch_num_tokens_used", norm.batch_num_tokens_used)?;
    c2("global_batch_size_used", norm.global_batch_size_used)?;
    c2("loss_scale_factor_used", norm.loss_scale_factor_used)
}

fn kl_family(c: &mut Case, function: &str) -> R<bool> {
    match function {
        "kl_penalty" => {
            let lp = tensor(c.req("logprob")?).set_requires_grad(true);
            let rf = tensor(c.req("ref_logprob")?).set_requires_grad(true);
            let p: KlPenalty = c.param_str("kl_penalty")?.parse()?;
            let kl = kl_penalty(&lp, &rf, p);
            c.tensor("kl", &kl)?;
            kl.sum(kl.kind()).backward();
            c.tensor("grad_logprob_of_sum", &lp.grad())?;
            c.tensor("grad_ref_logprob_of_sum", &rf.grad())?;
        }
        "entropy_from_logits" => {
            c.tensor("entropy", &entropy_from_logits(&tensor(c.req("logits")?)))?;
        }
        "compute_entropy_loss" => {
            let md = mode(c, AggMode::TokenMean)?;
            let l = compute_entropy_loss(
                &tensor(c.req("logits")?),
                &tensor(c.req("response_mask")?),
                md,
            );
            c.scalar("entropy_loss", l.double_value(&[]))?;
        }
        "compute_rewards" => {
            let r = compute_rewards(
                &tensor(c.req("token_level_scores")?),
                &tensor(c.req("old_log_prob")?),
                &tensor(c.req("ref_log_prob")?),
                c.param_f64("kl_ratio", 0.0),
            );
            c.tensor("token_level_rewards", &r)?;
        }
        _ => return Ok(false),
    }
    Ok(true)
}

fn policy_config(c: &Case) -> VerlPolicyConfig {
    let d = VerlPolicyConfig::default();
    let clip_ratio = c.param_f64("clip_ratio", d.clip_ratio);
    VerlPolicyConfig {
        clip_ratio,
        clip_ratio_low: Some(c.param_f64("clip_ratio_low", clip_ratio)),
        clip_ratio_high: Some(c.param_f64("clip_ratio_high", clip_ratio)),
        clip_ratio_c: c.param_f64("clip_ratio_c", d.clip_ratio_c),
        tau_pos: c.param_f64("tau_pos", d.tau_pos),
        tau_neg: c.param_f64("tau_neg", d.tau_neg),
        dro_beta: c.param_f64("policy_loss.dro_beta", d.dro_beta),
        kl_cov_ratio: c.param_f64("policy_loss.kl_cov_ratio", d.kl_cov_ratio),
        ppo_kl_coef: c.param_f64("policy_loss.ppo_kl_coef", d.ppo_kl_coef),
        clip_cov_ratio: c.param_f64("policy_loss.clip_cov_ratio", d.clip_cov_ratio),
        clip_cov_lb: c.param_f64("policy_loss.clip_cov_lb", d.clip_cov_lb),
        clip_cov_ub: c.param_f64("policy_loss.clip_cov_ub", d.clip_cov_ub),
        clamp_log_ratio: true,
        global_batch_info: batch_info(c.param("global_batch_info")),
    }
}

/// The trainer's update settings for a verl policy-loss case: the registered loss named by
/// the function, the case's aggregation and loss config, no KL or entropy term.
fn update_config(c: &Case, kind: PolicyLossKind) -> R<UpdateConfig> {
    let default_mode = match kind {
        PolicyLossKind::Reinforce => AggMode::SeqMeanTokenSum,
        PolicyLossKind::Gspo | PolicyLossKind::Sapo => AggMode::SeqMeanTokenMean,
        _ => AggMode::TokenMean,
    };
    let mut cfg = grpo_update(0.2, 0.2);
    cfg.policy_loss = kind;
    cfg.agg = mode(c, default_mode)?;
    cfg.loss = policy_config(c);
    cfg.skip_zero_advantage = false;
    Ok(cfg)
}

fn policy_kind(function: &str) -> Option<PolicyLossKind> {
    function
        .strip_prefix("compute_policy_loss_")
        .and_then(|name| name.parse::<PolicyLossKind>().ok())
}

/// What the trainer's objective returns for a policy-loss case under `cfg`.
pub struct PolicyOut {
    pub loss: f64,
    /// The loss as the objective's stats report it.
    pub pg_loss: f64,
    pub metrics: BTreeMap<String, f64>,
    /// d(loss)/d(log_prob).
    pub grad: Vec<f64>,
}

/// A `compute_policy_loss_*` case through the trainer's objective (`train::policy_objective`,
/// which calls the registered loss) under `cfg`.
fn policy_out(c: &Case, kind: PolicyLossKind, cfg: &UpdateConfig) -> R<PolicyOut> {
    // verl's REINFORCE reads the rollout policy's log-probs where the others read the old ones.
    let old_key = if kind == PolicyLossKind::Reinforce {
        "rollout_log_prob"
    } else {
        "old_log_prob"
    };
    let old = tensor(c.req(old_key)?);
    let lp = tensor(c.req("log_prob")?).set_requires_grad(true);
    let a = tensor(c.req("advantages")?);
    let m = tensor(c.req("response_mask")?);
    let w: Option<Tensor> = c.input("rollout_is_weights").map(tensor);
    let inputs = MiniBatchInputs {
        old_logp: &old,
        advantages: &a,
        mask: &m,
        ref_logp: None,
        is_weights: w.as_ref(),
    };
    let info = batch_info(c.param("global_batch_info"));
    let (loss, stats) = policy_objective(&lp, None, &inputs, cfg, &info);
    let value = loss.double_value(&[]);
    loss.backward();
    Ok(PolicyOut {
        loss: value,
        pg_loss: stats.pg_loss,
        metrics: stats.metrics,
        grad: super::values(&lp.grad()),
    })
}

/// A `compute_policy_loss_*` case, replayed through the trainer's objective with the case's
/// settings after the harness's perturbation.
fn policy(c: &mut Case, function: &str) -> R<bool> {
    let Some(kind) = policy_kind(function) else {
        return Ok(false);
    };
    let mut cfg = update_config(c, kind)?;
    (c.perturb.policy)(&mut cfg);
    let out = policy_out(c, kind, &cfg)?;
    c.scalar("pg_loss", out.loss)?;
    c.scalar("pg_loss", out.pg_loss)?;
    c.metrics("metrics", &out.metrics)?;
    c.array("grad_log_prob", &out.grad)?;
    c.through_trainer = true;
    Ok(true)
}

/// The critic's settings for a `compute_value_loss` case.
fn value_config(c: &Case) -> R<ValueConfig> {
    Ok(ValueConfig {
        epochs: 1,
        mini_batches: 1,
        lr: 0.0,
        max_grad_norm: 1.0,
        cliprange_value: c.param_f64("cliprange_value", 0.5),
        agg: mode(c, AggMode::TokenMean)?,
        loss_scale_factor: 1.0,
        memory: reinforge_torch::Memory::default(),
    })
}

/// A `compute_value_loss` case through the critic's objective (`train::value_objective`)
/// under `cfg`: the loss, the clip fraction and d(loss)/d(vpreds).
fn value_out(c: &Case, cfg: &ValueConfig) -> R<(f64, f64, Vec<f64>)> {
    let v = tensor(c.req("vpreds")?).set_requires_grad(true);
    let (returns, values_old, mask) = (
        tensor(c.req("returns")?),
        tensor(c.req("values")?),
        tensor(c.req("response_mask")?),
    );
    let x = ValueInputs {
        returns: &returns,
        values_old: &values_old,
        mask: &mask,
    };
    let (loss, frac) = value_objective(&v, &x, cfg, &GlobalBatchInfo::default());
    let value = loss.double_value(&[]);
    loss.backward();
    Ok((value, frac, super::values(&v.grad())))
}

/// A `compute_value_loss` case, replayed through the critic's objective with the case's
/// settings after the harness's perturbation.
fn value(c: &mut Case) -> R<()> {
    let mut cfg = value_config(c)?;
    (c.perturb.value)(&mut cfg);
    let (loss, frac, grad) = value_out(c, &cfg)?;
    c.scalar("vf_loss", loss)?;
    c.scalar("vf_clipfrac", frac)?;
    c.array("grad_vpreds", &grad)?;
    c.through_trainer = true;
    Ok(())
}

/// The trainer's outputs for a policy-loss or value-loss case `v` under the case's own
/// settings changed by `perturb` (applied here, not through the harness), by name: the loss,
/// its metrics or clip fraction, and its gradient. `None` for the cases of other functions.
pub fn trainer_outputs(v: &Value, perturb: Perturb) -> R<Option<BTreeMap<String, f64>>> {
    let function = v["function"].as_str().unwrap_or_default();
    let c = Case::new(v, "trainer_outputs".into(), Perturb::default());
    let grads = |key: &'static str, g: Vec<f64>| {
        g.into_iter()
            .enumerate()
            .map(move |(i, x)| (format!("{key}[{i}]"), x))
    };
    if let Some(kind) = policy_kind(function) {
        let mut cfg = update_config(&c, kind)?;
        (perturb.policy)(&mut cfg);
        let out = policy_out(&c, kind, &cfg)?;
        let mut named = out.metrics;
        named.insert("pg_loss".into(), out.loss);
        named.insert("stats.pg_loss".into(), out.pg_loss);
        named.extend(grads("grad_log_prob", out.grad));
        return Ok(Some(named));
    }
    if function == "compute_value_loss" {
        let mut cfg = value_config(&c)?;
        (perturb.value)(&mut cfg);
        let (loss, frac, grad) = value_out(&c, &cfg)?;
        let mut named = BTreeMap::from([("vf_loss".into(), loss), ("vf_clipfrac".into(), frac)]);
        named.extend(grads("grad_vpreds", grad));
        return Ok(Some(named));
    }
    Ok(None)
}

/// Checks `c` if `function` is a verl function; `Ok(false)` when it is not one.
pub fn dispatch(c: &mut Case, function: &str) -> R<bool> {
    if function == "agg_loss" {
        agg(c)?;
        return Ok(true);
    }
    if function == "compute_value_loss" {
        value(c)?;
        return Ok(true);
    }
    Ok(advantages(c, function)? || kl_family(c, function)? || policy(c, function)?)
}
