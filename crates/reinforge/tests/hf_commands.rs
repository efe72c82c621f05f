//! `reinforge generate` and `reinforge score` on the fixture checkpoints agree with
//! transformers (scripts/reference_generate_score.py run in the project's .venv): the same
//! chat-template rendering and tokenization, the same per-token log-probs, the same greedy
//! tokens. Plus clear errors for a bad model directory and a bad input line.

mod common;

use std::path::{Path, PathBuf};

use common::{floats, json_lines, max_abs_diff, reference, reinforge, root};

const ARCHS: &[&str] = &["llama", "qwen2", "qwen3", "mistral"];
const MAX_NEW: usize = 8;

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

#[test]
fn score_and_greedy_generate_match_transformers() {
    let tmp = tempfile::tempdir().unwrap();
    let pairs = pairs_file(tmp.path());
    for arch in ARCHS {
        let model = root().join("fixtures/hf/models").join(arch);
        let expected = reference(&model, &pairs, MAX_NEW);
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
            let diff = max_abs_diff(&g, &w);
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
