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

/// Text bytes per pool thread that one request verifies in a turn. A request's cases reach the
/// scoring pool in turns (`threads x` this, each row counted as at least
/// [`crate::limit::ROW_FLOOR_BYTES`]), each a job of its own; the pool takes jobs first in, first
/// out, so another request's job waits for the turn in progress, not for the whole batch
/// (about 30 ms at the verifier's slowest shape, instead of up to a second at
/// `--max-verify-bytes`).
pub const TURN_BYTES_PER_THREAD: usize = 1 << 20;

/// `cases` split in order into turns of at most `budget` bytes of work (at least one case each).
fn turns(cases: Vec<Case>, budget: usize) -> Vec<Vec<Case>> {
    let mut out: Vec<Vec<Case>> = vec![];
    let mut used = usize::MAX;
    for c in cases {
        let work = (c.gold.len() + c.pred.len()).max(crate::limit::ROW_FLOOR_BYTES);
        if used.saturating_add(work) > budget {
            out.push(vec![]);
            used = 0;
        }
        used = used.saturating_add(work);
        out.last_mut().expect("a turn was opened").push(c);
    }
    out
}

/// The verdict on one case, under its options or the batch's.
fn check(c: Case, default: &Options) -> VerdictOut {
    let v = reinforge_verify::verify(&c.gold, &c.pred, c.options.as_ref().unwrap_or(default));
    VerdictOut {
        id: c.id,
        correct: v.correct(),
        status: v.status,
        reason: v.reason,
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
            let budget = pool.current_num_threads() * TURN_BYTES_PER_THREAD;
            turns(req.cases, budget)
                .into_iter()
                .flat_map(|turn| {
                    pool.install(|| {
                        turn.into_par_iter()
                            .map(|c| check(c, &default))
                            .collect::<Vec<_>>()
                    })
                })
                .collect::<Vec<_>>()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn case(len: usize) -> Case {
        Case {
            id: Value::Null,
            gold: String::new(),
            pred: "x".repeat(len),
            options: None,
        }
    }

    #[test]
    fn turns_keep_order_and_bound_their_work() {
        let cases = vec![case(600), case(300), case(900), case(2000), case(10)];
        let sizes: Vec<Vec<usize>> = turns(cases, 1000)
            .iter()
            .map(|t| t.iter().map(|c| c.pred.len()).collect())
            .collect();
        // 600 + 300 fit; 900 alone; 2000 alone (over the budget, still one turn); 10 counts 256
        assert_eq!(sizes, vec![vec![600, 300], vec![900], vec![2000], vec![10]]);
        assert!(turns(vec![], 1000).is_empty());
    }
}
