//! TRL's DPO losses against golden vectors from running TRL's own `DPOTrainer._compute_loss`
//! (`fixtures/oracles/dpo/trl_dpo_losses.json`, made by `scripts/make_dpo_oracles.py`): the
//! loss, its gradients with respect to the policy's sequence log-probs, and the logged
//! metrics, for every loss type and f-divergence, through `loss::dpo::dpo_loss`.

use reinforge_torch::tch::{Kind, Tensor};
use reinforge_torch::train::loss::dpo::{dpo_loss, DpoBatch, DpoConfig};
use serde_json::Value;

use crate::golden;
use golden::numbers;

fn fixture() -> Value {
    golden::fixture("dpo/trl_dpo_losses.json")
}

fn t(v: &Value) -> Tensor {
    golden::tensor(v)
}

/// Checks one case with its expected values nudged by `nudge`; `Err` names what is off.
fn check(case: &Value, nudge: f64) -> Result<f64, String> {
    let p = &case["params"];
    let cfg = DpoConfig {
        losses: vec![(p["loss_type"].as_str().unwrap().parse().unwrap(), 1.0)],
        beta: p["beta"].as_f64().unwrap(),
        label_smoothing: p["label_smoothing"].as_f64().unwrap(),
        f_divergence: p["f_divergence_type"].as_str().unwrap().parse().unwrap(),
        f_alpha_divergence_coef: p["f_alpha_divergence_coef"].as_f64().unwrap(),
        discopop_tau: p["discopop_tau"].as_f64().unwrap(),
    };
    let i = &case["inputs"];
    let chosen = t(&i["chosen_logps"]).set_requires_grad(true);
    let rejected = t(&i["rejected_logps"]).set_requires_grad(true);
    let (rc, rr) = (t(&i["ref_chosen_logps"]), t(&i["ref_rejected_logps"]));
    let (lc, lr) = (t(&i["chosen_lengths"]), t(&i["rejected_lengths"]));
    let out = dpo_loss(
        &cfg,
        &DpoBatch {
            chosen_logps: &chosen,
            rejected_logps: &rejected,
            ref_chosen_logps: &rc,
            ref_rejected_logps: &rr,
            chosen_lengths: &lc,
            rejected_lengths: &lr,
        },
    )
    .map_err(|e| e.to_string())?;
    out.loss.backward();
    // Cases TRL could only compute in float32 (alpha divergence) carry a note.
    let tol = if case.get("note").is_some() {
        1e-5
    } else {
        1e-9
    };
    let e = &case["expected"];
    let mut worst: f64 = 0.0;
    let mut cmp = |name: &str, got: &[f64], want: &[f64]| -> Result<(), String> {
        for (k, (g, w)) in got.iter().zip(want).enumerate() {
            let w = w + nudge;
            let dev = (g - w).abs() / w.abs().max(1.0);
            worst = worst.max(dev);
            if dev > tol {
                return Err(format!(
                    "{} {}: {name}[{k}] = {g}, TRL {w}",
                    case["case"], p["loss_type"]
                ));
            }
        }
        Ok(())
    };
    // A loss that does not read an input (sft: the rejected side) leaves its gradient undefined.
    let values = |x: &Tensor| {
        let g = x.grad();
        let g = if g.defined() { g } else { x.zeros_like() };
        Vec::<f64>::try_from(&g.to_kind(Kind::Double)).unwrap()
    };
    cmp(
        "loss",
        &[out.loss.double_value(&[])],
        &[e["loss"].as_f64().unwrap()],
    )?;
    cmp(
        "grad_chosen_logps",
        &values(&chosen),
        &numbers(&e["grad_chosen_logps"]),
    )?;
    cmp(
        "grad_rejected_logps",
        &values(&rejected),
        &numbers(&e["grad_rejected_logps"]),
    )?;
    let m = &e["metrics"];
    // TRL logs accuracies through a float32 tensor.
    let metrics = [
        ("rewards/chosen", out.metrics.rewards_chosen, tol),
        ("rewards/rejected", out.metrics.rewards_rejected, tol),
        ("rewards/accuracies", out.metrics.rewards_accuracies, 1e-7),
        ("rewards/margins", out.metrics.rewards_margins, tol),
        ("logps/chosen", out.metrics.logps_chosen, tol),
        ("logps/rejected", out.metrics.logps_rejected, tol),
    ];
    for (name, got, mtol) in metrics {
        let w = m[name].as_f64().unwrap() + nudge;
        if (got - w).abs() / w.abs().max(1.0) > mtol.max(tol) {
            return Err(format!("{} {name} = {got}, TRL {w}", case["case"]));
        }
    }
    Ok(worst)
}

#[test]
fn every_trl_dpo_golden_case_passes() {
    let f = fixture();
    let cases = f["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 34);
    let mut by_type = std::collections::BTreeMap::new();
    for case in cases {
        let dev = check(case, 0.0).unwrap_or_else(|e| panic!("{e}"));
        let key = format!(
            "{}/{}",
            case["params"]["loss_type"].as_str().unwrap(),
            case["params"]["f_divergence_type"].as_str().unwrap()
        );
        let entry = by_type.entry(key).or_insert(0.0f64);
        *entry = entry.max(dev);
    }
    eprintln!("{by_type:#?}");
    assert_eq!(by_type.len(), 15 + 3, "every loss type and f-divergence");
}

#[test]
fn a_nudged_dpo_golden_value_fails() {
    for case in fixture()["cases"].as_array().unwrap() {
        assert!(
            check(case, 1e-4).is_err(),
            "{} passed with nudged values",
            case["case"]
        );
    }
}

#[test]
fn invalid_settings_are_errors() {
    let x = Tensor::zeros([2], (Kind::Double, reinforge_torch::Device::Cpu));
    let one = Tensor::ones([2], (Kind::Double, reinforge_torch::Device::Cpu));
    let b = DpoBatch {
        chosen_logps: &x,
        rejected_logps: &x,
        ref_chosen_logps: &x,
        ref_rejected_logps: &x,
        chosen_lengths: &one,
        rejected_lengths: &one,
    };
    let err = |cfg: DpoConfig| {
        dpo_loss(&cfg, &b)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    assert!(err(DpoConfig {
        beta: 0.0,
        ..Default::default()
    })
    .contains("beta"));
    let exo = DpoConfig {
        losses: vec![("exo_pair".parse().unwrap(), 1.0)],
        ..Default::default()
    };
    assert!(err(exo).contains("label_smoothing"));
    assert!("dpo"
        .parse::<reinforge_torch::train::loss::dpo::DpoLoss>()
        .unwrap_err()
        .contains("sigmoid"));
}
