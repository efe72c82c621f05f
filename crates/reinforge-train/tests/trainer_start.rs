//! Tests of `reinforge_train::trainer::start` through the public API (moved out of the library source).

use reinforge_train::run_dir::write_json;
use reinforge_train::run_dir::RunDir;
use reinforge_train::trainer::checkpoint::STATE_FILE;
use reinforge_train::trainer::*;
use reinforge_train::trainer::{Phase, TrainerState};

#[test]
fn a_run_opens_fresh_then_resumes_from_its_saved_state() {
    let dir = tempfile::tempdir().unwrap();
    let run = RunDir {
        root: dir.path().to_path_buf(),
    };
    let fresh = Start::open(&run, Phase::Sft).unwrap();
    assert!(!fresh.resumed && !fresh.has_progress(Phase::Sft));
    assert_eq!(fresh.state, TrainerState::start(Phase::Sft));
    let mut saved = TrainerState::start(Phase::Rl);
    saved.step = 4;
    std::fs::create_dir_all(&fresh.latest).unwrap();
    write_json(&fresh.latest.join(STATE_FILE), &saved).unwrap();
    let again = Start::open(&run, Phase::Sft).unwrap();
    assert!(again.resumed && again.has_progress(Phase::Sft));
    assert_eq!(
        (again.state, again.latest),
        (saved, run.checkpoint("latest"))
    );
}

/// Writes a complete checkpoint directory `checkpoints/<name>` of `run` at `step`.
fn complete(run: &RunDir, name: &str, step: usize) {
    let dir = run.checkpoint(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("model.safetensors"), b"weights").unwrap();
    let mut state = TrainerState::start(Phase::Rl);
    state.step = step;
    write_json(&dir.join(STATE_FILE), &state).unwrap();
}

/// Every state a save of `latest` passes through (checkpoint::save: write `.latest.tmp`, its
/// trainer state last; rename `latest` to `.latest.old`; rename `.latest.tmp` to `latest`;
/// remove `.latest.old`), killed there, opens at the newest complete checkpoint.
#[test]
fn a_save_killed_at_any_point_resumes_from_the_newest_complete_checkpoint() {
    // (what is on disk, the step the run resumes from, from where)
    type Layout = (
        &'static str,
        Vec<(&'static str, Option<usize>)>,
        usize,
        &'static str,
    );
    let layouts: Vec<Layout> = vec![
        (
            "writing the new one",
            vec![("latest", Some(3)), (".latest.tmp", None)],
            3,
            "latest",
        ),
        (
            "new one complete",
            vec![("latest", Some(3)), (".latest.tmp", Some(4))],
            4,
            ".latest.tmp",
        ),
        (
            "between the renames",
            vec![(".latest.old", Some(3)), (".latest.tmp", Some(4))],
            4,
            ".latest.tmp",
        ),
        (
            "before removing the old",
            vec![("latest", Some(4)), (".latest.old", Some(3))],
            4,
            "latest",
        ),
        (
            "first save, writing",
            vec![(".latest.tmp", None)],
            0,
            "latest",
        ),
    ];
    for (case, dirs, step, from) in layouts {
        let tmp = tempfile::tempdir().unwrap();
        let run = RunDir {
            root: tmp.path().to_path_buf(),
        };
        for (name, saved) in dirs {
            match saved {
                Some(s) => complete(&run, name, s),
                None => std::fs::create_dir_all(run.checkpoint(name).join("adapter")).unwrap(),
            }
        }
        let start = Start::open(&run, Phase::Rl).unwrap();
        assert_eq!(start.state.step, step, "{case}");
        assert_eq!(start.resumed, step > 0, "{case}");
        assert_eq!(start.latest, run.checkpoint(from), "{case}");
    }
}

/// A `latest` without its trainer state and nothing to fall back on, and a run that logged
/// steps but holds no checkpoint, are refused by name rather than started over.
#[test]
fn an_incomplete_checkpoint_or_metrics_without_one_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let run = RunDir {
        root: tmp.path().to_path_buf(),
    };
    std::fs::create_dir_all(run.checkpoint("latest")).unwrap();
    let err = Start::open(&run, Phase::Rl).unwrap_err().to_string();
    assert!(err.contains("latest") && err.contains(STATE_FILE), "{err}");
    std::fs::remove_dir_all(run.checkpoint("latest")).unwrap();
    std::fs::write(run.path("metrics.jsonl"), "{\"step\":0}\n").unwrap();
    let err = Start::open(&run, Phase::Rl).unwrap_err().to_string();
    assert!(
        err.contains("metrics.jsonl") && err.contains("no complete checkpoint"),
        "{err}"
    );
}

/// A save over an existing checkpoint replaces it and leaves nothing else behind.
#[test]
fn a_save_replaces_the_checkpoint_and_leaves_no_temporary() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = reinforge_train::config::TrainConfig {
        runs_dir: tmp.path().display().to_string(),
        ..Default::default()
    };
    cfg.model.num_hidden_layers = 1;
    let run = RunDir::create(&cfg).unwrap();
    let policy = reinforge_torch::Policy::new(&cfg.model, reinforge_torch::Device::Cpu, 0).unwrap();
    let mut t = Trainer::new(
        &policy,
        optimizer(&policy, 0.0),
        TrainerState::start(Phase::Rl),
        Box::new(|_: &std::path::Path| Ok(())),
    );
    for step in [1, 2] {
        t.state.step = step;
        t.save(&run, "latest", true).unwrap();
        let names: Vec<String> = std::fs::read_dir(run.root.join("checkpoints"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["latest".to_string()]);
        assert_eq!(Start::open(&run, Phase::Rl).unwrap().state.step, step);
    }
}
