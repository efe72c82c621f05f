//! TRL's ORPO against golden vectors from running TRL's own `ORPOTrainer` methods
//! (`fixtures/oracles/orpo/trl_orpo_loss.json`, made by `scripts/make_orpo_kto_oracles.py`):
//! the loss, its gradients at completion and prompt tokens, and the logged metrics, through
//! `loss::orpo::orpo_loss`, the function `train-orpo` calls.

use reinforge_torch::train::loss::orpo::{orpo_loss, OrpoBatch};
use serde_json::Value;

use crate::golden;
use golden::{grad_values, numbers, Compare};

/// TRL casts the averaged log-probs to float32, so the odds-ratio side carries float32
/// rounding (the fixture's README); the NLL and log-probs are float64.
const TOL: f64 = 1e-6;

fn check(case: &Value, nudge: f64) -> Result<f64, String> {
    let i = &case["inputs"];
    let t = |k: &str| golden::tensor(&i[k]);
    let chosen = t("chosen_logps").set_requires_grad(true);
    let rejected = t("rejected_logps").set_requires_grad(true);
    let full = t("chosen_full_logps").set_requires_grad(true);
    let (lc, lr, lf) = (
        t("chosen_lengths"),
        t("rejected_lengths"),
        t("chosen_full_lengths"),
    );
    let out = orpo_loss(
        case["params"]["beta"].as_f64().unwrap(),
        &OrpoBatch {
            chosen_logps: &chosen,
            rejected_logps: &rejected,
            chosen_lengths: &lc,
            rejected_lengths: &lr,
            chosen_full_logps: &full,
            chosen_full_lengths: &lf,
        },
    )
    .map_err(|e| e.to_string())?;
    out.loss.backward();
    let e = &case["expected"];
    let mut c = Compare::new(case, nudge);
    c.values(
        "loss",
        &[out.loss.double_value(&[])],
        &[e["loss"].as_f64().unwrap()],
        TOL,
    )?;
    // A completion token of a chosen sequence is in both sums; a prompt token only in the
    // full one.
    let (gc, gf) = (grad_values(&chosen), grad_values(&full));
    let completion: Vec<f64> = gc.iter().zip(&gf).map(|(a, b)| a + b).collect();
    c.values(
        "grad_chosen_completion_token",
        &completion,
        &numbers(&e["grad_chosen_completion_token"]),
        TOL,
    )?;
    // The fixture records 0 where a sequence has no prompt token after the first.
    let prompt_tokens = numbers(&i["chosen_full_lengths"])
        .iter()
        .zip(numbers(&i["chosen_lengths"]))
        .map(|(f, c)| f - c)
        .collect::<Vec<_>>();
    let prompt: Vec<f64> = gf
        .iter()
        .zip(&prompt_tokens)
        .map(|(g, &n)| if n > 0.0 { *g } else { 0.0 })
        .collect();
    c.values(
        "grad_chosen_prompt_token",
        &prompt,
        &numbers(&e["grad_chosen_prompt_token"]),
        TOL,
    )?;
    c.values(
        "grad_rejected_completion_token",
        &grad_values(&rejected),
        &numbers(&e["grad_rejected_completion_token"]),
        TOL,
    )?;
    let m = &e["metrics"];
    for (name, got) in [
        ("rewards/chosen", out.metrics.rewards_chosen),
        ("rewards/rejected", out.metrics.rewards_rejected),
        ("rewards/accuracies", out.metrics.rewards_accuracies),
        ("rewards/margins", out.metrics.rewards_margins),
        ("logps/chosen", out.metrics.logps_chosen),
        ("logps/rejected", out.metrics.logps_rejected),
        ("nll_loss", out.nll_loss),
        ("log_odds_ratio", out.log_odds_ratio),
        ("log_odds_chosen", out.log_odds_chosen),
    ] {
        c.values(name, &[got], &[m[name].as_f64().unwrap()], TOL)?;
    }
    Ok(c.worst)
}

#[test]
fn every_trl_orpo_golden_case_passes_and_a_nudged_one_fails() {
    golden::replay("orpo/trl_orpo_loss.json", 13, check);
}
