//! `reinforge generate` and `reinforge score` on the fixture checkpoints agree with
//! transformers (scripts/reference_generate_score.py run in the project's .venv): the same
//! chat-template rendering and tokenization, the same per-token log-probs, the same greedy
//! tokens. Plus clear errors for a bad model directory and a bad input line.

use crate::common;

use std::path::{Path, PathBuf};

use common::real_model::real_model;
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
    let models: Vec<PathBuf> = ARCHS
        .iter()
        .map(|arch| root().join("fixtures/hf/models").join(arch))
        .collect();
    let refs: Vec<&Path> = models.iter().map(PathBuf::as_path).collect();
    let expected = reference(&refs, &pairs, MAX_NEW);
    for ((arch, model), expected) in ARCHS.iter().zip(&models).zip(&expected) {
        let parity = check_parity(arch, model, &pairs, expected, MAX_NEW);
        assert!(parity.max_logprob_diff < 1e-4, "{arch}: {parity:?}");
        assert_eq!(
            parity.greedy_agree, parity.greedy_total,
            "{arch}: {parity:?}"
        );
    }
}

/// The real model (SmolLM2-135M-Instruct, scripts/real_model.sh) on real prompts: the chat
/// template renders the same text, completion log-probs agree within 1e-4 (f32, CPU) and
/// greedy decoding picks the same tokens as transformers' argmax over full forwards.
#[test]
fn real_model_scores_and_generates_like_transformers() {
    let Some(model) = real_model(&root()) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let pairs = tmp.path().join("pairs.jsonl");
    std::fs::write(
        &pairs,
        concat!(
            "{\"prompt\": \"Calculate 7 + -2.\", \"completion\": \"7 + (-2) = 5. The answer is 5.\"}\n",
            "{\"prompt\": \"Your task is to count how many legs there are in total when given a list of animals.\\n\\nNow, how many legs are there in total if you have 3 lions?\\n\", ",
            "\"completion\": \"Each lion has 4 legs, so 3 lions have 12 legs.\"}\n",
            "{\"prompt\": [{\"role\": \"system\", \"content\": \"Answer with a number.\"}, ",
            "{\"role\": \"user\", \"content\": \"What is 6 * 7?\"}], \"completion\": \"42\"}\n",
        ),
    )
    .unwrap();
    let expected = reference(&[&model], &pairs, 24).remove(0);
    let parity = check_parity("SmolLM2", &model, &pairs, &expected, 24);
    println!("SmolLM2 parity: {parity:?}");
    assert!(parity.max_logprob_diff < 1e-4, "{parity:?}");
    assert_eq!(parity.greedy_agree, parity.greedy_total, "{parity:?}");
}

/// What [`check_parity`] measured.
#[derive(Debug)]
struct Parity {
    max_logprob_diff: f64,
    /// Greedy tokens equal to transformers' (up to reinforge's stop), out of those compared.
    greedy_agree: usize,
    greedy_total: usize,
}

/// Runs `reinforge score` and greedy `reinforge generate` on `pairs` and compares them with
/// `expected`, transformers' lines for them ([`reference`]; the rendered prompt text must be
/// equal: the chat template's parity).
fn check_parity(
    label: &str,
    model: &Path,
    pairs: &Path,
    expected: &[serde_json::Value],
    max_new: usize,
) -> Parity {
    let lines = std::fs::read_to_string(pairs).unwrap().lines().count();
    assert_eq!(
        expected.len(),
        lines,
        "{label}: one reference line per pair"
    );
    let (m, p) = (model.to_str().unwrap(), pairs.to_str().unwrap());
    let out = reinforge(&["score", "--model", m, "--input", p]);
    assert!(
        out.status.success(),
        "{label}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let scored = json_lines(&out.stdout);
    assert_eq!(scored.len(), expected.len());
    let mut max_logprob_diff: f64 = 0.0;
    for (got, want) in scored.iter().zip(expected) {
        let (g, w) = (
            floats(&got["token_logprobs"]),
            floats(&want["token_logprobs"]),
        );
        assert_eq!(
            g.len(),
            w.len(),
            "{label}: completion tokenized differently"
        );
        max_logprob_diff = max_logprob_diff.max(max_abs_diff(&g, &w));
        let total: f64 = g.iter().sum();
        assert!((got["total_logprob"].as_f64().unwrap() - total).abs() < 1e-6);
    }
    let max = max_new.to_string();
    let out = reinforge(&[
        "generate",
        "--model",
        m,
        "--input",
        p,
        "--temperature",
        "0",
        "--max-new-tokens",
        &max,
    ]);
    assert!(
        out.status.success(),
        "{label}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = json_lines(&out.stdout);
    assert_eq!(generated.len(), expected.len());
    let (mut greedy_agree, mut greedy_total) = (0, 0);
    for (got, want) in generated.iter().zip(expected) {
        assert_eq!(
            got["prompt"], want["prompt_text"],
            "{label}: chat template rendering"
        );
        let ids = |v: &serde_json::Value| -> Vec<i64> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_i64().unwrap())
                .collect()
        };
        let (g, w) = (ids(&got["completion_ids"]), ids(&want["greedy_ids"]));
        // reinforge stops at a stop token; transformers was run without one.
        assert!(!g.is_empty(), "{label}: empty completion");
        greedy_total += g.len();
        greedy_agree += g.iter().zip(&w).take_while(|(a, b)| a == b).count();
        let stopped = got["finish_reason"] == "stop";
        assert_eq!(
            stopped,
            g.len() < max_new,
            "{label}: finish_reason vs length"
        );
    }
    Parity {
        max_logprob_diff,
        greedy_agree,
        greedy_total,
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
