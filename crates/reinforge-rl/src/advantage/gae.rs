//! Generalised Advantage Estimation (Schulman et al. 2015, arXiv:1506.02438), verl semantics.

use crate::advantage::AdvantageOutput;
use crate::masked::{masked_whiten, Matrix};

/// verl `compute_gae_advantage_return` (core_algos.py @ 1dda039): [`gae_raw`] advantages, then
/// whitened over the whole batch (`masked_whiten`: masked statistics, every position shifted);
/// returns are the raw advantages plus values.
///
/// # Panics
/// When fewer than two tokens are valid (verl raises); [`crate::advantage::outcome::estimate`]
/// checks this and returns an error instead.
pub fn gae(
    token_level_rewards: &Matrix,
    values: &Matrix,
    mask: &Matrix,
    gamma: f64,
    lam: f64,
) -> AdvantageOutput {
    let raw = gae_raw(token_level_rewards, values, mask, gamma, lam);
    let returns = returns_of(&raw, values);
    AdvantageOutput {
        advantages: masked_whiten(&raw, mask),
        returns,
    }
}

/// GAE before whitening: `δ_t = r_t + γ·V_next - V_t`, `A_t = δ_t + γλ·A_next`; at a masked
/// position (an observation hole or padding) `V_next` and `A_next` are carried through unchanged.
pub fn gae_raw(
    token_level_rewards: &Matrix,
    values: &Matrix,
    mask: &Matrix,
    gamma: f64,
    lam: f64,
) -> Matrix {
    token_level_rewards
        .iter()
        .zip(values)
        .zip(mask)
        .map(|((r, v), m)| {
            let mut adv = vec![0.0; r.len()];
            let (mut next_value, mut last) = (0.0, 0.0);
            for t in (0..r.len()).rev() {
                let delta = r[t] + gamma * next_value - v[t];
                let cand = delta + gamma * lam * last;
                next_value = v[t] * m[t] + (1.0 - m[t]) * next_value;
                last = cand * m[t] + (1.0 - m[t]) * last;
                adv[t] = last;
            }
            adv
        })
        .collect()
}

/// The value targets: raw advantages plus values.
pub fn returns_of(raw: &Matrix, values: &Matrix) -> Matrix {
    raw.iter()
        .zip(values)
        .map(|(a, v)| a.iter().zip(v).map(|(x, y)| x + y).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monte_carlo_returns_at_gamma_lambda_one() {
        let r = vec![vec![0.0, 0.0, 1.0], vec![0.0, 2.0, 0.0]];
        let v = vec![vec![0.5, 0.5, 0.5], vec![0.1, 0.2, 0.3]];
        let m = vec![vec![1.0; 3], vec![1.0, 1.0, 0.0]];
        let out = gae(&r, &v, &m, 1.0, 1.0);
        // With γ = λ = 1 the return is the undiscounted reward-to-go.
        assert!((out.returns[0][0] - 1.0).abs() < 1e-12);
        assert!((out.returns[1][0] - 2.0).abs() < 1e-12);
    }
}
