//! `reinforge train-p2l` and `reinforge p2l` on simulated battles where each prompt category
//! has its own known ranking: the trained model recovers every category's ranking (Kendall
//! tau) and beats the single global leaderboard on held-out log-likelihood.

use std::path::Path;
use std::process::Command;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

const MODELS: [&str; 4] = ["m0", "m1", "m2", "m3"];

/// True coefficients of each model in category `c` (0: m0 best; 1: reversed).
fn truth(c: usize) -> [f64; 4] {
    let up = [1.5, 0.5, -0.5, -1.5];
    if c == 0 {
        up
    } else {
        [up[3], up[2], up[1], up[0]]
    }
}

fn prompt(c: usize, rng: &mut ChaCha8Rng) -> String {
    let x: u32 = rng.gen_range(1..50);
    if c == 0 {
        format!("Solve the equation x + {x} = 100.")
    } else {
        let nouns = ["rain", "the sea", "a cat", "autumn", "the moon"];
        format!(
            "Write a short poem about {}.",
            nouns[rng.gen_range(0..nouns.len())]
        )
    }
}

/// `n` battles drawn from the categories' Bradley-Terry models.
fn battles(n: usize, seed: u64) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = String::new();
    for i in 0..n {
        let c = i % 2;
        let a = rng.gen_range(0..4);
        let b = (a + rng.gen_range(1..4)) % 4;
        let t = truth(c);
        let p_a = 1.0 / (1.0 + (t[b] - t[a]).exp());
        let winner = if rng.gen::<f64>() < p_a {
            "model_a"
        } else {
            "model_b"
        };
        out += &json!({"prompt": prompt(c, &mut rng), "model_a": MODELS[a], "model_b": MODELS[b], "winner": winner}).to_string();
        out.push('\n');
    }
    out
}

fn reinforge(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_reinforge"))
        .args(args)
        .output()
        .unwrap()
}

/// Kendall tau-a between two score vectors.
fn kendall(a: &[f64], b: &[f64]) -> f64 {
    let (mut s, mut n) = (0.0, 0.0);
    for i in 0..a.len() {
        for j in i + 1..a.len() {
            s += ((a[i] - a[j]) * (b[i] - b[j])).signum();
            n += 1.0;
        }
    }
    s / n
}

#[test]
fn p2l_recovers_per_category_rankings_and_beats_the_global_leaderboard() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("train.jsonl"), battles(800, 1)).unwrap();
    std::fs::write(d.join("test.jsonl"), battles(200, 2)).unwrap();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hf/models/llama");
    let out = d.join("p2l");
    let o = reinforge(&[
        "train-p2l",
        "--model",
        model.to_str().unwrap(),
        "--battles",
        d.join("train.jsonl").to_str().unwrap(),
        "--heldout",
        d.join("test.jsonl").to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--epochs",
        "3",
        "--batch-size",
        "16",
        "--lr",
        "3e-3",
        "--threads",
        "1",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let (p2l, global) = (
        report["heldout_nll_p2l"].as_f64().unwrap(),
        report["heldout_nll_global"].as_f64().unwrap(),
    );
    eprintln!("held-out NLL: P2L {p2l:.4}, global {global:.4}");
    assert!(p2l < global - 0.05, "P2L {p2l} vs global {global}");

    // Per-category leaderboards from `reinforge p2l --prompts`; routing under a budget that
    // excludes m0 and m3's opposite (m0 costs 10, the others 1).
    std::fs::write(
        d.join("costs.json"),
        r#"{"m0": 10, "m1": 1, "m2": 1, "m3": 1}"#,
    )
    .unwrap();
    for c in 0..2 {
        let mut rng = ChaCha8Rng::seed_from_u64(10 + c as u64);
        let lines: String = (0..20)
            .map(|_| json!({"prompt": prompt(c, &mut rng)}).to_string() + "\n")
            .collect();
        let file = d.join(format!("cat{c}.jsonl"));
        std::fs::write(&file, lines).unwrap();
        let costs = d.join("costs.json");
        let o = reinforge(&[
            "p2l",
            "--model",
            out.to_str().unwrap(),
            "--prompts",
            file.to_str().unwrap(),
            "--json",
            "--costs",
            costs.to_str().unwrap(),
            "--budget",
            "2",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let mut got = [0.0; 4];
        for row in v["leaderboard"].as_array().unwrap() {
            let m = MODELS.iter().position(|x| *x == row["model"]).unwrap();
            got[m] = row["coefficient"].as_f64().unwrap();
            assert!(
                row["lower"].as_f64().unwrap() <= got[m]
                    && got[m] <= row["upper"].as_f64().unwrap()
            );
        }
        let tau = kendall(&got, &truth(c));
        eprintln!("category {c}: coefficients {got:?}, Kendall tau {tau}");
        assert!(tau >= 0.66, "category {c}: {got:?}");
        // Category 0's best affordable model is m1, category 1's is m3.
        let want = if c == 0 { "m1" } else { "m3" };
        let routes = v["routes"].as_array().unwrap();
        let hits = routes.iter().filter(|r| *r == want).count();
        assert!(
            hits * 10 >= routes.len() * 9,
            "category {c}: routes {routes:?}"
        );
    }
    // A malformed battle names its row and field.
    std::fs::write(
        d.join("bad.jsonl"),
        "{\"prompt\": \"x\", \"model_a\": \"m0\", \"model_b\": \"m1\", \"winner\": \"a\"}\n",
    )
    .unwrap();
    let o = reinforge(&[
        "train-p2l",
        "--model",
        model.to_str().unwrap(),
        "--battles",
        d.join("bad.jsonl").to_str().unwrap(),
        "--output",
        d.join("x").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("row 1") && err.contains("winner"),
        "{err}"
    );
}

/// `train-p2l` runs through the one trainer: a run directory with `metrics.jsonl` and
/// checkpoints, and a run continued from its `checkpoints/latest` (here: asked for a second
/// epoch after finishing the first) ends with the weights and metrics of an uninterrupted run.
#[test]
fn train_p2l_resumes_from_its_latest_checkpoint_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("train.jsonl"), battles(48, 3)).unwrap();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hf/models/llama");
    let train = |out: &Path, epochs: &str| {
        let o = reinforge(&[
            "train-p2l",
            "--model",
            model.to_str().unwrap(),
            "--battles",
            d.join("train.jsonl").to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
            "--epochs",
            epochs,
            "--batch-size",
            "16",
            "--lr",
            "3e-3",
            "--threads",
            "1",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let (whole, split) = (d.join("whole"), d.join("split"));
    train(&whole, "2");
    train(&split, "1");
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(split.join("checkpoints/latest/trainer_state.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        (state["phase"].as_str(), state["step"].as_u64()),
        (Some("p2l"), Some(3))
    );
    train(&split, "2");
    let read = |p: &Path| std::fs::read(p).unwrap();
    for f in ["checkpoints/final/p2l.safetensors", "metrics.jsonl"] {
        assert!(read(&whole.join(f)) == read(&split.join(f)), "{f} differs");
    }
    let lines = std::fs::read_to_string(whole.join("metrics.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 6);
    // `reinforge p2l` reads the run directory (its checkpoints/final) and a checkpoint.
    for m in [whole.clone(), whole.join("checkpoints/latest")] {
        let o = reinforge(&[
            "p2l",
            "--model",
            m.to_str().unwrap(),
            "--prompt",
            "hi",
            "--json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
}
