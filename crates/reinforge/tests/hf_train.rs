//! `reinforge train --model DIR --data FILE --reward SPEC` on a fixture checkpoint: the reward
//! rises, the same seed repeats the metrics, and the trained checkpoint loads back in
//! transformers with the log-probs reinforge computes (scripts/reference_generate_score.py).

use crate::common;

use std::path::{Path, PathBuf};

use common::{floats, max_abs_diff, reference, reinforge, root};
use serde_json::Value;

/// Arithmetic prompts with answers, as a user's jsonl would hold them.
fn write_data(dir: &Path) -> PathBuf {
    let path = dir.join("arith.jsonl");
    let lines: String = (0..40)
        .map(|i| {
            let (a, b) = (i % 7, (i * 3) % 10);
            format!(
                "{{\"prompt\": \"What is {a}+{b}?\", \"answer\": \"{}\"}}\n",
                a + b
            )
        })
        .collect();
    std::fs::write(&path, lines).unwrap();
    path
}

/// A reward a random tiny model can learn within seconds: any digit in the completion.
fn write_spec(dir: &Path) -> PathBuf {
    let path = dir.join("digits.toml");
    std::fs::write(
        &path,
        "[components.digit]\ntype = \"format\"\npattern = '[0-9]'\n",
    )
    .unwrap();
    path
}

fn train(dir: &Path, name: &str, extra: &[&str]) -> Vec<Value> {
    let out = reinforge(&refs(&train_args(dir, name, extra)));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    metrics(dir, name)
}

fn refs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

fn metrics(dir: &Path, name: &str) -> Vec<Value> {
    std::fs::read_to_string(dir.join("runs").join(name).join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `train --model qwen2-fixture --data arith.jsonl --reward digits.toml` with a small fast
/// config (24 steps unless `extra` says otherwise).
fn train_args(dir: &Path, name: &str, extra: &[&str]) -> Vec<String> {
    let model = root().join("fixtures/hf/models/qwen2");
    let data = write_data(dir);
    let spec = write_spec(dir);
    let runs = dir.join("runs");
    let sets = [
        format!("runs_dir={}", runs.display()),
        format!("name={name}"),
        "rl.steps=24".into(),
        "rl.prompts_per_step=8".into(),
        "rl.num_generations=8".into(),
        "rl.max_completion_length=8".into(),
        "rl.lr=3e-3".into(),
    ];
    let mut args: Vec<String> = ["train", "--model", model.to_str().unwrap(), "--data"]
        .map(String::from)
        .to_vec();
    args.push(data.to_str().unwrap().into());
    args.push("--reward".into());
    args.push(spec.to_str().unwrap().into());
    for s in &sets {
        args.push("--set".into());
        args.push(s.clone());
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn rewards(m: &[Value]) -> Vec<f64> {
    m.iter()
        .map(|l| l["reward/mean"].as_f64().unwrap())
        .collect()
}

fn without_timing(m: &[Value]) -> Vec<Value> {
    m.iter()
        .map(|l| {
            let mut l = l.clone();
            l.as_object_mut()
                .unwrap()
                .retain(|k, _| !k.starts_with("timing/"));
            l
        })
        .collect()
}

#[test]
fn a_fixture_checkpoint_learns_its_reward_and_loads_back_in_transformers() {
    let tmp = tempfile::tempdir().unwrap();
    let m = train(tmp.path(), "a", &[]);
    assert_eq!(m.len(), 24);
    let r = rewards(&m);
    let first: f64 = r[..4].iter().sum::<f64>() / 4.0;
    let last: f64 = r[r.len() - 4..].iter().sum::<f64>() / 4.0;
    assert!(last > first + 0.3, "reward did not rise: {r:?}");

    // Same seed, same metrics (CPU).
    let again = train(tmp.path(), "b", &[]);
    assert_eq!(without_timing(&m), without_timing(&again));

    // The trained checkpoint: reinforge's and transformers' log-probs of a pair agree.
    let ckpt = tmp.path().join("runs/a/checkpoints/final");
    let pairs = tmp.path().join("pairs.jsonl");
    std::fs::write(
        &pairs,
        "{\"prompt\": \"What is 2+3?\", \"completion\": \"5, so 5\"}\n",
    )
    .unwrap();
    let out = reinforge(&[
        "score",
        "--model",
        ckpt.to_str().unwrap(),
        "--input",
        pairs.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ours: Value =
        serde_json::from_slice(out.stdout.split(|&b| b == b'\n').next().unwrap()).unwrap();
    let theirs = &reference(&[&ckpt], &pairs, 1)[0][0];
    let diff = max_abs_diff(
        &floats(&ours["token_logprobs"]),
        &floats(&theirs["token_logprobs"]),
    );
    assert!(
        diff < 1e-4,
        "trained checkpoint: max abs log-prob diff {diff}"
    );
}

#[test]
fn a_bad_data_row_is_named_before_training() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("bad.jsonl");
    std::fs::write(
        &data,
        "{\"prompt\": \"1+1\", \"answer\": \"2\"}\n{\"question\": \"x\"}\n",
    )
    .unwrap();
    let model = root().join("fixtures/hf/models/qwen2");
    let runs = format!("runs_dir={}", tmp.path().join("runs").display());
    let out = reinforge(&[
        "train",
        "--model",
        model.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--set",
        &runs,
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.jsonl") && err.contains("prompt") && err.contains('2'),
        "{err}"
    );
}

#[test]
fn lora_training_learns_and_writes_a_peft_adapter() {
    let tmp = tempfile::tempdir().unwrap();
    let m = train(
        tmp.path(),
        "lora",
        &["--lora-r", "8", "--set", "rl.lr=1e-2"],
    );
    let r = rewards(&m);
    let first: f64 = r[..4].iter().sum::<f64>() / 4.0;
    let last: f64 = r[r.len() - 4..].iter().sum::<f64>() / 4.0;
    assert!(last > first + 0.3, "LoRA reward did not rise: {r:?}");
    let adapter = tmp.path().join("runs/lora/checkpoints/final-adapter");
    let cfg: Value = serde_json::from_str(
        &std::fs::read_to_string(adapter.join("adapter_config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        (cfg["peft_type"].as_str(), cfg["r"].as_u64()),
        (Some("LORA"), Some(8))
    );
    assert!(adapter.join("adapter_model.safetensors").exists());
    // The merged checkpoint differs from the base: the adapters were trained and folded in.
    let base = std::fs::read(root().join("fixtures/hf/models/qwen2/model.safetensors")).unwrap();
    let merged = std::fs::read(
        tmp.path()
            .join("runs/lora/checkpoints/final/model.safetensors"),
    )
    .unwrap();
    assert_ne!(base, merged);
}

/// Ctrl-C (SIGINT) checkpoints and exits 130; `--resume` finishes with the metrics and the
/// final weights of an uninterrupted run, with and without LoRA.
#[test]
fn interrupted_dataset_runs_resume_exactly() {
    for (name, extra) in [
        (
            "full",
            &["--set", "rl.steps=60", "--set", "rl.checkpoint_every=5"][..],
        ),
        (
            "lora",
            &[
                "--set",
                "rl.steps=60",
                "--set",
                "rl.checkpoint_every=5",
                "--lora-r",
                "4",
            ][..],
        ),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let straight = train(tmp.path(), "straight", extra);
        let log = tmp.path().join("cut.stderr");
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_reinforge"))
            .args(train_args(tmp.path(), "cut", extra))
            .stderr(std::fs::File::create(&log).unwrap())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let file = tmp.path().join("runs/cut/metrics.jsonl");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while std::fs::read_to_string(&file).map_or(0, |t| t.lines().count()) < 7 {
            assert!(std::time::Instant::now() < deadline, "{name}: no progress");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        std::process::Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        let status = child.wait().unwrap();
        assert_eq!(
            status.code(),
            Some(130),
            "{name}: Ctrl-C exits 130, not {status:?}; its stderr:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let cut = metrics(tmp.path(), "cut");
        assert!(
            cut.len() < 60,
            "{name}: the run finished before the interrupt"
        );
        let run_dir = tmp.path().join("runs/cut");
        let out = reinforge(&["train", "--resume", run_dir.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            without_timing(&straight),
            without_timing(&metrics(tmp.path(), "cut")),
            "{name}: resumed metrics differ"
        );
        let weights = |run: &str| {
            std::fs::read(
                tmp.path()
                    .join("runs")
                    .join(run)
                    .join("checkpoints/final/model.safetensors"),
            )
            .unwrap()
        };
        assert!(
            weights("straight") == weights("cut"),
            "{name}: final weights differ"
        );
    }
}

/// Positions are checked against the loaded model (128 for the fixture), not the arithmetic
/// model's 64: a completion length past 64 trains; one past the fixture's positions is an
/// error naming the row and the keys before training.
#[test]
fn positions_are_checked_against_the_loaded_model() {
    let tmp = tempfile::tempdir().unwrap();
    let m = train(
        tmp.path(),
        "long",
        &[
            "--set",
            "rl.max_completion_length=80",
            "--set",
            "rl.steps=1",
            "--set",
            "rl.ignore_eos=true",
        ],
    );
    assert_eq!(m[0]["response_length/mean"].as_f64(), Some(80.0));
    let out = reinforge(&refs(&train_args(
        tmp.path(),
        "over",
        &["--set", "rl.max_completion_length=127"],
    )));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("arith.jsonl row 1")
            && err.contains("rl.max_completion_length")
            && err.contains("max_position_embeddings = 128"),
        "{err}"
    );
}

/// `rl.algorithm=ppo` on a dataset: the trainer creates the critic from the loaded model,
/// logs its metrics and saves it with the resumable checkpoint.
#[test]
fn ppo_trains_a_critic_on_a_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let m = train(
        tmp.path(),
        "ppo",
        &["--set", "rl.algorithm=ppo", "--set", "rl.steps=3"],
    );
    assert_eq!(m.len(), 3);
    for line in &m {
        let v = line["critic/value_loss"].as_f64().expect("critic metrics");
        assert!(v.is_finite(), "{line}");
    }
    let latest = tmp.path().join("runs/ppo/checkpoints/latest");
    for f in [
        "critic.safetensors",
        "critic_optimizer.safetensors",
        "tokenizer.json",
    ] {
        assert!(latest.join(f).exists(), "latest/{f}");
    }
}
