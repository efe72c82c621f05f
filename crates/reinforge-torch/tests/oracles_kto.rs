//! TRL's KTO against golden vectors from running TRL's own `KTOTrainer._compute_loss`
//! (`fixtures/oracles/kto/trl_kto_loss.json`, made by `scripts/make_orpo_kto_oracles.py`):
//! the loss, its gradient with respect to each row's log-prob, the KL point and the logged
//! metrics (present only for the sides a batch has), through `loss::kto::kto_loss`, the
//! function `train-kto` calls.

use reinforge_torch::train::loss::kto::{kto_loss, KtoBatch, KtoConfig};
use serde_json::Value;

use crate::golden;
use golden::{grad_values, numbers, Compare};

const TOL: f64 = 1e-9;

fn check(case: &Value, nudge: f64) -> Result<f64, String> {
    let p = &case["params"];
    let cfg = KtoConfig {
        loss_type: p["loss_type"].as_str().unwrap().parse().unwrap(),
        beta: p["beta"].as_f64().unwrap(),
        desirable_weight: p["desirable_weight"].as_f64().unwrap(),
        undesirable_weight: p["undesirable_weight"].as_f64().unwrap(),
    };
    let i = &case["inputs"];
    let labels: Vec<bool> = i["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_bool().unwrap())
        .collect();
    let logps = golden::tensor(&i["logps"]).set_requires_grad(true);
    let refs = golden::tensor(&i["ref_logps"]);
    let has_kl = !i["kl_logps"].as_array().unwrap().is_empty();
    let (kl, ref_kl) = (
        golden::tensor(&i["kl_logps"]),
        golden::tensor(&i["ref_kl_logps"]),
    );
    let out = kto_loss(
        &cfg,
        &KtoBatch {
            logps: &logps,
            ref_logps: &refs,
            labels: &labels,
            kl: has_kl.then_some((&kl, &ref_kl)),
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
    c.values(
        "grad_logps",
        &grad_values(&logps),
        &numbers(&e["grad_logps"]),
        TOL,
    )?;
    let m = e["metrics"].as_object().unwrap();
    for (name, got) in [
        ("kl", Some(out.kl)),
        ("rewards/chosen", out.rewards_chosen),
        ("rewards/rejected", out.rewards_rejected),
        ("rewards/margins", out.rewards_margins),
        ("logps/chosen", out.logps_chosen),
        ("logps/rejected", out.logps_rejected),
    ] {
        match (got, m.get(name)) {
            (Some(g), Some(w)) => c.values(name, &[g], &[w.as_f64().unwrap()], TOL)?,
            (None, None) => {}
            (g, w) => return Err(format!("{} {name}: reinforge {g:?}, TRL {w:?}", c.case)),
        }
    }
    Ok(c.worst)
}

#[test]
fn every_trl_kto_golden_case_passes_and_a_nudged_one_fails() {
    golden::replay("kto/trl_kto_loss.json", 12, check);
}
