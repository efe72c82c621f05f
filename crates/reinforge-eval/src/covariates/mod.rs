//! Per-battle covariates for the contextual Bradley-Terry model (Search Arena's analysis: citations,
//! source kinds, length, formatting): which JSON fields hold each side's number, how the pair becomes
//! one feature, and the coefficients' table.
//!
//! A covariate is named `NAME=FIELD_A,FIELD_B`; each field is a dotted path into the battle's JSON
//! object (`conv_metadata.cites_a`). A field's value is a number, or an array or object of numbers
//! that is summed: a multi-turn battle is one battle whose per-turn counts add up (FastChat sums its
//! style elements' objects the same way). The pair `(a, b)` becomes one feature by a [`Transform`],
//! by default arena-rank's example reading of FastChat's style features, `(a - b) / (a + b)`.
//! [`read`] reads battles with their covariates; [`sim`] generates battles with known effects.

pub mod read;
pub mod sim;

use anyhow::{bail, Result};
use serde::Serialize;

/// How a covariate's two sides become one feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transform {
    /// `(a - b) / (a + b)`, a zero sum replaced by 1 (lmarena's arena-rank example; the default).
    DiffOverSum,
    /// `(a - b) / (a + b + 1)` (FastChat `preprocess_for_style` with `add_one=True`).
    DiffOverSumPlusOne,
    /// `a - b`.
    Diff,
    /// `ln(1 + a) - ln(1 + b)` (values must be > -1).
    LogRatio,
}

impl Transform {
    /// Every variant, in declaration order (front ends list them by their serde names).
    pub const ALL: [Self; 4] = [
        Self::DiffOverSum,
        Self::DiffOverSumPlusOne,
        Self::Diff,
        Self::LogRatio,
    ];

    /// The feature of one battle, or an error saying why it is undefined.
    pub fn apply(self, a: f64, b: f64) -> Result<f64> {
        let v = match self {
            Transform::DiffOverSum => {
                let s = a + b;
                (a - b) / if s == 0.0 { 1.0 } else { s }
            }
            Transform::DiffOverSumPlusOne => {
                let s = a + b + 1.0;
                if s == 0.0 {
                    bail!("a + b + 1 = 0 (a = {a}, b = {b})");
                }
                (a - b) / s
            }
            Transform::Diff => a - b,
            Transform::LogRatio => {
                if a <= -1.0 || b <= -1.0 {
                    bail!("log-ratio needs values > -1 (a = {a}, b = {b})");
                }
                a.ln_1p() - b.ln_1p()
            }
        };
        if !v.is_finite() {
            bail!("the feature is not finite (a = {a}, b = {b})");
        }
        Ok(v)
    }
}

/// One covariate: its name, the dotted paths of model A's and model B's value, its transform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CovariateSpec {
    /// Name used in the report.
    pub name: String,
    /// Dotted path of model A's value.
    pub field_a: String,
    /// Dotted path of model B's value.
    pub field_b: String,
    /// Pair -> feature.
    pub transform: Transform,
}

impl CovariateSpec {
    /// Parses `NAME=FIELD_A,FIELD_B` (default transform).
    pub fn parse(s: &str) -> Result<Self> {
        let Some((name, fields)) = s.split_once('=') else {
            bail!("expected NAME=FIELD_A,FIELD_B, got {s:?}");
        };
        let parts: Vec<&str> = fields.split(',').map(str::trim).collect();
        let name = name.trim();
        let valid_path = |p: &str| !p.is_empty() && p.split('.').all(|k| !k.is_empty());
        if name.is_empty() || parts.len() != 2 || !parts.iter().all(|p| valid_path(p)) {
            bail!("expected NAME=FIELD_A,FIELD_B (dotted paths, e.g. cites=conv_metadata.cites_a,conv_metadata.cites_b), got {s:?}");
        }
        Ok(CovariateSpec {
            name: name.to_string(),
            field_a: parts[0].to_string(),
            field_b: parts[1].to_string(),
            transform: Transform::DiffOverSum,
        })
    }
}

/// Checks that covariate names are distinct (the report is keyed by them).
pub fn check_names(specs: &[CovariateSpec]) -> Result<()> {
    for (i, s) in specs.iter().enumerate() {
        if specs[..i].iter().any(|t| t.name == s.name) {
            bail!("covariate {:?} is given twice", s.name);
        }
    }
    Ok(())
}

/// `specs` with the transforms `--covariate-transform` names: `(None, t)` applies `t` to all,
/// then `(Some(name), t)` to the one named (an unknown name is an error). The names are checked
/// first ([`check_names`]).
pub fn with_transforms(
    specs: &[CovariateSpec],
    transforms: &[(Option<String>, Transform)],
) -> Result<Vec<CovariateSpec>> {
    let mut specs = specs.to_vec();
    check_names(&specs)?;
    for (_, t) in transforms.iter().filter(|(n, _)| n.is_none()) {
        specs.iter_mut().for_each(|s| s.transform = *t);
    }
    for (name, t) in transforms {
        if let Some(n) = name {
            let s = specs.iter_mut().find(|s| s.name == *n).ok_or_else(|| {
                anyhow::anyhow!("--covariate-transform names {n:?}, which is no --covariate")
            })?;
            s.transform = *t;
        }
    }
    Ok(specs)
}

/// Features per battle (one row per battle, one column per covariate) from the raw `(a, b)` values
/// that [`read`] returns; `lines` names each battle's `source:line` for errors.
pub fn features(
    specs: &[CovariateSpec],
    raw: &[Vec<(f64, f64)>],
    lines: &[String],
) -> Result<Vec<Vec<f64>>> {
    raw.iter()
        .enumerate()
        .map(|(i, row)| {
            specs
                .iter()
                .zip(row)
                .map(|(s, &(a, b))| {
                    s.transform.apply(a, b).map_err(|e| {
                        let at = lines.get(i).map_or("?", String::as_str);
                        anyhow::anyhow!(
                            "{at}: covariate {:?} ({} / {}): {e}",
                            s.name,
                            s.field_a,
                            s.field_b
                        )
                    })
                })
                .collect()
        })
        .collect()
}

/// Errors when a covariate's feature takes one value over all battles: its coefficient is not
/// identified (the unpenalised fit would not converge).
pub fn check_varies(specs: &[CovariateSpec], features: &[Vec<f64>]) -> Result<()> {
    for (c, s) in specs.iter().enumerate() {
        let mut col = features.iter().map(|r| r[c]);
        if let Some(first) = col.next() {
            if col.all(|x| x == first) {
                bail!(
                    "covariate {:?} ({} / {}) gives the same feature {first} in every battle; its effect cannot be estimated",
                    s.name,
                    s.field_a,
                    s.field_b
                );
            }
        }
    }
    Ok(())
}

/// One fitted coefficient with its sandwich interval, on the standardised scale (arena-rank's
/// `coeffs`: logit change per standard deviation of the feature) and per unit of the feature.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Coefficient {
    /// Covariate (or style element) name.
    pub name: String,
    /// Logit change per standard deviation of the feature (arena-rank's reported coefficient).
    pub per_sd: f64,
    /// Its interval.
    pub per_sd_lower: f64,
    /// Its interval.
    pub per_sd_upper: f64,
    /// Logit change per unit of the feature (`per_sd / sd`): comparable with a known effect.
    pub per_unit: f64,
    /// Its interval.
    pub lower: f64,
    /// Its interval.
    pub upper: f64,
    /// Standard error per unit of the feature.
    pub std_error: f64,
    /// The feature's standard deviation over the battles (1 when features are not standardised).
    pub feature_sd: f64,
    /// The same coefficient per unit from the unpenalised fit (`reg = 0`), when it was also run: a
    /// large gap means the penalty, not the battles, set the coefficient.
    pub unpenalised_per_unit: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transforms_follow_their_formulas() {
        let t = |t: Transform, a, b| t.apply(a, b).unwrap();
        assert_eq!(t(Transform::DiffOverSum, 3.0, 1.0), 0.5);
        assert_eq!(t(Transform::DiffOverSum, 0.0, 0.0), 0.0);
        assert_eq!(t(Transform::DiffOverSumPlusOne, 3.0, 1.0), 0.4);
        assert_eq!(t(Transform::Diff, 3.0, 1.0), 2.0);
        assert!((t(Transform::LogRatio, 3.0, 1.0) - 2f64.ln()).abs() < 1e-15);
        assert!(Transform::LogRatio.apply(-1.0, 0.0).is_err());
        assert!(Transform::DiffOverSumPlusOne.apply(-1.0, 0.0).is_err());
    }

    #[test]
    fn spec_parses_dotted_paths_and_rejects_malformed() {
        let s = CovariateSpec::parse("cites=conv_metadata.cites_a, conv_metadata.cites_b").unwrap();
        assert_eq!(
            (s.name.as_str(), s.field_a.as_str(), s.field_b.as_str()),
            ("cites", "conv_metadata.cites_a", "conv_metadata.cites_b")
        );
        for bad in ["cites", "=a,b", "c=a", "c=a,b,c", "c=a..x,b", "c=a,"] {
            assert!(CovariateSpec::parse(bad).is_err(), "{bad}");
        }
        let twice = [s.clone(), s];
        assert!(check_names(&twice)
            .unwrap_err()
            .to_string()
            .contains("twice"));
    }
}
