//! verl `agg_loss` (core_algos.py @ 1dda039): how a `B x T` loss matrix becomes one scalar, and
//! the normalisation that makes micro-batch losses add up to the global-batch loss.

use tch::Tensor;

use crate::train::loss::names::named_enum;

named_enum! {
    /// verl `loss_agg_mode`: how a `B x T` loss matrix becomes one scalar.
    pub enum AggMode ("loss_agg_mode") {
        /// `Σ ℓ·m / N_tokens · dp` (N_tokens local unless `batch_num_tokens` is given).
        TokenMean = "token-mean",
        /// Mean over sequences of per-sequence token means (`len + 1e-8`), rows with no token
        /// excluded.
        SeqMeanTokenMean = "seq-mean-token-mean",
        /// Mean over sequences of per-sequence token sums.
        SeqMeanTokenSum = "seq-mean-token-sum",
        /// Dr.GRPO: `Σ_i Σ_t ℓ·m / G / S` with a constant `S` (`loss_scale_factor`, else the
        /// padded T).
        SeqMeanTokenSumNorm = "seq-mean-token-sum-norm",
        /// `Σ ℓ·m · dp`.
        TokenSum = "token-sum",
    }
}

/// verl's `global_batch_info`: the constants that make a micro-batch loss a share of the global
/// loss. `None` means "this micro-batch's own value" (only allowed with `dp_size == 1`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GlobalBatchInfo {
    /// Data-parallel world size; every mode multiplies by it (DDP averages gradients).
    pub dp_size: usize,
    /// Valid tokens of the global batch (token-mean).
    pub batch_num_tokens: Option<f64>,
    /// Sequences of the global batch (seq-mean modes).
    pub global_batch_size: Option<f64>,
    /// The constant `S` of seq-mean-token-sum-norm.
    pub loss_scale_factor: Option<f64>,
}

impl Default for GlobalBatchInfo {
    fn default() -> Self {
        Self {
            dp_size: 1,
            batch_num_tokens: None,
            global_batch_size: None,
            loss_scale_factor: None,
        }
    }
}

/// The constants [`agg_loss`] divides by, for logging and documentation.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct AggNormalisation {
    pub batch_num_tokens_used: Option<f64>,
    pub global_batch_size_used: Option<f64>,
    pub loss_scale_factor_used: Option<f64>,
}

/// verl `verl_F.masked_mean` over the whole tensor: `Σ x·m / (Σ m + 1e-8)`, as a tensor.
pub fn verl_masked_mean(x: &Tensor, mask: &Tensor) -> Tensor {
    (x * mask).sum(x.kind()) / (mask.sum(x.kind()) + 1e-8)
}

fn check_dp(info: &GlobalBatchInfo, given: bool, what: &str) {
    assert!(
        given || info.dp_size <= 1,
        "(global) {what} is required when dp_size > 1"
    );
}

/// The normalisation constants verl uses for `mode` on this micro-batch.
pub fn agg_normalisation(mask: &Tensor, mode: AggMode, info: &GlobalBatchInfo) -> AggNormalisation {
    let rows_with_tokens = || {
        mask.sum_dim_intlist(-1i64, false, mask.kind())
            .gt(0.0)
            .sum(mask.kind())
            .double_value(&[])
    };
    let mut out = AggNormalisation::default();
    match mode {
        AggMode::TokenMean => {
            out.batch_num_tokens_used = Some(
                info.batch_num_tokens
                    .unwrap_or_else(|| mask.sum(mask.kind()).double_value(&[])),
            )
        }
        AggMode::TokenSum => {}
        AggMode::SeqMeanTokenMean | AggMode::SeqMeanTokenSum | AggMode::SeqMeanTokenSumNorm => {
            out.global_batch_size_used =
                Some(info.global_batch_size.unwrap_or_else(rows_with_tokens));
            if mode == AggMode::SeqMeanTokenSumNorm {
                out.loss_scale_factor_used = Some(
                    info.loss_scale_factor
                        .unwrap_or(*mask.size().last().expect("2-D mask") as f64),
                );
            }
        }
    }
    out
}

/// verl `agg_loss`: aggregates `loss_mat` (`B x T`) over the valid tokens of `mask` by `mode`
/// (see [`AggMode`]), with the global-batch constants of `info`. Differentiable in `loss_mat`.
///
/// # Panics
/// When `dp_size > 1` and the global constant the mode needs is missing (verl raises).
pub fn agg_loss(loss_mat: &Tensor, mask: &Tensor, mode: AggMode, info: &GlobalBatchInfo) -> Tensor {
    let kind = loss_mat.kind();
    let dp = info.dp_size as f64;
    match mode {
        AggMode::TokenMean => {
            check_dp(info, info.batch_num_tokens.is_some(), "batch_num_tokens");
            let n = match info.batch_num_tokens {
                Some(n) => Tensor::from(n).to_kind(kind).to_device(mask.device()),
                None => mask.sum(kind),
            };
            (loss_mat * mask).sum(kind) / n * dp
        }
        AggMode::TokenSum => (loss_mat * mask).sum(kind) * dp,
        AggMode::SeqMeanTokenMean | AggMode::SeqMeanTokenSum | AggMode::SeqMeanTokenSumNorm => {
            check_dp(info, info.global_batch_size.is_some(), "global_batch_size");
            let lens = mask.sum_dim_intlist(-1i64, false, kind);
            let mut seq = (loss_mat * mask).sum_dim_intlist(-1i64, false, kind);
            if mode == AggMode::SeqMeanTokenMean {
                seq = seq / (&lens + 1e-8);
            }
            let seq_mask = lens.gt(0.0).to_kind(kind);
            let g = match info.global_batch_size {
                Some(g) => Tensor::from(g).to_kind(kind).to_device(mask.device()),
                None => seq_mask.sum(kind),
            };
            let loss = (seq * seq_mask).sum(kind) / g * dp;
            if mode == AggMode::SeqMeanTokenSumNorm {
                let s = info
                    .loss_scale_factor
                    .unwrap_or(*mask.size().last().expect("2-D mask") as f64);
                loss / s
            } else {
                loss
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(rows: &[&[f64]]) -> Tensor {
        let flat: Vec<f64> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        Tensor::from_slice(&flat).view([rows.len() as i64, -1])
    }

    #[test]
    fn five_modes_by_hand() {
        let l = t(&[&[1.0, 2.0, 50.0], &[3.0, 60.0, 70.0], &[80.0, 90.0, 99.0]]);
        let m = t(&[&[1.0, 1.0, 0.0], &[1.0, 0.0, 0.0], &[0.0, 0.0, 0.0]]);
        let info = GlobalBatchInfo::default();
        let v = |mode| agg_loss(&l, &m, mode, &info).double_value(&[]);
        assert!((v(AggMode::TokenMean) - 2.0).abs() < 1e-12);
        assert!((v(AggMode::TokenSum) - 6.0).abs() < 1e-12);
        // Two rows with tokens: sums 3 and 3, means 1.5 and 3; the empty row is excluded.
        assert!((v(AggMode::SeqMeanTokenSum) - 3.0).abs() < 1e-12);
        assert!((v(AggMode::SeqMeanTokenMean) - 2.25).abs() < 1e-7);
        assert!(
            (v(AggMode::SeqMeanTokenSumNorm) - 1.0).abs() < 1e-12,
            "divided by T = 3"
        );
        let global = GlobalBatchInfo {
            dp_size: 2,
            batch_num_tokens: Some(12.0),
            global_batch_size: Some(6.0),
            loss_scale_factor: Some(4.0),
        };
        let g = |mode| agg_loss(&l, &m, mode, &global).double_value(&[]);
        assert!((g(AggMode::TokenMean) - 1.0).abs() < 1e-12);
        assert!((g(AggMode::SeqMeanTokenSumNorm) - 0.5).abs() < 1e-12);
    }
}
