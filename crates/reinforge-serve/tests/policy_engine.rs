//! The policy server's engine: batching (merged and continuous), the bounded queue, pausing,
//! weight loads and versions, a panicking generator; driven by the scripted generator of
//! `common/scripted.rs`.

use crate::common;

use std::thread;
use std::time::{Duration, Instant};

use common::policy::*;
use common::*;
use serde_json::{json, Value};

#[test]
fn queued_requests_with_equal_sampling_share_a_batch_and_seeded_ones_run_alone() {
    let (s, probe) = policy_server(false, |_| {});
    let url = format!("{}/v1/completions", s.url);
    // Hold the queue while the requests arrive, so the batches are known.
    let (st, v, _, _) = call(
        &format!("{}/pause_generation", s.url),
        &json!({"mode": "wait"}),
    );
    assert_eq!((st, &v["paused"]), (200, &json!(true)), "{v}");
    let mut handles = vec![];
    for i in 0..5i64 {
        let body = json!({"prompt": [[i + 1]], "max_tokens": 3, "temperature": 0.7,
                          "return_token_ids": true});
        handles.push(spawn_call(url.clone(), body));
    }
    for seed in [11, 11] {
        let body = json!({"prompt": [[50]], "n": 2, "max_tokens": 3, "temperature": 0.7,
                          "seed": seed, "return_token_ids": true});
        handles.push(spawn_call(url.clone(), body));
    }
    // Different sampling: its own batch.
    handles.push(spawn_call(
        url.clone(),
        json!({"prompt": [[9]], "max_tokens": 3, "temperature": 0}),
    ));
    wait_for("8 queued requests", || queue_depth(&s) == 8.0);
    assert!(probe.batches().is_empty(), "nothing decodes while paused");
    call(&format!("{}/continue_generation", s.url), &json!({}));
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(results.iter().all(|r| r.0 == 200), "{results:?}");
    let batches = probe.batches();
    let sizes: Vec<(usize, Option<u64>)> =
        batches.iter().map(|b| (b.prompts.len(), b.seed)).collect();
    let unseeded: Vec<_> = sizes.iter().filter(|s| s.1.is_none()).collect();
    // The five unseeded t=0.7 requests in one batch, the t=0 one alone, each seeded one alone.
    assert_eq!(batches.len(), 4, "{sizes:?}");
    assert!(
        unseeded.contains(&&(5, None)) && unseeded.contains(&&(1, None)),
        "{sizes:?}"
    );
    assert_eq!(
        sizes.iter().filter(|s| **s == (2, Some(11))).count(),
        2,
        "{sizes:?}"
    );
    // The same seed on the same weights gives the same tokens.
    assert_eq!(results[5].1["choices"], results[6].1["choices"]);
    let page = get_text(&format!("{}/metrics", s.url));
    assert_eq!(metric(&page, "reinforge_policy_batch_rows_count"), 4.0);
    assert_eq!(metric(&page, "reinforge_policy_batch_rows_sum"), 10.0);
    assert_eq!(
        metric(
            &page,
            "reinforge_policy_requests_total{endpoint=\"completions\",outcome=\"ok\"}"
        ),
        8.0
    );
    assert_eq!(
        metric(&page, "reinforge_policy_generated_tokens_total"),
        30.0
    );
}

#[test]
fn a_full_queue_answers_503_with_retry_after() {
    let (s, _) = policy_server(false, |a| a.max_queued_requests = 2);
    let url = format!("{}/v1/completions", s.url);
    call(
        &format!("{}/pause_generation", s.url),
        &json!({"mode": "wait"}),
    );
    let held: Vec<_> = (0..2)
        .map(|_| spawn_call(url.clone(), json!({"prompt": [1], "max_tokens": 1})))
        .collect();
    wait_for("2 queued requests", || queue_depth(&s) == 2.0);
    let (st, v, _, retry) = call(&url, &json!({"prompt": [1], "max_tokens": 1}));
    assert_eq!((st, retry.as_deref()), (503, Some("1")), "{v}");
    assert_eq!(v["error"]["type"], "ServiceUnavailableError");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--max-queued-requests"));
    call(&format!("{}/continue_generation", s.url), &json!({}));
    for h in held {
        assert_eq!(h.join().unwrap().0, 200);
    }
}

#[test]
fn pause_abort_ends_the_running_batch_with_abort_and_later_requests_wait() {
    let (s, probe) = policy_server(false, |_| {});
    probe.set_delay(Duration::from_millis(20));
    let url = format!("{}/v1/completions", s.url);
    let running = spawn_call(
        url.clone(),
        json!({"prompt": [10], "max_tokens": 100, "temperature": 0, "ignore_eos": true,
               "return_token_ids": true}),
    );
    wait_for("the batch to start", || !probe.batches().is_empty());
    thread::sleep(Duration::from_millis(100));
    let (st, v, _, _) = call(
        &format!("{}/pause_generation", s.url),
        &json!({"mode": "abort"}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["num_aborted_requests"], 1);
    let (st, v, version) = running.join().unwrap();
    assert_eq!((st, version.as_deref()), (200, Some("0")));
    let c = &v["choices"][0];
    assert_eq!(c["finish_reason"], "abort");
    let n = ids(&c["token_ids"]).len();
    assert!(n > 0 && n < 100, "partial tokens: {n}");
    assert_eq!(get(&format!("{}/is_paused", s.url))["is_paused"], true);
    // While paused, a new request waits; it runs after the resume.
    probe.set_delay(Duration::ZERO);
    let later = spawn_call(url.clone(), json!({"prompt": [1], "max_tokens": 2}));
    wait_for("the request to queue", || queue_depth(&s) == 1.0);
    thread::sleep(Duration::from_millis(100));
    assert!(!later.is_finished(), "no generation while paused");
    let (_, v, _, _) = call(&format!("{}/resume", s.url), &json!({}));
    assert_eq!(v["status"], "resumed");
    let (st, v, _) = later.join().unwrap();
    assert_eq!(
        (st, &v["choices"][0]["finish_reason"]),
        (200, &json!("length"))
    );
    let page = get_text(&format!("{}/metrics", s.url));
    assert_eq!(
        metric(
            &page,
            "reinforge_policy_requests_total{endpoint=\"completions\",outcome=\"aborted\"}"
        ),
        1.0
    );
}

#[test]
fn pause_wait_lets_the_running_batch_finish() {
    let (s, probe) = policy_server(false, |_| {});
    probe.set_delay(Duration::from_millis(10));
    let url = format!("{}/v1/completions", s.url);
    let running = spawn_call(
        url.clone(),
        json!({"prompt": [10], "max_tokens": 20, "ignore_eos": true}),
    );
    wait_for("the batch to start", || !probe.batches().is_empty());
    // vLLM's route and answer; it returns once the batch (20 steps of 10 ms) is done.
    let t = Instant::now();
    let r = ureq::post(&format!("{}/pause?mode=wait", s.url))
        .call()
        .unwrap();
    let waited = t.elapsed();
    let v: Value = r.into_json().unwrap();
    assert_eq!(
        (&v["status"], &v["num_aborted_requests"]),
        (&json!("paused"), &json!(0))
    );
    assert!(
        waited >= Duration::from_millis(100),
        "returned after {waited:?}"
    );
    let (_, v, _) = running.join().unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    for mode in ["retract", "keep", "nope"] {
        let (st, v, _, _) = call(
            &format!("{}/pause_generation", s.url),
            &json!({"mode": mode}),
        );
        assert_eq!((st, &v["error"]["param"]), (400, &json!("mode")), "{v}");
    }
    call(&format!("{}/continue_generation", s.url), &json!({}));
    assert_eq!(get(&format!("{}/is_paused", s.url))["is_paused"], false);
}

#[test]
fn weight_updates_change_version_and_checksum_and_failures_keep_the_old_weights() {
    let (s, probe) = policy_server(false, |_| {});
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("{}/v1/completions", s.url);
    let before = get(&format!("{}/get_weight_version", s.url));
    assert_eq!(
        (&before["weight_version"], &before["paused"]),
        (&json!("0"), &json!(false))
    );
    let update = format!("{}/update_weights_from_disk", s.url);
    // A load that takes at least 200 ms: `load_seconds` times the load, within the request.
    let load = Duration::from_millis(200);
    probe.set_load_delay(load);
    let sent = Instant::now();
    let (st, v, version, _) = call(
        &update,
        &json!({"model_path": weights_dir(&tmp, "w1", r#"{"shift": 7}"#)}),
    );
    let round_trip = sent.elapsed().as_secs_f64();
    probe.set_load_delay(Duration::ZERO);
    assert_eq!((st, &v["success"]), (200, &json!(true)), "{v}");
    assert_eq!(
        (v["weight_version"].as_str(), version.as_deref()),
        (Some("1"), Some("1"))
    );
    assert_ne!(v["checksum"], before["checksum"]);
    let took = v["load_seconds"].as_f64().unwrap();
    assert!(
        load.as_secs_f64() <= took && took <= round_trip,
        "load_seconds {took} outside [{load:?}, round trip {round_trip}]"
    );
    let (_, c, version, _) = call(
        &url,
        &json!({"prompt": [3], "max_tokens": 2, "temperature": 0, "return_token_ids": true}),
    );
    assert_eq!(
        ids(&c["choices"][0]["token_ids"]),
        vec![tok(&[3], 0, 7), tok(&[3], 1, 7)]
    );
    assert_eq!(
        (c["weight_version"].as_str(), version.as_deref()),
        (Some("1"), Some("1"))
    );
    let now = get(&format!("{}/get_weight_version", s.url));
    assert_eq!(now["checksum"], v["checksum"]);
    assert_eq!(
        get(&format!("{}/v1/models", s.url))["data"][0]["weight_version"],
        "1"
    );

    // A failed load keeps version 1 and its weights.
    for (body, words) in [
        (
            json!({"model_path": weights_dir(&tmp, "bad", r#"{"shift": "x"}"#)}),
            "shift",
        ),
        (
            json!({"model_path": tmp.path().join("missing")}),
            "not a directory",
        ),
    ] {
        let (st, v, _, _) = call(&update, &body);
        assert_eq!((st, &v["success"]), (400, &json!(false)), "{v}");
        assert!(v["message"].as_str().unwrap().contains(words), "{v}");
        assert_eq!(v["weight_version"], "1");
        assert_eq!(get(&format!("{}/get_weight_version", s.url)), now);
    }
    let (_, c, _, _) = call(
        &url,
        &json!({"prompt": [3], "max_tokens": 1, "temperature": 0, "return_token_ids": true}),
    );
    assert_eq!(ids(&c["choices"][0]["token_ids"]), vec![tok(&[3], 0, 7)]);
    let page = get_text(&format!("{}/metrics", s.url));
    assert_eq!(
        metric(&page, "reinforge_policy_weight_loads_total{status=\"ok\"}"),
        1.0
    );
    assert_eq!(
        metric(
            &page,
            "reinforge_policy_weight_loads_total{status=\"error\"}"
        ),
        1.0
    );

    // Named versions (string or integer); after a name, the next must be named.
    let w2 = weights_dir(&tmp, "w2", r#"{"shift": 9}"#);
    let (_, v, _, _) = call(
        &update,
        &json!({"model_path": w2, "weight_version": "step-5"}),
    );
    assert_eq!(v["weight_version"], "step-5");
    let (st, v, _, _) = call(&update, &json!({"model_path": w2}));
    assert_eq!(
        (st, &v["error"]["param"]),
        (400, &json!("weight_version")),
        "{v}"
    );
    let (_, v, _, _) = call(&update, &json!({"model_path": w2, "weight_version": 12}));
    assert_eq!(v["weight_version"], "12");
}

#[test]
fn a_load_with_abort_all_requests_stops_the_running_batch_first() {
    let (s, probe) = policy_server(false, |_| {});
    probe.set_delay(Duration::from_millis(20));
    let tmp = tempfile::tempdir().unwrap();
    let running = spawn_call(
        format!("{}/v1/completions", s.url),
        json!({"prompt": [10], "max_tokens": 100, "ignore_eos": true, "return_token_ids": true}),
    );
    wait_for("the batch to start", || !probe.batches().is_empty());
    let (st, v, _, _) = call(
        &format!("{}/update_weights_from_disk", s.url),
        &json!({"model_path": weights_dir(&tmp, "w", r#"{"shift": 1}"#), "abort_all_requests": true}),
    );
    assert_eq!(
        (st, &v["num_aborted_requests"], &v["weight_version"]),
        (200, &json!(1), &json!("1")),
        "{v}"
    );
    let (_, r, version) = running.join().unwrap();
    assert_eq!(
        (
            r["choices"][0]["finish_reason"].as_str(),
            version.as_deref()
        ),
        (Some("abort"), Some("0"))
    );
    assert!(ids(&r["choices"][0]["token_ids"]).len() < 100);
}

/// A load during a running batch waits for it: the batch's response is all old weights, and
/// every later one all new weights.
#[test]
fn no_response_mixes_weight_versions() {
    let (s, probe) = policy_server(false, |_| {});
    probe.set_delay(Duration::from_millis(15));
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("{}/v1/completions", s.url);
    let body = json!({"prompt": [[10], [20]], "max_tokens": 30, "temperature": 0, "ignore_eos": true,
                      "return_token_ids": true, "stream": false});
    let running = spawn_call(url.clone(), body.clone());
    wait_for("the batch to start", || !probe.batches().is_empty());
    let (st, v, _, _) = call(
        &format!("{}/update_weights_from_disk", s.url),
        &json!({"model_path": weights_dir(&tmp, "w", r#"{"shift": 100}"#)}),
    );
    assert_eq!((st, &v["weight_version"]), (200, &json!("1")), "{v}");
    let (_, old, version) = running.join().unwrap();
    assert_eq!(
        (old["weight_version"].as_str(), version.as_deref()),
        (Some("0"), Some("0"))
    );
    for (i, p) in [[10i64], [20]].iter().enumerate() {
        let want: Vec<i64> = (0..30).map(|k| tok(p, k, 0)).collect();
        assert_eq!(
            ids(&old["choices"][i]["token_ids"]),
            want,
            "all old weights"
        );
    }
    probe.set_delay(Duration::ZERO);
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (chunks, _, version) = sse(&url, &streamed);
    assert_eq!(version.as_deref(), Some("1"));
    assert!(chunks.iter().all(|c| c["weight_version"] == "1"));
    let first: Vec<i64> = chunks
        .iter()
        .filter(|c| c["choices"].get(0).is_some_and(|ch| ch["index"] == 0))
        .flat_map(|c| ids(&c["choices"][0]["token_ids"]))
        .collect();
    assert_eq!(
        first,
        (0..30).map(|k| tok(&[10], k, 100)).collect::<Vec<_>>()
    );
}

#[test]
fn model_info_and_health_still_served_beside_rewards() {
    let (s, _) = policy_server(true, |_| {});
    let v = get(&format!("{}/get_model_info", s.url));
    assert_eq!(
        (&v["is_generation"], &v["weight_version"]),
        (&json!(true), &json!("0"))
    );
    assert!(v["tokenizer_path"].as_str().unwrap().ends_with("llama"));
    let (st, v, _) = post(
        &format!("{}/get_reward", s.url),
        &json!({"query": ["\\boxed{1}"], "labels": ["1"]}),
    );
    assert_eq!((st, &v["rewards"]), (200, &json!([1.0])));
    // Without a generator the policy routes do not exist.
    let mut a = args();
    a.no_sandbox = true;
    let plain = start(a);
    let r = ureq::get(&format!("{}/v1/models", plain.url)).call();
    assert!(matches!(r, Err(ureq::Error::Status(404, _))));
}

#[test]
fn a_panicking_generator_fails_its_request_and_the_server_goes_on() {
    let (s, _) = policy_server(false, |_| {});
    let url = format!("{}/v1/completions", s.url);
    let (st, v, _, _) = call(
        &url,
        &json!({"prompt": [common::scripted::PANIC_TOKEN], "max_tokens": 2}),
    );
    assert_eq!(st, 500, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("scripted panic"),
        "{v}"
    );
    let (st, v, _, _) = call(&url, &json!({"prompt": [5], "max_tokens": 2}));
    assert_eq!(
        (st, &v["choices"][0]["finish_reason"]),
        (200, &json!("length")),
        "{v}"
    );
}

/// Step-level continuous batching: a request that arrives while a batch decodes joins it
/// (no second batch), decodes what it decodes alone, and is answered as soon as its own rows
/// finish, before the longer request it joined; nothing joins a seeded batch.
#[test]
fn requests_join_a_running_batch_and_leave_when_done() {
    let (s, probe) = policy_server(false, |_| {});
    probe.set_delay(Duration::from_millis(30));
    let url = format!("{}/v1/completions", s.url);
    let long = spawn_call(
        url.clone(),
        json!({"prompt": [[1, 2]], "max_tokens": 40, "temperature": 0, "return_token_ids": true}),
    );
    wait_for("the batch to start", || !probe.batches().is_empty());
    let t = Instant::now();
    let (st, short, _, _) = call(
        &url,
        &json!({"prompt": [[7]], "max_tokens": 3, "temperature": 0, "return_token_ids": true}),
    );
    let short_done = t.elapsed();
    assert_eq!(st, 200, "{short}");
    let want: Vec<i64> = (0..3).map(|k| tok(&[7], k, 0)).collect();
    assert_eq!(ids(&short["choices"][0]["token_ids"]), want);
    assert!(
        short_done < Duration::from_millis(30 * 20),
        "answered when its rows finished, not at the batch's end: {short_done:?}"
    );
    let (st, long, _) = long.join().unwrap();
    assert_eq!(st, 200);
    assert_eq!(
        long["choices"][0]["token_ids"].as_array().unwrap().len(),
        40
    );
    assert_eq!(
        probe.batches().len(),
        1,
        "the short request joined the running batch"
    );

    // A seeded batch admits nothing: the later request gets a batch of its own.
    let seeded = spawn_call(
        url.clone(),
        json!({"prompt": [[3]], "max_tokens": 20, "temperature": 0.7, "seed": 5}),
    );
    wait_for("the seeded batch to start", || probe.batches().len() == 2);
    let (st, _, _, _) = call(
        &url,
        &json!({"prompt": [[4]], "max_tokens": 2, "temperature": 0.7}),
    );
    assert_eq!(st, 200);
    assert_eq!(seeded.join().unwrap().0, 200);
    assert_eq!(probe.batches().len(), 3, "no admission into a seeded batch");
}
