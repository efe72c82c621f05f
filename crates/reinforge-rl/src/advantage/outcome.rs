//! The one dispatch of the estimator registry ([`Estimator`], verl's `algorithm.adv_estimator`
//! names): [`estimate`], which the trainer and the oracle tests both call.
//!
//! [`estimate`] takes verl's inputs (`B x T` token-level rewards, response mask, group index and
//! the extra inputs some estimators need) and returns verl's `(advantages, returns)`.
//! [`outcome_advantages`] is the trainer's adapter for outcome rewards (one score per completion,
//! completions of different lengths); [`crate::advantage::ragged`] holds the critic's (GAE).

use crate::advantage::{
    gae, gpg, grpo, opo, optimal_baseline, reinforce_pp, remax, rloo, trl, AdvantageConfig,
    AdvantageOutput,
};
use crate::groups::Groups;
use crate::masked::{hadamard, Matrix};

pub use crate::advantage::estimator::{Estimator, ExtraInput, UnknownEstimator};

/// What an estimator reads, with verl's names; matrices are `B x T` with a 0/1 response mask.
/// Build with [`EstimatorInputs::new`] and set the extras an estimator needs.
#[derive(Debug, Clone, Copy)]
pub struct EstimatorInputs<'a> {
    pub token_level_rewards: &'a Matrix,
    pub response_mask: &'a Matrix,
    /// Group id of each row (verl `index`); rows of a group need not be contiguous.
    pub index: &'a [i64],
    pub values: Option<&'a Matrix>,
    pub reward_baselines: Option<&'a [f64]>,
    pub old_log_probs: Option<&'a Matrix>,
    pub sum_pi_squared: Option<&'a Matrix>,
}

impl<'a> EstimatorInputs<'a> {
    /// Rewards, mask and group index, no extras.
    pub fn new(
        token_level_rewards: &'a Matrix,
        response_mask: &'a Matrix,
        index: &'a [i64],
    ) -> Self {
        Self {
            token_level_rewards,
            response_mask,
            index,
            values: None,
            reward_baselines: None,
            old_log_probs: None,
            sum_pi_squared: None,
        }
    }
}

/// The estimators' settings, verl's defaults in [`Default`].
#[derive(Debug, Clone, PartialEq)]
pub struct EstimatorParams {
    /// GRPO-family normalisation (`norm_adv_by_std_in_grpo`, `epsilon`).
    pub advantage: AdvantageConfig,
    /// Discount (verl `algorithm.gamma`): `reinforce_plus_plus` and `gae`.
    pub gamma: f64,
    /// GAE λ (verl `algorithm.lam`).
    pub lam: f64,
    /// Whiten GAE's advantages over the batch (verl always does; `false` returns the raw ones).
    pub whiten_gae: bool,
    /// GPG's `f_norm`.
    pub f_norm: f64,
    /// Optimal token baseline: zero the baseline of a group's unique longest tail.
    pub handle_zero_tail: bool,
    /// Optimal token baseline: added to the denominator.
    pub otb_epsilon: f64,
}

impl Default for EstimatorParams {
    fn default() -> Self {
        Self {
            advantage: AdvantageConfig::default(),
            gamma: 1.0,
            lam: 1.0,
            whiten_gae: true,
            f_norm: 1.0,
            handle_zero_tail: true,
            otb_epsilon: 1e-8,
        }
    }
}

/// Why an estimator cannot run on the inputs given.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EstimatorError {
    #[error("advantage estimator {estimator} needs `{input}`, which was not given")]
    MissingInput {
        estimator: Estimator,
        input: &'static str,
    },
    #[error("advantage estimator {estimator}: `{input}` has {got} {what}, expected {expected}")]
    Shape {
        estimator: Estimator,
        input: &'static str,
        what: &'static str,
        got: usize,
        expected: usize,
    },
    #[error("advantage estimator {estimator} needs at least 2 responses per group; group {group} has {size}")]
    GroupTooSmall {
        estimator: Estimator,
        group: i64,
        size: usize,
    },
    #[error("advantage estimator {estimator} whitens over the batch and needs at least 2 valid tokens, got {valid}")]
    TooFewTokens { estimator: Estimator, valid: f64 },
}

/// verl's `(advantages, returns)` of `estimator` on `x`: the one dispatch the trainer and the
/// oracle tests call. Errors, never panics, on missing extras, mismatched shapes, a `grpo_passk`
/// group of one, or a whitened batch with fewer than two valid tokens.
pub fn estimate(
    estimator: Estimator,
    x: &EstimatorInputs,
    p: &EstimatorParams,
) -> Result<AdvantageOutput, EstimatorError> {
    check_inputs(estimator, x, p)?;
    let (r, m, idx) = (x.token_level_rewards, x.response_mask, x.index);
    let cfg = &p.advantage;
    // Extras are checked by `check_inputs`; the empty fallbacks are never read.
    let empty = Matrix::new();
    let values = x.values.unwrap_or(&empty);
    Ok(match estimator {
        Estimator::Grpo => grpo::grpo_outcome(r, m, idx, cfg),
        Estimator::DrGrpo => {
            let no_std = AdvantageConfig {
                norm_by_std: false,
                ..cfg.clone()
            };
            grpo::grpo_outcome(r, m, idx, &no_std)
        }
        Estimator::GrpoVectorized => grpo::grpo_vectorized_outcome(r, m, idx, cfg),
        Estimator::GrpoPassk => grpo::grpo_passk_outcome(r, m, idx, cfg),
        Estimator::Gdpo => grpo::gdpo_outcome(std::slice::from_ref(r), &[1.0], m, idx, cfg),
        Estimator::Rloo => rloo::rloo_outcome(r, m, idx),
        Estimator::RlooVectorized => rloo::rloo_vectorized_outcome(r, m, idx),
        Estimator::ReinforcePlusPlus => reinforce_pp::reinforce_pp_outcome(r, m, p.gamma),
        Estimator::ReinforcePlusPlusBaseline => {
            reinforce_pp::reinforce_pp_baseline_outcome(r, m, idx)
        }
        Estimator::Gae if p.whiten_gae => gae::gae(r, values, m, p.gamma, p.lam),
        Estimator::Gae => {
            let raw = gae::gae_raw(r, values, m, p.gamma, p.lam);
            AdvantageOutput {
                returns: gae::returns_of(&raw, values),
                advantages: hadamard(&raw, m),
            }
        }
        Estimator::Opo => opo::opo_outcome(r, m, idx),
        Estimator::Gpg => gpg::gpg_outcome(r, m, idx, p.f_norm),
        Estimator::Remax => remax::remax_outcome(r, x.reward_baselines.unwrap_or(&[]), m),
        Estimator::OptimalTokenBaseline => optimal_baseline::optimal_token_baseline(
            r,
            m,
            idx,
            x.old_log_probs.unwrap_or(&empty),
            x.sum_pi_squared.unwrap_or(&empty),
            p.handle_zero_tail,
            p.otb_epsilon,
        ),
        Estimator::TrlGrpo => trl::trl_grpo_outcome(r, m, idx, cfg),
    })
}

/// The preconditions under which the estimator functions cannot panic.
fn check_inputs(
    e: Estimator,
    x: &EstimatorInputs,
    p: &EstimatorParams,
) -> Result<(), EstimatorError> {
    let rows = x.token_level_rewards.len();
    let width = x.token_level_rewards.first().map_or(0, Vec::len);
    let shape = |input, what, got, expected| EstimatorError::Shape {
        estimator: e,
        input,
        what,
        got,
        expected,
    };
    let matrix = |input: &'static str, m: &Matrix| -> Result<(), EstimatorError> {
        if m.len() != rows {
            return Err(shape(input, "rows", m.len(), rows));
        }
        match m.iter().find(|r| r.len() != width) {
            Some(r) => Err(shape(input, "columns in a row", r.len(), width)),
            None => Ok(()),
        }
    };
    matrix("token_level_rewards", x.token_level_rewards)?;
    matrix("response_mask", x.response_mask)?;
    if x.index.len() != rows {
        return Err(shape("index", "entries", x.index.len(), rows));
    }
    let missing = |input: ExtraInput| EstimatorError::MissingInput {
        estimator: e,
        input: input.name(),
    };
    for &extra in e.extra_inputs() {
        match extra {
            ExtraInput::RewardBaselines => {
                let b = x.reward_baselines.ok_or(missing(extra))?;
                if b.len() != rows {
                    return Err(shape(extra.name(), "entries", b.len(), rows));
                }
            }
            ExtraInput::Values => matrix(extra.name(), x.values.ok_or(missing(extra))?)?,
            ExtraInput::OldLogProbs => {
                matrix(extra.name(), x.old_log_probs.ok_or(missing(extra))?)?
            }
            ExtraInput::SumPiSquared => {
                matrix(extra.name(), x.sum_pi_squared.ok_or(missing(extra))?)?
            }
        }
    }
    let whitens = matches!(
        e,
        Estimator::Gdpo | Estimator::ReinforcePlusPlus | Estimator::ReinforcePlusPlusBaseline
    ) || (e == Estimator::Gae && p.whiten_gae);
    let valid: f64 = x.response_mask.iter().flatten().sum();
    if whitens && valid < 2.0 {
        return Err(EstimatorError::TooFewTokens {
            estimator: e,
            valid,
        });
    }
    if matches!(e, Estimator::GrpoPassk | Estimator::OptimalTokenBaseline) {
        if let Some(rows) = Groups::from_index(x.index).iter().find(|g| g.len() < 2) {
            // The optimal token baseline skips singletons, but its zero-tail rule reads the
            // second-longest response of a group; only pass@k rejects singletons (as verl).
            if e == Estimator::GrpoPassk {
                return Err(EstimatorError::GroupTooSmall {
                    estimator: e,
                    group: x.index[rows[0]],
                    size: rows.len(),
                });
            }
        }
    }
    Ok(())
}

/// Advantages of a batch for the trainer: one per row, and for token-level estimators one per
/// completion token.
#[derive(Debug, Clone, PartialEq)]
pub struct Advantages {
    /// The row's advantage; for token-level estimators its largest |advantage| (zero exactly
    /// when every token's advantage is zero).
    pub per_row: Vec<f64>,
    /// `per_token[i][t]` for the `lens[i]` completion tokens of row `i` (token-level estimators).
    pub per_token: Option<Matrix>,
}

/// Advantages of responses with outcome `scores` and completion lengths `lens`, through
/// [`estimate`]: the score is the reward of the row's last token (as verl's reward managers place
/// it; an empty completion counts as one token so its score still enters its group), `groups`
/// gives verl's `index`. Estimators needing extra inputs (`gae`, `remax`,
/// `optimal_token_baseline`) return [`EstimatorError::MissingInput`].
pub fn outcome_advantages(
    estimator: Estimator,
    scores: &[f64],
    lens: &[usize],
    groups: &Groups,
    cfg: &AdvantageConfig,
) -> Result<Advantages, EstimatorError> {
    if lens.len() != scores.len() {
        return Err(EstimatorError::Shape {
            estimator,
            input: "lens",
            what: "entries",
            got: lens.len(),
            expected: scores.len(),
        });
    }
    let index = index_of(groups, scores.len());
    let (rewards, mask) = last_token_rewards(scores, lens);
    let params = EstimatorParams {
        advantage: cfg.clone(),
        ..EstimatorParams::default()
    };
    let out = estimate(
        estimator,
        &EstimatorInputs::new(&rewards, &mask, &index),
        &params,
    )?;
    if !estimator.is_token_level() {
        return Ok(Advantages {
            per_row: out.advantages.iter().map(|a| a[0]).collect(),
            per_token: None,
        });
    }
    let per_token: Matrix = out
        .advantages
        .into_iter()
        .zip(lens)
        .map(|(mut a, &l)| {
            a.truncate(l);
            a
        })
        .collect();
    Ok(Advantages {
        per_row: per_token
            .iter()
            .map(|r| r.iter().fold(0.0, |m: f64, a| m.max(a.abs())))
            .collect(),
        per_token: Some(per_token),
    })
}

/// verl's `index`: the group id of each row (rows in no group get id -1).
pub fn index_of(groups: &Groups, n: usize) -> Vec<i64> {
    let mut index = vec![-1; n];
    for (g, rows) in groups.iter().enumerate() {
        for &i in rows.iter().filter(|&&i| i < n) {
            index[i] = g as i64;
        }
    }
    index
}

/// Token-level rewards with each score at its row's last completion token, and the mask; a row
/// of length 0 is given one valid token.
fn last_token_rewards(scores: &[f64], lens: &[usize]) -> (Matrix, Matrix) {
    let width = lens.iter().copied().max().unwrap_or(0).max(1);
    let mut rewards = vec![vec![0.0; width]; scores.len()];
    let mut mask = vec![vec![0.0; width]; scores.len()];
    for (i, (&s, &l)) in scores.iter().zip(lens).enumerate() {
        let l = l.max(1);
        mask[i][..l].fill(1.0);
        rewards[i][l - 1] = s;
    }
    (rewards, mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_variance_groups_give_zero_advantage_per_row_estimators() {
        let scores = [1.0, 1.0, 0.0, 1.0];
        let groups = Groups::contiguous(2, 2);
        for e in [Estimator::Grpo, Estimator::DrGrpo, Estimator::Rloo] {
            let a = outcome_advantages(e, &scores, &[3, 1, 2, 2], &groups, &Default::default())
                .unwrap();
            assert_eq!(&a.per_row[..2], &[0.0, 0.0], "{e:?}");
            assert!(a.per_row[2] < 0.0 && a.per_row[3] > 0.0, "{e:?}");
        }
        // The trainer's `reward/zero_std_frac` counts exactly these groups.
        let stats = crate::GroupStats::of(&scores, &groups);
        assert_eq!(stats.zero_variance_frac, 0.5);
    }

    #[test]
    fn outcome_path_equals_the_per_row_grpo_formula() {
        let scores = [0.3, 1.0, 0.0, 0.7, 0.2, 0.2];
        let groups = Groups::contiguous(2, 3);
        let cfg = AdvantageConfig::default();
        let a = outcome_advantages(Estimator::Grpo, &scores, &[4, 1, 0, 2, 5, 3], &groups, &cfg)
            .unwrap();
        assert_eq!(a.per_row, crate::grpo_advantages(&scores, &groups, &cfg));
        assert!(a.per_token.is_none());
    }

    #[test]
    fn rloo_is_score_minus_mean_of_others() {
        let a = outcome_advantages(
            Estimator::Rloo,
            &[1.0, 0.0, 0.0],
            &[1, 1, 1],
            &Groups::contiguous(1, 3),
            &Default::default(),
        )
        .unwrap();
        assert_eq!(a.per_row, vec![1.0, -0.5, -0.5]);
    }

    #[test]
    fn reinforce_pp_whitens_over_tokens_and_handles_single_tokens() {
        let lens = [1, 3, 1, 2];
        let a = outcome_advantages(
            Estimator::ReinforcePlusPlus,
            &[1.0, 0.0, 1.0, 1.0],
            &lens,
            &Groups::contiguous(2, 2),
            &Default::default(),
        )
        .unwrap();
        let t = a.per_token.unwrap();
        assert_eq!(t.iter().map(Vec::len).collect::<Vec<_>>(), lens.to_vec());
        let flat: Vec<f64> = t.iter().flatten().copied().collect();
        let mean = flat.iter().sum::<f64>() / flat.len() as f64;
        // verl's 1e-8 in `masked_mean` keeps the mean from being exactly 0.
        assert!(mean.abs() < 1e-6, "whitened: mean 0, got {mean}");
        assert!(t[0][0] > 0.0 && t[1].iter().all(|&x| x < 0.0));
    }

    #[test]
    fn every_outcome_estimator_gives_finite_advantages_and_extras_are_named() {
        let scores = [1.0, 0.0, 0.0, 1.0, 0.5, 0.5];
        let lens = [3, 1, 2, 4, 2, 2];
        let groups = Groups::contiguous(3, 2);
        for e in Estimator::ALL {
            let got = outcome_advantages(e, &scores, &lens, &groups, &Default::default());
            match e.extra_inputs().first() {
                None => {
                    let a = got.unwrap_or_else(|err| panic!("{e}: {err}"));
                    assert!(a.per_row.iter().all(|x| x.is_finite()), "{e}");
                    assert!(a.per_row.iter().any(|&x| x != 0.0), "{e}: some signal");
                }
                Some(input) => {
                    let err = got.unwrap_err().to_string();
                    assert!(
                        err.contains(input.name()) && err.contains(e.name()),
                        "{err}"
                    );
                }
            }
        }
    }

    #[test]
    fn bad_inputs_are_errors_not_panics() {
        let g = Groups::contiguous(2, 1);
        let one = outcome_advantages(
            Estimator::GrpoPassk,
            &[1.0, 0.0],
            &[1, 1],
            &g,
            &Default::default(),
        );
        assert!(matches!(
            one,
            Err(EstimatorError::GroupTooSmall { size: 1, .. })
        ));
        let tiny = outcome_advantages(
            Estimator::ReinforcePlusPlus,
            &[1.0],
            &[1],
            &Groups::contiguous(1, 1),
            &Default::default(),
        );
        assert!(matches!(tiny, Err(EstimatorError::TooFewTokens { .. })));
        let r = vec![vec![0.0, 1.0]];
        let m = vec![vec![1.0]];
        let err = estimate(
            Estimator::Grpo,
            &EstimatorInputs::new(&r, &m, &[0]),
            &Default::default(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("response_mask"), "{err}");
        let lens_err =
            outcome_advantages(Estimator::Grpo, &[1.0], &[1, 2], &g, &Default::default());
        assert!(lens_err.unwrap_err().to_string().contains("lens"));
    }
}
