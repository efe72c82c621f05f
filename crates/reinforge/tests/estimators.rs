//! Every advantage estimator the trainer can select runs the default experiment end to end (short
//! phases): `train` succeeds and every GRPO line of `metrics.jsonl` has finite numbers. The list
//! comes from the registry, so a newly registered outcome estimator is covered without an edit.

use std::path::Path;
use std::process::Command;
use std::thread;

use reinforge_rl::Estimator;
use serde_json::Value;

/// The default experiment cut to what the estimators see: two RL steps (the second reads the
/// first's update), after one SFT step and the smallest evaluations. Thirty SFT steps (7.5 of
/// a run's 9 s) changed nothing the check reads: the tiny policy's reward was 0 after them
/// too, so the groups' zero spread, the case an estimator must not divide by, is tested.
const SHORT: &[&str] = &[
    "sft.steps=1",
    "rl.steps=2",
    "eval.problems=2",
    "eval.samples=2",
];

/// Runs `reinforge train` with `estimator` (and `extra` overrides) into `runs`; returns the
/// failure as text.
fn train(runs: &Path, estimator: &str, extra: &[&str]) -> Result<(), String> {
    let mut args = vec!["train".to_string()];
    let sets = SHORT.iter().chain(extra).map(|s| s.to_string()).chain([
        format!("runs_dir={}", runs.display()),
        format!("name={estimator}"),
        format!("rl.advantage_estimator={estimator}"),
    ]);
    for kv in sets {
        args.push("--set".into());
        args.push(kv);
    }
    let out = Command::new(env!("CARGO_BIN_EXE_reinforge"))
        .args(&args)
        .output()
        .map_err(|e| format!("{estimator}: cannot run the binary: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{estimator}: status {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    finite_metrics(&runs.join(estimator)).map_err(|e| format!("{estimator}: {e}"))
}

/// Every GRPO step logged, every number in it finite.
fn finite_metrics(run: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).map_err(|e| e.to_string())?;
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let steps = lines
        .iter()
        .filter(|m| m.get("reward/mean").is_some())
        .count();
    if steps != 2 {
        return Err(format!("{steps} GRPO lines in metrics.jsonl, expected 2"));
    }
    for (i, m) in lines.iter().enumerate() {
        for (k, v) in m.as_object().into_iter().flatten() {
            if let Some(x) = v.as_f64() {
                if !x.is_finite() {
                    return Err(format!("metrics.jsonl line {}: {k} = {x}", i + 1));
                }
            }
        }
    }
    Ok(())
}

#[test]
fn every_trainable_estimator_runs_the_default_experiment() {
    let dir = tempfile::tempdir().unwrap();
    let mut runs: Vec<(&str, Vec<&str>)> = Estimator::outcome_names()
        .into_iter()
        .map(|n| (n, vec![]))
        .collect();
    // GAE needs the critic the `ppo` preset brings.
    runs.push((Estimator::Gae.name(), vec!["rl.algorithm=ppo"]));
    // Two at a time: each run is single-threaded (the default `threads = 1`).
    let failures: Vec<String> = runs
        .chunks(2)
        .flat_map(|pair| {
            thread::scope(|s| {
                let handles: Vec<_> = pair
                    .iter()
                    .map(|(name, extra)| s.spawn(|| train(dir.path(), name, extra)))
                    .collect();
                handles
                    .into_iter()
                    .filter_map(|h| h.join().expect("no panic").err())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn estimators_without_their_inputs_are_rejected_naming_the_input() {
    let dir = tempfile::tempdir().unwrap();
    for e in Estimator::ALL
        .into_iter()
        .filter(|e| *e != Estimator::Gae && !e.extra_inputs().is_empty())
    {
        let err = train(dir.path(), e.name(), &[]).unwrap_err();
        let input = e.extra_inputs()[0].name();
        assert!(err.contains(input) && !err.contains("panicked"), "{err}");
    }
}
