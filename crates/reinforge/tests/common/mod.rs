//! Helpers shared by the integration tests that drive the `reinforge` binary on the HF
//! fixtures and compare with the transformers reference script.

#![allow(dead_code)]

pub mod bad;
#[path = "../../../reinforge-torch/tests/hf_support/real_model.rs"]
pub mod real_model;
pub mod server;
pub mod tiny;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `fixtures/data/rank` (battles and reference leaderboards), overridable with
/// `REINFORGE_RANK_DATA_DIR`.
pub fn rank_dir() -> PathBuf {
    match std::env::var_os("REINFORGE_RANK_DATA_DIR") {
        Some(d) => PathBuf::from(d),
        None => root().join("fixtures/data/rank"),
    }
}

/// Writes `n` preference rows to `dir`: `pairs.jsonl` (a helpful chosen, a curt rejected
/// answer) and `rows.jsonl` (KTO's unpaired rows, every third one undesirable), with prompts
/// of different lengths.
pub fn preference_rows(dir: &Path, n: usize) {
    let row = |i: usize, tail: &str| {
        format!(
            "{{\"prompt\": \"Question {i}: help with task {}?\", {tail}}}\n",
            i * 7 % 13
        )
    };
    let pairs: String = (0..n)
        .map(|i| {
            row(
                i,
                "\"chosen\": \"Sure, I can help.\", \"rejected\": \"No.\"",
            )
        })
        .collect();
    let unpaired: String = (0..n)
        .map(|i| {
            let (text, good) = if i % 3 == 1 {
                ("No.", false)
            } else {
                ("Sure.", true)
            };
            row(i, &format!("\"completion\": \"{text}\", \"label\": {good}"))
        })
        .collect();
    std::fs::write(dir.join("pairs.jsonl"), pairs).unwrap();
    std::fs::write(dir.join("rows.jsonl"), unpaired).unwrap();
}

/// libtorch's default intra-op threads for the processes tests start (`OMP_NUM_THREADS`;
/// an explicit `--threads` or `threads =` still sets its own): the harness runs two tests
/// at once on the two cores, and a process per core runs without the oversubscription that
/// slows libtorch's threads by large factors (the real model's parity test took 127 s beside
/// another test at libtorch's default of one thread per core, 39 s at one).
pub const ONE_CORE: &str = "1";

/// Runs the `reinforge` binary with `args`, on one core by default ([`ONE_CORE`]).
pub fn reinforge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_reinforge"))
        .args(args)
        .env("OMP_NUM_THREADS", ONE_CORE)
        .output()
        .expect("run reinforge")
}

/// Parses JSON lines.
pub fn json_lines(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

/// `scripts/reference_generate_score.py PAIRS MAX_NEW MODEL...` in the project's .venv
/// (installed by scripts/setup.sh), one interpreter for all `models`: transformers' log-probs
/// and greedy ids per pair, one list per model in the order given.
pub fn reference(models: &[&Path], pairs: &Path, max_new: usize) -> Vec<Vec<Value>> {
    let out = Command::new(root().join(".venv/bin/python"))
        .env("OMP_NUM_THREADS", ONE_CORE)
        .arg(root().join("scripts/reference_generate_score.py"))
        .arg(pairs)
        .arg(max_new.to_string())
        .args(models)
        .output()
        .expect("run the transformers reference (scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out.stdout);
    models
        .iter()
        .map(|m| {
            let m = m.to_str().unwrap();
            lines.iter().filter(|l| l["model"] == m).cloned().collect()
        })
        .collect()
}

/// A JSON array of numbers.
pub fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// Largest absolute difference of two equally long vectors.
pub fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// The largest parameter difference of two HF checkpoint directories of the same model.
pub fn param_gap(a: &Path, b: &Path) -> f64 {
    param_gap_under(a, b, "")
}

/// [`param_gap`] over the parameters whose names start with `prefix` (some must).
pub fn param_gap_under(a: &Path, b: &Path, prefix: &str) -> f64 {
    use reinforge_torch::{Device, Policy};
    let (pa, pb) = (
        Policy::load(a, Device::Cpu).unwrap(),
        Policy::load(b, Device::Cpu).unwrap(),
    );
    let vb = pb.vs.variables();
    let gaps: Vec<f64> = pa
        .vs
        .variables()
        .iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(k, t)| (t - &vb[k]).abs().max().double_value(&[]))
        .collect();
    assert!(!gaps.is_empty(), "no parameter under {prefix:?}");
    gaps.into_iter().fold(0.0, f64::max)
}
