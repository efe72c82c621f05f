//! verl's log-prob-based policy losses and the value loss (core_algos.py @ 1dda039): GPG, DRO,
//! KL-Cov, Clip-Cov, REINFORCE and `compute_value_loss`.

use tch::{Device, Kind, Tensor};

use crate::train::loss::agg::{agg_loss, verl_masked_mean, AggMode, GlobalBatchInfo};
use crate::train::loss::policy::{as_float, weighted, PolicyInputs, PolicyLoss, VerlPolicyConfig};

fn values(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(t.detach().to_kind(Kind::Double).flatten(0, -1)).expect("f64 values")
}

/// A `B x T` 0/1 tensor (dtype of `like`) with ones at the flat positions `picked`.
fn selection(picked: &[usize], like: &Tensor) -> Tensor {
    let mut flat = vec![0.0f64; like.numel()];
    for &i in picked {
        flat[i] = 1.0;
    }
    Tensor::from_slice(&flat)
        .view(like.size().as_slice())
        .to_kind(like.kind())
        .to_device(like.device())
}

/// verl `compute_policy_loss_gpg` (GPG, Chu et al. 2025, arXiv:2504.02546): plain policy
/// gradient `-logp·A`, aggregated by `mode`; no metrics.
pub fn gpg(x: &PolicyInputs, mode: AggMode, cfg: &VerlPolicyConfig) -> PolicyLoss {
    let pg = weighted(-x.log_prob * x.advantages, x.rollout_is_weights);
    PolicyLoss::new(
        agg_loss(&pg, x.response_mask, mode, &cfg.global_batch_info),
        &[],
    )
}

/// verl `compute_policy_loss_dro` (Direct Reward Optimisation, as in Tinker's `dro` loss):
/// `-(A·logp - ½β·(logp - old)²)` per token, aggregated by `mode`; `actor/ppo_kl` is the masked
/// mean of `old - logp`.
pub fn dro(x: &PolicyInputs, mode: AggMode, cfg: &VerlPolicyConfig) -> PolicyLoss {
    let (a, m, lp) = (x.advantages, x.response_mask, x.log_prob);
    let d = lp - x.old_log_prob;
    let pg = weighted(
        -(a * lp - d.square() * (0.5 * cfg.dro_beta)),
        x.rollout_is_weights,
    );
    let ppo_kl = verl_masked_mean(&-&d, m);
    PolicyLoss::new(
        agg_loss(&pg, m, mode, &cfg.global_batch_info),
        &[("actor/ppo_kl", &ppo_kl)],
    )
}

/// verl `compute_policy_loss_kl_cov` (Cui et al. 2025, arXiv:2505.22617): `-A·r` (no clip, no
/// clamp), and on the `k = max(1, ⌊n·kl_cov_ratio⌋)` valid tokens with the largest
/// `(A - Ā)(logp - mean logp)` additionally `+ ppo_kl_coef·|logp - old|`. `actor/ppo_kl` is the
/// masked mean of `|logp - old|`.
pub fn kl_cov(x: &PolicyInputs, mode: AggMode, cfg: &VerlPolicyConfig) -> PolicyLoss {
    assert!(
        cfg.kl_cov_ratio > 0.0,
        "kl_cov_ratio should be larger than 0"
    );
    let (a, m, lp) = (x.advantages, x.response_mask, x.log_prob);
    let nak = lp - x.old_log_prob;
    let abs_kl = nak.abs();
    let ratio = nak.exp();
    let ppo_kl_abs = verl_masked_mean(&abs_kl, m);
    let l1 = -a * &ratio;
    let l_kl = &l1 + &abs_kl * cfg.ppo_kl_coef;
    let (av, lv, mv) = (values(a), values(lp), values(m));
    let valid: Vec<usize> = (0..mv.len()).filter(|&i| mv[i] > 0.0).collect();
    let mut picked = vec![];
    if !valid.is_empty() {
        let n = valid.len() as f64;
        let am = valid.iter().map(|&i| av[i]).sum::<f64>() / n;
        let lm = valid.iter().map(|&i| lv[i]).sum::<f64>() / n;
        let mut cov: Vec<(f64, usize)> = valid
            .iter()
            .map(|&i| ((av[i] - am) * (lv[i] - lm), i))
            .collect();
        cov.sort_by(|p, q| q.0.total_cmp(&p.0));
        let k = ((n * cfg.kl_cov_ratio) as usize).max(1);
        picked = cov.iter().take(k).map(|&(_, i)| i).collect();
    }
    let sel = selection(&picked, a).gt(0.5);
    let pg = weighted(l_kl.where_self(&sel, &l1), x.rollout_is_weights);
    PolicyLoss::new(
        agg_loss(&pg, m, mode, &cfg.global_batch_info),
        &[("actor/ppo_kl", &ppo_kl_abs)],
    )
}

/// verl `compute_policy_loss_clip_cov` (Cui et al. 2025, arXiv:2505.22617): the PPO clip without
/// the ±20 clamp, and the gradient of up to `max(1, ⌊n·clip_cov_ratio⌋)` tokens is cut. The
/// candidates are valid, not already clipped, with `lb < (A - Ā)(logp - mean logp) < ub` (masked
/// means with `+1e-8`); when there are more candidates than that, a uniformly random subset is
/// drawn from torch's generator (verl uses `torch.randperm`). `actor/pg_clipfrac` = cut tokens.
pub fn clip_cov(x: &PolicyInputs, mode: AggMode, cfg: &VerlPolicyConfig) -> PolicyLoss {
    assert!(
        cfg.clip_cov_ratio > 0.0,
        "clip_cov_ratio should be larger than 0"
    );
    let (a, m, lp) = (x.advantages, x.response_mask, x.log_prob);
    let nak = lp - x.old_log_prob;
    let ratio = nak.exp();
    let ppo_kl = verl_masked_mean(&-&nak, m);
    let l1 = -a * &ratio;
    let l2 = -a * ratio.clamp(1.0 - cfg.low(), 1.0 + cfg.high());
    let by_origin = values(&l2.gt_tensor(&l1).to_kind(Kind::Double));
    let cov =
        values(&((a - verl_masked_mean(a, m)) * (lp.detach() - verl_masked_mean(&lp.detach(), m))));
    let mv = values(m);
    let n_valid: f64 = mv.iter().sum();
    let clip_num = ((cfg.clip_cov_ratio * n_valid) as usize).max(1);
    let candidates: Vec<usize> = (0..mv.len())
        .filter(|&i| {
            mv[i] > 0.0
                && by_origin[i] == 0.0
                && cov[i] > cfg.clip_cov_lb
                && cov[i] < cfg.clip_cov_ub
        })
        .collect();
    let picked: Vec<usize> = if candidates.len() <= clip_num {
        candidates
    } else {
        let perm = crate::runtime::with_generator(|| {
            // host: a permutation read back as indices (verl draws it on the CPU too).
            Tensor::randperm(candidates.len() as i64, (Kind::Int64, Device::Cpu))
        });
        Vec::<i64>::try_from(perm)
            .expect("permutation")
            .into_iter()
            .take(clip_num)
            .map(|p| candidates[p as usize])
            .collect()
    };
    let corr = -selection(&picked, a) + 1.0;
    let clipfrac = verl_masked_mean(&as_float(&corr.eq(0.0), a), m);
    let pg = weighted(l1.maximum(&l2) * &corr, x.rollout_is_weights);
    PolicyLoss::new(
        agg_loss(&pg, m, mode, &cfg.global_batch_info),
        &[("actor/pg_clipfrac", &clipfrac), ("actor/ppo_kl", &ppo_kl)],
    )
}

/// verl `compute_policy_loss_reinforce`: `-A·logp` (times the rollout IS weights when given),
/// aggregated by `mode` (verl's default is seq-mean-token-sum); `actor/ppo_kl` is the masked mean
/// of `rollout_logp - logp`. Here `x.old_log_prob` is the rollout policy's log-prob.
pub fn reinforce(x: &PolicyInputs, mode: AggMode, cfg: &VerlPolicyConfig) -> PolicyLoss {
    let m = x.response_mask;
    let pg = weighted(-x.advantages * x.log_prob, x.rollout_is_weights);
    let kl = verl_masked_mean(&(x.old_log_prob - x.log_prob), m);
    PolicyLoss::new(
        agg_loss(&pg, m, mode, &cfg.global_batch_info),
        &[("actor/ppo_kl", &kl)],
    )
}

/// verl `compute_value_loss` (PPO's clipped value loss): `v̂` clipped to `values ± cliprange`,
/// `½·agg(max((v - R)², (v̂ - R)²))`; also returns `vf_clipfrac`, the masked fraction where the
/// clipped error is larger.
pub fn value_loss(
    vpreds: &Tensor,
    returns: &Tensor,
    values_old: &Tensor,
    mask: &Tensor,
    cliprange_value: f64,
    mode: AggMode,
    info: &GlobalBatchInfo,
) -> (Tensor, f64) {
    let clipped = vpreds
        .minimum(&(values_old + cliprange_value))
        .maximum(&(values_old - cliprange_value));
    let l1 = (vpreds - returns).square();
    let l2 = (clipped - returns).square();
    let loss = agg_loss(&l1.maximum(&l2), mask, mode, info) * 0.5;
    let frac = verl_masked_mean(&as_float(&l2.gt_tensor(&l1), vpreds), mask);
    (loss, frac.to_kind(Kind::Double).double_value(&[]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_clip_by_hand() {
        let v = Tensor::from_slice(&[2.0f64, 0.1]).view([1, 2]);
        let old = Tensor::from_slice(&[0.0f64, 0.0]).view([1, 2]);
        let ret = Tensor::from_slice(&[1.0f64, 1.0]).view([1, 2]);
        let m = Tensor::from_slice(&[1.0f64, 1.0]).view([1, 2]);
        let (loss, frac) = value_loss(
            &v,
            &ret,
            &old,
            &m,
            0.5,
            AggMode::TokenMean,
            &GlobalBatchInfo::default(),
        );
        // Token 0: (2-1)² = 1 vs (0.5-1)² = 0.25 → 1. Token 1: 0.81 vs (0.1-1)² = 0.81 → 0.81.
        assert!((loss.double_value(&[]) - 0.5 * (1.0 + 0.81) / 2.0).abs() < 1e-12);
        assert_eq!(frac, 0.0);
    }
}
