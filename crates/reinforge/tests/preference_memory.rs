//! The memory tools change how a preference step runs, not what it computes (issue 23):
//! `train-dpo`, `train-orpo`, `train-kto` and `train-rm` on the fixture Llama, three steps with
//! `--max-tokens-per-microbatch`, `--gradient-checkpointing`, `--padding-free` and all three,
//! against the run without them: every step's loss and gradient norm, and the final
//! parameters, within 1e-5. The gaps are printed (`--nocapture`).

use std::path::{Path, PathBuf};
use std::process::Command;

use reinforge_torch::tch::{Kind, Tensor};
use serde_json::{json, Value};

/// What a run is compared on.
const TOL: f64 = 1e-5;

/// Preference pairs whose prompts and answers differ in length (so padding varies).
fn pairs(n: usize) -> String {
    (0..n)
        .map(|k| {
            let prompt = format!("Question {k}: {}", "can you help me? ".repeat(1 + k % 4));
            let chosen = format!("Sure, I can help{}.", " with that".repeat(k % 3));
            json!({"prompt": prompt, "chosen": chosen, "rejected": "No."}).to_string() + "\n"
        })
        .collect()
}

/// Unpaired rows: the polite answer desirable, the curt one not, alternating.
fn unpaired(n: usize) -> String {
    (0..n)
        .map(|i| {
            let k = i / 2;
            let good = i % 2 == 0;
            let prompt = format!("Question {k}: {}", "can you help me? ".repeat(1 + k % 4));
            json!({"prompt": prompt,
                   "completion": if good { "Sure, I can help with that." } else { "No." },
                   "label": good})
            .to_string()
                + "\n"
        })
        .collect()
}

fn fixture_model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hf/models/llama")
}

/// Runs `cmd` for three steps on `data` with `extra` flags into `out`; its metrics lines.
fn run(cmd: &str, data: &Path, out: &Path, extra: &[&str]) -> Vec<Value> {
    let model = fixture_model();
    let mut args: Vec<String> = [
        cmd,
        "--model",
        model.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--steps",
        "3",
        "--batch-size",
        "8",
        "--lr",
        "1e-3",
        "--threads",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    let o = Command::new(env!("CARGO_BIN_EXE_reinforge"))
        .args(&args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{cmd} {extra:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The largest difference between the parameters of two runs' final checkpoints.
fn params_gap(a: &Path, b: &Path) -> f64 {
    let read = |run: &Path| -> std::collections::HashMap<String, Tensor> {
        let file = run.join("checkpoints/final/model.safetensors");
        Tensor::read_safetensors(&file)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
            .into_iter()
            .collect()
    };
    let (wa, wb) = (read(a), read(b));
    assert_eq!(wa.len(), wb.len());
    wa.iter()
        .map(|(k, t)| {
            let d = t.to_kind(Kind::Double) - wb[k].to_kind(Kind::Double);
            d.abs().max().double_value(&[])
        })
        .fold(0.0, f64::max)
}

/// The largest difference of `key` between the steps of two runs (both must log it), over
/// max(|value|, 1): absolute for values up to 1, relative above.
fn metric_gap(a: &[Value], b: &[Value], key: &str) -> f64 {
    assert_eq!(a.len(), 3);
    assert_eq!(b.len(), 3);
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            let (x, y) = (x[key].as_f64(), y[key].as_f64());
            let (x, y) = (x.unwrap_or_else(|| panic!("no {key}")), y.unwrap());
            (x - y).abs() / x.abs().max(1.0)
        })
        .fold(0.0, f64::max)
}

#[test]
fn memory_tools_leave_three_preference_steps_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (paired, single) = (d.join("pairs.jsonl"), d.join("unpaired.jsonl"));
    std::fs::write(&paired, pairs(16)).unwrap();
    std::fs::write(&single, unpaired(16)).unwrap();
    // A prompt is about 40 of the fixture tokenizer's tokens (chat template included), so a
    // pair (both sequences) counts over 64 tokens padded or packed, as does a KTO row with its
    // KL completion: every row of a step reads in its own micro-batch.
    let variants: [(&str, &[&str]); 4] = [
        ("budget", &["--max-tokens-per-microbatch", "64"]),
        ("checkpointing", &["--gradient-checkpointing"]),
        ("padding-free", &["--padding-free"]),
        (
            "all",
            &[
                "--max-tokens-per-microbatch",
                "64",
                "--gradient-checkpointing",
                "--padding-free",
            ],
        ),
    ];
    let mut worst: f64 = 0.0;
    for (cmd, data) in [
        ("train-dpo", &paired),
        ("train-orpo", &paired),
        ("train-kto", &single),
        ("train-rm", &paired),
    ] {
        let plain_out = d.join(format!("{cmd}-plain"));
        let plain = run(cmd, data, &plain_out, &[]);
        // The parameters moved, so the comparison can fail.
        let loss_at = |i: usize| plain[i]["loss"].as_f64().unwrap();
        let moved = (loss_at(2) - loss_at(0)).abs();
        assert!(moved > 1e-3, "{cmd}: the loss did not move ({moved})");
        for (name, flags) in variants {
            let out = d.join(format!("{cmd}-{name}"));
            let m = run(cmd, data, &out, flags);
            let loss = metric_gap(&plain, &m, "loss");
            let grad = metric_gap(&plain, &m, "grad_norm");
            let params = params_gap(&plain_out, &out);
            eprintln!(
                "{cmd} {name}: loss gap {loss:.2e}, grad_norm gap {grad:.2e}, \
                 max |param - plain| {params:.2e}"
            );
            assert!(loss <= TOL, "{cmd} {name}: loss gap {loss}");
            assert!(grad <= TOL, "{cmd} {name}: grad_norm gap {grad}");
            assert!(params <= TOL, "{cmd} {name}: parameter gap {params}");
            worst = worst.max(loss).max(grad).max(params);
        }
    }
    eprintln!("largest gap: {worst:.2e}");
}
