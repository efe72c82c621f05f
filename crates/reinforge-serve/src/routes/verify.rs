//! `POST /v1/verify`: a batch of math checks, the HTTP form of `reinforge verify`.
//!
//! Request: `{"cases": [{"id"?, "gold", "pred", "options"?}], "options"?}` (per-case options win
//! over the batch's; both are `reinforge_verify::Options`, Math-Verify's names). Response:
//! `{"verdicts": [{"id", "correct", "status", "reason"}]}`, in request order. Unknown keys are
//! errors (this is reinforge's own schema). A request whose cases hold more than
//! `--max-verify-bytes` of text (each case counted as at least 256 bytes) is a 413 naming the
//! flag, before any work.

use axum::extract::{Extension, State};
use axum::Json;
use rayon::prelude::*;
use reinforge_verify::{Options, Status};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ApiError, ApiJson};
use crate::limit::Slot;
use crate::AppState;

/// One check.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    #[serde(default)]
    pub id: Value,
    pub gold: String,
    pub pred: String,
    #[serde(default)]
    pub options: Option<Options>,
}

/// The request body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyRequest {
    pub cases: Vec<Case>,
    #[serde(default)]
    pub options: Option<Options>,
}

/// One verdict.
#[derive(Serialize, Deserialize, Debug)]
pub struct VerdictOut {
    pub id: Value,
    pub correct: bool,
    pub status: Status,
    pub reason: String,
}

/// The response body.
#[derive(Serialize, Deserialize, Debug)]
pub struct VerifyResponse {
    pub verdicts: Vec<VerdictOut>,
}

fn status_label(s: Status) -> &'static str {
    match s {
        Status::Correct => "correct",
        Status::Incorrect => "incorrect",
        Status::UnparsablePred => "unparsable_pred",
        Status::UnparsableGold => "unparsable_gold",
    }
}

pub async fn verify(
    State(state): State<AppState>,
    Extension(slot): Extension<Slot>,
    ApiJson(req): ApiJson<VerifyRequest>,
) -> Result<Json<VerifyResponse>, ApiError> {
    let lens = req.cases.iter().map(|c| c.gold.len() + c.pred.len());
    crate::limit::check_verify_work("cases", lens, state.max_verify_bytes)?;
    let pool = state.pool.clone();
    let verdicts = state
        .blocking(slot, move || {
            let default = req.options.unwrap_or_default();
            pool.install(|| {
                req.cases
                    .into_par_iter()
                    .map(|c| {
                        let v = reinforge_verify::verify(
                            &c.gold,
                            &c.pred,
                            c.options.as_ref().unwrap_or(&default),
                        );
                        VerdictOut {
                            id: c.id,
                            correct: v.correct(),
                            status: v.status,
                            reason: v.reason,
                        }
                    })
                    .collect::<Vec<_>>()
            })
        })
        .await?;
    let mut counts = std::collections::BTreeMap::<&str, u64>::new();
    for v in &verdicts {
        *counts.entry(status_label(v.status)).or_default() += 1;
    }
    for (status, n) in counts {
        state.metrics.checks.with_label_values(&[status]).inc_by(n);
    }
    Ok(Json(VerifyResponse { verdicts }))
}
