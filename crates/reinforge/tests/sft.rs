//! `train-sft` on the fixture chat rows (fixtures/data/sft) and the fixture Llama: the held-out
//! loss falls, a run continued from its checkpoint equals an uninterrupted one (full and LoRA),
//! the memory tools give the plain run's result, and bad input is refused with its reason.

use crate::common;

use std::path::Path;

use common::tiny::{column, metrics};
use common::{max_abs_diff, reinforge, root};
use serde_json::Value;

/// `train-sft` on the fixture chat rows into `out` for `steps` steps, constant rate.
fn args(out: &Path, steps: usize, extra: &[&str]) -> Vec<String> {
    let r = root();
    let mut a: Vec<String> = [
        "train-sft",
        "--model",
        r.join("fixtures/hf/models/llama").to_str().unwrap(),
        "--data",
        r.join("fixtures/data/sft/chat_train.jsonl")
            .to_str()
            .unwrap(),
        "--heldout",
        r.join("fixtures/data/sft/chat_heldout.jsonl")
            .to_str()
            .unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--batch-size",
        "8",
        "--lr",
        "1e-3",
        "--lr-scheduler-type",
        "constant",
        "--threads",
        "1",
    ]
    .map(String::from)
    .to_vec();
    a.push("--steps".into());
    a.push(steps.to_string());
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn run_ok(a: &[String]) {
    let refs: Vec<&str> = a.iter().map(String::as_str).collect();
    let o = reinforge(&refs);
    assert!(
        o.status.success(),
        "{a:?}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn report(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap()
}

/// The largest parameter difference of the two runs' final checkpoints.
fn param_gap(a: &Path, b: &Path) -> f64 {
    common::param_gap(&a.join("checkpoints/final"), &b.join("checkpoints/final"))
}

#[test]
fn heldout_loss_falls_and_a_continued_run_equals_an_uninterrupted_one() {
    let dir = tempfile::tempdir().unwrap();
    let (whole, parts) = (dir.path().join("whole"), dir.path().join("parts"));
    run_ok(&args(&whole, 6, &[]));
    run_ok(&args(&parts, 3, &[]));
    run_ok(&args(&parts, 6, &[]));
    let r = report(&whole);
    let before = r["heldout_before"]["loss"].as_f64().unwrap();
    let after = r["heldout_after"]["loss"].as_f64().unwrap();
    eprintln!("held-out loss {before:.4} -> {after:.4}");
    assert!(after < 0.8 * before, "{r}");
    assert_eq!(r["format"], "messages");
    assert_eq!(r["rows"], 48);
    let m = metrics(&whole);
    assert_eq!(m.len(), 6);
    assert!(column(&m, "tokens").iter().all(|&t| t > 0.0));
    let gap = param_gap(&whole, &parts);
    eprintln!("continued vs uninterrupted: max |Δparam| {gap:.2e}");
    assert!(gap < 1e-6, "{gap}");
    assert_eq!(
        metrics(&parts).len(),
        6,
        "the second command continued the run"
    );
    assert!(max_abs_diff(&column(&m, "loss"), &column(&metrics(&parts), "loss")) < 1e-6);
}

#[test]
fn padding_free_checkpointed_micro_batches_train_like_the_plain_step() {
    let dir = tempfile::tempdir().unwrap();
    let (plain, tools) = (dir.path().join("plain"), dir.path().join("tools"));
    run_ok(&args(&plain, 3, &[]));
    let memory = [
        "--padding-free",
        "--gradient-checkpointing",
        "--max-tokens-per-microbatch",
        "150",
    ];
    run_ok(&args(&tools, 3, &memory));
    let gap = param_gap(&plain, &tools);
    let loss_gap = max_abs_diff(
        &column(&metrics(&plain), "loss"),
        &column(&metrics(&tools), "loss"),
    );
    eprintln!("memory tools vs plain: max |Δparam| {gap:.2e}, max |Δloss| {loss_gap:.2e}");
    assert!(gap < 1e-5 && loss_gap < 1e-5, "{gap} {loss_gap}");
}

#[test]
fn lora_trains_an_adapter_and_continues_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (whole, parts) = (dir.path().join("whole"), dir.path().join("parts"));
    let lora = ["--lora-r", "4"];
    run_ok(&args(&whole, 6, &lora));
    run_ok(&args(&parts, 3, &lora));
    run_ok(&args(&parts, 6, &lora));
    let adapter = whole.join("checkpoints/final-adapter");
    let cfg: Value = serde_json::from_str(
        &std::fs::read_to_string(adapter.join("adapter_config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(cfg["r"], 4);
    let r = report(&whole);
    let (before, after) = (
        r["heldout_before"]["loss"].as_f64().unwrap(),
        r["heldout_after"]["loss"].as_f64().unwrap(),
    );
    eprintln!("LoRA held-out loss {before:.4} -> {after:.4}");
    assert!(after < before, "{r}");
    let gap = param_gap(&whole, &parts);
    eprintln!("LoRA continued vs uninterrupted: max |Δparam| {gap:.2e}");
    assert!(gap < 1e-6, "{gap}");
}

#[test]
fn bad_input_is_refused_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = reinforge(
        &args(&out, 1, &["--raw"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--raw does not apply"));
    let rows = dir.path().join("rows.jsonl");
    std::fs::write(&rows, "{\"question\": \"x\"}\n").unwrap();
    let mut a = args(&out, 1, &[]);
    let data = a.iter().position(|x| x == "--data").unwrap() + 1;
    a[data] = rows.to_str().unwrap().into();
    let o = reinforge(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("rows.jsonl") && err.contains("`messages`") && err.contains("`text`"),
        "{err}"
    );
    assert!(
        !out.join("checkpoints").exists(),
        "nothing is created for bad data"
    );
}
