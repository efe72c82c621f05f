//! Rollouts beyond the trainer's lock step: asynchronous generation on the local engine
//! (`rollout.max_staleness`), and remote engines (`rollout.engine = "openai"`) served by
//! `reinforge serve --model` in other processes: the same draw as the local engine, weight
//! pushes confirmed by version and checksum, and a killed engine that fails the step clearly
//! and resumes with nothing lost.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common;
use common::server::{post, Server, ADMIN_KEY, API_KEY};
use common::tiny::{
    self, assert_prefix, check, column, deterministic_metrics as deterministic, learning_steps,
    mean_change, metrics, reward_null, train_args, train_seeds, turns_null, LEARNING_STEPS,
    REPEAT_STEPS,
};

fn reinforge(args: &[String]) -> Output {
    tiny::run(args)
}

#[test]
fn asynchronous_runs_repeat_exactly_and_train_on_weights_k_updates_old() {
    let dir = tempfile::tempdir().unwrap();
    let steps = learning_steps();
    let extra = [steps.as_str(), "rollout.max_staleness=2"];
    check(&reinforge(&train_args(dir.path(), "a", &extra)));
    // The same seed repeats the run: generation overlapping training adds no nondeterminism.
    let repeat = format!("rl.steps={REPEAT_STEPS}");
    let short = ["rollout.max_staleness=2", repeat.as_str()];
    check(&reinforge(&train_args(dir.path(), "b", &short)));
    assert_prefix(&dir.path().join("a"), &dir.path().join("b"));
    let a = deterministic(&dir.path().join("a"));
    // Step j trains on rollouts of weights max(0, j - 2).
    let stale = column(&a, "rollout/staleness_max");
    assert!(
        stale[0].is_nan(),
        "step 0 is on fresh weights: no staleness key"
    );
    assert_eq!(&stale[2..], &[2.0; LEARNING_STEPS - 2]);
    assert_eq!(column(&a, "rollout/stale_dropped")[5], 0.0);
    // Off-policy by two updates, yet the reward rises by more than a frozen policy's noise,
    // over this run (seed 0) and seeds 1 to 3: it learns more slowly and less evenly across
    // seeds than the synchronous run (tiny::reward_null), so four seeds.
    let mut seeds = vec![a.clone()];
    seeds.extend(train_seeds(dir.path(), "a", &extra, 1..4));
    let (gain, each) = mean_change(&seeds, "reward/mean");
    let min = reward_null().above(seeds.len());
    assert!(
        gain > min,
        "reward should rise by more than {min:.3}: {each:?}"
    );
    // The importance weights show the policy moved since the rollouts were drawn.
    assert!(column(&a, "rollout/is_weight_max")[6] > 1.0);
}

/// Copies the SFT-only run `base` to `name`, sets `keys` (TOML values) in its config and
/// resumes it: the RL phase from the same SFT checkpoint.
fn rl_from(base: &Path, name: &str, keys: &[(&str, &str, String)]) -> (PathBuf, Output) {
    let run = base.parent().unwrap().join(name);
    copy_dir(base, &run);
    for f in ["metrics.jsonl", "eval_rl.json", "summary.json", "report.md"] {
        let _ = std::fs::remove_file(run.join(f));
    }
    set_keys(&run, keys);
    let out = reinforge(&["train".into(), "--resume".into(), run.display().to_string()]);
    (run, out)
}

/// Sets `section.key = value` in a run's config.toml (each key present once in its section).
fn set_keys(run: &Path, keys: &[(&str, &str, String)]) {
    let path = run.join("config.toml");
    let mut doc: toml::Table = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for (section, key, value) in keys {
        let v: toml::Value =
            toml::from_str::<toml::Table>(&format!("v = {value}")).unwrap()["v"].clone();
        doc[*section]
            .as_table_mut()
            .unwrap()
            .insert(key.to_string(), v);
    }
    std::fs::write(&path, toml::to_string(&doc).unwrap()).unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// The keys both engines must agree on (the remote engine reports no entropies, and the
/// `rollout/*` keys exist only with it).
const SHARED: &[&str] = &[
    "reward/mean",
    "reward/std",
    "loss",
    "pg_loss",
    "ppo_kl",
    "pg_clipfrac",
    "grad_norm",
    "response_length/mean",
    "response/truncated_frac",
];

#[test]
fn remote_engines_draw_like_the_local_engine_and_a_killed_engine_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    check(&reinforge(&train_args(dir.path(), "base", &["rl.steps=0"])));
    let base = dir.path().join("base");
    let steps = ("rl", "steps", "4".to_string());
    let (local, out) = rl_from(&base, "local", std::slice::from_ref(&steps));
    check(&out);

    // One engine serving the SFT weights, seeded requests decoded alone: the local draw.
    let a = Server::model_with_keys(&base.join("checkpoints/sft"));
    let remote_keys = |urls: &[&str]| {
        vec![
            steps.clone(),
            ("rollout", "engine", "\"openai\"".to_string()),
            ("rollout", "base_urls", format!("{urls:?}")),
            ("rollout", "retries", "1".to_string()),
            ("rollout", "timeout_s", "60".to_string()),
            // The engines want keys (issue 24): the trainer sends both.
            ("rollout", "api_key", format!("{API_KEY:?}")),
            ("rollout", "admin_key", format!("{ADMIN_KEY:?}")),
        ]
    };
    let (one, out) = rl_from(&base, "one", &remote_keys(&[&a.url]));
    check(&out);
    let (l, r) = (metrics(&local), metrics(&one));
    assert_eq!(l.len(), 4);
    for (ls, rs) in l.iter().zip(&r) {
        for key in SHARED {
            let (x, y) = (ls[key].as_f64().unwrap(), rs[key].as_f64().unwrap());
            assert!(
                (x - y).abs() <= 1e-6 * (1.0 + x.abs()),
                "step {}: {key} local {x} remote {y}",
                ls["step"]
            );
        }
        // A push per step (the weights changed), and the engine's log-probs are the trainer's.
        assert!(rs["rollout/push_bytes"].as_f64().unwrap() > 0.0);
        assert!(
            rs["rollout/logprob_gap_max_abs"].as_f64().unwrap() < 1e-4,
            "{rs}"
        );
    }

    // Two engines: the groups split across them; the run trains and every push is confirmed.
    let b = Server::model_with_keys(&base.join("checkpoints/sft"));
    let mut keys = remote_keys(&[&a.url, &b.url]);
    keys[0].2 = "12".into();
    let (two, out) = rl_from(&base, "two", &keys);
    check(&out);
    let m = metrics(&two);
    assert_eq!(m.len(), 12);
    assert!(m
        .iter()
        .all(|s| s["rollout/logprob_gap_max_abs"].as_f64().unwrap() < 1e-4));

    // Kill engine b mid-run: the step fails naming it, latest holds every finished step, and
    // the resumed run (b replaced by a new engine) equals the uninterrupted one.
    let cut = dir.path().join("cut");
    copy_dir(&base, &cut);
    for f in ["metrics.jsonl", "eval_rl.json", "summary.json", "report.md"] {
        let _ = std::fs::remove_file(cut.join(f));
    }
    set_keys(&cut, &keys);
    let run = Command::new(env!("CARGO_BIN_EXE_reinforge"))
        .args(["train", "--resume"])
        .arg(&cut)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while std::fs::read_to_string(cut.join("metrics.jsonl")).map_or(0, |t| t.lines().count()) < 2 {
        assert!(std::time::Instant::now() < deadline, "no progress");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let b_url = b.url.clone();
    drop(b);
    let out = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the run outlived its engine: {err}");
    assert!(err.contains(&b_url) && err.contains("--resume"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let done = metrics(&cut).len();
    assert!((2..12).contains(&done), "{done} steps before the failure");
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(cut.join("checkpoints/latest/trainer_state.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        state["step"].as_u64(),
        Some(done as u64),
        "latest holds every finished step"
    );
    let c = Server::model_with_keys(&base.join("checkpoints/sft"));
    set_keys(
        &cut,
        &[("rollout", "base_urls", format!("{:?}", [&a.url, &c.url]))],
    );
    check(&reinforge(&[
        "train".into(),
        "--resume".into(),
        cut.display().to_string(),
    ]));
    let (straight, resumed) = (metrics(&two), metrics(&cut));
    assert_eq!(resumed.len(), 12);
    for (x, y) in straight.iter().zip(&resumed) {
        for key in SHARED {
            assert_eq!(x[key], y[key], "step {}: {key}", x["step"]);
        }
    }
}

/// `reinforge generate` output lines.
fn generate(args: &[&str]) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_reinforge"))
        .arg("generate")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn served_greedy_completions_equal_reinforge_generate() {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hf/models/llama");
    let m = model.to_str().unwrap();
    let s = Server::model(&model);
    let prompt = "The quick brown fox";
    // Raw text: /v1/completions against generate --raw.
    let want = generate(&[
        "--model",
        m,
        "--prompt",
        prompt,
        "--raw",
        "--temperature",
        "0",
        "--max-new-tokens",
        "12",
    ]);
    let got = post(
        &format!("{}/v1/completions", s.url),
        &serde_json::json!({"model": "llama", "prompt": prompt, "max_tokens": 12, "temperature": 0, "return_token_ids": true}),
    );
    assert_eq!(
        got["choices"][0]["token_ids"], want[0]["completion_ids"],
        "{got}"
    );
    assert_eq!(got["choices"][0]["text"], want[0]["completion"]);
    assert_eq!(got["weight_version"], "0");
    // A chat message: /v1/chat/completions against generate with the chat template.
    let want = generate(&[
        "--model",
        m,
        "--prompt",
        prompt,
        "--temperature",
        "0",
        "--max-new-tokens",
        "12",
    ]);
    let got = post(
        &format!("{}/v1/chat/completions", s.url),
        &serde_json::json!({"model": "llama", "messages": [{"role": "user", "content": prompt}],
                             "max_tokens": 12, "temperature": 0, "return_token_ids": true}),
    );
    assert_eq!(
        got["choices"][0]["token_ids"], want[0]["completion_ids"],
        "{got}"
    );
    assert_eq!(
        got["choices"][0]["message"]["content"],
        want[0]["completion"]
    );
}

/// The official `openai` Python client (installed into `.venv` by scripts/setup.sh) completes,
/// chats, streams, gets token ids and log-probs, and drives the weight routes of
/// `reinforge serve --model` (scripts/clients/openai_policy_client.py: 52 checks).
#[test]
fn the_official_openai_client_passes_every_check() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let model = root.join("fixtures/hf/models/llama");
    let s = Server::start(&[
        "--threads",
        "1",
        "--model",
        model.to_str().unwrap(),
        "--api-key",
        API_KEY,
    ]);
    let out = Command::new(root.join(".venv/bin/python"))
        .arg(root.join("scripts/clients/openai_policy_client.py"))
        .arg(&s.url)
        .arg("--update-weights")
        .arg(&model)
        .arg("--api-key")
        .arg(API_KEY)
        .output()
        .expect("runs .venv/bin/python (scripts/setup.sh creates it)");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&report).expect("a JSON summary");
    assert!(v["checks"].as_u64().unwrap() >= 40);
    assert_eq!(v["checks"], v["passed"]);
}

/// The built-in multi-turn task (`task.attempts`): after a wrong answer the problem is posed
/// again; episodes carry the environment's tokens masked out of the loss, and training raises
/// the reward while the episodes get shorter (more first-try answers).
#[test]
fn the_retry_game_trains_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let steps = learning_steps();
    let extra = [steps.as_str(), "task.attempts=3"];
    check(&reinforge(&train_args(dir.path(), "retry", &extra)));
    let m = metrics(&dir.path().join("retry"));
    let turns = column(&m, "multi_turn/turns_mean");
    let obs = column(&m, "multi_turn/observations_mean");
    assert!(turns.iter().all(|&t| (1.0..=3.0).contains(&t)), "{turns:?}");
    assert!(
        obs[0] > 0.0,
        "some first attempts fail and get the problem again: {obs:?}"
    );
    // Over this run (seed 0) and seed 1, beyond a frozen policy's noise: the reward rises and
    // the episodes get shorter.
    let mut seeds = vec![m];
    seeds.extend(train_seeds(dir.path(), "retry", &extra, 1..2));
    let (gain, each) = mean_change(&seeds, "reward/mean");
    let min = reward_null().above(seeds.len());
    assert!(
        gain > min,
        "reward should rise by more than {min:.3}: {each:?}"
    );
    let (change, each) = mean_change(&seeds, "multi_turn/turns_mean");
    let max = turns_null().below(seeds.len());
    assert!(
        change < max,
        "turns should fall by more than {max:.3}: {each:?}"
    );
}
