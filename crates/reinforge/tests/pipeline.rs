//! End-to-end runs of `reinforge train` on a tiny configuration: the reward rises, the same
//! seed repeats the metrics, Ctrl-C plus `--resume` equals an uninterrupted run, and `eval`
//! reads the checkpoints.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A small, fast configuration: 1-digit addition, a 2-layer model, short phases.
const TINY: &[&str] = &[
    "task.digits=1",
    "model.hidden_size=32",
    "model.intermediate_size=64",
    "model.num_hidden_layers=2",
    "sft.steps=200",
    "sft.lr=1e-2",
    "sft.batch_size=32",
    "sft.warmup_steps=10",
    "grpo.steps=20",
    "grpo.prompts_per_step=16",
    "grpo.num_generations=8",
    "grpo.lr=5e-4",
    "grpo.max_completion_length=16",
    "grpo.checkpoint_every=2",
    "eval.problems=8",
    "eval.samples=8",
];

fn reinforge(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_reinforge"))
        .args(args)
        .output()
        .expect("runs the binary")
}

fn train_args(runs: &Path, name: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["train".to_string()];
    for kv in TINY.iter().chain(extra).map(|s| s.to_string()).chain([
        format!("runs_dir={}", runs.display()),
        format!("name={name}"),
    ]) {
        args.push("--set".into());
        args.push(kv);
    }
    args
}

fn check(out: &Output) {
    assert!(
        out.status.success(),
        "status {:?}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `metrics.jsonl` without the wall-clock `timing/*` keys.
fn deterministic_metrics(run: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    text.lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            v.as_object_mut()
                .unwrap()
                .retain(|k, _| !k.starts_with("timing/"));
            v
        })
        .collect()
}

fn rewards(run: &Path) -> Vec<f64> {
    deterministic_metrics(run)
        .iter()
        .map(|m| m["reward/mean"].as_f64().unwrap())
        .collect()
}

#[test]
fn short_run_raises_reward_and_writes_every_file() {
    let dir = tempfile::tempdir().unwrap();
    check(&reinforge(&train_args(dir.path(), "a", &[])));
    let run = dir.path().join("a");
    let r = rewards(&run);
    assert_eq!(r.len(), 20);
    let first = r[..5].iter().sum::<f64>() / 5.0;
    let last = r[r.len() - 5..].iter().sum::<f64>() / 5.0;
    assert!(
        last > first + 0.03,
        "reward should rise: first steps {first:.3}, last steps {last:.3} ({r:?})"
    );
    for f in [
        "config.toml",
        "sft_metrics.jsonl",
        "eval_sft.json",
        "eval_rl.json",
        "summary.json",
        "report.md",
        "reward.png",
        "pass_at_k.png",
        "patterns.png",
        "pattern_success.png",
    ] {
        assert!(run.join(f).exists(), "{f} missing");
    }
    for c in ["sft", "final", "latest"] {
        for f in ["model.safetensors", "config.json", "trainer_state.json"] {
            assert!(
                run.join("checkpoints").join(c).join(f).exists(),
                "checkpoints/{c}/{f} missing"
            );
        }
    }
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    for k in [
        "pass_at_1_sft",
        "pass_at_1_rl",
        "best_pattern_share_sft",
        "best_pattern_share_rl",
    ] {
        let v = summary[k]
            .as_f64()
            .unwrap_or_else(|| panic!("summary.json lacks {k}"));
        assert!((0.0..=1.0).contains(&v), "{k} = {v}");
    }
    // The resolved config repeats the run.
    let again = reinforge(&[
        "train".into(),
        "--config".into(),
        run.join("config.toml").display().to_string(),
        "--set".into(),
        "name=b".into(),
    ]);
    check(&again);
    assert_eq!(
        deterministic_metrics(&run),
        deterministic_metrics(&dir.path().join("b")),
        "same seed, same metrics"
    );
    // eval reads a checkpoint.
    let out = reinforge(&[
        "eval".into(),
        "--checkpoint".into(),
        run.join("checkpoints/final").display().to_string(),
        "--problems".into(),
        "4".into(),
        "--samples".into(),
        "4".into(),
    ]);
    check(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("pass@4"));
    // A run directory is never overwritten.
    let clash = reinforge(&train_args(dir.path(), "a", &[]));
    assert!(!clash.status.success());
    assert!(String::from_utf8_lossy(&clash.stderr).contains("--resume"));
}

#[test]
fn ctrl_c_then_resume_equals_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    check(&reinforge(&train_args(dir.path(), "straight", &[])));

    let mut child = Command::new(env!("CARGO_BIN_EXE_reinforge"))
        .args(train_args(dir.path(), "cut", &[]))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let metrics = dir.path().join("cut/metrics.jsonl");
    let deadline = Instant::now() + Duration::from_secs(300);
    while std::fs::read_to_string(&metrics).map_or(0, |t| t.lines().count()) < 3 {
        assert!(Instant::now() < deadline, "no GRPO progress");
        std::thread::sleep(Duration::from_millis(20));
    }
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(130),
        "Ctrl-C exits with 130 after checkpointing"
    );
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("cut/checkpoints/latest/trainer_state.json"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(state["phase"], "grpo");
    assert!(state["step"].as_u64().unwrap() < 20);

    check(&reinforge(&[
        "train".into(),
        "--resume".into(),
        dir.path().join("cut").display().to_string(),
    ]));
    assert_eq!(
        deterministic_metrics(&dir.path().join("straight")),
        deterministic_metrics(&dir.path().join("cut"))
    );
}

#[test]
fn bad_config_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let out = reinforge(&train_args(dir.path(), "x", &["grpo.num_generations=many"]));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("grpo.num_generations") && err.contains("expected a integer"),
        "{err}"
    );
    let bad_file: PathBuf = dir.path().join("bad.toml");
    std::fs::write(&bad_file, "[sft]\nsteps = \"ten\"\n").unwrap();
    let out = reinforge(&[
        "train".into(),
        "--config".into(),
        bad_file.display().to_string(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("steps"), "{err}");
}
