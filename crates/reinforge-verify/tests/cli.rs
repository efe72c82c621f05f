//! The CLI's run function on temporary files: verdict lines, bad-line handling.

use reinforge_verify::cli::{run, run_batch, OutLine, VerifyArgs};

#[test]
fn batch_writes_one_verdict_per_good_line_and_skips_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("cases.jsonl");
    let output = dir.path().join("verdicts.jsonl");
    std::fs::write(
        &input,
        concat!(
            r#"{"id": "a", "gold": "\\frac{1}{2}", "pred": "The answer is $\\boxed{0.5}$."}"#, "\n",
            "this is not json\n",
            r#"{"id": 7, "gold": "3", "pred": "\\boxed{4}"}"#, "\n",
            "\n",
            r#"{"id": "c", "gold": "A", "pred": "The answer is B.", "options": {"extraction_targets": ["string"]}}"#, "\n",
            r#"{"id": "d", "gold": "2", "pred": "   "}"#, "\n",
        ),
    )
    .unwrap();
    let args = VerifyArgs {
        input: Some(input.clone()),
        probe: None,
        output: output.clone(),
        options: None,
        quiet: true,
    };
    let s = run_batch(&args).unwrap();
    assert_eq!(s.lines, 5);
    assert_eq!(s.bad_lines, 1);
    let out: Vec<OutLine> = std::fs::read_to_string(&output)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(out.len(), 4);
    assert_eq!(out[0].id, serde_json::json!("a"));
    assert!(out[0].correct);
    assert_eq!(out[1].id, serde_json::json!(7));
    assert!(!out[1].correct);
    assert!(!out[2].correct, "choice B is not A");
    assert_eq!(
        serde_json::to_value(out[3].status).unwrap(),
        serde_json::json!("unparsable_pred")
    );
    assert!(out.iter().all(|o| !o.reason.is_empty()));
    assert_eq!(s.first_bad_line, Some(2));
    // The public entry point writes the same verdicts, then fails naming the bad line.
    let e = run(&VerifyArgs {
        quiet: false,
        ..args
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("line 2") && e.contains("cases.jsonl"), "{e}");
    assert_eq!(std::fs::read_to_string(&output).unwrap().lines().count(), 4);
}

#[test]
fn empty_input_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("empty.jsonl");
    std::fs::write(&input, "\n").unwrap();
    let args = VerifyArgs {
        input: Some(input),
        probe: None,
        output: dir.path().join("o.jsonl"),
        options: None,
        quiet: true,
    };
    let e = run(&args).unwrap_err().to_string();
    assert!(e.contains("empty.jsonl") && e.contains("no cases"), "{e}");
}

#[test]
fn missing_input_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let args = VerifyArgs {
        input: Some(dir.path().join("nope.jsonl")),
        probe: None,
        output: dir.path().join("o.jsonl"),
        options: None,
        quiet: true,
    };
    assert!(run(&args).is_err());
}
