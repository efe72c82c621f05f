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
