//! What the policy's and the critic's mini-batch updates share.

use crate::train::loss::agg::GlobalBatchInfo;

/// verl's `global_batch_info` of one mini-batch (one data-parallel rank): its valid tokens, its
/// rows with a valid token and `S`. Computed over the whole mini-batch before any row is
/// skipped, so skipping rows that contribute exactly zero leaves every denominator, hence the
/// update, unchanged.
pub(super) fn minibatch_info(
    chunk: &[i64],
    row_tokens: &[f64],
    loss_scale_factor: f64,
) -> GlobalBatchInfo {
    let tokens: f64 = chunk.iter().map(|&i| row_tokens[i as usize]).sum();
    let rows = chunk
        .iter()
        .filter(|&&i| row_tokens[i as usize] > 0.0)
        .count();
    GlobalBatchInfo {
        dp_size: 1,
        batch_num_tokens: Some(tokens.max(1.0)),
        global_batch_size: Some(rows.max(1) as f64),
        loss_scale_factor: Some(loss_scale_factor),
    }
}
