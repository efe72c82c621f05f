//! The offline preference commands on data with a known rule (the chosen answer is polite,
//! the rejected one curt): `train-dpo` and `train-orpo` raise held-out `rewards/accuracies`
//! and the chosen answers' log-prob, `train-kto` separates the desirable rows' rewards from
//! the undesirable ones', and a run stopped early continues from its checkpoint.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

fn pairs(n: usize, offset: usize) -> String {
    (0..n)
        .map(|i| {
            let k = i + offset;
            json!({"prompt": format!("Question {k}: can you help me with task {}?", k * 7 % 13),
                   "chosen": "Sure, I can help with that.", "rejected": "No."})
            .to_string()
                + "\n"
        })
        .collect()
}

/// Unpaired rows: the polite answer desirable, the curt one not, alternating.
fn unpaired(n: usize, offset: usize) -> String {
    (0..n)
        .map(|i| {
            let k = i / 2 + offset;
            let good = i % 2 == 0;
            json!({"prompt": format!("Question {k}: can you help me with task {}?", k * 7 % 13),
                   "completion": if good { "Sure, I can help with that." } else { "No." },
                   "label": good})
            .to_string()
                + "\n"
        })
        .collect()
}

fn reinforge(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_reinforge"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn dpo_learns_the_preference_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("train.jsonl"), pairs(48, 0)).unwrap();
    std::fs::write(d.join("test.jsonl"), pairs(16, 100)).unwrap();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hf/models/llama");
    let out = d.join("run");
    let args = |steps: &str| command("train-dpo", &model, d, &out, steps);
    let run = |a: Vec<String>| {
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        let o = reinforge(&refs);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    // 10 steps, then continue the same run to 20.
    run(args("10"));
    run(args("20"));
    let report = report(&out);
    let (before, after) = (&report["heldout_before"], &report["heldout_after"]);
    assert!(
        after["rewards_accuracies"].as_f64().unwrap() >= 0.9,
        "{report}"
    );
    assert!(after["logps_chosen"].as_f64().unwrap() > before["logps_chosen"].as_f64().unwrap());
    let m = metrics(&out);
    assert_eq!(m.len(), 20, "the second command continued the run");
    assert!(m.iter().enumerate().all(|(i, x)| x["step"] == i));
    for key in [
        "loss",
        "rewards/chosen",
        "rewards/rejected",
        "rewards/accuracies",
        "rewards/margins",
        "logps/chosen",
        "logps/rejected",
    ] {
        assert!(m[0].get(key).is_some(), "{key}");
    }
    // At the first step the policy is the reference: the implicit rewards are zero (up to
    // float32 sums over differently padded batches) and the DPO loss is ln 2.
    assert!(m[0]["rewards/margins"].as_f64().unwrap().abs() < 1e-5);
    assert!((m[0]["loss"].as_f64().unwrap() - std::f64::consts::LN_2).abs() < 1e-5);
    // A pair without `chosen` names its row.
    std::fs::write(
        d.join("bad.jsonl"),
        "{\"prompt\": \"x\", \"rejected\": \"y\"}\n",
    )
    .unwrap();
    let o = reinforge(&[
        "train-dpo",
        "--model",
        model.to_str().unwrap(),
        "--data",
        d.join("bad.jsonl").to_str().unwrap(),
        "--output",
        d.join("bad").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("row 1") && err.contains("chosen"),
        "{err}"
    );
}

fn fixture_model() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hf/models/llama")
}

fn report(run: &Path) -> Value {
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("report.json")).unwrap()).unwrap();
    eprintln!("{r:#}");
    r
}

fn metrics(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn run_ok(args: Vec<String>) {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = reinforge(&refs);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn orpo_learns_the_preference_without_a_reference_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("train.jsonl"), pairs(48, 0)).unwrap();
    std::fs::write(d.join("test.jsonl"), pairs(16, 100)).unwrap();
    let out = d.join("run");
    run_ok(command("train-orpo", &fixture_model(), d, &out, "10"));
    run_ok(command("train-orpo", &fixture_model(), d, &out, "20"));
    let report = report(&out);
    let (before, after) = (&report["heldout_before"], &report["heldout_after"]);
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap();
    assert!(f(after, "rewards/accuracies") >= 0.9, "{report}");
    assert!(f(after, "logps/chosen") > f(before, "logps/chosen"));
    assert!(f(after, "nll_loss") < f(before, "nll_loss"));
    assert!(f(after, "log_odds_ratio") > f(before, "log_odds_ratio"));
    let m = metrics(&out);
    assert_eq!(m.len(), 20, "the second command continued the run");
    assert!(
        !out.join("reference_logps.json").exists(),
        "ORPO reads no reference"
    );
    // The logged reward is beta times the mean per-token log-prob (TRL's definition).
    for line in &m {
        let (r, lp) = (f(line, "rewards/chosen"), f(line, "logps/chosen"));
        assert!((r - 0.1 * lp).abs() < 1e-5 * lp.abs().max(1.0), "{line}");
    }
}

#[test]
fn kto_separates_desirable_from_undesirable_rows_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("train.jsonl"), unpaired(96, 0)).unwrap();
    std::fs::write(d.join("test.jsonl"), unpaired(32, 100)).unwrap();
    let out = d.join("run");
    run_ok(command("train-kto", &fixture_model(), d, &out, "10"));
    run_ok(command("train-kto", &fixture_model(), d, &out, "20"));
    let report = report(&out);
    let (before, after) = (&report["heldout_before"], &report["heldout_after"]);
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap();
    // Before training the policy is the reference: every implicit reward is ~0.
    assert!(f(before, "rewards/chosen").abs() < 1e-4, "{report}");
    assert!(f(after, "rewards/chosen") > 0.0, "{report}");
    assert!(f(after, "rewards/rejected") < 0.0, "{report}");
    assert!(f(after, "logps/chosen") > f(before, "logps/chosen"));
    let m = metrics(&out);
    assert_eq!(m.len(), 20, "the second command continued the run");
    // The KL point is a clamped mean: never negative.
    assert!(m.iter().all(|l| f(l, "kl") >= 0.0));
    // At the first step, with policy = reference, every per-row loss is 1 - sigmoid(0) = 0.5.
    assert!((f(&m[0], "loss") - 0.5).abs() < 1e-4, "{}", m[0]);
    // A row without a label names its row and field.
    std::fs::write(
        d.join("bad.jsonl"),
        "{\"prompt\": \"x\", \"completion\": \"y\"}\n",
    )
    .unwrap();
    let mut args = command("train-kto", &fixture_model(), d, &d.join("bad"), "1");
    args[4] = d.join("bad.jsonl").display().to_string();
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = reinforge(&refs);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("row 1") && err.contains("label"),
        "{err}"
    );
}

/// The arguments of `cmd` on `dir`'s train.jsonl and test.jsonl for `steps` steps.
fn command(cmd: &str, model: &Path, dir: &Path, out: &Path, steps: &str) -> Vec<String> {
    vec![
        cmd.to_string(),
        "--model".into(),
        model.display().to_string(),
        "--data".into(),
        dir.join("train.jsonl").display().to_string(),
        "--heldout".into(),
        dir.join("test.jsonl").display().to_string(),
        "--output".into(),
        out.display().to_string(),
        "--steps".into(),
        steps.into(),
        "--batch-size".into(),
        "8".into(),
        "--lr".into(),
        "1e-3".into(),
        "--threads".into(),
        "1".into(),
    ]
}

/// Ctrl-C saves `checkpoints/latest` and exits 130; the same command continues the run with
/// no step lost or repeated.
#[test]
fn ctrl_c_saves_and_the_same_command_continues() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("train.jsonl"), pairs(48, 0)).unwrap();
    std::fs::write(d.join("test.jsonl"), pairs(8, 100)).unwrap();
    let out = d.join("run");
    let child = Command::new(env!("CARGO_BIN_EXE_reinforge"))
        .args(command("train-dpo", &fixture_model(), d, &out, "100000"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let file = out.join("metrics.jsonl");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while std::fs::read_to_string(&file).map_or(0, |t| t.lines().count()) < 3 {
        assert!(std::time::Instant::now() < deadline, "no progress");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(err.contains("run the same command again"), "{err}");
    let done = metrics(&out).len();
    assert!(out.join("checkpoints/latest").exists(), "{err}");
    let more = (done + 2).to_string();
    run_ok(command("train-dpo", &fixture_model(), d, &out, &more));
    let m = metrics(&out);
    assert_eq!(m.len(), done + 2);
    assert!(
        m.iter().enumerate().all(|(i, x)| x["step"] == i),
        "steps continue"
    );
}

/// `--max-tokens-per-microbatch` changes how a step runs, not what it computes: three steps of
/// `train-dpo` and of `train-kto` (whose batch KL couples the rows) log the losses and
/// rewards of the run without it, and the budget did split the steps.
#[test]
fn microbatched_preference_runs_log_the_same_steps() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hf/models/llama");
    for (cmd, rows) in [("train-dpo", pairs(24, 0)), ("train-kto", unpaired(24, 0))] {
        std::fs::write(d.join("train.jsonl"), &rows).unwrap();
        std::fs::write(d.join("test.jsonl"), &rows).unwrap();
        let run = |name: &str, budget: &str| {
            let out = d.join(format!("{cmd}-{name}"));
            let mut a = command(cmd, &model, d, &out, "3");
            a.extend(["--max-tokens-per-microbatch".into(), budget.into()]);
            let refs: Vec<&str> = a.iter().map(String::as_str).collect();
            let o = reinforge(&refs);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            metrics(&out)
        };
        // A prompt is about 40 of the fixture tokenizer's tokens (chat template included), so
        // a pair counts over 64 and a KTO row with its KL completion over 80: each row of
        // a step reads in its own micro-batch.
        let (plain, micro) = (run("plain", "0"), run("micro", "64"));
        assert_eq!(plain.len(), 3);
        assert_eq!(
            micro.len(),
            plain.len(),
            "{cmd}: the micro-batched run's steps"
        );
        for (a, b) in plain.iter().zip(&micro) {
            let mut compared = 0;
            for key in ["loss", "rewards/chosen", "rewards/rejected"] {
                match (a[key].as_f64(), b[key].as_f64()) {
                    (Some(x), Some(y)) => {
                        assert!((x - y).abs() < 1e-4, "{cmd} {key}: {x} vs {y}");
                        compared += 1;
                    }
                    (None, None) => {}
                    (x, y) => panic!("{cmd} {key}: logged by one run only: {x:?} vs {y:?}"),
                }
            }
            assert!(a["loss"].as_f64().is_some(), "{cmd}: {a}");
            // DPO logs all three; KTO at least its loss.
            let least = if cmd == "train-dpo" { 3 } else { 1 };
            assert!(compared >= least, "{cmd}: {compared} keys compared: {a}");
        }
    }
}
