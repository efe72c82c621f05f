//! The `rank` leaderboard with arena-rank's fit and sandwich intervals (`--ci sandwich`): the
//! usual table's battle counts and online Elo columns, with the ratings, intervals and ranks of
//! [`crate::sandwich`]'s Bradley-Terry fit (plain, style-controlled, or with Search Arena's
//! covariates), and the coefficient table of the contextual fit.

use anyhow::{bail, Result};

use crate::bootstrap::interval_ranks;
use crate::io::Battles;
use crate::leaderboard::{rank, Leaderboard, Method, RankConfig};
use crate::sandwich::{
    arena_style_features, coefficient_table, sandwich_bt, sandwich_contextual, ArenaOptions,
};
use crate::style::STYLE_NAMES;

/// The sandwich fit's settings beyond the [`RankConfig`] (arena-rank's option names).
#[derive(Debug, Clone, Default)]
pub struct SandwichConfig {
    /// Ridge added to the Hessian before inverting it.
    pub hessian_reg: f64,
    /// Reweighted fit (arena-rank's `reweighted`); default: on for a contextual fit.
    pub reweighted: Option<bool>,
    /// L2 penalty on the contextual coefficients.
    pub reg: f64,
    /// Names of the covariate columns, in the order of the feature rows.
    pub covariate_names: Vec<String>,
}

/// The leaderboard with arena-rank's fit and sandwich intervals in place of the bootstrap's
/// (the battle counts and online Elo columns from the usual table).
pub fn sandwich_leaderboard(
    b: &Battles,
    cfg: &RankConfig,
    s: &SandwichConfig,
    covariates: Option<&[Vec<f64>]>,
) -> Result<Leaderboard> {
    if cfg.method != Method::Bt {
        bail!(
            "--ci sandwich needs --method bt (arena-rank's model), got {:?}",
            cfg.method
        );
    }
    if cfg.anchor.is_some() || cfg.fit.prior > 0.0 {
        bail!("--ci sandwich fits arena-rank's model: --anchor and --prior do not apply");
    }
    let contextual = cfg.style_control || covariates.is_some();
    let mut coefficients = None;
    let mut unpenalised_failed = false;
    let opts = ArenaOptions {
        scale: cfg.scale,
        hessian_reg: s.hessian_reg,
        significance: 1.0 - cfg.level,
        reweighted: s.reweighted.unwrap_or(contextual),
        reg: s.reg,
        ..ArenaOptions::default()
    };
    let mut names: Vec<String> = vec![];
    let board = if contextual {
        let mut features = vec![vec![]; b.len()];
        if cfg.style_control {
            names.extend(STYLE_NAMES.iter().map(|s| s.to_string()));
            for (row, f) in features.iter_mut().zip(arena_style_features(b)?) {
                row.extend(f);
            }
        }
        if let Some(cov) = covariates {
            names.extend(s.covariate_names.iter().cloned());
            for (row, f) in features.iter_mut().zip(cov) {
                row.extend(f);
            }
        }
        let board = sandwich_contextual(b, &features, &opts)?;
        let mut table = coefficient_table(&board, &names, &opts)?;
        if opts.reg > 0.0 {
            // The unpenalised fit next to the penalised one shows how much the penalty moved each
            // coefficient (docs/arena.md).
            let free = sandwich_contextual(b, &features, &ArenaOptions { reg: 0.0, ..opts })?;
            if free.converged {
                for (row, (c, sd)) in table
                    .iter_mut()
                    .zip(free.coefficients.iter().zip(&free.feature_scales))
                {
                    row.unpenalised_per_unit = Some(c / sd);
                }
            } else {
                unpenalised_failed = true;
            }
        }
        coefficients = Some(table);
        board
    } else {
        sandwich_bt(b, &opts)?
    };
    let mut lb = rank(
        b,
        &RankConfig {
            rounds: 0,
            style_control: false,
            ..cfg.clone()
        },
    )?;
    let ranks = interval_ranks(&board.lower, &board.upper);
    for row in &mut lb.rows {
        let i = board
            .models
            .iter()
            .position(|m| *m == row.model)
            .ok_or_else(|| anyhow::anyhow!("model {} missing from the sandwich fit", row.model))?;
        row.rating = board.ratings[i];
        row.lower = board.lower[i];
        row.upper = board.upper[i];
        row.variance = board.variances[i];
        row.rank = ranks[i];
    }
    lb.rows.sort_by(|a, b| b.rating.total_cmp(&a.rating));
    lb.theta = None;
    lb.style_coefficients = cfg.style_control.then(|| {
        STYLE_NAMES
            .iter()
            .map(|s| s.to_string())
            .zip(board.coefficients.iter().copied())
            .collect()
    });
    lb.coefficients = coefficients;
    if unpenalised_failed {
        lb.warnings.push(
            "the unpenalised (reg = 0) refit did not converge, so its column is empty: a feature may separate the outcomes".into(),
        );
    }
    if !board.converged {
        lb.warnings.push(format!(
            "the arena-rank fit did not converge in {} iterations",
            board.iterations
        ));
    }
    Ok(lb)
}
