//! The reward-hacking monitor from the command line (issue 27, item 2): `reinforge verify
//! --probe` tells a verifier in `last_value` mode from the default one on a labelled set
//! whose prompts contain their answers, for the verifier alone and for a reward spec; and a
//! dataset run scores the canaries of its own prompts, logs `integrity/*` and writes the
//! "Reward integrity" section, warning only for the exploitable reward.

use crate::common;

use std::path::{Path, PathBuf};

use common::{reinforge, root};
use serde_json::Value;

/// Prompts whose hint numbers end with the answer, so repeating them states it last.
fn write_set(dir: &Path) -> PathBuf {
    let path = dir.join("hinted.jsonl");
    let rows: String = (0..6)
        .map(|i| {
            let (a, b) = (i + 2, 2 * i + 3);
            serde_json::json!({
                "id": format!("r{i}"),
                "prompt": format!("What is {a} + {b}? Hint: the numbers {} and {} may help.", i + 1, a + b),
                "gold": (a + b).to_string(),
                "answer": (a + b).to_string(),
            })
            .to_string()
                + "\n"
        })
        .collect();
    std::fs::write(&path, rows).unwrap();
    path
}

fn write_spec(dir: &Path, policy: &str) -> PathBuf {
    let path = dir.join(format!("{policy}.toml"));
    std::fs::write(
        &path,
        format!("[components.accuracy]\ntype = \"math\"\n[components.accuracy.options]\nanswer_policy = \"{policy}\"\n"),
    )
    .unwrap();
    path
}

/// `verify --probe` with `extra` args: the output lines and stderr.
fn probe(set: &Path, out: &Path, extra: &[&str]) -> (Vec<Value>, String) {
    let mut args = vec![
        "verify",
        "--probe",
        set.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = reinforge(&args);
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{stderr}");
    let lines = std::fs::read_to_string(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (lines, stderr)
}

fn credited_kinds(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l["credited"] == true)
        .map(|l| l["kind"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn verify_probe_tells_an_exploitable_verifier_from_the_default() {
    let tmp = tempfile::tempdir().unwrap();
    let set = write_set(tmp.path());
    let out = tmp.path().join("canaries.jsonl");
    let (lines, stderr) = probe(&set, &out, &[]);
    assert!(lines.len() >= 6 * 6, "{} canaries", lines.len());
    assert!(credited_kinds(&lines).is_empty(), "{stderr}");
    assert!(stderr.contains("no canary credited"), "{stderr}");

    let (lines, stderr) = probe(
        &set,
        &out,
        &["--options", r#"{"answer_policy": "last_value"}"#],
    );
    let hits = credited_kinds(&lines);
    assert_eq!(
        hits.len(),
        6,
        "one repeated-numbers canary per row: {stderr}"
    );
    assert!(hits.iter().all(|k| k == "question_numbers"), "{hits:?}");
    assert!(stderr.contains("question_numbers  6 of 12"), "{stderr}");

    // The same through a reward spec.
    for (policy, want) in [("stated", 0), ("last_value", 6)] {
        let spec = write_spec(tmp.path(), policy);
        let (lines, stderr) = probe(&set, &out, &["--reward", spec.to_str().unwrap()]);
        assert_eq!(credited_kinds(&lines).len(), want, "{policy}: {stderr}");
    }
    // --reward belongs to --probe.
    let spec = write_spec(tmp.path(), "stated");
    let o = reinforge(&[
        "verify",
        "--input",
        set.to_str().unwrap(),
        "--output",
        "-",
        "--reward",
        spec.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--probe"));
}

#[test]
fn a_dataset_run_scores_its_canaries_and_reports_them() {
    let tmp = tempfile::tempdir().unwrap();
    let data = write_set(tmp.path());
    let model = root().join("fixtures/hf/models/llama");
    let runs = tmp.path().join("runs");
    for policy in ["last_value", "stated"] {
        let spec = write_spec(tmp.path(), policy);
        let mut args: Vec<String> = [
            "train",
            "--model",
            model.to_str().unwrap(),
            "--data",
            data.to_str().unwrap(),
            "--reward",
            spec.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec();
        for kv in [
            format!("runs_dir={}", runs.display()),
            format!("name={policy}"),
            "rl.steps=2".into(),
            "rl.prompts_per_step=3".into(),
            "rl.num_generations=2".into(),
            "rl.max_completion_length=6".into(),
            "integrity.canary_every=1".into(),
            "integrity.canary_prompts=6".into(),
        ] {
            args.extend(["--set".into(), kv]);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = reinforge(&refs);
        let stderr = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "{stderr}");
        let run = runs.join(policy);
        let metrics: Vec<Value> = std::fs::read_to_string(run.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let section = std::fs::read_to_string(run.join("integrity.md")).unwrap();
        let log: Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("integrity.json")).unwrap())
                .unwrap();
        assert_eq!(log["canary_checks"].as_array().unwrap().len(), 2, "{log}");
        for m in &metrics {
            let share = m["integrity/canary_credited"].as_f64().unwrap();
            assert!(
                m["integrity/credited"].is_number(),
                "the math verifier judged every row: {m}"
            );
            if policy == "last_value" {
                assert!(share > 0.0, "{m}");
            } else {
                assert_eq!(share, 0.0, "{m}");
            }
        }
        if policy == "last_value" {
            assert!(
                section.contains("**Warning**") && section.contains("question_numbers"),
                "{section}"
            );
            assert!(stderr.contains("warning: reward integrity"), "{stderr}");
        } else {
            assert!(section.contains("No warning"), "{section}");
            assert!(!stderr.contains("reward integrity"), "{stderr}");
        }
    }
}
