//! `scripts/gpu_check.sh` as a CPU dry run (`DEVICE=cpu SHAPE=tiny`): every stage of the GPU
//! check runs on the CPU with this build's binary, so the script cannot rot between GPU
//! sessions. The TRL stage runs when `.venv-trl` exists (scripts/trl_env.sh, which
//! scripts/test.sh runs, makes it); otherwise it must say why and the test records a skip; NCCL is replaced by the same 2-process command over
//! Gloo. docs/gpu.md.

use crate::common;

use std::process::Command;

use common::root;
use serde_json::Value;

/// Every number under `v` (recursively) is finite; returns how many were checked.
fn all_finite(v: &Value, path: &str) -> usize {
    match v {
        Value::Number(n) => {
            let x = n.as_f64().unwrap();
            assert!(x.is_finite(), "{path} = {x}");
            1
        }
        Value::Object(m) => m
            .iter()
            .map(|(k, x)| all_finite(x, &format!("{path}.{k}")))
            .sum(),
        Value::Array(a) => a.iter().map(|x| all_finite(x, path)).sum(),
        _ => 0,
    }
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number: {v}"))
}

#[test]
fn the_gpu_check_dry_runs_every_stage_on_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let started = std::time::Instant::now();
    let run = Command::new("bash")
        .arg(root().join("scripts/gpu_check.sh"))
        .args(["--bin", env!("CARGO_BIN_EXE_reinforge")])
        .env("DEVICE", "cpu")
        .env("SHAPE", "tiny")
        .env("STEPS", "1")
        .env("WARMUP", "1")
        .env("ROUNDS", "1")
        .env("PROMPTS", "2")
        .env("GENERATIONS", "4")
        .env("MAX_LEN", "8")
        .env("THREADS", "1")
        // The MFU code path needs a peak; the CPU has none in the table.
        .env("PEAK_TFLOPS", "1")
        .env("OUT", &out)
        .env("WORK", tmp.path().join("work"))
        .output()
        .expect("run scripts/gpu_check.sh");
    assert!(
        run.status.success(),
        "gpu_check.sh failed:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    eprintln!("dry run took {:.1} s", started.elapsed().as_secs_f64());
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert!(all_finite(&r, "results") > 40);
    assert!(out.join("summary.txt").exists());
    let s = &r["stages"];

    // Parity: every fixture scored; cpu against cpu is exact in f32, bf16 drifts but not far;
    // the GRPO step has a gradient and the same samples on both sides.
    let p = &s["parity"];
    let fixtures = std::fs::read_dir(root().join("fixtures/hf/models"))
        .unwrap()
        .count();
    assert_eq!(p["logprobs"].as_object().unwrap().len(), fixtures);
    assert!(num(p, "logprobs_max_abs_f32") < 1e-5, "{p}");
    let bf16 = num(p, "logprobs_max_abs_bf16");
    assert!(bf16 > 0.0 && bf16 < 1.0, "{p}");
    let step = &p["grpo_step"];
    assert!(num(&step["cpu"], "grad_norm") > 0.0, "{step}");
    assert_eq!(step["same_samples"], Value::Bool(true));
    assert!(num(step, "grad_norm_rel_diff") < 1e-4, "{step}");

    let side = |x: &Value| {
        for k in [
            "median_step_s",
            "median_gen_s",
            "median_update_s",
            "gen_tokens_per_s",
            "update_tokens_per_s",
            "mfu_update",
            "mfu_step",
            "peak_mem_mib",
            "mean_completion_tokens",
        ] {
            assert!(num(x, k) > 0.0, "{k}: {x}");
        }
    };
    assert_eq!(s["grpo"]["status"], "ok");
    side(&s["grpo"]["reinforge"]);

    if root().join(".venv-trl/bin/python").exists() {
        assert_eq!(s["trl"]["status"], "ok", "{}", s["trl"]);
        side(&s["trl"]["trl"]);
        assert!(num(&s["trl"], "ratio_step_reinforge_over_trl") > 0.0);
    } else {
        // The script says why, and the test counts as skipped (scripts/test.sh prepares
        // .venv-trl with scripts/trl_env.sh, so under CI this fails the run).
        assert_eq!(s["trl"]["status"], "skipped");
        assert!(s["trl"]["reason"].as_str().unwrap().contains("trl"));
        common::real_model::skip("no .venv-trl (scripts/trl_env.sh): the TRL stage did not run");
    }

    let dp = &s["dp2"];
    assert_eq!(
        (dp["status"].as_str(), dp["backend"].as_str()),
        (Some("ok"), Some("gloo"))
    );
    assert!(num(&dp["max_abs_diff"], "grad_norm") < 1e-4, "{dp}");
}
