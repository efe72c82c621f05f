//! The library trains without the command line: the default experiment's pipeline, called in
//! process on a tiny configuration, runs SFT, evaluation and RL through the one trainer, writes
//! its run directory, and a second call on the finished run resumes it without training again.

use reinforge_recipes::arith::{self, Outcome};
use reinforge_train::config::TrainConfig;
use reinforge_train::run_dir::RunDir;
use reinforge_train::trainer::{Phase, Start};

#[test]
fn the_default_pipeline_trains_in_process_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let set: Vec<String> = [
        "sft.steps=6",
        "sft.batch_size=8",
        "sft.checkpoint_every=0",
        "rl.steps=2",
        "rl.prompts_per_step=2",
        "rl.num_generations=2",
        "eval.problems=4",
        "eval.samples=2",
        "model.num_hidden_layers=1",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("runs_dir={}", dir.path().display())])
    .collect();
    let cfg = TrainConfig::resolve(None, &set).unwrap();
    cfg.validate_arith().unwrap();
    let run = RunDir::create(&cfg).unwrap();
    let Outcome::Finished(summary) = arith::run(&cfg, &run).unwrap() else {
        panic!("the run finished")
    };
    assert_eq!(summary.seed, 0);
    assert!((0.0..=1.0).contains(&summary.pass_at_1_rl));
    let sft: Vec<serde_json::Value> = run.read_jsonl("sft_metrics.jsonl").unwrap();
    let rl: Vec<serde_json::Value> = run.read_jsonl("metrics.jsonl").unwrap();
    assert_eq!((sft.len(), rl.len()), (6, 2));
    assert!(rl
        .iter()
        .all(|l| l["loss"].as_f64().is_some_and(f64::is_finite)));
    for tag in ["sft", "latest", "final"] {
        assert!(
            run.checkpoint(tag).join("model.safetensors").exists(),
            "{tag}"
        );
    }
    let start = Start::open(&run, Phase::Sft).unwrap();
    assert_eq!((start.state.phase, start.state.step), (Phase::Rl, 2));
    // Called again, the finished run trains no further step.
    assert!(matches!(
        arith::run(&cfg, &run).unwrap(),
        Outcome::Finished(_)
    ));
    let again: Vec<serde_json::Value> = run.read_jsonl("metrics.jsonl").unwrap();
    assert_eq!(again.len(), 2);
}
