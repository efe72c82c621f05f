//! What the tests of the RL update share: GRPO's update settings, the base each test adjusts.

use reinforge_torch::train::loss::policy::{VerlPolicyConfig, NO_DUAL_CLIP};
use reinforge_torch::train::loss::{AggMode, KlPenalty, PolicyLossKind};
use reinforge_torch::train::rl::UpdateConfig;

/// GRPO's update as verl runs it, the base every replayed case adjusts: PPO-clip (`vanilla`, no
/// dual clip) with clip range `[1 - epsilon_low, 1 + epsilon_high]`, token-mean, no KL or
/// entropy term, one pass of one mini-batch.
pub fn grpo_update(epsilon_low: f64, epsilon_high: f64) -> UpdateConfig {
    UpdateConfig {
        policy_loss: PolicyLossKind::Vanilla,
        agg: AggMode::TokenMean,
        loss: VerlPolicyConfig {
            clip_ratio: epsilon_low,
            clip_ratio_low: Some(epsilon_low),
            clip_ratio_high: Some(epsilon_high),
            clip_ratio_c: NO_DUAL_CLIP,
            ..VerlPolicyConfig::default()
        },
        beta: 0.0,
        kl: KlPenalty::K3,
        entropy_coef: 0.0,
        epochs: 1,
        mini_batches: 1,
        lr: 0.0,
        max_grad_norm: 1.0,
        temperature: 1.0,
        skip_zero_advantage: true,
        loss_scale_factor: 1.0,
        memory: reinforge_torch::Memory::default(),
    }
}
