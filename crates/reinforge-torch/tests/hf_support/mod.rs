//! Helpers shared by the Hugging Face checkpoint tests: fixture paths, a fixed padded batch,
//! a forward pass, and the Python reference checkers of scripts/ (run in the project's .venv,
//! which scripts/setup.sh installs before the tests).

#![allow(dead_code)]

pub mod real_model;

use std::path::PathBuf;
use std::process::Command;

use reinforge_torch::model::transformer::{positions_from_mask, ForwardInput};
use reinforge_torch::tch::{Device, Kind, Tensor};
use reinforge_torch::Policy;

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every fixture architecture / layout under fixtures/hf/models.
pub const FIXTURES: [&str; 8] = [
    "llama",
    "llama_tied",
    "llama_rope3",
    "llama_sharded",
    "llama_bf16",
    "qwen2",
    "qwen3",
    "mistral",
];

/// A fixture checkpoint directory under fixtures/hf/models.
pub fn fixture(name: &str) -> PathBuf {
    root().join("fixtures/hf/models").join(name)
}

/// A left-padded batch `[3, 10]` of ids below `vocab`: (ids, mask, positions).
pub fn batch(vocab: i64) -> (Tensor, Tensor, Tensor) {
    let ids = Tensor::arange(30, (Kind::Int64, Device::Cpu))
        .multiply_scalar(37)
        .remainder(vocab)
        .view([3, 10]);
    let mask = Tensor::ones([3, 10], (Kind::Int64, Device::Cpu));
    let _ = mask.narrow(1, 0, 2).get(1).fill_(0);
    let _ = mask.narrow(1, 0, 4).get(2).fill_(0);
    let ids = &ids * &mask;
    let pos = positions_from_mask(&mask);
    (ids, mask, pos)
}

/// Float32 logits `[B, T, V]` of `p` on a batch.
pub fn logits(p: &Policy, ids: &Tensor, mask: &Tensor, pos: &Tensor) -> Tensor {
    raw_logits(p, ids, mask, pos).to_kind(Kind::Float)
}

/// Logits `[B, T, V]` of `p` on a batch, in the dtype the model computed them.
pub fn raw_logits(p: &Policy, ids: &Tensor, mask: &Tensor, pos: &Tensor) -> Tensor {
    p.model.forward(
        &ForwardInput {
            ids,
            positions: pos,
            key_mask: &mask.to_kind(Kind::Bool),
            segments: &[],
            images: None,
        },
        None,
        false,
    )
}

/// Max |a - b| over real (non-padding) query positions, in float32.
pub fn max_diff(a: &Tensor, b: &Tensor, mask: &Tensor) -> f64 {
    let real = mask.to_kind(Kind::Float).unsqueeze(-1);
    ((a.to_kind(Kind::Float) - b.to_kind(Kind::Float)).abs() * real)
        .max()
        .double_value(&[])
}

/// Mean absolute difference over the real (unmasked) positions: steadier than [`max_diff`]
/// where roundings differ by machine (bf16 kernels), as the mean of thousands of logits is.
pub fn mean_diff(a: &Tensor, b: &Tensor, mask: &Tensor) -> f64 {
    let real = mask.to_kind(Kind::Float).unsqueeze(-1);
    let diff = (a.to_kind(Kind::Float) - b.to_kind(Kind::Float)).abs() * &real;
    let count = real.sum(Kind::Float).double_value(&[]) * a.size()[a.dim() - 1] as f64;
    diff.sum(Kind::Double).double_value(&[]) / count
}

/// Writes the batch and reinforge's logits as the reference file `check_hf_checkpoint.py`
/// reads (`input_ids`, `attention_mask`, `position_ids`, `logits`).
pub fn write_reference(
    path: &std::path::Path,
    ids: Tensor,
    mask: Tensor,
    pos: Tensor,
    logits: &Tensor,
) {
    let named = [
        ("input_ids", ids),
        ("attention_mask", mask),
        ("position_ids", pos),
        ("logits", logits.contiguous()),
    ];
    Tensor::write_safetensors(&named, path).unwrap();
}

/// Runs a Python checker of scripts/ with `--tol 1e-5` and returns the `max_abs_diff` of each
/// JSON line it prints; fails the test when the checker fails.
pub fn run_python(script: &str, args: &[PathBuf]) -> Vec<f64> {
    run_python_tol(script, 1e-5, args)
}

/// [`run_python`] with the checker's tolerance `tol`.
pub fn run_python_tol(script: &str, tol: f64, args: &[PathBuf]) -> Vec<f64> {
    let python = root().join(".venv/bin/python");
    let out = Command::new(&python)
        .arg(root().join("scripts").join(script))
        .args(["--tol", &tol.to_string()])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", python.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|line| {
            println!("{script}: {line}");
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            v["max_abs_diff"].as_f64().unwrap()
        })
        .collect()
}
