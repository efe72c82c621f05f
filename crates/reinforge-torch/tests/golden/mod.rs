//! Reading the golden-vector files of `fixtures/oracles/` (the P2L, DPO and reward-model
//! tests; the verl/TRL harness has its own dispatch in `oracle_support`).

#![allow(dead_code)]

use reinforge_torch::tch::{Kind, Tensor};
use serde_json::Value;

/// `fixtures/oracles/<rel>` parsed.
pub fn fixture(rel: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/oracles")
        .join(rel);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every number of a (nested) JSON array, in row-major order.
pub fn numbers(v: &Value) -> Vec<f64> {
    match v {
        Value::Array(a) => a.iter().flat_map(numbers).collect(),
        Value::Number(n) => vec![n.as_f64().unwrap()],
        other => panic!("not a number: {other}"),
    }
}

/// The shape of a nested JSON array.
pub fn shape(v: &Value) -> Vec<i64> {
    match v {
        Value::Array(a) => {
            let mut s = vec![a.len() as i64];
            if let Some(first) = a.first() {
                s.extend(shape(first));
            }
            s
        }
        _ => vec![],
    }
}

/// A nested JSON array as a float64 tensor of its shape.
pub fn tensor(v: &Value) -> Tensor {
    Tensor::from_slice(&numbers(v))
        .view(shape(v).as_slice())
        .to_kind(Kind::Double)
}

/// Compares computed values with a case's expected ones (each shifted by `nudge`, to prove a
/// harness fails) at relative tolerance `tol`, tracking the worst relative deviation seen.
pub struct Compare<'c> {
    pub case: &'c str,
    pub nudge: f64,
    pub worst: f64,
}

impl<'c> Compare<'c> {
    pub fn new(case: &'c Value, nudge: f64) -> Self {
        Self {
            case: case["case"].as_str().unwrap_or("?"),
            nudge,
            worst: 0.0,
        }
    }

    /// `Err` names the first value of `name` off by more than `tol` (relative, floor 1).
    pub fn values(
        &mut self,
        name: &str,
        got: &[f64],
        want: &[f64],
        tol: f64,
    ) -> Result<(), String> {
        if got.len() != want.len() {
            return Err(format!(
                "{} {name}: {} values, expected {}",
                self.case,
                got.len(),
                want.len()
            ));
        }
        for (k, (g, w)) in got.iter().zip(want).enumerate() {
            let w = w + self.nudge;
            let dev = (g - w).abs() / w.abs().max(1.0);
            self.worst = self.worst.max(dev);
            if dev > tol || dev.is_nan() {
                return Err(format!("{} {name}[{k}] = {g}, reference {w}", self.case));
            }
        }
        Ok(())
    }
}

/// The gradient of `x` as float64 values (zeros when the loss did not read `x`).
pub fn grad_values(x: &Tensor) -> Vec<f64> {
    let g = x.grad();
    let g = if g.defined() { g } else { x.zeros_like() };
    Vec::<f64>::try_from(&g.to_kind(Kind::Double)).unwrap()
}

/// Replays every case of `fixtures/oracles/<rel>` (there must be `count`) through `check`,
/// panicking at the first failure, and proves the harness can fail: each case with its
/// expected values nudged by 1e-4 must be rejected. Returns the worst relative deviation.
pub fn replay(rel: &str, count: usize, check: impl Fn(&Value, f64) -> Result<f64, String>) -> f64 {
    let f = fixture(rel);
    let cases = f["cases"].as_array().unwrap();
    assert_eq!(cases.len(), count, "{rel}");
    let mut worst: f64 = 0.0;
    for case in cases {
        worst = worst.max(check(case, 0.0).unwrap_or_else(|e| panic!("{e}")));
        assert!(
            check(case, 1e-4).is_err(),
            "{} passed with nudged values",
            case["case"]
        );
    }
    eprintln!("{rel}: worst relative deviation {worst:.2e} over {count} cases");
    worst
}
