//! One config style for every trainer: each offline trainer writes its resolved settings to
//! `<output>/config.toml`, and `--config` that file (with another `--output`) repeats the run,
//! metric for metric; `--set` and the flags given beside the file win over it; a bad key names
//! the file, its line and the key, and leaves nothing behind.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{preference_rows, root};

fn reinforge(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_reinforge"))
        .args(args)
        .output()
        .unwrap()
}

fn run_ok(args: &[String]) {
    let o = reinforge(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The run's metrics lines without their clocks (seconds differ between runs).
fn metrics(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            let m = v.as_object_mut().unwrap();
            m.retain(|k, _| !k.contains("second") && !k.contains("time") && k != "elapsed");
            v
        })
        .collect()
}

/// The training files of each trainer in `d`.
fn write_data(d: &Path) {
    preference_rows(d, 6);
    let row = |i: usize, tail: &str| {
        format!(
            "{{\"prompt\": \"Question {i}: help with task {}?\", {tail}}}\n",
            i * 7 % 13
        )
    };
    let prompts: String = (0..6).map(|i| row(i, "\"x\": 0")).collect();
    let models = ["m0", "m1", "m2"];
    let battles: String = (0..6)
        .map(|i| {
            let (a, b) = (models[i % 3], models[(i + 1) % 3]);
            let w = if i % 2 == 0 { "model_a" } else { "model_b" };
            row(
                i,
                &format!("\"model_a\": \"{a}\", \"model_b\": \"{b}\", \"winner\": \"{w}\""),
            )
        })
        .collect();
    for (name, text) in [("prompts.jsonl", prompts), ("battles.jsonl", battles)] {
        std::fs::write(d.join(name), text).unwrap();
    }
}

/// Each trainer's command on the tiny llama fixture, two optimizer steps (P2L: one epoch of
/// batches of 3).
fn trainers(d: &Path) -> Vec<(&'static str, Vec<String>)> {
    let model = root().join("fixtures/hf/models/llama");
    let m = model.to_str().unwrap().to_string();
    let f = |name: &str| d.join(name).to_str().unwrap().to_string();
    let sft = root().join("fixtures/data/sft/chat_train.jsonl");
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let common = |data_flag: &str, data: String| {
        let mut a = s(&[
            "--model",
            &m,
            data_flag,
            &data,
            "--threads",
            "1",
            "--batch-size",
            "3",
        ]);
        a.extend(s(&["--lr", "1e-2"]));
        a
    };
    let steps = s(&["--steps", "2"]);
    let with = |mut a: Vec<String>, more: &[String]| {
        a.extend(more.iter().cloned());
        a
    };
    vec![
        (
            "train-sft",
            with(common("--data", sft.to_str().unwrap().into()), &steps),
        ),
        (
            "train-dpo",
            with(
                common("--data", f("pairs.jsonl")),
                &s(&["--steps", "2", "--loss-type", "ipo"]),
            ),
        ),
        (
            "train-orpo",
            with(common("--data", f("pairs.jsonl")), &steps),
        ),
        ("train-kto", with(common("--data", f("rows.jsonl")), &steps)),
        (
            "train-rm",
            with(
                common("--data", f("pairs.jsonl")),
                &s(&["--steps", "2", "--lora-r", "2"]),
            ),
        ),
        (
            "train-distill",
            with(
                common("--data", f("prompts.jsonl")),
                &s(&[
                    "--steps",
                    "2",
                    "--teacher",
                    &m,
                    "--max-new-tokens",
                    "4",
                    "--raw",
                ]),
            ),
        ),
        (
            "train-p2l",
            with(
                common("--battles", f("battles.jsonl")),
                &s(&["--epochs", "1"]),
            ),
        ),
    ]
}

#[test]
fn every_trainer_repeats_its_run_from_its_config_toml() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_data(d);
    for (cmd, flags) in trainers(d) {
        let (first, again) = (d.join(format!("{cmd}-1")), d.join(format!("{cmd}-2")));
        let mut args = vec![cmd.to_string()];
        args.extend(flags);
        args.extend(["--output".into(), first.display().to_string()]);
        run_ok(&args);
        let config = first.join("config.toml");
        let text = std::fs::read_to_string(&config).unwrap();
        assert!(text.contains("lr = 0.01"), "{cmd}: {text}");
        assert!(
            !text.contains("[") || text.contains("= ["),
            "{cmd}: flat keys only: {text}"
        );
        run_ok(&[
            cmd.into(),
            "--config".into(),
            config.display().to_string(),
            "--output".into(),
            again.display().to_string(),
        ]);
        let (a, b) = (metrics(&first), metrics(&again));
        assert!(!a.is_empty(), "{cmd}: no metrics");
        assert_eq!(a, b, "{cmd}: the repeated run's metrics differ");
        // The repeat's own config.toml names its own output and is otherwise the same file.
        let repeated = std::fs::read_to_string(again.join("config.toml")).unwrap();
        let first_out = first.display().to_string();
        let again_out = again.display().to_string();
        assert_eq!(repeated, text.replace(&first_out, &again_out), "{cmd}");
    }
}

/// The file, then the flags given, then `--set`: the last wins; a key the trainer lacks names
/// the file's line and the key, and no run directory is created.
#[test]
fn flags_and_sets_win_over_the_file_and_bad_keys_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_data(d);
    let (cmd, flags) = trainers(d).remove(3); // train-kto
    let first = d.join("kto");
    let mut args = vec![cmd.to_string()];
    args.extend(flags);
    args.extend(["--output".into(), first.display().to_string()]);
    run_ok(&args);
    let config = first.join("config.toml").display().to_string();
    let again = d.join("kto-more");
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    run_ok(&s(&[
        cmd,
        "--config",
        &config,
        "--steps",
        "4",
        "--set",
        "steps=3",
        "--output",
        again.to_str().unwrap(),
    ]));
    assert_eq!(metrics(&again).len(), 3, "--set steps=3 is the last word");
    let repeated = std::fs::read_to_string(again.join("config.toml")).unwrap();
    assert!(repeated.contains("steps = 3"), "{repeated}");

    let bad = d.join("bad.toml");
    std::fs::write(
        &bad,
        format!(
            "{}\nbatch_sise = 2\n",
            std::fs::read_to_string(&config).unwrap()
        ),
    )
    .unwrap();
    let lines = std::fs::read_to_string(&bad).unwrap().lines().count();
    let nowhere = d.join("never");
    let o = reinforge(&s(&[
        cmd,
        "--config",
        bad.to_str().unwrap(),
        "--output",
        nowhere.to_str().unwrap(),
    ]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains(&format!("bad.toml line {lines}: unknown key `batch_sise`")),
        "{err}"
    );
    assert!(err.contains("known keys: model,"), "{err}");
    assert!(
        !nowhere.exists(),
        "a refused config leaves no run directory"
    );
    let o = reinforge(&s(&[
        cmd,
        "--config",
        &config,
        "--set",
        "steps=many",
        "--output",
        nowhere.to_str().unwrap(),
    ]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--steps"), "{err}");
    assert!(!nowhere.exists());
}
