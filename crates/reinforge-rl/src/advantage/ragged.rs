//! The trainer's layout, rows of different lengths (one per completion, one entry per
//! completion token), adapted to verl's padded `B x T` matrices with a 0/1 mask, so the critic's
//! GAE goes through the registry's [`estimate`] like every other estimator.

use crate::advantage::outcome::{
    estimate, Estimator, EstimatorError, EstimatorInputs, EstimatorParams,
};
use crate::advantage::AdvantageOutput;
use crate::masked::Matrix;

/// Pads `rows` with zeros to the longest row; returns the matrix and its mask (1 on entries of
/// the original rows).
pub fn pad(rows: &Matrix) -> (Matrix, Matrix) {
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    let padded = rows
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.resize(width, 0.0);
            r
        })
        .collect();
    let mask = rows
        .iter()
        .map(|r| {
            (0..width)
                .map(|t| if t < r.len() { 1.0 } else { 0.0 })
                .collect()
        })
        .collect();
    (padded, mask)
}

/// Cuts each row of `m` back to the length of the matching row of `like`.
pub fn unpad(m: Matrix, like: &Matrix) -> Matrix {
    m.into_iter()
        .zip(like)
        .map(|(mut row, r)| {
            row.truncate(r.len());
            row
        })
        .collect()
}

/// Token-level rewards: each outcome score on its row's last completion token (as verl's reward
/// managers place it), minus `kl_coef · kl` at every token when KL is in the reward (verl
/// `apply_kl_penalty`: `token_level_scores - β·kld`). `kl` rows are as long as the completions.
pub fn token_rewards(scores: &[f64], lens: &[usize], kl: Option<(&Matrix, f64)>) -> Matrix {
    scores
        .iter()
        .zip(lens)
        .enumerate()
        .map(|(i, (&s, &len))| {
            let mut row = vec![0.0; len];
            if let Some(last) = row.last_mut() {
                *last = s;
            }
            if let Some((kl, coef)) = kl {
                for (r, k) in row.iter_mut().zip(kl.get(i).into_iter().flatten()) {
                    *r -= coef * k;
                }
            }
            row
        })
        .collect()
}

/// GAE over rows of different lengths through [`estimate`] (`gae`, verl
/// `compute_gae_advantage_return`): rows are padded to the longest with mask 0, which GAE
/// carries through and whitening ignores, and cut back. Uses `params.gamma`, `params.lam` and
/// `params.whiten_gae` (without whitening the advantages are the raw ones, `returns - values`).
/// Advantages and returns have the rows' lengths.
pub fn gae_targets(
    rewards: &Matrix,
    values: &Matrix,
    params: &EstimatorParams,
) -> Result<AdvantageOutput, EstimatorError> {
    if let Some((i, v)) = values
        .iter()
        .enumerate()
        .find(|(i, v)| rewards.get(*i).map(Vec::len) != Some(v.len()))
    {
        return Err(EstimatorError::Shape {
            estimator: Estimator::Gae,
            input: "values",
            what: "entries in a row",
            got: v.len(),
            expected: rewards.get(i).map_or(0, Vec::len),
        });
    }
    let (r, mask) = pad(rewards);
    let (v, _) = pad(values);
    let index: Vec<i64> = (0..rewards.len() as i64).collect();
    let inputs = EstimatorInputs {
        values: Some(&v),
        ..EstimatorInputs::new(&r, &mask, &index)
    };
    let out = estimate(Estimator::Gae, &inputs, params)?;
    Ok(AdvantageOutput {
        advantages: unpad(out.advantages, rewards),
        returns: unpad(out.returns, rewards),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advantage::gae::gae;
    use proptest::prelude::*;

    fn params(gamma: f64, lam: f64, whiten: bool) -> EstimatorParams {
        EstimatorParams {
            gamma,
            lam,
            whiten_gae: whiten,
            ..Default::default()
        }
    }

    #[test]
    fn rewards_sit_on_the_last_token_minus_the_kl_penalty() {
        let r = token_rewards(&[1.0, 0.0], &[3, 1], None);
        assert_eq!(r, vec![vec![0.0, 0.0, 1.0], vec![0.0]]);
        let kl = vec![vec![0.5, -0.5, 1.0], vec![2.0]];
        let r = token_rewards(&[1.0, 0.0], &[3, 1], Some((&kl, 0.1)));
        assert_eq!(r, vec![vec![-0.05, 0.05, 0.9], vec![-0.2]]);
    }

    #[test]
    fn gae_over_ragged_rows_matches_monte_carlo_at_gamma_lambda_one() {
        let rewards = vec![vec![0.0, 0.0, 1.0], vec![0.0, 2.0]];
        let values = vec![vec![0.5, 0.25, 0.75], vec![1.0, 1.5]];
        let raw = gae_targets(&rewards, &values, &params(1.0, 1.0, false)).unwrap();
        // γ = λ = 1: the return of every token is the reward-to-go, the advantage R - V.
        assert_eq!(raw.returns, vec![vec![1.0, 1.0, 1.0], vec![2.0, 2.0]]);
        assert_eq!(raw.advantages, vec![vec![0.5, 0.75, 0.25], vec![1.0, 0.5]]);
        let w = gae_targets(&rewards, &values, &params(1.0, 1.0, true)).unwrap();
        assert_eq!(w.returns, raw.returns, "whitening leaves the returns alone");
        let flat: Vec<f64> = w.advantages.iter().flatten().copied().collect();
        let mean = flat.iter().sum::<f64>() / 5.0;
        let var = flat.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / 4.0;
        // Mean 0 and variance 1 over the five real tokens: the padding stayed out.
        assert!(
            mean.abs() < 1e-6 && (var - 1.0).abs() < 1e-6,
            "{mean} {var}"
        );
    }

    #[test]
    fn lambda_below_one_bootstraps_from_the_next_value() {
        // One row, reward only at the end: A_0 = δ_0 + γλ δ_1 with δ_0 = V_1 - V_0.
        let t = gae_targets(
            &vec![vec![0.0, 1.0]],
            &vec![vec![0.2, 0.6]],
            &params(1.0, 0.5, false),
        )
        .unwrap();
        let (d1, d0) = (1.0 - 0.6, 0.6 - 0.2);
        assert!((t.advantages[0][1] - d1).abs() < 1e-12);
        assert!((t.advantages[0][0] - (d0 + 0.5 * d1)).abs() < 1e-12);
    }

    #[test]
    fn mismatched_values_and_one_token_batches_are_errors() {
        let e = gae_targets(
            &vec![vec![0.0, 1.0]],
            &vec![vec![0.2]],
            &params(1.0, 1.0, true),
        );
        assert!(e.unwrap_err().to_string().contains("values"));
        let one = gae_targets(&vec![vec![1.0]], &vec![vec![0.2]], &params(1.0, 1.0, true));
        assert!(matches!(one, Err(EstimatorError::TooFewTokens { .. })));
        let raw = gae_targets(
            &vec![vec![1.0]],
            &vec![vec![0.25]],
            &params(1.0, 1.0, false),
        );
        assert_eq!(
            raw.unwrap().advantages,
            vec![vec![0.75]],
            "no whitening, no minimum"
        );
    }

    fn rows(b: usize, t: usize) -> impl Strategy<Value = Matrix> {
        proptest::collection::vec(proptest::collection::vec(-2.0f64..2.0, t), b)
    }

    proptest! {
        #[test]
        fn ragged_gae_on_equal_rows_is_the_batch_gae(
            (r, v) in (1usize..5, 1usize..6).prop_flat_map(|(b, t)| (rows(b, t), rows(b, t))),
            gamma in 0.5f64..=1.0,
            lam in 0.0f64..=1.0,
        ) {
            let mask: Matrix = r.iter().map(|row| vec![1.0; row.len()]).collect();
            prop_assume!(mask.iter().flatten().sum::<f64>() >= 2.0);
            let batch = gae(&r, &v, &mask, gamma, lam);
            let ragged = gae_targets(&r, &v, &params(gamma, lam, true)).unwrap();
            prop_assert_eq!(ragged.advantages, batch.advantages);
            prop_assert_eq!(ragged.returns, batch.returns);
        }

        #[test]
        fn padding_does_not_change_a_row(
            lens in proptest::collection::vec(1usize..6, 2..5),
            gamma in 0.5f64..=1.0,
            lam in 0.0f64..=1.0,
        ) {
            // Each row alone (unwhitened) equals the same row inside a padded batch.
            let r: Matrix = lens.iter().map(|&l| (0..l).map(|t| t as f64 * 0.1).collect()).collect();
            let v: Matrix = lens.iter().map(|&l| (0..l).map(|t| 0.5 - t as f64 * 0.05).collect()).collect();
            let batch = gae_targets(&r, &v, &params(gamma, lam, false)).unwrap();
            for i in 0..r.len() {
                let alone = gae_targets(&vec![r[i].clone()], &vec![v[i].clone()], &params(gamma, lam, false)).unwrap();
                prop_assert_eq!(&alone.advantages[0], &batch.advantages[i]);
            }
        }
    }
}
