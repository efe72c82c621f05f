//! The machinery of the oracle harness: reading fixture files, the tolerance checks and the
//! dispatch of a case by its `function` name (`verl.rs` and `trl.rs` hold the per-function code).

mod trl;
mod verl;

pub use crate::rl_support::grpo_update;
pub use verl::trainer_outputs;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use reinforge_rl::AdvantageConfig;
use reinforge_torch::train::rl::{UpdateConfig, ValueConfig};
use serde_json::Value;
use tch::{Kind, Tensor};

/// Cases checked and the largest `|got - exp| / max(1, |exp|)` seen, for one function.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub cases: usize,
    pub max_dev: f64,
}

/// The outcome of a run over one directory.
#[derive(Debug, Default)]
pub struct Report {
    pub per_function: BTreeMap<String, Stats>,
    /// Cases per function replayed through the functions the trainer calls: the losses (and
    /// gradients) through its objectives (`rl::policy_objective`, `rl::value_objective`), TRL's
    /// advantages through the `trl_grpo` estimator's function.
    pub through_trainer: BTreeMap<String, usize>,
    /// Pending function names that occurred (their cases were not checked).
    pub pending: Vec<String>,
    /// With [`Options::keep_going`]: `(function, error)` of every failed case.
    pub failures: Vec<(String, String)>,
}

/// A deliberate change to the trainer's configurations before each replay: the harness's
/// self-test that it drives the trainer (a wrong setting must make the replay fail).
#[derive(Clone, Copy)]
pub struct Perturb {
    pub policy: fn(&mut UpdateConfig),
    pub value: fn(&mut ValueConfig),
    /// The advantage settings of TRL's advantage cases.
    pub advantage: fn(&mut AdvantageConfig),
}

impl Default for Perturb {
    fn default() -> Self {
        Self {
            policy: |_| {},
            value: |_| {},
            advantage: |_| {},
        }
    }
}

/// How [`run_dir_with`] runs.
#[derive(Clone, Copy, Default)]
pub struct Options<'a> {
    /// Functions to skip (reported as pending).
    pub pending: &'a [&'a str],
    pub perturb: Perturb,
    /// Record failed cases in [`Report::failures`] instead of stopping at the first.
    pub keep_going: bool,
}

/// Tolerance of one comparison.
#[derive(Debug, Clone, Copy)]
pub enum Tol {
    /// `|g - e| <= 1e-9·max(1, |e|)` (the README's default for float64 implementations).
    Default,
    /// `|g - e| <= atol + rtol·|e|`.
    Mixed { rtol: f64, atol: f64 },
}

/// One case under check: reads inputs/params, compares expected fields and records which
/// expected fields were consumed.
pub struct Case<'a> {
    pub v: &'a Value,
    pub id: String,
    used: BTreeSet<String>,
    max_dev: f64,
    pub tol: Tol,
    pub perturb: Perturb,
    /// Set by a check that replayed the case through the functions the trainer calls.
    pub through_trainer: bool,
}

pub type R<T> = Result<T, String>;

impl<'a> Case<'a> {
    fn new(v: &'a Value, id: String, perturb: Perturb) -> Self {
        let tol = if v["function"] == "compute_grpo_vectorized_outcome_advantage" {
            Tol::Mixed {
                rtol: 1e-6,
                atol: 1e-6,
            }
        } else {
            Tol::Default
        };
        Case {
            v,
            id,
            used: BTreeSet::new(),
            max_dev: 0.0,
            tol,
            perturb,
            through_trainer: false,
        }
    }

    pub fn param(&self, key: &str) -> Option<&'a Value> {
        self.v["params"].get(key).filter(|v| !v.is_null())
    }
    pub fn param_f64(&self, key: &str, default: f64) -> f64 {
        self.param(key).and_then(Value::as_f64).unwrap_or(default)
    }
    pub fn param_str(&self, key: &str) -> R<&'a str> {
        self.param(key)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{}: missing string param {key}", self.id))
    }
    pub fn input(&self, key: &str) -> Option<&'a Value> {
        self.v["inputs"].get(key).filter(|v| !v.is_null())
    }
    pub fn req(&self, key: &str) -> R<&'a Value> {
        self.input(key)
            .ok_or_else(|| format!("{}: missing input {key}", self.id))
    }
    pub fn has_expected(&self, key: &str) -> bool {
        self.v["expected"].get(key).is_some()
    }

    fn expected(&mut self, key: &str) -> R<&'a Value> {
        self.used.insert(key.to_string());
        self.v["expected"]
            .get(key)
            .ok_or_else(|| format!("{}: expected.{key} is missing", self.id))
    }

    fn close(&mut self, what: &str, got: f64, exp: f64) -> R<()> {
        let ok = match self.tol {
            Tol::Default => (got - exp).abs() <= 1e-9 * exp.abs().max(1.0),
            Tol::Mixed { rtol, atol } => (got - exp).abs() <= atol + rtol * exp.abs(),
        };
        let dev = (got - exp).abs() / exp.abs().max(1.0);
        if dev.is_nan() || !ok {
            return Err(format!(
                "{}: {what}: got {got:e}, expected {exp:e}",
                self.id
            ));
        }
        self.max_dev = self.max_dev.max(dev);
        Ok(())
    }

    /// Compares a scalar expected field.
    pub fn scalar(&mut self, key: &str, got: f64) -> R<()> {
        let e = self.expected(key)?;
        let e = e
            .as_f64()
            .ok_or_else(|| format!("{}: {key} is not a number", self.id))?;
        self.close(key, got, e)
    }

    /// Compares an array expected field (any nesting), element by element, row-major.
    pub fn array(&mut self, key: &str, got: &[f64]) -> R<()> {
        let e = flat(self.expected(key)?);
        if e.len() != got.len() {
            return Err(format!(
                "{}: {key}: {} values, expected {}",
                self.id,
                got.len(),
                e.len()
            ));
        }
        for (i, (g, e)) in got.iter().zip(&e).enumerate() {
            self.close(&format!("{key}[{i}]"), *g, *e)?;
        }
        Ok(())
    }

    /// Compares a tensor with an expected field.
    pub fn tensor(&mut self, key: &str, got: &Tensor) -> R<()> {
        self.array(key, &values(got))
    }

    /// Compares a boolean array exactly.
    pub fn bools(&mut self, key: &str, got: &[bool]) -> R<()> {
        let e: Vec<bool> = flat_values(self.expected(key)?)
            .iter()
            .map(|v| v.as_bool().unwrap_or(false))
            .collect();
        if e != got {
            return Err(format!("{}: {key}: got {got:?}, expected {e:?}", self.id));
        }
        Ok(())
    }

    /// Compares every key of an expected metrics dict (no key may be missing on our side).
    pub fn metrics(&mut self, key: &str, got: &BTreeMap<String, f64>) -> R<()> {
        let e = self.expected(key)?;
        let e = e
            .as_object()
            .ok_or_else(|| format!("{}: {key} is not an object", self.id))?;
        for (k, v) in e {
            let g = *got
                .get(k)
                .ok_or_else(|| format!("{}: metric {k} not produced", self.id))?;
            let ev = v
                .as_f64()
                .ok_or_else(|| format!("{}: metric {k} not a number", self.id))?;
            self.close(&format!("{key}.{k}"), g, ev)?;
        }
        if got.len() != e.len() {
            return Err(format!(
                "{}: metrics {:?} differ from expected keys {:?}",
                self.id,
                got.keys().collect::<Vec<_>>(),
                e.keys().collect::<Vec<_>>()
            ));
        }
        Ok(())
    }

    /// Marks an expected field as consumed without comparing (documentation-only fields).
    pub fn consume(&mut self, key: &str) -> R<&'a Value> {
        self.expected(key)
    }

    fn finish(&self) -> R<()> {
        let all: BTreeSet<String> = self.v["expected"]
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        let left: Vec<&String> = all.difference(&self.used).collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{}: expected fields not checked: {left:?}",
                self.id
            ))
        }
    }
}

/// All numbers of a nested JSON array, row-major; `null` (NaN shown as null) becomes NaN.
pub fn flat(v: &Value) -> Vec<f64> {
    flat_values(v)
        .iter()
        .map(|x| x.as_f64().unwrap_or(f64::NAN))
        .collect()
}

fn flat_values(v: &Value) -> Vec<&Value> {
    match v {
        Value::Array(a) => a.iter().flat_map(flat_values).collect(),
        other => vec![other],
    }
}

fn shape(v: &Value) -> Vec<i64> {
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

/// A nested JSON array as an f64 tensor of its shape.
pub fn tensor(v: &Value) -> Tensor {
    Tensor::from_slice(&flat(v)).view(shape(v).as_slice())
}

/// A nested JSON array as a `B x T` matrix.
pub fn matrix(v: &Value) -> Vec<Vec<f64>> {
    v.as_array()
        .expect("matrix")
        .iter()
        .map(|r| {
            r.as_array()
                .expect("row")
                .iter()
                .map(|x| x.as_f64().unwrap_or(f64::NAN))
                .collect()
        })
        .collect()
}

/// The values of a tensor, row-major, as f64.
pub fn values(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(t.detach().to_kind(Kind::Double).flatten(0, -1)).expect("values")
}

fn check_case(c: &mut Case, function: &str) -> R<()> {
    if verl::dispatch(c, function)? || trl::dispatch(c, function)? {
        Ok(())
    } else {
        Err(format!("{}: unknown function {function:?}", c.id))
    }
}

/// Runs every case of every `*.json` file of `dir`. Functions in `pending` are skipped and
/// reported; any other unknown function, mismatch or unchecked expected field is an error.
pub fn run_dir(dir: &Path, pending: &[&str]) -> R<Report> {
    run_dir_with(
        dir,
        Options {
            pending,
            ..Options::default()
        },
    )
}

/// [`run_dir`] with a perturbation of the trainer's configuration and optionally collecting
/// failures instead of stopping at the first.
pub fn run_dir_with(dir: &Path, opts: Options) -> R<Report> {
    let pending = opts.pending;
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("no *.json fixtures in {}", dir.display()));
    }
    let mut report = Report::default();
    for file in files {
        let text =
            std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let doc: Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        let cases = doc["cases"]
            .as_array()
            .ok_or_else(|| format!("{}: no cases array", file.display()))?;
        for v in cases {
            let function = v["function"]
                .as_str()
                .ok_or_else(|| format!("{}: case without function", file.display()))?;
            if pending.contains(&function) {
                if !report.pending.iter().any(|p| p == function) {
                    report.pending.push(function.to_string());
                }
                continue;
            }
            let id = format!(
                "{}:{}",
                file.file_name().unwrap().to_string_lossy(),
                v["case"].as_str().unwrap_or("?")
            );
            let mut c = Case::new(v, id, opts.perturb);
            let outcome = check_case(&mut c, function).and_then(|()| c.finish());
            match outcome {
                Ok(()) => {}
                Err(e) if opts.keep_going => {
                    report.failures.push((function.to_string(), e));
                    continue;
                }
                Err(e) => return Err(e),
            }
            if c.through_trainer {
                *report
                    .through_trainer
                    .entry(function.to_string())
                    .or_default() += 1;
            }
            let s = report.per_function.entry(function.to_string()).or_default();
            s.cases += 1;
            s.max_dev = s.max_dev.max(c.max_dev);
        }
    }
    Ok(report)
}
