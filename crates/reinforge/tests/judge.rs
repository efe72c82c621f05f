//! `reinforge judge` on the fixture Llama: swapping cancels the position effect exactly (a
//! pair and its mirror get complementary swap-averaged verdicts, and the debiased first-slot
//! shift is 0 while the single-order one is measured), battles feed `reinforge rank`, pointwise
//! ratings lie in [1, 5], a `type = "judge"` reward component trains, and bad templates fail
//! with the missing placeholder named.

use crate::common;

use std::path::{Path, PathBuf};

use common::{json_lines, reinforge, root};
use serde_json::{json, Value};

const ROWS: [(&str, &str, &str); 3] = [
    ("What is 2+2?", "4", "5"),
    ("Capital of France?", "Paris", "Rome"),
    ("Say hi", "hi", "bye"),
];

fn fixture() -> PathBuf {
    root().join("fixtures/hf/models/llama")
}

/// Each pair, then its mirror (responses swapped).
fn mirrored_pairs(path: &Path) {
    let mut text = String::new();
    for (p, a, b) in ROWS {
        for (x, y, mx, my, w) in [
            (a, b, "good", "bad", "model_a"),
            (b, a, "bad", "good", "model_b"),
        ] {
            text += &(json!({"prompt": p, "response_a": x, "response_b": y,
                             "model_a": mx, "model_b": my, "winner": w})
            .to_string()
                + "\n");
        }
    }
    std::fs::write(path, text).unwrap();
}

#[test]
fn swapping_cancels_position_and_battles_rank() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    mirrored_pairs(&d.join("pairs.jsonl"));
    let o = reinforge(&[
        "judge",
        "--model",
        fixture().to_str().unwrap(),
        "--data",
        d.join("pairs.jsonl").to_str().unwrap(),
        "--battles",
        d.join("battles.jsonl").to_str().unwrap(),
        "--threads",
        "1",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let v = json_lines(&o.stdout);
    assert_eq!(v.len(), 6);
    for pair in v.chunks(2) {
        let (p, q) = (
            pair[0]["p_a"].as_f64().unwrap(),
            pair[1]["p_a"].as_f64().unwrap(),
        );
        assert!((p + q - 1.0).abs() < 1e-5, "mirror verdicts {p} and {q}");
        // Each single-order verdict is the mirror's other order.
        let (f, s) = (
            pair[0]["p_a_shown_first"].as_f64().unwrap(),
            pair[1]["p_a_shown_second"].as_f64().unwrap(),
        );
        assert!((f + s - 1.0).abs() < 1e-5, "{f} {s}");
    }
    let summary: Value = serde_json::from_str(&err[err.find('{').unwrap()..]).unwrap();
    let single: f64 = v
        .iter()
        .flat_map(|r| {
            [
                r["p_a_shown_first"].as_f64().unwrap(),
                1.0 - r["p_a_shown_second"].as_f64().unwrap(),
            ]
        })
        .sum::<f64>()
        / 12.0
        - 0.5;
    assert!((summary["first_position_shift"].as_f64().unwrap() - single).abs() < 1e-9);
    assert!(
        summary["debiased_first_position_shift"]
            .as_f64()
            .unwrap()
            .abs()
            < 1e-9
    );
    assert_eq!(summary["pairs"], 6);
    let o = reinforge(&["rank", "--input", d.join("battles.jsonl").to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("good") && table.contains("bad"), "{table}");
}

#[test]
fn pointwise_ratings_reward_training_and_bad_templates() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let rows: String = ROWS
        .iter()
        .map(|(p, a, _)| json!({"prompt": p, "response": a}).to_string() + "\n")
        .collect();
    std::fs::write(d.join("rows.jsonl"), &rows).unwrap();
    let model = fixture();
    let o = reinforge(&[
        "judge",
        "--model",
        model.to_str().unwrap(),
        "--mode",
        "pointwise",
        "--data",
        d.join("rows.jsonl").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for r in json_lines(&o.stdout) {
        let x = r["rating"].as_f64().unwrap();
        assert!((1.0..=5.0).contains(&x), "{x}");
    }
    // A judge as a reward component of a short data run: every reward lies in [0, 1].
    let prompts: String = ROWS
        .iter()
        .map(|(p, _, _)| json!({"prompt": p}).to_string() + "\n")
        .collect();
    std::fs::write(d.join("prompts.jsonl"), prompts).unwrap();
    std::fs::write(
        d.join("judge.toml"),
        format!(
            "[components.judge]\ntype = \"judge\"\npath = {:?}\n",
            model.to_str().unwrap()
        ),
    )
    .unwrap();
    let runs = d.join("runs");
    let o = reinforge(&[
        "train",
        "--model",
        model.to_str().unwrap(),
        "--data",
        d.join("prompts.jsonl").to_str().unwrap(),
        "--reward",
        d.join("judge.toml").to_str().unwrap(),
        "--set",
        &format!("runs_dir={}", runs.display()),
        "--set",
        "name=j",
        "--set",
        "threads=1",
        "--set",
        "rl.steps=2",
        "--set",
        "rl.prompts_per_step=2",
        "--set",
        "rl.num_generations=4",
        "--set",
        "rl.max_completion_length=4",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m: Vec<Value> = std::fs::read_to_string(runs.join("j/metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(m.len(), 2);
    for l in &m {
        let r = l["reward/mean"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&r) && r > 0.0, "{r}");
    }
    // A template without {response} names it.
    std::fs::write(d.join("t.txt"), "Rate {prompt}").unwrap();
    let o = reinforge(&[
        "judge",
        "--model",
        model.to_str().unwrap(),
        "--mode",
        "pointwise",
        "--template",
        d.join("t.txt").to_str().unwrap(),
        "--data",
        d.join("rows.jsonl").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("{response}"), "{err}");
}
