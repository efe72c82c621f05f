//! Tests of `reinforge_train::trainer::state` through the public API (moved out of the library source).

use reinforge_train::trainer::*;

#[test]
fn both_version_one_schemas_read() {
    let arith: TrainerState = serde_json::from_str(
        r#"{"phase":"grpo","step":3,"task_digits":3,"sft_seconds":1.5,"grpo_seconds":2.0}"#,
    )
    .unwrap();
    assert_eq!(
        (arith.version, arith.phase, arith.step, arith.sft_seconds),
        (1, Phase::Rl, 3, 1.5)
    );
    let data: TrainerState = serde_json::from_str(r#"{"step":7,"seconds":4.0}"#).unwrap();
    assert_eq!(
        (data.phase, data.step, data.grpo_seconds),
        (Phase::Rl, 7, 4.0)
    );
    let now = serde_json::to_value(TrainerState::start(Phase::Sft)).unwrap();
    assert_eq!(now["version"], STATE_VERSION);
    assert_eq!(now["phase"], "sft");
    // The renamed phases keep their on-disk names, so older runs resume.
    for (phase, name) in [
        (Phase::Rl, "grpo"),
        (Phase::Preference, "dpo"),
        (Phase::P2l, "p2l"),
    ] {
        let state = serde_json::to_value(TrainerState::start(phase)).unwrap();
        assert_eq!((state["phase"].as_str(), phase.label()), (Some(name), name));
    }
}
