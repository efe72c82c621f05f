//! `scripts/gpu_check.sh`, the one prepared check for an NVIDIA machine, dry-run on the CPU with
//! a tiny model shape so that it cannot rot between GPU sessions: every stage runs (parity, the
//! GRPO throughput stage, TRL's side when `.venv-trl` exists, the NCCL stage's skip) and writes
//! finite figures into results.json.

mod common;

use std::process::Command;

use common::root;

fn num(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn gpu_check_dry_runs_every_stage_on_cpu() {
    let out = tempfile::tempdir().unwrap();
    let status = Command::new("bash")
        .arg(root().join("scripts/gpu_check.sh"))
        .current_dir(root())
        .env("DEVICE", "cpu")
        .env("SHAPE", "tiny")
        .env("STEPS", "2")
        .env("WARMUP", "1")
        .env("PROMPTS", "2")
        .env("GENERATIONS", "4")
        .env("MAX_LEN", "16")
        .env("OUT", out.path().join("check"))
        .env("REINFORGE_BIN", env!("CARGO_BIN_EXE_reinforge"))
        .status()
        .expect("run bash");
    assert!(status.success(), "gpu_check.sh failed: {status}");
    let text = std::fs::read_to_string(out.path().join("check/results.json")).unwrap();
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    for fx in ["llama", "qwen2", "qwen3", "mistral"] {
        let p = &r["parity"][fx];
        // CPU against CPU: the same numbers, and a step with a real gradient to compare.
        assert_eq!(num(&p["logprobs"]["max_abs"]), 0.0, "{fx}: {p}");
        assert!(p["logprobs"]["tokens"].as_u64().unwrap() > 0, "{fx}: {p}");
        assert_eq!(num(&p["grpo_step"]["grad_norm"]["abs"]), 0.0, "{fx}: {p}");
        assert!(
            num(&p["grpo_step"]["grad_norm"]["a"]) > 0.0,
            "{fx}: a vacuous step: {p}"
        );
    }
    let g = &r["grpo"]["reinforge"];
    for key in [
        "step_s",
        "generation_s",
        "update_s",
        "generation_tokens_per_s",
        "update_tokens_per_s",
    ] {
        let v = num(&g[key]);
        assert!(v.is_finite() && v > 0.0, "{key} = {v}");
    }
    assert!(r["grpo"]["params"].as_u64().unwrap() > 0);
    assert_eq!(r["nccl"]["ran"], false, "no GPUs here: {}", r["nccl"]);
    let trl_venv = root().join(".venv-trl/bin/python").exists();
    if trl_venv {
        assert_eq!(r["trl"]["available"], true, "{}", r["trl"]);
        let ratio = num(&r["trl_ratio"]["reinforge_over_trl_step_s"]);
        assert!(ratio.is_finite() && ratio > 0.0, "{ratio}");
    }
    eprintln!("gpu_check dry run: {} s", r["wall_s"]);
}
