//! Tests of `reinforge_train::trainer` through its public API (moved out of the library source).

use anyhow::Result;
use reinforge_torch::Policy;
use reinforge_train::config::TrainConfig;
use reinforge_train::run_dir::RunDir;
use reinforge_train::trainer::*;
use serde::Serialize;
use std::path::Path;

#[derive(Serialize)]
struct Line {
    bad: usize,
}

impl StepLog for Line {
    fn bar_message(&self) -> String {
        String::new()
    }
    fn nonfinite_grad_steps(&self) -> usize {
        self.bad
    }
}

/// Runs a phase whose step `i` reports `bad[i]` skipped optimizer steps.
fn run_with(
    bad: &[usize],
    limit: usize,
    resume_at: usize,
) -> (Result<PhaseEnd>, usize, RunDir, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = TrainConfig {
        runs_dir: dir.path().display().to_string(),
        ..TrainConfig::default()
    };
    cfg.model.num_hidden_layers = 1;
    let run = RunDir::create(&cfg).unwrap();
    let policy = Policy::new(&cfg.model, reinforge_torch::Device::Cpu, 0).unwrap();
    let mut state = TrainerState::start(Phase::Rl);
    state.step = resume_at;
    // A stale line past the checkpoint, as an interrupted run leaves one.
    for i in 0..=resume_at {
        run.append_jsonl("m.jsonl", &Line { bad: i }).unwrap();
    }
    let mut t = Trainer::new(
        &policy,
        optimizer(&policy, 0.0),
        state,
        Box::new(|_: &Path| Ok(())),
    )
    .stop_after_nonfinite_steps(limit);
    let plan = PhasePlan {
        steps: bad.len(),
        checkpoint_every: 0,
        metrics_file: "m.jsonl",
    };
    let end = t.run_phase(&run, &plan, |t| {
        Ok(Line {
            bad: bad[t.state.step],
        })
    });
    (end, t.state.step, run, dir)
}

#[test]
fn consecutive_nonfinite_steps_stop_the_run_after_saving() {
    let (end, step, run, _dir) = run_with(&[0, 1, 1, 0, 1, 1, 1, 0, 0], 3, 0);
    let err = format!("{:#}", end.unwrap_err());
    assert!(
        err.contains("3 consecutive") && err.contains("max_nonfinite_steps"),
        "{err}"
    );
    assert_eq!(step, 7, "stopped after the third bad step in a row");
    let saved: TrainerState =
        reinforge_train::run_dir::read_json(&run.checkpoint("latest").join(checkpoint::STATE_FILE))
            .unwrap();
    assert_eq!(saved.step, 7);
    assert_eq!(
        run.read_jsonl::<serde_json::Value>("m.jsonl")
            .unwrap()
            .len(),
        7
    );
    // Two in a row stay under the limit; 0 never stops.
    let (end, step, _, _) = run_with(&[1, 1, 0, 1, 1, 0], 3, 0);
    assert_eq!((end.unwrap(), step), (PhaseEnd::Finished, 6));
    let (end, _, _, _) = run_with(&[1; 6], 0, 0);
    assert_eq!(end.unwrap(), PhaseEnd::Finished);
}

#[test]
fn a_resumed_phase_drops_lines_past_its_checkpoint() {
    let (end, step, run, _dir) = run_with(&[0; 5], 0, 2);
    assert_eq!((end.unwrap(), step), (PhaseEnd::Finished, 5));
    let lines: Vec<serde_json::Value> = run.read_jsonl("m.jsonl").unwrap();
    let bad: Vec<u64> = lines.iter().map(|l| l["bad"].as_u64().unwrap()).collect();
    assert_eq!(
        bad,
        vec![0, 1, 0, 0, 0],
        "the stale third line was replaced"
    );
}

#[test]
fn positions_fit_at_the_edge_and_not_one_past() {
    check_positions(9, 55, 64, "a prompt").unwrap();
    let err = check_positions(9, 56, 64, "a prompt")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("rl.max_completion_length") && err.contains("max_position_embeddings"),
        "{err}"
    );
    assert!(err.contains("at most 55"), "{err}");
}
