//! Reward models end to end on the fixture Llama: `train-rm` learns a known rule (the chosen
//! response repeats the number the prompt names) to held-out accuracy ≥ 0.95 and resumes;
//! transformers' `AutoModelForSequenceClassification` loads the saved model and gives the
//! same scores; `score-rm`, a reward spec's `type = "model"` component (GRPO raises the
//! reward model's score) and OpenRLHF's `/get_reward` all read the same numbers; LoRA runs
//! resume to the very scores of an uninterrupted run.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::server::{post, Server};
use common::tiny::column;
use common::{reinforge, root};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

/// Pairs whose chosen response repeats the prompt's number and whose rejected one names
/// another (two-digit numbers, drawn from `seed`).
fn pairs(n: usize, seed: u64) -> Vec<(u32, u32)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let a = rng.gen_range(10..99);
            let mut b = rng.gen_range(10..99);
            while b == a {
                b = rng.gen_range(10..99);
            }
            (a, b)
        })
        .collect()
}

fn write_pairs(path: &Path, p: &[(u32, u32)]) {
    let text: String = p
        .iter()
        .map(|(a, b)| {
            json!({"prompt": format!("Repeat {a}."), "chosen": a.to_string(), "rejected": b.to_string()})
                .to_string()
                + "\n"
        })
        .collect();
    std::fs::write(path, text).unwrap();
}

fn fixture() -> PathBuf {
    root().join("fixtures/hf/models/llama")
}

fn ok(args: &[&str]) -> std::process::Output {
    let o = reinforge(args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    o
}

fn train_rm(data: &Path, out: &Path, steps: &str, extra: &[&str]) {
    let mut a = vec![
        "train-rm",
        "--model",
        fixture().to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--steps",
        steps,
        "--batch-size",
        "32",
        "--lr",
        "1e-3",
        "--threads",
        "1",
    ]
    .into_iter()
    .map(String::from)
    .collect::<Vec<_>>();
    a.extend(extra.iter().map(|s| s.to_string()));
    ok(&a.iter().map(String::as_str).collect::<Vec<_>>());
}

/// `score-rm --emit-ids` of `rows` with `model`: the output rows.
fn score_rm(model: &Path, rows: &Path) -> Vec<Value> {
    let o = ok(&[
        "score-rm",
        "--model",
        model.to_str().unwrap(),
        "--data",
        rows.to_str().unwrap(),
        "--emit-ids",
    ]);
    common::json_lines(&o.stdout)
}

/// scripts/check_rm_transformers.py on `scored`: transformers' largest score difference.
fn transformers_gap(model: &Path, scored: &[Value], dir: &Path) -> f64 {
    let path = dir.join("scored.jsonl");
    let text: String = scored.iter().map(|v| v.to_string() + "\n").collect();
    std::fs::write(&path, text).unwrap();
    let out = Command::new(root().join(".venv/bin/python"))
        .arg(root().join("scripts/check_rm_transformers.py"))
        .args([model.as_os_str(), path.as_os_str()])
        .output()
        .expect("runs .venv/bin/python (scripts/setup.sh creates it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["num_labels"], 1);
    assert_eq!(v["architecture"], "LlamaForSequenceClassification");
    v["max_abs_diff"].as_f64().unwrap()
}

/// Rows for `score-rm`: each held-out pair's chosen and rejected response.
fn response_rows(path: &Path, p: &[(u32, u32)]) {
    let text: String = p
        .iter()
        .flat_map(|(a, b)| {
            [a, b].map(|r| {
                json!({"prompt": format!("Repeat {a}."), "response": r.to_string()}).to_string()
                    + "\n"
            })
        })
        .collect();
    std::fs::write(path, text).unwrap();
}

#[test]
fn reward_model_learns_the_rule_loads_in_transformers_and_rewards_rl() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (train, test) = (pairs(1024, 0), pairs(200, 1));
    write_pairs(&d.join("train.jsonl"), &train);
    write_pairs(&d.join("test.jsonl"), &test);
    let out = d.join("rm");
    let heldout = ["--heldout", d.join("test.jsonl").to_str().unwrap()].map(String::from);
    let h: Vec<&str> = heldout.iter().map(String::as_str).collect();
    // 400 steps, then the same command continues to 800.
    train_rm(&d.join("train.jsonl"), &out, "400", &h);
    train_rm(&d.join("train.jsonl"), &out, "800", &h);
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    eprintln!("{report:#}");
    let acc = report["heldout_after"]["accuracy"].as_f64().unwrap();
    assert!(acc >= 0.95, "held-out accuracy {acc}");
    assert!(report["heldout_before"]["accuracy"].as_f64().unwrap() < 0.8);
    let m: Vec<Value> = std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(m.len(), 800, "the second command continued the run");
    assert!(m.iter().enumerate().all(|(i, x)| x["step"] == i));
    for key in [
        "loss",
        "accuracy",
        "margin",
        "min_reward",
        "mean_reward",
        "max_reward",
    ] {
        assert!(m[0].get(key).is_some(), "{key}");
    }

    // transformers reads the saved model with the same scores, on the same ids.
    let model = out.join("checkpoints/final");
    response_rows(&d.join("rows.jsonl"), &test);
    let scored = score_rm(&model, &d.join("rows.jsonl"));
    let gap = transformers_gap(&model, &scored, d);
    eprintln!("reinforge vs transformers: max |Δscore| {gap:.2e}");
    assert!(gap <= 1e-5, "scores differ from transformers by {gap}");
    let rewards: Vec<f64> = scored
        .iter()
        .map(|r| r["reward"].as_f64().unwrap())
        .collect();
    let right = rewards.chunks(2).filter(|c| c[0] > c[1]).count();
    assert!(
        right as f64 >= 0.95 * test.len() as f64,
        "{right} of {}",
        test.len()
    );

    // The same model as a reward component, through OpenRLHF's /get_reward: the prompt the
    // server sees is the rendered one (score-rm renders it with the chat template too).
    let spec = d.join("rm.toml");
    std::fs::write(
        &spec,
        format!(
            "[components.preference]\ntype = \"model\"\npath = {:?}\n",
            model.to_str().unwrap()
        ),
    )
    .unwrap();
    // The first four held-out pairs, chosen then rejected, as OpenRLHF sends them: the
    // rendered prompt and the prompt + response text.
    let (mut query, mut prompts) = (vec![], vec![]);
    for (a, b) in &test[..4] {
        let rendered = rendered_prompt(&model, &format!("Repeat {a}."));
        for r in [a, b] {
            query.push(format!("{rendered}{r}"));
            prompts.push(rendered.clone());
        }
    }
    let server = Server::start(&["--reward", spec.to_str().unwrap()]);
    let answer = post(
        &format!("{}/get_reward", server.url),
        &json!({"query": query, "prompts": prompts}),
    );
    drop(server);
    let served: Vec<f64> = common::floats(&answer["rewards"]);
    let gap = common::max_abs_diff(&served, &rewards[..8]);
    assert!(
        gap < 1e-5,
        "/get_reward {served:?} vs score-rm {:?}",
        &rewards[..8]
    );

    // GRPO against the reward model raises its score.
    let prompts: String = train
        .iter()
        .map(|(a, _)| json!({"prompt": format!("Repeat {a}.")}).to_string() + "\n")
        .collect();
    std::fs::write(d.join("prompts.jsonl"), prompts).unwrap();
    let runs = d.join("runs");
    let sets = [
        format!("runs_dir={}", runs.display()),
        "name=grpo-rm".into(),
        "threads=1".into(),
        "rl.steps=100".into(),
        "rl.prompts_per_step=8".into(),
        "rl.num_generations=8".into(),
        "rl.max_completion_length=8".into(),
        "rl.lr=3e-3".into(),
    ];
    let mut args = vec![
        "train".to_string(),
        "--model".into(),
        fixture().display().to_string(),
        "--data".into(),
        d.join("prompts.jsonl").display().to_string(),
        "--reward".into(),
        spec.display().to_string(),
    ];
    for s in sets {
        args.extend(["--set".to_string(), s]);
    }
    ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let m: Vec<Value> = std::fs::read_to_string(runs.join("grpo-rm/metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let r = column(&m, "reward/mean");
    let first = r[..10].iter().sum::<f64>() / 10.0;
    let last = r[r.len() - 10..].iter().sum::<f64>() / 10.0;
    eprintln!("GRPO on the reward model: mean score {first:.3} -> {last:.3}");
    assert!(
        last > first + 1.0,
        "reward-model score {first:.3} -> {last:.3}"
    );
}

/// The prompt text a data run scores with: `prompt` rendered by `model`'s chat template.
fn rendered_prompt(model: &Path, prompt: &str) -> String {
    let tok = reinforge_hf::HfTokenizer::from_dir(model).unwrap();
    let msgs = [json!({"role": "user", "content": prompt})];
    tok.apply_chat_template(
        &msgs,
        &reinforge_hf::ChatOptions {
            add_generation_prompt: true,
            ..Default::default()
        },
    )
    .unwrap()
}

#[test]
fn lora_reward_model_resumes_exactly_and_saves_merged() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = d.join("train.jsonl");
    write_pairs(&data, &pairs(64, 2));
    let lora = ["--lora-r", "8", "--lora-alpha", "16"];
    train_rm(&data, &d.join("straight"), "20", &lora);
    train_rm(&data, &d.join("resumed"), "10", &lora);
    assert!(d
        .join("resumed/checkpoints/latest/adapter/adapter_config.json")
        .is_file());
    train_rm(&data, &d.join("resumed"), "20", &lora);
    response_rows(&d.join("rows.jsonl"), &pairs(8, 3));
    let scores = |run: &str| -> Vec<f64> {
        score_rm(
            &d.join(run).join("checkpoints/final"),
            &d.join("rows.jsonl"),
        )
        .iter()
        .map(|r| r["reward"].as_f64().unwrap())
        .collect()
    };
    let (a, b) = (scores("straight"), scores("resumed"));
    assert!(common::max_abs_diff(&a, &b) < 1e-6, "{a:?} vs {b:?}");
    // The merged checkpoint is a plain sequence-classification model for transformers.
    let model = d.join("straight/checkpoints/final");
    let scored = score_rm(&model, &d.join("rows.jsonl"));
    assert!(transformers_gap(&model, &scored, d) <= 1e-5);
}

/// Runs `args`, asserts it fails, and returns its stderr.
fn fails(args: &[&str]) -> String {
    let o = reinforge(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{args:?} succeeded");
    err
}

#[test]
fn reward_model_inputs_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = fixture();
    let train = |data: &str, out: &str| {
        fails(&[
            "train-rm",
            "--model",
            model.to_str().unwrap(),
            "--data",
            d.join(data).to_str().unwrap(),
            "--output",
            d.join(out).to_str().unwrap(),
        ])
    };
    std::fs::write(
        d.join("bad.jsonl"),
        "{\"prompt\": \"x\", \"chosen\": \"y\"}\n",
    )
    .unwrap();
    let err = train("bad.jsonl", "run");
    assert!(err.contains("row 1") && err.contains("rejected"), "{err}");
    // A causal checkpoint is not a reward model.
    std::fs::write(
        d.join("rows.jsonl"),
        "{\"prompt\": \"x\", \"response\": \"y\"}\n",
    )
    .unwrap();
    let err = fails(&[
        "score-rm",
        "--model",
        model.to_str().unwrap(),
        "--data",
        d.join("rows.jsonl").to_str().unwrap(),
    ]);
    assert!(err.contains("ForSequenceClassification"), "{err}");
    // A margin on some rows only.
    std::fs::write(
        d.join("margin.jsonl"),
        "{\"prompt\": \"x\", \"chosen\": \"y\", \"rejected\": \"z\", \"margin\": 1.0}\n{\"prompt\": \"x\", \"chosen\": \"y\", \"rejected\": \"z\"}\n",
    )
    .unwrap();
    let err = train("margin.jsonl", "run2");
    assert!(err.contains("margin"), "{err}");
}
