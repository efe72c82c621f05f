//! OpenRLHF's remote reward and SandboxFusion's run_code, through the Python clients in
//! scripts/clients/ (plain python3, standard library only), and /v1/verify.

use crate::common;

use std::process::Command;

use common::*;
use serde_json::json;

fn python_client(script: &str, url: &str) {
    let path = repo_root().join("scripts/clients").join(script);
    let out = Command::new("python3")
        .arg(&path)
        .args(["--url", url, "--self-test"])
        .output()
        .expect("running python3 (the clients need CPython 3 on PATH)");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{script} --self-test failed:\n{text}");
    assert!(!text.contains("FAIL"), "{text}");
}

#[test]
fn openrlhf_client_gets_correct_rewards() {
    let mut a = args();
    a.no_sandbox = true;
    let server = start(a);
    python_client(
        "openrlhf_remote_reward.py",
        &format!("{}/get_reward", server.url),
    );
    let page = get_text(&format!("{}/metrics", server.url));
    // 7 + 1 samples scored (the 422 request scores none)
    assert_eq!(metric(&page, "reinforge_rewards_computed_total"), 8.0);
    assert_eq!(
        metric(
            &page,
            r#"reinforge_http_requests_total{route="/get_reward",status="422"}"#
        ),
        1.0
    );
}

#[test]
fn reward_spec_components_reach_extra_logs() {
    let mut a = args();
    a.no_sandbox = true;
    a.reward = Some(repo_root().join("crates/reinforge-reward/specs/math_format_overlong.toml"));
    let server = start(a);
    let prompt = "<|im_start|>user\nWhat is 3+4?<|im_end|>\n<|im_start|>assistant\n";
    let responses = [
        "<think>3+4=7</think> So \\boxed{7}<|im_end|>",
        "So \\boxed{8}<|im_end|>",
    ];
    let queries: Vec<String> = responses.iter().map(|r| format!("{prompt}{r}")).collect();
    let (status, v, _) = post(
        &format!("{}/get_reward", server.url),
        &json!({"query": queries, "prompts": [prompt, prompt], "labels": ["7", 7]}),
    );
    assert_eq!(status, 200, "{v}");
    let rewards: Vec<f64> = serde_json::from_value(v["rewards"].clone()).unwrap();
    assert!(
        (rewards[0] - 1.1).abs() < 1e-9 && (rewards[1] + 1.0).abs() < 1e-9,
        "{v}"
    );
    assert_eq!(v["scores"], json!([1.0, -1.0]));
    assert_eq!(v["extra_logs"]["format"], json!([1.0, 0.0]));
    assert_eq!(v["extra_logs"]["overlong"], json!([0.0, 0.0]));
    // a label the math component cannot use
    let (status, v, _) = post(
        &format!("{}/get_reward", server.url),
        &json!({"query": queries, "prompts": [prompt, prompt], "labels": ["7", null]}),
    );
    assert_eq!(
        (status, v["field"].as_str()),
        (422, Some("labels[1]")),
        "{v}"
    );
}

#[test]
fn verify_batches() {
    let mut a = args();
    a.no_sandbox = true;
    let server = start(a);
    let (status, v, _) = post(
        &format!("{}/v1/verify", server.url),
        &json!({
            "cases": [
                {"id": "a", "gold": "\\frac{1}{2}", "pred": "so $\\boxed{0.5}$"},
                {"id": 2, "gold": "2", "pred": "\\boxed{3}"},
                {"gold": "x", "pred": "\\boxed{}", "options": {"extraction_targets": ["latex"]}},
                {"id": "r", "gold": "0.333", "pred": "\\boxed{1/3}"}
            ],
            "options": {"float_rounding": 3}
        }),
    );
    assert_eq!(status, 200, "{v}");
    let s: Vec<&str> = v["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        s,
        ["correct", "incorrect", "unparsable_pred", "correct"],
        "{v}"
    );
    assert_eq!(v["verdicts"][0]["id"], "a");
    assert_eq!(v["verdicts"][1]["correct"], false);
    let page = get_text(&format!("{}/metrics", server.url));
    assert_eq!(
        metric(&page, r#"reinforge_verify_checks_total{status="correct"}"#),
        2.0
    );
}

/// Needs the sandbox (reinforge-sandbox: Linux namespaces, a Python 3 for the runs).
#[test]
fn sandboxfusion_client_gets_sandboxfusion_statuses() {
    let server = start(args());
    python_client("sandboxfusion_client.py", &server.url);
    let page = get_text(&format!("{}/metrics", server.url));
    // success, stdin, files -> Success; runtime error, exit 3, timeout, bash exit 2 -> Failed
    assert_eq!(
        metric(&page, r#"reinforge_sandbox_runs_total{status="Success"}"#),
        3.0
    );
    assert_eq!(
        metric(&page, r#"reinforge_sandbox_runs_total{status="Failed"}"#),
        4.0
    );
}

/// Needs the sandbox.
#[test]
fn code_tests_reward_and_memory_limit() {
    let mut a = args();
    a.reward = Some(repo_root().join("crates/reinforge-reward/specs/code.toml"));
    let server = start(a);
    let prompt = "Write add(a, b).\n";
    let tests = "assert add(1, 2) == 3\nassert add(0, 0) == 0";
    let (status, v, _) = post(
        &format!("{}/get_reward", server.url),
        &json!({
            "query": [
                format!("{prompt}```python\ndef add(a, b):\n    return a + b\n```"),
                format!("{prompt}```python\ndef add(a, b):\n    return a * b\n```"),
            ],
            "prompts": [prompt, prompt],
            "labels": [tests, tests],
        }),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["rewards"], json!([1.0, 0.0]));
    assert_eq!(v["extra_logs"]["tests"], json!([1.0, 0.0]));
    // memory_limit_MB is honoured: allocating 512 MiB under a 128 MiB limit fails
    let (status, v, _) = post(
        &format!("{}/run_code", server.url),
        &json!({"code": "x = bytearray(512 << 20)\nprint('allocated')", "language": "python", "memory_limit_MB": 128}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["status"], "Failed", "{v}");
    assert_ne!(v["run_result"]["stdout"], "allocated\n", "{v}");
}
