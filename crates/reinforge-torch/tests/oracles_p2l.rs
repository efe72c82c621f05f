//! The P2L losses against golden vectors from running lmarena/p2l's own `p2l/model.py`
//! (`fixtures/oracles/p2l/p2l_losses.json`: loss and autograd gradients of every registered
//! loss on float64 inputs). The losses are called through `P2lLoss::loss`, the function
//! `train-p2l` trains with.

use reinforge_torch::tch::{Kind, Tensor};
use reinforge_torch::train::loss::p2l::{HeadOutputs, P2lLoss};
use serde_json::Value;

use crate::golden;
use golden::{numbers, shape, tensor};

fn fixture() -> Value {
    golden::fixture("p2l/p2l_losses.json")
}

/// A float64 leaf tensor of `v` that records gradients.
fn leaf(v: &Value) -> Tensor {
    tensor(v).set_requires_grad(true)
}

/// Checks one case with expected values optionally nudged by `nudge`; `Err` names the first
/// value off by more than `tol` (relative to max(1, |expected|)).
fn check(case: &Value, nudge: f64) -> Result<f64, String> {
    let kind: P2lLoss = case["function"].as_str().unwrap().parse().unwrap();
    let inputs = &case["inputs"];
    let coefs = leaf(&inputs["coefs"]);
    let eta = inputs.get("eta").map(leaf);
    let gamma = inputs.get("gamma").map(leaf);
    let labels = Tensor::from_slice(
        &numbers(&inputs["labels"])
            .iter()
            .map(|&x| x as i64)
            .collect::<Vec<_>>(),
    )
    .view(shape(&inputs["labels"]).as_slice());
    let weights = inputs
        .get("weights")
        .map(|w| Tensor::from_slice(&numbers(w)).to_kind(Kind::Double));
    let head = HeadOutputs {
        coefs: &coefs,
        eta: eta.as_ref(),
        gamma: gamma.as_ref(),
    };
    let loss = kind
        .loss(&head, &labels, weights.as_ref())
        .map_err(|e| e.to_string())?;
    loss.backward();
    // grk/bag compute in float32 inside the reference.
    let tol = if matches!(kind, P2lLoss::Grk | P2lLoss::Bag) {
        1e-5
    } else {
        1e-9
    };
    let exp = &case["expected"];
    let mut worst: f64 = 0.0;
    let mut cmp = |name: &str, got: Vec<f64>, want: Vec<f64>| -> Result<(), String> {
        if got.len() != want.len() {
            return Err(format!(
                "{name}: {} values, expected {}",
                got.len(),
                want.len()
            ));
        }
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let w = w + nudge;
            let dev = (g - w).abs() / w.abs().max(1.0);
            worst = worst.max(dev);
            if dev > tol {
                return Err(format!("{}: {name}[{i}] = {g}, expected {w}", case["case"]));
            }
        }
        Ok(())
    };
    let values =
        |t: &Tensor| Vec::<f64>::try_from(&t.to_kind(Kind::Double).flatten(0, -1)).unwrap();
    cmp("loss", vec![loss.double_value(&[])], numbers(&exp["loss"]))?;
    cmp(
        "grad_coefs",
        values(&coefs.grad()),
        numbers(&exp["grad_coefs"]),
    )?;
    for (name, t) in [("grad_eta", &eta), ("grad_gamma", &gamma)] {
        if let Some(want) = exp.get(name) {
            cmp(name, values(&t.as_ref().unwrap().grad()), numbers(want))?;
        }
    }
    Ok(worst)
}

#[test]
fn every_p2l_golden_case_passes() {
    let f = fixture();
    let cases = f["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 28);
    let mut functions = std::collections::BTreeMap::new();
    for case in cases {
        let dev = check(case, 0.0).unwrap_or_else(|e| panic!("{e}"));
        let e = functions
            .entry(case["function"].as_str().unwrap().to_string())
            .or_insert((0, 0.0f64));
        e.0 += 1;
        e.1 = e.1.max(dev);
    }
    eprintln!("{functions:?}");
    let names: Vec<&str> = functions.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        ["ba", "bag", "bt", "bt-tie", "grk", "rk", "rk-reparam"]
    );
}

#[test]
fn a_nudged_golden_value_fails() {
    let f = fixture();
    for case in f["cases"].as_array().unwrap() {
        assert!(
            check(case, 1e-4).is_err(),
            "{} passed with nudged values",
            case["case"]
        );
    }
}

#[test]
fn malformed_labels_are_errors_not_panics() {
    let coefs = Tensor::zeros([2, 3], (Kind::Double, reinforge_torch::Device::Cpu));
    let eta = Tensor::zeros([2, 1], (Kind::Double, reinforge_torch::Device::Cpu));
    let head = HeadOutputs {
        coefs: &coefs,
        eta: Some(&eta),
        gamma: None,
    };
    let labels = |v: &[i64], cols: i64| Tensor::from_slice(v).view([2, cols]);
    let err = |k: P2lLoss, l: Tensor| {
        k.loss(&head, &l, None)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    assert!(err(P2lLoss::Bt, labels(&[0, 3, 1, 2], 2)).contains("model index"));
    assert!(err(P2lLoss::RkReparam, labels(&[0, 1, 2, 1, 2, 0], 3)).contains("tie"));
    assert!(err(P2lLoss::Bt, labels(&[0, 1, 0, 1, 2, 0], 3)).contains("[batch, 2]"));
    assert!(err(P2lLoss::Ba, labels(&[0, 1, 0, 1, 2, 0], 3)).contains("gamma"));
}
