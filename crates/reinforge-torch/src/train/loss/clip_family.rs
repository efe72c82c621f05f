//! verl's ratio-based policy losses (core_algos.py @ 1dda039): vanilla PPO-clip with clip-higher
//! and dual-clip, GSPO, CISPO, SAPO, DPPO-Binary-TV/KL and GMPO (geo-mean).

use tch::Tensor;

use crate::train::loss::agg::{agg_loss, verl_masked_mean, AggMode};
use crate::train::loss::policy::{as_float, weighted, PolicyInputs, PolicyLoss, VerlPolicyConfig};

/// verl `compute_policy_loss_vanilla` (PPO, Schulman et al. 2017; dual-clip, Ye et al. 2020):
/// `r = exp(clamp(logp - old, ±20))` (unclamped without `clamp_log_ratio`, as TRL), `ℓ =
/// max(-A·r, -A·clip(r, 1-ε_low, 1+ε_high))`, and where A < 0 additionally `min(ℓ, -A·c)`: with
/// `c = δ ≥ 1+ε_high` this is TRL's two-sided clip `-min(min(r, δ)·A, clip(r)·A)` (`delta`). Metrics `actor/pg_clipfrac` (tokens where the clipped term
/// is larger), `actor/pg_clipfrac_lower` (dual-clip active), `actor/ppo_kl` (mean `old - logp`).
pub fn vanilla(x: &PolicyInputs, mode: AggMode, cfg: &VerlPolicyConfig) -> PolicyLoss {
    assert!(cfg.clip_ratio_c > 1.0, "dual-clip needs clip_ratio_c > 1");
    let (a, m) = (x.advantages, x.response_mask);
    let nak = cfg.log_ratio(x.log_prob, x.old_log_prob, 20.0);
    let ratio = nak.exp();
    let ppo_kl = verl_masked_mean(&-&nak, m);
    let l1 = -a * &ratio;
    let l2 = -a * ratio.clamp(1.0 - cfg.low(), 1.0 + cfg.high());
    let clip1 = l1.maximum(&l2);
    let clipfrac = verl_masked_mean(&as_float(&l2.gt_tensor(&l1), a), m);
    let l3 = -a * cfg.clip_ratio_c;
    let clip2 = l3.minimum(&clip1);
    let neg = a.lt(0.0);
    let lower = verl_masked_mean(&(as_float(&clip1.gt_tensor(&l3), a) * as_float(&neg, a)), m);
    let pg = weighted(clip2.where_self(&neg, &clip1), x.rollout_is_weights);
    PolicyLoss::new(
        agg_loss(&pg, m, mode, &cfg.global_batch_info),
        &[
            ("actor/pg_clipfrac", &clipfrac),
            ("actor/ppo_kl", &ppo_kl),
            ("actor/pg_clipfrac_lower", &lower),
        ],
    )
}

/// verl `compute_policy_loss_gspo` (Zheng et al. 2025, arXiv:2507.18071): the sequence ratio
/// `s = exp(mean_t(logp - old))` enters each token as `sg(log s) + logp - sg(logp)` (clamped at
/// max 10), then the PPO clip. Always aggregated seq-mean-token-mean (`mode` is ignored, as in
/// verl); `actor/pg_clipfrac_lower` is 0.
pub fn gspo(x: &PolicyInputs, _mode: AggMode, cfg: &VerlPolicyConfig) -> PolicyLoss {
    let (a, m, lp) = (x.advantages, x.response_mask, x.log_prob);
    let kind = lp.kind();
    let nak = lp - x.old_log_prob;
    let lens = m.sum_dim_intlist(-1i64, true, kind).clamp_min(1.0);
    let seq = (&nak * m).sum_dim_intlist(-1i64, true, kind) / lens;
    let log_s = lp - lp.detach() + seq.detach();
    let log_s = if cfg.clamp_log_ratio {
        log_s.clamp_max(10.0)
    } else {
        log_s
    };
    let s = log_s.exp();
    let l1 = -a * &s;
    let l2 = -a * s.clamp(1.0 - cfg.low(), 1.0 + cfg.high());
    let pg = weighted(l1.maximum(&l2), x.rollout_is_weights);
    let loss = agg_loss(&pg, m, AggMode::SeqMeanTokenMean, &cfg.global_batch_info);
    let clipfrac = verl_masked_mean(&as_float(&l2.gt_tensor(&l1), a), m);
    let ppo_kl = verl_masked_mean(&-&nak, m);
    let zero = Tensor::from(0.0).to_device(a.device());
    PolicyLoss::new(
        loss,
        &[
            ("actor/pg_clipfrac", &clipfrac),
            ("actor/ppo_kl", &ppo_kl),
            ("actor/pg_clipfrac_lower", &zero),
        ],
    )
}

/// verl `compute_policy_loss_cispo` (MiniMax-M1, arXiv:2506.13585): `-sg(clip(r, 1-ε_low,
/// 1+ε_high))·A·logp` with the ±20 log-ratio clamp; `actor/pg_clipfrac` = tokens whose ratio was
/// changed by the clip. TRL's CISPO, `min(r, epsilon_high)` unclamped, is this with
/// `clip_ratio_low = 1`, `clip_ratio_high = epsilon_high - 1` and no `clamp_log_ratio`.
pub fn cispo(x: &PolicyInputs, mode: AggMode, cfg: &VerlPolicyConfig) -> PolicyLoss {
    let (a, m, lp) = (x.advantages, x.response_mask, x.log_prob);
    let nak = cfg.log_ratio(lp, x.old_log_prob, 20.0);
    let ratio = nak.exp();
    let ppo_kl = verl_masked_mean(&-&nak, m);
    let clipped = ratio.clamp(1.0 - cfg.low(), 1.0 + cfg.high());
    let pg = weighted(-clipped.detach() * a * lp, x.rollout_is_weights);
    let clipfrac = verl_masked_mean(&as_float(&ratio.ne_tensor(&clipped), a), m);
    let zero = Tensor::from(0.0).to_device(a.device());
    PolicyLoss::new(
        agg_loss(&pg, m, mode, &cfg.global_batch_info),
        &[
            ("actor/pg_clipfrac", &clipfrac),
            ("actor/ppo_kl", &ppo_kl),
            ("actor/pg_clipfrac_lower", &zero),
        ],
    )
}

/// verl `compute_policy_loss_sapo` (Gao et al. 2025, arXiv:2511.20347): a soft gate
/// `σ(τ·(r - 1))·4/τ` replaces the clip, `τ = tau_pos` where A > 0 else `tau_neg`; loss
/// `-gate·A`, always seq-mean-token-mean. Both clip fractions are 0.
pub fn sapo(x: &PolicyInputs, _mode: AggMode, cfg: &VerlPolicyConfig) -> PolicyLoss {
    let (a, m) = (x.advantages, x.response_mask);
    let nak = cfg.log_ratio(x.log_prob, x.old_log_prob, 20.0);
    let ratio = nak.exp();
    let pos = Tensor::from(cfg.tau_pos)
        .to_kind(a.kind())
        .to_device(a.device());
    let neg = Tensor::from(cfg.tau_neg)
        .to_kind(a.kind())
        .to_device(a.device());
    let tau = pos.where_self(&a.gt(0.0), &neg);
    let gate = (&tau * (ratio - 1.0)).sigmoid() * 4.0 / &tau;
    let pg = weighted(-gate * a, x.rollout_is_weights);
    let loss = agg_loss(&pg, m, AggMode::SeqMeanTokenMean, &cfg.global_batch_info);
    let ppo_kl = verl_masked_mean(&-&nak, m);
    let zero = Tensor::from(0.0).to_device(a.device());
    PolicyLoss::new(
        loss,
        &[
            ("actor/pg_clipfrac", &zero),
            ("actor/ppo_kl", &ppo_kl),
            ("actor/pg_clipfrac_lower", &zero),
        ],
    )
}

/// Which divergence DPPO thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DppoDivergence {
    /// Total variation of the sampled token's probability: `π - π_old`.
    Tv,
    /// Binary KL between Bernoulli(π_old) and Bernoulli(π) of the sampled token.
    Kl,
}

/// verl `compute_policy_loss_dppo_tv` / `compute_policy_loss_dppo_kl` (arXiv:2602.04879):
/// `-A·sg(min(r, c))·logp·valid`, where `valid` (detached) drops tokens whose divergence from the
/// old policy exceeds `clip_ratio_high` in the direction A favours (or `clip_ratio_low` against).
/// `actor/pg_clipfrac` = dropped tokens, `actor/pg_clipfrac_lower` = kept tokens with `r > c`.
pub fn dppo(
    x: &PolicyInputs,
    mode: AggMode,
    cfg: &VerlPolicyConfig,
    divergence: DppoDivergence,
) -> PolicyLoss {
    let (a, m, lp, old) = (x.advantages, x.response_mask, x.log_prob, x.old_log_prob);
    let nak = cfg.log_ratio(lp, old, 20.0);
    let ratio = nak.exp();
    let ppo_kl = verl_masked_mean(&-&nak, m);
    let truncated = ratio.clamp_max(cfg.clip_ratio_c).detach();
    let (p, p_old) = (lp.exp(), old.exp());
    let (pos_ok, neg_ok) = match divergence {
        DppoDivergence::Tv => {
            let d = &p - &p_old;
            (d.le(cfg.high()), d.ge(-cfg.low()))
        }
        DppoDivergence::Kl => {
            let bkl = &p_old * (old - lp)
                + (-&p_old + 1.0) * ((-&p_old + 1.0 + 1e-8) / (-&p + 1.0 + 1e-8)).log();
            (
                bkl.le(cfg.high()).logical_or(&p.le_tensor(&p_old)),
                bkl.le(cfg.low()).logical_or(&p.ge_tensor(&p_old)),
            )
        }
    };
    let valid = as_float(&pos_ok.where_self(&a.gt(0.0), &neg_ok), a).detach();
    let pg = weighted(-a * &truncated * lp * &valid, x.rollout_is_weights);
    let clipfrac = verl_masked_mean(&(-&valid + 1.0), m);
    let lower = verl_masked_mean(&(as_float(&ratio.gt(cfg.clip_ratio_c), a) * &valid), m);
    PolicyLoss::new(
        agg_loss(&pg, m, mode, &cfg.global_batch_info),
        &[
            ("actor/pg_clipfrac", &clipfrac),
            ("actor/ppo_kl", &ppo_kl),
            ("actor/pg_clipfrac_lower", &lower),
        ],
    )
}

/// verl `compute_policy_loss_dppo_tv`: [`dppo`] with the total-variation divergence.
pub fn dppo_tv(x: &PolicyInputs, mode: AggMode, cfg: &VerlPolicyConfig) -> PolicyLoss {
    dppo(x, mode, cfg, DppoDivergence::Tv)
}

/// verl `compute_policy_loss_dppo_kl`: [`dppo`] with the binary KL divergence.
pub fn dppo_kl(x: &PolicyInputs, mode: AggMode, cfg: &VerlPolicyConfig) -> PolicyLoss {
    dppo(x, mode, cfg, DppoDivergence::Kl)
}

/// verl `compute_policy_loss_geo_mean` (GMPO, Zhao et al. 2025, arXiv:2507.20673): token
/// log-ratios clipped to `[-ε_low, ε_high]` on the side A favours (no ±20 clamp), the sequence
/// ratio is their masked geometric mean, the advantage the masked mean of A; loss
/// `mean_i(-Ā_i·r_i)` over sequences (`mode` is unused, as in verl).
pub fn geo_mean(x: &PolicyInputs, _mode: AggMode, cfg: &VerlPolicyConfig) -> PolicyLoss {
    let (a, m) = (x.advantages, x.response_mask);
    let kind = a.kind();
    let nak = x.log_prob - x.old_log_prob;
    let ppo_kl = verl_masked_mean(&-&nak, m);
    let sgn = a.sign();
    let nak_clamp = nak.clamp(-cfg.low(), cfg.high());
    let nak_min = &sgn * (&sgn * &nak).minimum(&(&sgn * &nak_clamp));
    let len = m.sum_dim_intlist(-1i64, false, kind) + 1e-8;
    let ratio = ((nak_min * m).sum_dim_intlist(-1i64, false, kind) / &len).exp();
    let adv = (a * m).sum_dim_intlist(-1i64, false, kind) / &len;
    let mut pg = -adv * ratio;
    if let Some(w) = x.rollout_is_weights {
        let seq_w = (((w + 1e-10).log() * m).sum_dim_intlist(-1i64, false, kind) / &len).exp();
        pg = pg * seq_w;
    }
    let clipped = as_float(&nak.ne_tensor(&nak_clamp), a);
    let high = verl_masked_mean(&(&clipped * as_float(&a.gt(0.0), a)), m);
    let low = verl_masked_mean(&(&clipped * as_float(&a.lt(0.0), a)), m);
    PolicyLoss::new(
        pg.mean(kind),
        &[
            ("actor/pg_clipfrac", &high),
            ("actor/ppo_kl", &ppo_kl),
            ("actor/pg_clipfrac_lower", &low),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(v: &[f64]) -> Tensor {
        Tensor::from_slice(v).view([1, -1])
    }

    #[test]
    fn dual_clip_caps_negative_advantage_loss() {
        // r = e^2 ≈ 7.39 with A = -1: max(7.39, 1.2) = 7.39, capped at c = 3.
        let (lp, old, a, m) = (row(&[2.0]), row(&[0.0]), row(&[-1.0]), row(&[1.0]));
        let x = PolicyInputs {
            old_log_prob: &old,
            log_prob: &lp,
            advantages: &a,
            response_mask: &m,
            rollout_is_weights: None,
        };
        let out = vanilla(&x, AggMode::TokenMean, &VerlPolicyConfig::default());
        assert!((out.loss.double_value(&[]) - 3.0).abs() < 1e-12);
        assert!((out.metrics["actor/pg_clipfrac_lower"] - 1.0).abs() < 1e-7);
    }

    #[test]
    fn cispo_gradient_is_clipped_weight_times_advantage() {
        let lp = row(&[1.0]).set_requires_grad(true);
        let (old, a, m) = (row(&[0.0]), row(&[2.0]), row(&[1.0]));
        let x = PolicyInputs {
            old_log_prob: &old,
            log_prob: &lp,
            advantages: &a,
            response_mask: &m,
            rollout_is_weights: None,
        };
        cispo(&x, AggMode::TokenMean, &VerlPolicyConfig::default())
            .loss
            .backward();
        // r = e > 1.2, so the detached weight is 1.2: d/dlogp = -1.2 · 2.
        assert!((lp.grad().double_value(&[0, 0]) + 2.4).abs() < 1e-12);
    }
}
