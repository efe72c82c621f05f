//! Every registered policy loss (`rl.policy_loss`, `reinforge_torch::train::loss::PolicyLossKind`)
//! runs the default experiment end to end on tiny settings, with finite metrics.

use std::process::Command;

use reinforge_torch::train::loss::PolicyLossKind;
use serde_json::Value;

/// A tiny version of the default experiment: short SFT and two GRPO iterations, each with two
/// epochs of two mini-batches (so the ratio moves away from 1 and the clips can act).
const TINY: &[&str] = &[
    "task.digits=1",
    "model.hidden_size=32",
    "model.intermediate_size=64",
    "model.num_hidden_layers=2",
    "sft.steps=30",
    "sft.batch_size=16",
    "sft.lr=1e-2",
    "sft.checkpoint_every=0",
    "rl.steps=2",
    "rl.prompts_per_step=4",
    "rl.num_generations=4",
    "rl.max_completion_length=16",
    "rl.checkpoint_every=0",
    "eval.problems=8",
    "eval.samples=4",
];

/// Every numeric value of every line of a jsonl file, with its key.
fn numbers(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .flat_map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON line");
            v.as_object()
                .expect("an object")
                .iter()
                .filter_map(|(k, x)| x.as_f64().map(|f| (k.clone(), f)))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn every_registered_policy_loss_trains_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    for loss in PolicyLossKind::NAMES {
        let mut args = vec!["train".to_string()];
        for kv in TINY.iter().map(|s| s.to_string()).chain([
            format!("runs_dir={}", dir.path().display()),
            format!("name=t-{loss}"),
            format!("rl.policy_loss={loss}"),
        ]) {
            args.push("--set".into());
            args.push(kv);
        }
        let out = Command::new(env!("CARGO_BIN_EXE_reinforge"))
            .args(&args)
            .output()
            .expect("runs the binary");
        assert!(
            out.status.success(),
            "{loss}: status {:?}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let run = dir.path().join(format!("t-{loss}"));
        let config = std::fs::read_to_string(run.join("config.toml")).unwrap();
        assert!(
            config.contains(&format!("policy_loss = \"{loss}\"")),
            "{loss}: the run used it"
        );
        let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
        assert_eq!(metrics.lines().count(), 2, "{loss}: two GRPO iterations");
        let values = numbers(&metrics);
        assert!(values.iter().any(|(k, _)| k == "pg_loss"), "{loss}");
        for (k, v) in values {
            assert!(v.is_finite(), "{loss}: {k} = {v}");
        }
    }
}
