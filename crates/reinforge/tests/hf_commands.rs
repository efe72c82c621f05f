//! `reinforge generate` and `reinforge score` on the fixture checkpoints agree with
//! transformers (scripts/reference_generate_score.py run in the project's .venv): the same
//! chat-template rendering and tokenization, the same per-token log-probs, the same greedy
//! tokens. Plus clear errors for a bad model directory and a bad input line.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const ARCHS: &[&str] = &["llama", "qwen2", "qwen3", "mistral"];
const MAX_NEW: usize = 8;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn reinforge(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_reinforge"))
        .args(args)
        .output()
        .expect("run reinforge")
}

fn json_lines(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

fn pairs_file(dir: &Path) -> PathBuf {
    let path = dir.join("pairs.jsonl");
    std::fs::write(
        &path,
        concat!(
            "{\"prompt\": \"What is 12+30?\", \"completion\": \"12+30=42\"}\n",
            "{\"prompt\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, ",
            "{\"role\": \"user\", \"content\": \"Say hello\"}], \"completion\": \"hello there\"}\n",
        ),
    )
    .unwrap();
    path
}

fn reference(model: &Path, pairs: &Path) -> Vec<Value> {
    let out = Command::new(root().join(".venv/bin/python"))
        .arg(root().join("scripts/reference_generate_score.py"))
        .args([model.as_os_str(), pairs.as_os_str()])
        .arg(MAX_NEW.to_string())
        .output()
        .expect("run the transformers reference (scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    json_lines(&out.stdout)
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

#[test]
fn score_and_greedy_generate_match_transformers() {
    let tmp = tempfile::tempdir().unwrap();
    let pairs = pairs_file(tmp.path());
    for arch in ARCHS {
        let model = root().join("fixtures/hf/models").join(arch);
        let expected = reference(&model, &pairs);
        let m = model.to_str().unwrap();
        let p = pairs.to_str().unwrap();

        let out = reinforge(&["score", "--model", m, "--input", p]);
        assert!(
            out.status.success(),
            "{arch}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let scored = json_lines(&out.stdout);
        assert_eq!(scored.len(), expected.len());
        for (got, want) in scored.iter().zip(&expected) {
            let (g, w) = (
                floats(&got["token_logprobs"]),
                floats(&want["token_logprobs"]),
            );
            assert_eq!(g.len(), w.len(), "{arch}: completion tokenized differently");
            let diff = g
                .iter()
                .zip(&w)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            assert!(diff < 1e-4, "{arch}: log-prob max abs diff {diff}");
            let total: f64 = g.iter().sum();
            assert!((got["total_logprob"].as_f64().unwrap() - total).abs() < 1e-6);
        }

        let out = reinforge(&[
            "generate",
            "--model",
            m,
            "--input",
            p,
            "--temperature",
            "0",
            "--max-new-tokens",
            &MAX_NEW.to_string(),
        ]);
        assert!(
            out.status.success(),
            "{arch}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let generated = json_lines(&out.stdout);
        assert_eq!(generated.len(), expected.len());
        for (got, want) in generated.iter().zip(&expected) {
            let g: Vec<i64> = got["completion_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_i64().unwrap())
                .collect();
            let w: Vec<i64> = want["greedy_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_i64().unwrap())
                .collect();
            // reinforge stops at a stop token; transformers was run without one.
            assert!(
                !g.is_empty() && w.starts_with(&g),
                "{arch}: greedy {g:?} vs transformers {w:?}"
            );
            let stopped = got["finish_reason"] == "stop";
            assert_eq!(
                stopped,
                g.len() < MAX_NEW,
                "{arch}: finish_reason vs length"
            );
        }
    }
}

#[test]
fn bad_inputs_name_the_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let out = reinforge(&[
        "generate",
        "--model",
        tmp.path().to_str().unwrap(),
        "--prompt",
        "x",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("config.json"), "{err}");

    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": \"a\"}\n",
    )
    .unwrap();
    let model = root().join("fixtures/hf/models/qwen2");
    let out = reinforge(&[
        "score",
        "--model",
        model.to_str().unwrap(),
        "--input",
        bad.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.jsonl") && err.contains("completion") && err.contains('2'),
        "{err}"
    );
}
