//! `reinforge derl` end to end on the tiny configuration: the outer loop's files and report,
//! an interrupted and resumed outer loop equal to an uninterrupted one, bad options.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::tiny::{check, run, TINY};
use serde_json::Value;

/// `derl` on [`TINY`] (shorter SFT) with a population of 2, 2 generations of 2-step inner runs
/// and 2 final seeds, into `out`.
fn derl_args(out: &Path) -> Vec<String> {
    let mut args: Vec<String> = [
        "derl",
        "--population",
        "2",
        "--generations",
        "2",
        "--inner-steps",
        "2",
        "--final-seeds",
        "2",
        "--val-problems",
        "4",
        "--test-problems",
        "4",
        "--eval-samples",
        "4",
        "--out",
    ]
    .map(String::from)
    .to_vec();
    args.push(out.display().to_string());
    for kv in TINY
        .iter()
        .chain(&["sft.steps=60", "rl.checkpoint_every=1"])
    {
        args.push("--set".into());
        args.push(kv.to_string());
    }
    args
}

/// A JSON file.
fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn derl_runs_reports_and_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let straight = dir.path().join("straight");
    check(&run(&derl_args(&straight)));

    // Every inner run is an ordinary finished run directory started from the SFT checkpoint.
    for name in ["g000-c00-s0", "g000-c01-s0", "g001-c00-s0", "g001-c01-s0"] {
        let inner = straight.join("inner").join(name);
        assert!(inner.join("summary.json").exists(), "{name}");
        let metrics = std::fs::read_to_string(inner.join("metrics.jsonl")).unwrap();
        assert_eq!(metrics.lines().count(), 2, "{name}: 2 GRPO steps");
        assert!(
            !inner.join("sft_metrics.jsonl").exists(),
            "{name}: no SFT of its own"
        );
    }
    for name in ["best-s0", "default-s0", "best-s1", "default-s1"] {
        assert!(straight
            .join("final")
            .join(name)
            .join("eval_rl.json")
            .exists());
    }
    let state = json(&straight.join("state.json"));
    let generations = state["generations"].as_array().unwrap();
    assert_eq!(generations.len(), 2);
    for g in generations {
        let scores: Vec<f64> = g["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["score"].as_f64().unwrap())
            .collect();
        assert_eq!(scores.len(), 2);
        let best = scores.iter().copied().fold(f64::MIN, f64::max);
        assert_eq!(g["best"].as_f64().unwrap(), best);
        assert!(scores.iter().all(|s| (0.0..=1.0).contains(s)));
    }
    let comparison = json(&straight.join("comparison.json"));
    assert_eq!(comparison["seeds"], 2);
    assert_eq!(comparison["problems"], 8);
    let report = std::fs::read_to_string(straight.join("report.md")).unwrap();
    assert!(
        report.contains("| generation | best val pass@1"),
        "{report}"
    );
    assert!(report.contains(comparison["verdict"].as_str().unwrap()));

    // Interrupted once the first generation is written, then resumed: the same result.
    let cut = dir.path().join("cut");
    let mut child = Command::new(env!("CARGO_BIN_EXE_reinforge"))
        .args(derl_args(&cut))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(600);
    while !cut.join("state.json").exists() {
        assert!(Instant::now() < deadline, "no generation finished");
        std::thread::sleep(Duration::from_millis(20));
    }
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(130));
    assert!(!cut.join("comparison.json").exists());
    let resumed = run(&["derl".into(), "--resume".into(), cut.display().to_string()]);
    check(&resumed);
    assert_eq!(json(&cut.join("state.json")), state);
    assert_eq!(json(&cut.join("comparison.json")), comparison);
}

#[test]
fn bad_derl_options_name_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("d");
    let cases: [(&[&str], &str); 4] = [
        (&["derl", "--population", "1"], "--population"),
        (&["derl", "--lr", "0"], "--lr"),
        (&["derl", "--set", "task.attempts=2"], "task.attempts"),
        (
            &["derl", "--resume", "/nonexistent/derl"],
            "not a DERL directory",
        ),
    ];
    for (args, needle) in cases {
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        if !args.contains(&"--resume".to_string()) {
            args.extend(["--out".into(), out.display().to_string()]);
        }
        let o = run(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    assert!(!out.join("derl.json").exists());
    // --resume with another option is refused by the parser.
    let o = run(&[
        "derl".into(),
        "--resume".into(),
        out.display().to_string(),
        "--population".into(),
        "3".into(),
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--population"));
}
