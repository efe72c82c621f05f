//! End-to-end runs of `reinforge train` on a tiny configuration: the reward rises, the same
//! seed repeats the metrics, Ctrl-C plus `--resume` equals an uninterrupted run, and `eval`
//! reads the checkpoints; the same for PPO with a critic (`rl.algorithm=ppo`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;
use common::tiny::{
    self, assert_prefix, check, deterministic_metrics, learning_steps, mean_change, metrics,
    reward_null, train_args, train_seeds, value_loss_null, LEARNING_STEPS, REPEAT_STEPS,
};

fn reinforge(args: &[String]) -> Output {
    tiny::run(args)
}

/// Trains `name` beside `run` from `run`'s resolved `config.toml` alone, for
/// [`REPEAT_STEPS`], and asserts it repeats the first steps of `run`.
fn repeat_from_config(run: &Path, name: &str) {
    check(&reinforge(&[
        "train".into(),
        "--config".into(),
        run.join("config.toml").display().to_string(),
        "--set".into(),
        format!("name={name}"),
        "--set".into(),
        format!("rl.steps={REPEAT_STEPS}"),
    ]));
    assert_prefix(run, &run.parent().unwrap().join(name));
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
    let steps = learning_steps();
    check(&reinforge(&train_args(dir.path(), "a", &[&steps])));
    let run = dir.path().join("a");
    assert_eq!(rewards(&run).len(), LEARNING_STEPS);
    // The reward rises, over this run (seed 0) and seed 1, by more than a frozen policy's noise.
    let mut seeds = vec![metrics(&run)];
    seeds.extend(train_seeds(dir.path(), "a", &[&steps], 1..2));
    let (gain, each) = mean_change(&seeds, "reward/mean");
    let min = reward_null().above(seeds.len());
    assert!(
        gain > min,
        "reward should rise by more than {min:.3} (a frozen policy's noise): {each:?}"
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
    // The claim is measured: selection + improvement is the pass@1 change, each with an
    // interval around its estimate, and the report writes the sentence the numbers support.
    let d = &summary["decomposition"];
    let num = |v: &Value| v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
    let gain = num(&summary["pass_at_1_gain"]);
    assert!((num(&d["delta"]) - gain).abs() < 1e-12, "{d}");
    assert!(
        (num(&d["selection"]) + num(&d["improvement"]) - gain).abs() < 1e-12,
        "selection + improvement must equal the pass@1 change: {d}"
    );
    for part in ["delta", "selection", "improvement"] {
        let (lo, hi) = (
            num(&d["intervals"][part]["lower"]),
            num(&d["intervals"][part]["upper"]),
        );
        assert!(lo <= num(&d[part]) && num(&d[part]) <= hi, "{part}: {d}");
    }
    let report = std::fs::read_to_string(run.join("report.md")).unwrap();
    let sentence = d["sentence"].as_str().unwrap();
    assert!(!sentence.is_empty() && report.contains(sentence));
    // The resolved config repeats the run.
    repeat_from_config(&run, "b");
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
    interrupt_resume_and_compare(dir.path(), &[]);
}

/// Runs `straight` to the end and `cut` with a Ctrl-C after 3 GRPO steps and `--resume`; their
/// metrics must agree.
fn interrupt_resume_and_compare(runs: &Path, extra: &[&str]) {
    let dir = runs;
    check(&reinforge(&train_args(dir, "straight", extra)));

    let mut child = Command::new(env!("CARGO_BIN_EXE_reinforge"))
        .args(train_args(dir, "cut", extra))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let metrics = dir.join("cut/metrics.jsonl");
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
        &std::fs::read_to_string(dir.join("cut/checkpoints/latest/trainer_state.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(state["phase"], "grpo");
    assert!(state["step"].as_u64().unwrap() < 20);

    check(&reinforge(&[
        "train".into(),
        "--resume".into(),
        dir.join("cut").display().to_string(),
    ]));
    assert_eq!(
        deterministic_metrics(&dir.join("straight")),
        deterministic_metrics(&dir.join("cut"))
    );
}

fn column(metrics: &[Value], key: &str) -> Vec<f64> {
    metrics
        .iter()
        .map(|m| {
            m[key]
                .as_f64()
                .unwrap_or_else(|| panic!("metrics lack {key}: {m}"))
        })
        .collect()
}

#[test]
fn ppo_run_raises_reward_and_its_critic_learns() {
    let dir = tempfile::tempdir().unwrap();
    let steps = learning_steps();
    let extra = ["rl.algorithm=ppo", &steps];
    check(&reinforge(&train_args(dir.path(), "ppo", &extra)));
    let run = dir.path().join("ppo");
    let config = std::fs::read_to_string(run.join("config.toml")).unwrap();
    assert!(
        config.contains("advantage_estimator = \"gae\"") && config.contains("[ppo]"),
        "{config}"
    );
    let m = deterministic_metrics(&run);
    assert_eq!(m.len(), LEARNING_STEPS);
    // Over this run (seed 0) and seed 1: the reward rises by more than a frozen policy's noise,
    // and the critic learns: its loss ends below where a frozen critic's drifts to.
    let mut seeds = vec![m.clone()];
    seeds.extend(train_seeds(dir.path(), "ppo", &extra, 1..2));
    let (gain, each) = mean_change(&seeds, "reward/mean");
    let min = reward_null().above(seeds.len());
    assert!(
        gain > min,
        "reward should rise by more than {min:.3} (a frozen policy's noise): {each:?}"
    );
    let (change, each) = mean_change(&seeds, "critic/value_loss");
    let max = value_loss_null().below(seeds.len());
    assert!(
        change < max,
        "value loss should change by less than {max:.3} (a frozen critic's): {each:?}"
    );
    // Explained variance is only checked finite: its change with a learning critic
    // (+0.071 ± 0.040 over 10 seeds) is within a frozen critic's spread (-0.014 ± 0.044).
    for k in [
        "critic/explained_var",
        "critic/vf_clipfrac",
        "critic/values_mean",
        "critic/returns_mean",
    ] {
        assert!(column(&m, k).iter().all(|v| v.is_finite()), "{k}");
    }
    assert!(
        m[0].get("ppo/reward_kl").is_none(),
        "no KL in the reward by default"
    );
    // Resumable checkpoints hold the critic and its optimizer; the final one its weights.
    for f in ["critic.safetensors", "critic_optimizer.safetensors"] {
        assert!(
            run.join("checkpoints/latest").join(f).exists(),
            "latest/{f}"
        );
    }
    assert!(run.join("checkpoints/final/critic.safetensors").exists());
    // The same seed repeats the run.
    repeat_from_config(&run, "again");
    // A GRPO run leaves the critic out of its metrics and checkpoints.
    check(&reinforge(&train_args(
        dir.path(),
        "grpo",
        &["rl.steps=2", "sft.steps=20"],
    )));
    let g = deterministic_metrics(&dir.path().join("grpo"));
    assert!(g[0].get("critic/value_loss").is_none());
    assert!(!dir
        .path()
        .join("grpo/checkpoints/latest/critic.safetensors")
        .exists());
}

#[test]
fn ppo_with_critic_warmup_and_kl_in_reward_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let extra = [
        "rl.algorithm=ppo",
        "ppo.critic_warmup=2",
        "ppo.kl_coef=0.05",
        "ppo.lam=0.95",
    ];
    interrupt_resume_and_compare(dir.path(), &extra);
    let m = deterministic_metrics(&dir.path().join("straight"));
    // Warm-up: the first two iterations update only the critic.
    for (i, line) in m.iter().enumerate() {
        let grad = line["grad_norm"].as_f64().unwrap();
        let critic_grad = line["critic/grad_norm"].as_f64().unwrap();
        assert!(critic_grad > 0.0, "step {i}: the critic always trains");
        assert_eq!(grad == 0.0, i < 2, "step {i}: policy grad_norm {grad}");
    }
    // KL in the reward: zero while the policy equals the SFT model, then positive.
    let kl = column(&m, "ppo/reward_kl");
    assert!(kl[..3].iter().all(|&k| k.abs() < 1e-6), "{kl:?}");
    assert!(kl[3..].iter().any(|&k| k > 0.0), "{kl:?}");
}

#[test]
fn bad_config_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let out = reinforge(&train_args(dir.path(), "x", &["rl.num_generations=many"]));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rl.num_generations") && err.contains("of type integer"),
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

/// Prompt (`<bos>` included) plus `rl.max_completion_length` exactly at the model's positions
/// trains (every completion runs to the limit with `ignore_eos`); one more token is an error
/// naming the keys, before any training.
#[test]
fn completions_fill_the_positions_exactly_at_the_edge() {
    let dir = tempfile::tempdir().unwrap();
    // 1-digit prompts: <bos> d + d = is 5 tokens; the model has 64 positions.
    let edge = [
        "rl.max_completion_length=59",
        "rl.ignore_eos=true",
        "sft.steps=5",
        "rl.steps=2",
        "eval.problems=2",
        "eval.samples=2",
    ];
    let out = reinforge(&train_args(dir.path(), "edge", &edge));
    check(&out);
    let m = deterministic_metrics(&dir.path().join("edge"));
    assert_eq!(column(&m, "response_length/mean"), vec![59.0, 59.0]);
    let mut over = edge.to_vec();
    over[0] = "rl.max_completion_length=60";
    let out = reinforge(&train_args(dir.path(), "over", &over));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rl.max_completion_length")
            && err.contains("max_position_embeddings = 64")
            && err.contains("at most 59"),
        "{err}"
    );
    assert!(
        !dir.path().join("over/sft_metrics.jsonl").exists(),
        "checked before training"
    );
}

/// `eval` reads the run's config.toml: the task's digits and completion length of the run,
/// not the defaults (a 1-digit run evaluated as 3-digit problems would score near zero).
#[test]
fn eval_uses_the_runs_own_config() {
    let dir = tempfile::tempdir().unwrap();
    check(&reinforge(&train_args(dir.path(), "e", &["rl.steps=2"])));
    let run = dir.path().join("e");
    let eval = |extra: &[&str]| {
        let mut args = vec![
            "eval".to_string(),
            "--checkpoint".into(),
            run.join("checkpoints/final").display().to_string(),
            "--output".into(),
            dir.path().join("eval.json").display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        check(&reinforge(&args));
        let v: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("eval.json")).unwrap())
                .unwrap();
        v
    };
    // Defaults come from the run's [eval]: 8 problems x 8 samples at the run's seed, so the
    // report equals the run's own evaluation after RL.
    let own: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("eval_rl.json")).unwrap()).unwrap();
    let v = eval(&[]);
    assert_eq!(
        (v["problems"].as_u64(), v["samples_per_problem"].as_u64()),
        (Some(8), Some(8))
    );
    // The same problems and policy as the run's own evaluation (other samples): pass@1
    // agrees within sampling noise, as it would not on the default 3-digit task.
    let (ours, theirs) = (
        v["pass_at_1"].as_f64().unwrap(),
        own["pass_at_1"].as_f64().unwrap(),
    );
    assert!(
        (ours - theirs).abs() < 0.3,
        "eval {ours} vs the run's {theirs}"
    );
    let none = reinforge(&[
        "eval".into(),
        "--checkpoint".into(),
        dir.path().display().to_string(),
    ]);
    assert!(!none.status.success());
    assert!(String::from_utf8_lossy(&none.stderr).contains("config.toml"));
}

/// A learning rate that blows the weights up gives NaN gradients: after
/// `max_nonfinite_steps` such steps in a row the run saves `checkpoints/latest` and stops
/// with an error naming the key, instead of training on garbage.
#[test]
fn repeated_nonfinite_gradients_stop_the_run_after_saving() {
    let dir = tempfile::tempdir().unwrap();
    let out = reinforge(&train_args(
        dir.path(),
        "blowup",
        &["sft.lr=1e30", "sft.warmup_steps=1", "max_nonfinite_steps=3"],
    ));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("3 consecutive") && err.contains("max_nonfinite_steps"),
        "{err}"
    );
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(
            dir.path()
                .join("blowup/checkpoints/latest/trainer_state.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(state["phase"], "sft");
    let steps = state["step"].as_u64().unwrap();
    assert!(steps < 200, "stopped early, at step {steps}");
    let lines = std::fs::read_to_string(dir.path().join("blowup/sft_metrics.jsonl")).unwrap();
    assert_eq!(lines.lines().count() as u64, steps);
}
