//! Malformed requests (4xx naming the field), body limits, backpressure, metrics.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

#[test]
fn malformed_requests_name_the_field() {
    let mut a = args();
    a.no_sandbox = true;
    let server = start(a);
    let reward = format!("{}/get_reward", server.url);
    let (s, v, _) = post_raw(&reward, b"{\"query\": [\"a\",");
    assert_eq!(s, 400, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("malformed JSON"),
        "{v}"
    );

    let cases = [
        (json!({"prompts": ["p"], "labels": ["1"]}), "query"),
        (json!({"query": ["a", 7]}), "query[1]"),
        (json!({"query": "a"}), "query"),
        (json!({"query": ["a"], "prompts": ["p", "q"]}), "prompts"),
        (json!({"query": ["a"], "labels": []}), "labels"),
        (json!({"query": ["a"], "prompts": [null]}), "prompts[0]"),
    ];
    for (body, field) in cases {
        let (s, v, _) = post(&reward, &body);
        assert_eq!(
            (s, v["field"].as_str()),
            (422, Some(field)),
            "{body} -> {v}"
        );
        assert!(!v["error"].as_str().unwrap().is_empty());
    }

    let verify = format!("{}/v1/verify", server.url);
    let (s, v, _) = post(
        &verify,
        &json!({"cases": [{"gold": "1", "prediction": "1"}]}),
    );
    assert_eq!(s, 422, "{v}");
    assert!(v["field"].as_str().unwrap().starts_with("cases[0]"), "{v}");
    let (s, v, _) = post(
        &verify,
        &json!({"cases": [{"gold": "1", "pred": "1", "options": {"float_rounding": "x"}}]}),
    );
    assert_eq!(
        (s, v["field"].as_str()),
        (422, Some("cases[0].options.float_rounding")),
        "{v}"
    );

    let run = format!("{}/run_code", server.url);
    let (s, v, _) = post(&run, &json!({"code": "print(1)", "language": "python"}));
    assert_eq!(s, 503, "sandbox disabled: {v}");
    let (s, v, _) = post(&run, &json!({"language": "python"}));
    assert_eq!((s, v["field"].as_str()), (422, Some("code")), "{v}");

    let r = ureq::get(&format!("{}/nope", server.url)).call();
    assert!(matches!(r, Err(ureq::Error::Status(404, _))));
}

/// Needs the sandbox only to be enabled (the checks fail before any run).
#[test]
fn run_code_rejects_what_it_cannot_run() {
    let server = start(args());
    let run = format!("{}/run_code", server.url);
    let cases = [
        (
            json!({"code": "int main(){}", "language": "cpp"}),
            "language",
        ),
        (
            json!({"code": "print(1)", "language": "python", "run_timeout": -1}),
            "run_timeout",
        ),
        (
            json!({"code": "", "language": "python", "files": {"../x": "YQ=="}}),
            "files.../x",
        ),
        (
            json!({"code": "", "language": "python", "files": {"a": "***"}}),
            "files.a",
        ),
        (
            json!({"code": "", "language": "python", "fetch_files": ["/etc/passwd"]}),
            "fetch_files[0]",
        ),
    ];
    for (body, field) in cases {
        let (s, v, _) = post(&run, &body);
        assert_eq!(
            (s, v["field"].as_str()),
            (422, Some(field)),
            "{body} -> {v}"
        );
    }
}

#[test]
fn bodies_over_the_limit_get_413() {
    let mut a = args();
    a.no_sandbox = true;
    a.max_body_bytes = 1000;
    let server = start(a);
    let big = json!({"query": ["x".repeat(2000)], "labels": ["1"]});
    let (s, v, _) = post(&format!("{}/get_reward", server.url), &big);
    assert_eq!(s, 413, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("max-body-bytes"),
        "{v}"
    );
    let small = json!({"query": ["\\boxed{1}"], "labels": ["1"]});
    let (s, v, _) = post(&format!("{}/get_reward", server.url), &small);
    assert_eq!((s, v["rewards"].clone()), (200, json!([1.0])));
}

#[test]
fn a_full_queue_sheds_load_with_retry_after() {
    let mut a = args();
    a.no_sandbox = true;
    a.workers = 1;
    a.max_concurrency = 1;
    a.max_queue = 0;
    let server = start(a);
    let url = format!("{}/v1/verify", server.url);
    let slow = slow_verify_batch(20_000);
    let u = url.clone();
    let busy = std::thread::spawn(move || post(&u, &slow));
    let t = Instant::now();
    while server.state.metrics.in_flight.get() < 1 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the slow request never started"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let (s, v, retry) = post(&url, &json!({"cases": []}));
    let still_busy = server.state.metrics.in_flight.get() == 1;
    assert!(
        still_busy,
        "the slow batch finished too early to test shedding"
    );
    assert_eq!((s, retry.as_deref()), (503, Some("1")), "{v}");
    let (s, v, _) = busy.join().unwrap();
    assert_eq!(s, 200);
    assert_eq!(v["verdicts"].as_array().unwrap().len(), 20_000);
    // health and metrics are not behind the limit
    assert!(get_text(&format!("{}/health", server.url)).contains("\"ok\""));
    let page = get_text(&format!("{}/metrics", server.url));
    assert_eq!(
        metric(
            &page,
            r#"reinforge_http_requests_total{route="/v1/verify",status="503"}"#
        ),
        1.0
    );
    assert_eq!(metric(&page, "reinforge_http_requests_in_flight"), 0.0);
    assert_eq!(metric(&page, "reinforge_http_requests_queued"), 0.0);
}

#[test]
fn metrics_page_parses_and_counts() {
    let mut a = args();
    a.no_sandbox = true;
    let server = start(a);
    for _ in 0..5 {
        let (s, _, _) = post(
            &format!("{}/v1/verify", server.url),
            &json!({"cases": [{"gold": "1", "pred": "\\boxed{1}"}]}),
        );
        assert_eq!(s, 200);
    }
    let _ = post_raw(&format!("{}/v1/verify", server.url), b"not json");
    let page = get_text(&format!("{}/metrics", server.url));
    // every sample line is `name{labels} value` with a float value
    let mut samples = 0;
    for line in page
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (series, value) = line.rsplit_once(' ').unwrap();
        value
            .parse::<f64>()
            .unwrap_or_else(|e| panic!("{line}: {e}"));
        let name = series.split('{').next().unwrap();
        assert!(
            name.starts_with("reinforge_")
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{line}"
        );
        samples += 1;
    }
    assert!(samples > 10, "{page}");
    assert!(page.contains("# TYPE reinforge_http_request_duration_seconds histogram"));
    let ok = r#"reinforge_http_requests_total{route="/v1/verify",status="200"}"#;
    assert_eq!(metric(&page, ok), 5.0);
    let bad = r#"reinforge_http_requests_total{route="/v1/verify",status="400"}"#;
    assert_eq!(metric(&page, bad), 1.0);
    let count = r#"reinforge_http_request_duration_seconds_count{route="/v1/verify"}"#;
    assert_eq!(metric(&page, count), 6.0);
    assert_eq!(
        metric(&page, r#"reinforge_verify_checks_total{status="correct"}"#),
        5.0
    );
}

/// Issue 50, item 2: a verify or reward request asking for more work than --max-verify-bytes
/// (its texts' bytes, each row counted as at least 256) is a 413 naming the flag, whether the
/// work is in size or in rows; one just under it is answered.
#[test]
fn verify_and_reward_work_over_the_cap_gets_413() {
    let mut a = args();
    a.no_sandbox = true;
    a.max_verify_bytes = 10_000;
    let server = start(a);
    let verify = format!("{}/v1/verify", server.url);
    let reward = format!("{}/get_reward", server.url);
    let long = "x".repeat(10_000);
    let tiny = |n: usize| json!({"cases": vec![json!({"gold": "2", "pred": "2"}); n]});
    let over = [
        (
            &verify,
            json!({"cases": [{"gold": "2", "pred": long}]}),
            "cases",
        ),
        (&verify, tiny(40), "cases"),
        (&reward, json!({"query": [long], "labels": ["1"]}), "query"),
        (
            &reward,
            json!({"query": vec!["1"; 40], "labels": vec!["1"; 40]}),
            "query",
        ),
    ];
    for (url, body, field) in over {
        let (s, v, _) = post(url, &body);
        assert_eq!((s, v["field"].as_str()), (413, Some(field)), "{v}");
        let msg = v["error"].as_str().unwrap();
        assert!(
            msg.contains("--max-verify-bytes") && msg.contains("10000"),
            "{v}"
        );
    }
    let (s, v, _) = post(&verify, &tiny(39));
    assert_eq!(
        (s, v["verdicts"].as_array().map(Vec::len)),
        (200, Some(39)),
        "{v}"
    );
    let (s, v, _) = post(
        &reward,
        &json!({"query": vec!["\\boxed{1}"; 39], "labels": vec!["1"; 39]}),
    );
    assert_eq!((s, v["rewards"][38].as_f64()), (200, Some(1.0)), "{v}");
}
