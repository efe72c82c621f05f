//! `reinforge explain`: its figures computed independently here from the config it was given
//! and checked against what the runs then do (rows per rank and optimizer steps per step of
//! the default experiment, a data-parallel run and a dataset run), the parameter count of every
//! fixture checkpoint against its safetensors headers, and `--set` errors naming the key.

use crate::common;

use std::path::Path;

use common::{reinforge, root};
use serde_json::Value;

/// `reinforge explain ARGS --json`, parsed; panics with stderr on failure.
fn explain_json(args: &[&str]) -> Value {
    let mut all = vec!["explain", "--json"];
    all.extend_from_slice(args);
    let out = reinforge(&all);
    assert!(
        out.status.success(),
        "explain {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("explain --json prints JSON")
}

fn num(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

/// Optimizer steps as the update splits rows: chunks of ceil(rows / mini_batches), per epoch.
fn steps(rows: u64, mini_batches: u64, epochs: u64) -> u64 {
    let per = rows.div_ceil(mini_batches);
    epochs * rows.div_ceil(per)
}

#[test]
fn rows_and_optimizer_steps_follow_the_config() {
    let v = explain_json(&[
        "--set",
        "rl.prompts_per_step=6",
        "--set",
        "rl.num_generations=4",
        "--set",
        "rl.mini_batches=3",
        "--set",
        "rl.ppo_epochs=2",
        "--set",
        "rl.steps=5",
    ]);
    assert_eq!(num(&v, "rows_per_step"), 6 * 4);
    assert_eq!(num(&v, "rows_per_rank"), 6 * 4);
    assert_eq!(num(&v, "optimizer_steps_per_step"), steps(24, 3, 2));
    assert_eq!(num(&v, "optimizer_steps_total"), 5 * steps(24, 3, 2));

    // Two ranks halve the rows; 9 rows in 4 mini-batches are 3 chunks of 3.
    let v = explain_json(&[
        "--nproc",
        "2",
        "--set",
        "rl.prompts_per_step=10",
        "--set",
        "rl.num_generations=3",
        "--set",
        "rl.mini_batches=4",
    ]);
    assert_eq!(num(&v, "world"), 2);
    assert_eq!(num(&v, "rows_per_rank"), 10 * 3 / 2);
    assert_eq!(num(&v, "optimizer_steps_per_step"), steps(30, 4, 2));
}

#[test]
fn the_default_experiment_matches_its_config() {
    // The defaults as `reinforge train` resolves them, read from the config schema's own
    // serialisation (config.toml of a run), not from explain.
    let cfg: toml::Value = reinforge_train::config::TrainConfig::default()
        .to_toml()
        .parse()
        .unwrap();
    let g = |k: &str| cfg["rl"][k].as_integer().unwrap() as u64;
    let v = explain_json(&[]);
    let rows = g("prompts_per_step") * g("num_generations");
    assert_eq!(num(&v, "rows_per_step"), rows);
    assert_eq!(
        num(&v, "optimizer_steps_per_step"),
        steps(rows, g("mini_batches"), g("ppo_epochs"))
    );
    // The arithmetic prompt: <bos>, two operands, `+`, `=`.
    let digits = cfg["task"]["digits"].as_integer().unwrap() as u64;
    assert_eq!(num(&v, "longest_prompt_tokens"), 1 + 2 * digits + 2);
    assert_eq!(
        num(&v, "longest_row_tokens"),
        1 + 2 * digits + 2 + g("max_completion_length")
    );
}

#[test]
fn a_token_budget_sets_the_micro_batch() {
    let v = explain_json(&["--set", "memory.max_tokens_per_microbatch=500"]);
    let row = num(&v, "longest_row_tokens");
    assert_eq!(num(&v, "rows_per_microbatch"), 500 / row);
    assert_eq!(num(&v, "tokens_per_microbatch"), (500 / row) * row);
    assert!(num(&v, "tokens_per_microbatch") <= 500);
}

#[test]
fn ranks_that_do_not_divide_the_rows_fail_naming_the_keys() {
    let out = reinforge(&["explain", "--nproc", "3"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rl.prompts_per_step"), "{err}");
}

#[test]
fn an_unknown_key_fails_naming_it() {
    let out = reinforge(&["explain", "--set", "rl.no_such_key=1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rl.no_such_key"), "{err}");
    let out = reinforge(&["explain", "--set", "rl.steps=many"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("rl.steps"));
}

/// Parameters stored in a safetensors file: the product of every tensor's shape in its
/// header (8-byte little-endian length, then JSON).
fn safetensors_parameters(path: &Path) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
    header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(_, t)| {
            t["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .product::<u64>()
        })
        .sum()
}

#[test]
fn parameter_count_equals_the_fixture_checkpoints() {
    let models = root().join("fixtures/hf/models");
    let mut checked = 0;
    for entry in std::fs::read_dir(&models).unwrap() {
        let dir = entry.unwrap().path();
        let stored: u64 = std::fs::read_dir(&dir)
            .unwrap()
            .map(|f| f.unwrap().path())
            .filter(|p| {
                let name = p.file_name().unwrap().to_string_lossy();
                name.starts_with("model") && name.ends_with(".safetensors")
            })
            .map(|p| safetensors_parameters(&p))
            .sum();
        let v = explain_json(&["--model", dir.to_str().unwrap()]);
        assert_eq!(
            v["memory"]["parameters"].as_u64().unwrap(),
            stored,
            "{}",
            dir.display()
        );
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} fixture models");
}

#[test]
fn the_report_names_trl_and_verl_keys() {
    let out = reinforge(&["explain", "--nproc", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "rows per rank",
        "num_generations",
        "rollout.n",
        "actor.clip_ratio_low",
        "no TRL or verl equivalent:",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    // A key without either counterpart is listed as such.
    let v = explain_json(&[]);
    let none: Vec<&str> = v["no_equivalent"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert!(none.contains(&"rl.skip_zero_advantage"), "{none:?}");
    assert!(!none.contains(&"rl.num_generations"));
}

/// Runs `args` (a `train` command) and returns its metrics lines from `run`.
fn run_metrics(args: &[String], run: &Path) -> Vec<Value> {
    let out = common::tiny::run(args);
    assert!(
        out.status.success(),
        "{args:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    common::tiny::metrics(run)
}

/// Every step of `m` did what `explain` said: this rank's rows and the optimizer steps.
fn assert_run_matches(what: &str, v: &Value, m: &[Value]) {
    assert!(!m.is_empty(), "{what}: no metrics");
    for line in m {
        assert_eq!(
            line["update/rows_per_rank"].as_u64(),
            Some(num(v, "rows_per_rank")),
            "{what}: {line}"
        );
        assert_eq!(
            line["update/optimizer_steps"].as_u64(),
            Some(num(v, "optimizer_steps_per_step")),
            "{what}: {line}"
        );
    }
    eprintln!(
        "{what}: {} rows per rank, {} optimizer steps per step, as explained",
        num(v, "rows_per_rank"),
        num(v, "optimizer_steps_per_step")
    );
}

/// `explain`'s figures against what the runs then do: the default experiment (tiny), the same
/// on 2 data-parallel ranks, and a dataset run on a fixture checkpoint.
#[test]
fn explain_predicts_what_the_runs_do() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let sets = [
        "sft.steps=5",
        "rl.steps=2",
        "rl.prompts_per_step=6",
        "rl.num_generations=4",
        "rl.mini_batches=4",
        "rl.ppo_epochs=2",
        "rl.skip_zero_advantage=false",
        "eval.problems=4",
        "eval.samples=2",
        "threads=1",
        "rollout.rng=\"per_row\"",
    ];
    let set_args: Vec<&str> = common::tiny::TINY
        .iter()
        .chain(&sets)
        .flat_map(|kv| ["--set", kv])
        .collect();
    let with = |extra: &[&'static str]| -> Vec<&str> { [&set_args[..], extra].concat() };

    let v = explain_json(&with(&[]));
    let m = run_metrics(
        &common::tiny::train_args(&runs, "one", &sets),
        &runs.join("one"),
    );
    assert_run_matches("default experiment", &v, &m);

    let v = explain_json(&with(&["--nproc", "2"]));
    let mut args = common::tiny::train_args(&runs, "two", &sets);
    args.extend(["--nproc", "2"].map(String::from));
    let m = run_metrics(&args, &runs.join("two"));
    assert_eq!(num(&v, "rows_per_rank"), 6 * 4 / 2);
    assert_run_matches("2 ranks", &v, &m);

    // A dataset run on a fixture checkpoint (TRL's defaults for pretrained models, then these).
    let model = root().join("fixtures/hf/models/qwen2");
    let data = dir.path().join("prompts.jsonl");
    let rows: String = (0..12)
        .map(|i| {
            format!(
                "{{\"prompt\": \"What is {i}+1?\", \"answer\": \"{}\"}}\n",
                i + 1
            )
        })
        .collect();
    std::fs::write(&data, rows).unwrap();
    let data_sets = [
        "rl.steps=2",
        "rl.prompts_per_step=3",
        "rl.num_generations=4",
        "rl.mini_batches=2",
        "rl.max_completion_length=4",
        "threads=1",
    ];
    let mut explain_args = vec!["--model", model.to_str().unwrap()];
    explain_args.extend(data_sets.iter().flat_map(|kv| ["--set", *kv]));
    let v = explain_json(&explain_args);
    let mut args: Vec<String> = [
        "train",
        "--model",
        model.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec();
    for kv in data_sets
        .iter()
        .map(|s| s.to_string())
        .chain([format!("runs_dir={}", runs.display()), "name=data".into()])
    {
        args.push("--set".into());
        args.push(kv);
    }
    let m = run_metrics(&args, &runs.join("data"));
    assert_run_matches("dataset run", &v, &m);
}
