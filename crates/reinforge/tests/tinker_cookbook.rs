//! tinker-cookbook's recipes, unmodified, against `reinforge serve --tinker` on the fixture
//! Llama: scripts/tinker_cookbook.sh starts the server and runs the chat SFT recipe
//! (`recipes.chat_sl.train` on the cookbook's example conversations) and the RL recipe
//! (`recipes.math_rl.train`, env=arithmetic) with the SDK and cookbook of .venv-tinker
//! (scripts/tinker_env.sh). Checked: the SFT recipe's training loss falls; the RL recipe runs
//! every step and logs its rewards; each recipe's final `save_state` wrote the weights with
//! the optimizer state.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::root;
use serde_json::Value;

const SFT_STEPS: usize = 8;
const RL_STEPS: usize = 3;

/// Reports a skip as the other SDK-driven tests do: a SKIPPED line and a file for
/// scripts/test.sh (which fails the run under CI).
fn skip(why: &str) {
    eprintln!("SKIPPED tinker_cookbook::recipes_run_unmodified: {why}");
    if let Some(dir) = std::env::var_os("REINFORGE_SKIPS_DIR") {
        let path = PathBuf::from(dir).join(format!("tinker_cookbook.{}", std::process::id()));
        std::fs::write(
            &path,
            format!("tinker_cookbook::recipes_run_unmodified\n{why}"),
        )
        .unwrap();
    }
}

/// The rows of a recipe's `metrics.jsonl` that have `key`.
fn metrics(dir: &Path, key: &str) -> Vec<Value> {
    let path = dir.join("metrics.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r.get(key).is_some())
        .collect()
}

/// The checkpoint directory of the recipe's final `save_state` (its checkpoints.jsonl).
fn final_state(out: &Path, recipe: &str) -> PathBuf {
    let path = out.join(recipe).join("checkpoints.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let state = last["state_path"].as_str().unwrap();
    let rest = state.strip_prefix("tinker://").unwrap();
    out.join("checkpoints").join(rest)
}

#[test]
fn recipes_run_unmodified() {
    let python = root().join(".venv-tinker/bin/python");
    let has_cookbook = python.is_file()
        && Command::new(&python)
            .args(["-c", "import tinker_cookbook.recipes.math_rl.train"])
            .status()
            .is_ok_and(|s| s.success());
    if !has_cookbook {
        skip("no tinker-cookbook in .venv-tinker (scripts/tinker_env.sh installs it)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let run = Command::new(root().join("scripts/tinker_cookbook.sh"))
        .arg(root().join("fixtures/hf/models/llama"))
        .arg(&out)
        .env("REINFORGE", env!("CARGO_BIN_EXE_reinforge"))
        .env("THREADS", "1")
        .env("LORA_RANK", "4")
        .env("SFT_STEPS", SFT_STEPS.to_string())
        .env("SFT_LR", "1e-2")
        // The fixture's context is 128 tokens.
        .env("SFT_MAX_LENGTH", "120")
        .env("RL_STEPS", RL_STEPS.to_string())
        .env("RL_GROUPS", "2")
        .env("RL_GROUP_SIZE", "4")
        .env("RL_MAX_TOKENS", "5")
        .output()
        .expect("runs scripts/tinker_cookbook.sh");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "the recipes failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    eprintln!("{stdout}");

    // SFT: every step logged; the loss of the last steps is well below the first ones'.
    let sft: Vec<f64> = metrics(&out.join("sft"), "train_mean_nll")
        .iter()
        .map(|r| r["train_mean_nll"].as_f64().unwrap())
        .collect();
    assert_eq!(sft.len(), SFT_STEPS, "{sft:?}");
    assert!(sft.iter().all(|x| x.is_finite()), "{sft:?}");
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (first, last) = (mean(&sft[..2]), mean(&sft[SFT_STEPS - 3..]));
    assert!(
        last < first - 0.2,
        "the SFT loss did not fall: first two steps {first}, last three {last} ({sft:?})"
    );

    // RL: every step sampled, scored and trained, with its reward logged.
    let rl = metrics(&out.join("rl"), "env/all/reward/total");
    let steps: Vec<u64> = rl.iter().map(|r| r["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, (0..RL_STEPS as u64).collect::<Vec<_>>(), "{rl:?}");
    for r in &rl {
        assert!(r["env/all/reward/total"].as_f64().unwrap().is_finite());
        assert!(
            r["env/all/ac_tokens_per_turn"].as_f64().unwrap() > 0.0,
            "{r}"
        );
    }

    // Each recipe ends with save_state: weights, adapter and the optimizer's moments.
    for recipe in ["sft", "rl"] {
        let dir = final_state(&out, recipe);
        for file in ["adapter_config.json", "optimizer.safetensors"] {
            assert!(dir.join(file).is_file(), "{} lacks {file}", dir.display());
        }
    }
}
