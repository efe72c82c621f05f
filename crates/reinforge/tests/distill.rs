//! `train-distill` end to end: a student (the tiny `llama` fixture) distilled from a teacher
//! with the same tokenizer but other weights (the `llama_tied` fixture) moves towards it (the
//! held-out KL falls), a run continued from its checkpoint ends with the weights of an
//! uninterrupted one, and a teacher with another tokenizer is refused. A teacher behind
//! `reinforge serve --model` (`--teacher-url`, its vLLM-style `prompt_logprobs`) scores tokens
//! as `reinforge score` does and the student moves towards it too.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/hf/models")
        .join(name)
}

fn prompts(n: usize, offset: usize) -> String {
    (0..n)
        .map(|i| {
            let k = i + offset;
            json!({"prompt": format!("Tell me about {k} and {}.", k * 7 % 13)}).to_string() + "\n"
        })
        .collect()
}

fn reinforge(args: &[String]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_reinforge"))
        .args(args)
        .output()
        .unwrap()
}

fn run_ok(args: &[String]) {
    let o = reinforge(args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `train-distill` of the llama fixture from `teacher` on `d`'s files into `out`.
fn command(d: &Path, teacher: &str, out: &Path, steps: &str) -> Vec<String> {
    let s = |x: &str| x.to_string();
    let p = |x: &Path| x.display().to_string();
    vec![
        s("train-distill"),
        s("--model"),
        p(&fixture("llama")),
        s("--teacher"),
        p(&fixture(teacher)),
        s("--data"),
        p(&d.join("train.jsonl")),
        s("--heldout"),
        p(&d.join("test.jsonl")),
        s("--output"),
        p(out),
        s("--steps"),
        s(steps),
        s("--batch-size"),
        s("8"),
        s("--lr"),
        s("0.01"),
        s("--max-new-tokens"),
        s("12"),
        s("--raw"),
        s("--threads"),
        s("1"),
    ]
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn metrics(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn the_student_moves_towards_the_teacher_and_a_resumed_run_matches() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("train.jsonl"), prompts(32, 0)).unwrap();
    std::fs::write(d.join("test.jsonl"), prompts(8, 100)).unwrap();
    let whole = d.join("whole");
    run_ok(&command(d, "llama_tied", &whole, "12"));
    let report = read_json(&whole.join("report.json"));
    eprintln!("{report:#}");
    let kl = |k: &str| report[k]["reverse_kl"].as_f64().unwrap();
    let (before, after) = (kl("heldout_before"), kl("heldout_after"));
    // The teacher is really another model: the held-out KL starts well above zero.
    assert!(before > 1e-3, "{report}");
    // 12 steps of reverse KL on the student's own samples at least halve it.
    assert!(after < 0.5 * before, "held-out KL {before} -> {after}");
    assert_eq!(report["heldout_on"], "student samples");
    let m = metrics(&whole);
    assert_eq!(m.len(), 12);
    for key in [
        "loss",
        "grad_norm",
        "on_policy",
        "completion_length",
        "reverse_kl",
        "forward_kl",
        "entropy",
        "tokens",
    ] {
        assert!(m[0].get(key).is_some(), "{key}: {}", m[0]);
    }
    // beta = 1: the trained loss is the reverse KL.
    for line in &m {
        let (loss, r) = (
            line["loss"].as_f64().unwrap(),
            line["reverse_kl"].as_f64().unwrap(),
        );
        assert!((loss - r).abs() <= 1e-5 * r.abs().max(1e-3), "{line}");
        assert_eq!(line["on_policy"], 1.0);
    }
    // 5 steps, then the same run continued to 12: the weights of the uninterrupted run.
    let split = d.join("split");
    run_ok(&command(d, "llama_tied", &split, "5"));
    run_ok(&command(d, "llama_tied", &split, "12"));
    assert_eq!(metrics(&split).len(), 12);
    let weights =
        |run: &Path| std::fs::read(run.join("checkpoints/final/model.safetensors")).unwrap();
    assert!(
        weights(&whole) == weights(&split),
        "the resumed run's weights differ"
    );
}

/// Prompts with a `completion` column.
fn with_completions(n: usize, offset: usize) -> String {
    (0..n)
        .map(|i| {
            let k = i + offset;
            json!({"prompt": format!("Tell me about {k}."), "completion": format!("It is {}.", k % 5)})
                .to_string()
                + "\n"
        })
        .collect()
}

#[test]
fn off_policy_steps_train_on_the_data_or_the_teachers_samples() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("train.jsonl"), with_completions(16, 0)).unwrap();
    std::fs::write(d.join("test.jsonl"), with_completions(4, 100)).unwrap();
    for (extra, name) in [(vec![], "mixed"), (vec!["--seq-kd"], "seq_kd")] {
        let out = d.join(name);
        let mut args = command(d, "llama_tied", &out, "8");
        args.extend(["--lmbda", "0.5", "--beta", "0.5"].map(String::from));
        args.extend(extra.iter().map(|s| s.to_string()));
        run_ok(&args);
        let report = read_json(&out.join("report.json"));
        // Held-out rows with completions are scored on those fixed tokens.
        assert_eq!(report["heldout_on"], "data completions", "{report}");
        let kl = |k: &str| report[k]["reverse_kl"].as_f64().unwrap();
        assert!(kl("heldout_after") < kl("heldout_before"), "{report}");
        let m = metrics(&out);
        let on: Vec<f64> = m.iter().map(|l| l["on_policy"].as_f64().unwrap()).collect();
        assert!(on.contains(&0.0) && on.contains(&1.0), "{name}: {on:?}");
        // beta = 0.5: the trained loss is the JSD, not either KL.
        let l = &m[0];
        let f = |k: &str| l[k].as_f64().unwrap();
        assert!(
            (f("loss") - f("reverse_kl")).abs() > 1e-6 && f("loss") < f("reverse_kl"),
            "{l}"
        );
    }
}

#[test]
fn a_teacher_with_another_tokenizer_and_bad_rows_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("train.jsonl"), prompts(4, 0)).unwrap();
    std::fs::write(d.join("test.jsonl"), prompts(2, 100)).unwrap();
    let o = reinforge(&command(d, "qwen2", &d.join("bad"), "1"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("tokenizer"), "{err}");
    // lmbda < 1 without --seq-kd trains off-policy steps on the data's completions.
    let mut args = command(d, "llama_tied", &d.join("bad2"), "1");
    args.extend(["--lmbda".to_string(), "0.5".to_string()]);
    let o = reinforge(&args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("completion"), "{err}");
    // `completion` on some rows only names the count.
    let rows = format!("{}{}", with_completions(2, 0), prompts(1, 5));
    std::fs::write(d.join("train.jsonl"), rows).unwrap();
    let o = reinforge(&command(d, "llama_tied", &d.join("bad3"), "1"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("set on 2 of 3 rows"),
        "{err}"
    );
    // A prompt too long for the model's 128 positions names its row.
    let long = json!({"prompt": "word ".repeat(200)}).to_string() + "\n";
    std::fs::write(d.join("train.jsonl"), format!("{}{long}", prompts(1, 0))).unwrap();
    let o = reinforge(&command(d, "llama_tied", &d.join("bad4"), "1"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("row 2") && err.contains("positions"),
        "{err}"
    );
}

/// The server's `prompt_logprobs` of a token-id sequence equal `reinforge score`'s log-probs of
/// the same tokens (the actual token's entry), with ranks and the top alternatives sorted.
#[test]
fn a_served_teacher_scores_tokens_as_score_does_and_distils_the_student() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let teacher = fixture("llama_tied");
    let server = common::server::Server::model(&teacher);
    // `reinforge score` on a text row (--raw: the prompt with the tokenizer's special tokens,
    // the completion without), then the server on the same ids.
    let rows = d.join("rows.jsonl");
    let row = json!({"prompt": "The teacher says", "completion": " hello to the student"});
    std::fs::write(&rows, row.to_string() + "\n").unwrap();
    let out = reinforge(&[
        "score".into(),
        "--model".into(),
        teacher.display().to_string(),
        "--input".into(),
        rows.display().to_string(),
        "--raw".into(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let scored: Value =
        serde_json::from_slice(out.stdout.split(|&b| b == b'\n').next().unwrap()).unwrap();
    let tok = reinforge_hf::HfTokenizer::from_dir(&teacher).unwrap();
    let prompt: Vec<i64> = tok
        .encode("The teacher says", true)
        .unwrap()
        .into_iter()
        .map(i64::from)
        .collect();
    assert_eq!(scored["prompt_tokens"].as_u64(), Some(prompt.len() as u64));
    let completion: Vec<i64> = scored["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    let score_lps: Vec<f64> = scored["token_logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let seq: Vec<i64> = prompt.iter().chain(&completion).copied().collect();
    let body = json!({"model": "llama_tied", "prompt": [seq], "max_tokens": 1,
                      "temperature": 1.0, "prompt_logprobs": 5});
    let resp = common::server::post(&format!("{}/v1/completions", server.url), &body);
    let entries = resp["choices"][0]["prompt_logprobs"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(entries.len(), seq.len());
    assert!(entries[0].is_null());
    assert_eq!(score_lps.len(), completion.len());
    for (j, &id) in completion.iter().enumerate() {
        let e = &entries[prompt.len() + j];
        let actual = &e[id.to_string()];
        let gap = (actual["logprob"].as_f64().unwrap() - score_lps[j]).abs();
        assert!(gap < 1e-5, "position {j}: {e} vs score {}", score_lps[j]);
        let mut ranked: Vec<(u64, f64)> = e
            .as_object()
            .unwrap()
            .values()
            .map(|v| (v["rank"].as_u64().unwrap(), v["logprob"].as_f64().unwrap()))
            .collect();
        ranked.sort_by_key(|r| r.0);
        assert_eq!(ranked[0].0, 1);
        assert!(ranked.windows(2).all(|w| w[0].1 >= w[1].1), "{e}");
    }
    // Chat does not serve prompt scores; asking there is a 400 naming the field.
    let err = ureq::post(&format!("{}/v1/chat/completions", server.url))
        .send_json(
            json!({"model": "llama_tied", "messages": [{"role": "user", "content": "hi"}],
                          "prompt_logprobs": 2}),
        )
        .unwrap_err();
    assert!(matches!(err, ureq::Error::Status(400, _)), "{err:?}");

    // Distillation from the served teacher: the held-out top-k divergence falls.
    std::fs::write(d.join("train.jsonl"), prompts(32, 0)).unwrap();
    std::fs::write(d.join("test.jsonl"), prompts(8, 100)).unwrap();
    let out_dir = d.join("remote");
    let mut args = command(d, "llama_tied", &out_dir, "12");
    let i = args.iter().position(|a| a == "--teacher").unwrap();
    args[i] = "--teacher-url".into();
    args[i + 1] = server.url.clone();
    args.extend(["--teacher-top-k".into(), "8".into()]);
    run_ok(&args);
    let report = read_json(&out_dir.join("report.json"));
    let kl = |k: &str| report[k]["reverse_kl"].as_f64().unwrap();
    let (before, after) = (kl("heldout_before"), kl("heldout_after"));
    eprintln!("served teacher, top-8: held-out reverse KL over the top-k support {before:.4} -> {after:.4}");
    assert!(before > 1e-3 && after < 0.5 * before, "{report}");
}
