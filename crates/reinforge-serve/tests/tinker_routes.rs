//! The Tinker routes over a scripted backend (no libtorch): the per-session limits (models,
//! queued requests: 429 with Retry-After), bad requests answered 4xx naming the field before
//! anything is queued, the futures protocol, session expiry freeing models. The real model and
//! the real SDK: crates/reinforge/tests/tinker.rs.

use crate::common;

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use anyhow::Result;
use prost::Message;
use reinforge_serve::tinker::backend::{
    AdamParams, Datum, ForwardOutput, Lora, LossFn, TinkerBackend,
};
use reinforge_serve::tinker::proto;
use reinforge_serve::AppState;
use serde_json::{json, Value};

const VOCAB: usize = 50;
/// Sessions the test servers hold at once (`Config::max_sessions`).
const MAX_SESSIONS: usize = 4;

/// Holds every forward_backward while `held` is true.
#[derive(Default)]
struct Gate {
    held: Mutex<bool>,
    open: Condvar,
}

impl Gate {
    fn set(&self, held: bool) {
        *self.held.lock().unwrap() = held;
        self.open.notify_all();
    }

    fn wait(&self) {
        let mut held = self.held.lock().unwrap();
        while *held {
            held = self.open.wait(held).unwrap();
        }
    }
}

/// log-prob of target `t` = -t / 10; loss = the cross entropy of that.
struct Scripted {
    gate: Arc<Gate>,
    models: Arc<Mutex<Vec<String>>>,
    /// forward_backward and optim_step calls run.
    calls: Arc<Mutex<usize>>,
}

impl TinkerBackend for Scripted {
    fn create_model(&mut self, model_id: &str, _: Option<&Lora>) -> Result<()> {
        self.models.lock().unwrap().push(model_id.to_string());
        Ok(())
    }
    fn forward_backward(
        &mut self,
        _: &str,
        data: &[Datum],
        _: LossFn,
        _: bool,
    ) -> Result<ForwardOutput> {
        self.gate.wait();
        *self.calls.lock().unwrap() += 1;
        let logprobs: Vec<Vec<f32>> = data
            .iter()
            .map(|d| d.targets.iter().map(|&t| -(t as f32) / 10.0).collect())
            .collect();
        let loss_sum = logprobs.iter().flatten().map(|&x| -x as f64).sum();
        Ok(ForwardOutput { logprobs, loss_sum })
    }
    fn optim_step(&mut self, _: &str, a: &AdamParams) -> Result<Vec<(String, f64)>> {
        *self.calls.lock().unwrap() += 1;
        Ok(vec![("lr".into(), a.learning_rate)])
    }
    fn save(&mut self, _: &str, dir: &Path, _: bool) -> Result<()> {
        std::fs::create_dir_all(dir)?;
        Ok(())
    }
    fn load(&mut self, _: &str, _: &Path, _: bool) -> Result<()> {
        Ok(())
    }
    fn snapshot(&mut self, _: &str, _: &str) -> Result<()> {
        Ok(())
    }
    fn drop_model(&mut self, id: &str) {
        self.models.lock().unwrap().retain(|m| m != id);
    }
    fn max_context(&self) -> usize {
        64
    }
    fn vocab_size(&self) -> usize {
        VOCAB
    }
    fn eos_token_ids(&self) -> Vec<i64> {
        vec![1]
    }
}

struct Setup {
    server: common::Server,
    gate: Arc<Gate>,
    models: Arc<Mutex<Vec<String>>>,
    calls: Arc<Mutex<usize>>,
    /// The sampling engine's scripted generator.
    probe: common::scripted::Probe,
    _dir: tempfile::TempDir,
}

fn setup(session_timeout: Duration) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let mut args = common::args();
    args.no_sandbox = true;
    let (gate, models) = (Arc::new(Gate::default()), Arc::new(Mutex::new(vec![])));
    let calls = Arc::new(Mutex::new(0));
    let backend = Scripted {
        gate: gate.clone(),
        models: models.clone(),
        calls: calls.clone(),
    };
    let config = reinforge_serve::tinker::Config {
        base_model: "scripted".into(),
        checkpoint_dir: dir.path().join("ckpt"),
        max_models_per_session: 2,
        max_sessions: MAX_SESSIONS,
        max_full_models: 1,
        max_checkpoints_per_model: 3,
        max_pending_per_session: 2,
        max_snapshots_per_model: 2,
        session_timeout,
        max_batch_rows: 64,
    };
    let (sampler, probe) = common::scripted::Scripted::new(VOCAB, 64, vec![1]);
    let state = AppState::new(&args)
        .unwrap()
        .with_tinker(config, Box::new(backend), Box::new(sampler))
        .unwrap();
    Setup {
        server: common::start_state(state),
        gate,
        models,
        calls,
        probe,
        _dir: dir,
    }
}

fn post(s: &Setup, route: &str, body: Value) -> (u16, Value, Option<String>) {
    common::post(&format!("{}/api/v1/{route}", s.server.url), &body)
}

fn post_proto(s: &Setup, msg: &proto::ForwardBackwardRequest) -> (u16, Value) {
    let r = ureq::post(&format!("{}/api/v1/forward_backward", s.server.url))
        .set("Content-Type", "application/x-protobuf")
        .send_bytes(&msg.encode_to_vec());
    let resp = match r {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{e}"),
    };
    (resp.status(), resp.into_json().unwrap())
}

fn session(s: &Setup) -> String {
    let (st, v, _) = post(
        s,
        "create_session",
        json!({"tags": [], "sdk_version": "test"}),
    );
    assert_eq!(st, 200, "{v}");
    v["session_id"].as_str().unwrap().to_string()
}

fn model(s: &Setup, session: &str) -> (u16, Value) {
    let (st, v, _) = post(
        s,
        "create_model",
        json!({"session_id": session, "model_seq_id": 0, "base_model": "scripted",
               "lora_config": {"rank": 4}}),
    );
    (st, v)
}

/// The result of future `id`, waiting through `try_again`.
fn result(s: &Setup, id: &Value) -> ureq::Response {
    loop {
        let r = ureq::post(&format!("{}/api/v1/retrieve_future", s.server.url))
            .send_json(json!({"request_id": id}))
            .unwrap();
        if r.content_type() == "application/json" {
            let text = r.into_string().unwrap();
            let v: Value = serde_json::from_str(&text).unwrap();
            if v["type"] == "try_again" {
                continue;
            }
            return ureq::Response::new(200, "OK", &text).unwrap();
        }
        return r;
    }
}

fn datum(input: &[i32], targets: &[i64]) -> proto::Datum {
    let tensor = |v: &[i64]| proto::Tensor {
        dense: Some(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        sparse_csr: None,
        dtype: proto::DTYPE_INT64,
        shape: vec![v.len() as i64],
    };
    proto::Datum {
        model_input: vec![proto::Chunk {
            encoded_text: Some(proto::EncodedTextChunk {
                tokens: input.iter().flat_map(|x| x.to_le_bytes()).collect(),
            }),
            image: None,
            dmel: None,
        }],
        loss_fn_inputs: [("target_tokens".to_string(), tensor(targets))].into(),
    }
}

static SEQ: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(1);

fn request(model: &str, loss: &str, data: Vec<proto::Datum>) -> proto::ForwardBackwardRequest {
    proto::ForwardBackwardRequest {
        model_id: model.into(),
        // Distinct per request, as the SDK numbers them (a repeat is a retry).
        seq_id: SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        data,
        loss_fn: loss.into(),
        loss_fn_config: Default::default(),
        forward_only: false,
    }
}

#[test]
fn limits_errors_and_futures() {
    let s = setup(Duration::from_secs(300));
    let sess = session(&s);
    let (st, m1) = model(&s, &sess);
    assert_eq!(st, 200, "{m1}");
    let (st, m2) = model(&s, &sess);
    assert_eq!(st, 200, "{m2}");
    // Model creation is queued work of the session: wait for both, so that the queue
    // limit below counts only the requests this test holds at the gate.
    for m in [&m1, &m2] {
        result(&s, &m["request_id"]).into_string().unwrap();
    }
    let m1 = m1["model_id"].as_str().unwrap().to_string();
    // Two models per session at most.
    let (st, e) = model(&s, &sess);
    assert_eq!(st, 400);
    assert_eq!(e["field"], "session_id", "{e}");
    // Unknown session, model, future; a wrong base model.
    assert_eq!(
        post(&s, "session_heartbeat", json!({"session_id": "nope"})).0,
        404
    );
    assert_eq!(post(&s, "get_info", json!({"model_id": "nope"})).0, 404);
    assert_eq!(
        post(&s, "retrieve_future", json!({"request_id": "424242"})).0,
        404
    );
    assert_eq!(
        post(&s, "retrieve_future", json!({"request_id": "x"})).0,
        404
    );
    let (st, e, _) = post(
        &s,
        "create_model",
        json!({"session_id": sess, "model_seq_id": 3, "base_model": "other"}),
    );
    assert_eq!((st, e["field"].as_str()), (400, Some("base_model")), "{e}");

    // Bad forward_backward bodies: each a 400 naming the field, nothing queued.
    let cases = [
        (
            request(&m1, "dro", vec![datum(&[1, 2], &[2, 3])]),
            "loss_fn",
        ),
        (
            request(&m1, "cross_entropy", vec![datum(&[1, 2, 3], &[2, 3])]),
            "data[0].loss_fn_inputs.target_tokens",
        ),
        (
            request(
                &m1,
                "cross_entropy",
                vec![datum(&[1, 2], &[2, VOCAB as i64])],
            ),
            "data[0].target_tokens",
        ),
        (
            request(&m1, "importance_sampling", vec![datum(&[1, 2], &[2, 3])]),
            "data[0].loss_fn_inputs.logprobs",
        ),
        (request(&m1, "cross_entropy", vec![]), "data"),
    ];
    for (msg, field) in cases {
        let (st, e) = post_proto(&s, &msg);
        assert_eq!((st, e["field"].as_str()), (400, Some(field)), "{e}");
    }
    let (st, _) = post_proto(
        &s,
        &request("nope", "cross_entropy", vec![datum(&[1], &[2])]),
    );
    assert_eq!(st, 404);
    let r =
        ureq::post(&format!("{}/api/v1/forward_backward", s.server.url)).send_bytes(b"\x0a\x05a");
    assert!(matches!(r, Err(ureq::Error::Status(400, _))), "{r:?}");

    // Two queued requests per session; the third is 429 with Retry-After until they finish.
    s.gate.set(true);
    // Each a new request (its own seq_id): a repeated one would be a retry, not queued again.
    let good = || request(&m1, "cross_entropy", vec![datum(&[1, 2], &[2, 3])]);
    let (st1, f1) = post_proto(&s, &good());
    let (st2, _) = post_proto(&s, &good());
    assert_eq!((st1, st2), (200, 200));
    let r = ureq::post(&format!("{}/api/v1/forward_backward", s.server.url))
        .send_bytes(&good().encode_to_vec());
    let Err(ureq::Error::Status(429, resp)) = r else {
        panic!("expected 429, got {r:?}")
    };
    assert_eq!(resp.header("Retry-After"), Some("1"));
    s.gate.set(false);
    let out = result(&s, &f1["request_id"]);
    assert_eq!(out.content_type(), "application/x-protobuf");
    let mut bytes = vec![];
    std::io::Read::read_to_end(&mut out.into_reader(), &mut bytes).unwrap();
    let fb = proto::ForwardBackwardOutput::decode(bytes.as_slice()).unwrap();
    assert!(
        (fb.metrics["loss:sum"] - 0.5).abs() < 1e-6,
        "{:?}",
        fb.metrics
    );
    assert_eq!(fb.loss_fn_outputs[0].num_datums, 1);
    // The queue drained: the session may queue again.
    assert_eq!(post_proto(&s, &good()).0, 200);
    let (st, f, _) = post(
        &s,
        "optim_step",
        json!({"model_id": m1, "adam_params": {"learning_rate": 0.25}}),
    );
    assert_eq!(st, 200, "{f}");
    let v: Value = result(&s, &f["request_id"]).into_json().unwrap();
    assert_eq!(v["metrics"]["lr"], 0.25);
    let (st, e, _) = post(
        &s,
        "optim_step",
        json!({"model_id": m1, "adam_params": {"learning_rate": -1.0}}),
    );
    assert_eq!((st, e["field"].as_str()), (400, Some("adam_params")));
}

#[test]
fn expired_sessions_free_their_models() {
    let s = setup(Duration::from_millis(300));
    let old = session(&s);
    let (_, m) = model(&s, &old);
    let m = m["model_id"].as_str().unwrap().to_string();
    let (st, _, _) = post(&s, "get_info", json!({"model_id": m}));
    assert_eq!(st, 200);
    std::thread::sleep(Duration::from_millis(500));
    // A new session sweeps the expired one: its model is gone here and on the worker.
    let _ = session(&s);
    assert_eq!(post(&s, "get_info", json!({"model_id": m})).0, 404);
    assert_eq!(
        post(&s, "session_heartbeat", json!({"session_id": old})).0,
        404
    );
    // Freed by a job queued on the training worker: its time is not the point.
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_secs(20) {
        if s.models.lock().unwrap().is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the worker still holds {:?}", s.models.lock().unwrap());
}

/// A request sent again with its `seq_id` (the SDK's retry after a lost answer) gets the
/// first one's future and does not run again; a new `seq_id`, or another body under a used
/// one, runs.
#[test]
fn retried_requests_run_once() {
    let s = setup(Duration::from_secs(300));
    let sess = session(&s);
    let (_, m) = model(&s, &sess);
    // Created before the steps (the session may hold 2 pending requests, and a loaded
    // machine's worker may not have run create_model yet).
    assert_eq!(result(&s, &m["request_id"]).status(), 200);
    let m = m["model_id"].as_str().unwrap().to_string();
    let step = |seq: i64, lr: f64| {
        let (st, v, _) = post(
            &s,
            "optim_step",
            json!({"model_id": m, "seq_id": seq, "adam_params": {"learning_rate": lr}}),
        );
        assert_eq!(st, 200, "{v}");
        v["request_id"].clone()
    };
    let first = step(7, 1e-3);
    assert_eq!(step(7, 1e-3), first, "a retry is the same future");
    let other = step(8, 1e-3);
    assert_ne!(other, first);
    // Both done before the next (the session may hold 2 pending: a loaded machine's worker
    // may not have run them yet).
    for id in [&first, &other] {
        assert_eq!(result(&s, id).status(), 200);
    }
    let reused = step(7, 2e-3);
    assert_ne!(reused, first, "another body under seq_id 7 is new work");
    let mut fb = request(&m, "cross_entropy", vec![datum(&[1, 2], &[2, 3])]);
    fb.seq_id = 9;
    let (st, a) = post_proto(&s, &fb);
    assert_eq!(st, 200, "{a}");
    let (_, b) = post_proto(&s, &fb);
    assert_eq!(a["request_id"], b["request_id"]);
    for id in [&first, &other, &reused, &a["request_id"]] {
        assert_eq!(result(&s, id).status(), 200);
    }
    // Three optimizer steps and one forward_backward ran, not five and two.
    assert_eq!(*s.calls.lock().unwrap(), 4);
}

/// Stop strings need the model's tokenizer, which the scripted backend lacks: a 400 naming
/// the field; token ids pass.
#[test]
fn stop_strings_without_a_tokenizer_are_refused() {
    let s = setup(Duration::from_secs(300));
    let ask = |stop: Value| {
        post(
            &s,
            "asample",
            json!({"base_model": "scripted", "num_samples": 1,
                   "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, 2]}]},
                   "sampling_params": {"max_tokens": 2, "stop": stop}}),
        )
    };
    let (st, e, _) = ask(json!(["\n\nUser:"]));
    assert_eq!(
        (st, e["field"].as_str()),
        (400, Some("sampling_params.stop")),
        "{e}"
    );
    let (st, e, _) = ask(json!([1, "x"]));
    assert_eq!(st, 400, "{e}");
    let (st, v, _) = ask(json!([1]));
    assert_eq!(st, 200, "{v}");
}

/// An `asample` request's body on `weights` (`{"base_model": ...}` or a sampling session).
fn sample_body(weights: Value, prompt: &[i64], n: usize, seed: Option<u64>) -> Value {
    let mut body = json!({"num_samples": n,
        "prompt": {"chunks": [{"type": "encoded_text", "tokens": prompt}]},
        "sampling_params": {"max_tokens": 3, "seed": seed}});
    for (k, v) in weights.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// The sequences of a finished `asample` future.
fn sampled(s: &Setup, id: &Value) -> Vec<Vec<i32>> {
    let r = result(s, id);
    assert_eq!(r.content_type(), "application/x-protobuf");
    let mut bytes = vec![];
    std::io::Read::read_to_end(&mut r.into_reader(), &mut bytes).unwrap();
    proto::SampleResponse::decode(bytes.as_slice())
        .unwrap()
        .sequences
        .iter()
        .map(|q| {
            q.tokens
                .chunks(4)
                .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
                .collect()
        })
        .collect()
}

/// Sampling goes through the batching engine on its own thread: the `asample` requests of two
/// clients (and each request's samples) decode in one batch, requests for other weights (a
/// snapshot) in a batch of their own, and none of it waits behind a `forward_backward` held
/// on the training worker.
#[test]
fn samples_of_two_clients_share_a_batch_beside_training() {
    let s = setup(Duration::from_secs(300));
    // Three sessions: each holds at most 2 pending requests here.
    let (train, a, b) = (session(&s), session(&s), session(&s));
    let (st, m) = model(&s, &train);
    assert_eq!(st, 200, "{m}");
    let m = m["model_id"].as_str().unwrap().to_string();
    let (st, v, _) = post(
        &s,
        "save_weights_for_sampler",
        json!({"model_id": m, "seq_id": 100}),
    );
    assert_eq!(st, 200, "{v}");
    let snap = result(&s, &v["request_id"]).into_json::<Value>().unwrap();
    let snapshot = snap["sampling_session_id"].as_str().unwrap().to_string();
    let base = |session: &str| {
        let (st, v, _) = post(
            &s,
            "create_sampling_session",
            json!({"session_id": session, "base_model": "scripted"}),
        );
        assert_eq!(st, 200, "{v}");
        json!({"sampling_session_id": v["sampling_session_id"]})
    };
    let (base_a, base_b) = (base(&a), base(&b));
    // Training is held on the worker while every sample below is asked for and answered.
    s.gate.set(true);
    let (st, held) = post_proto(
        &s,
        &request(&m, "cross_entropy", vec![datum(&[1, 2], &[2, 3])]),
    );
    assert_eq!(st, 200, "{held}");
    let ask = |w: &Value, prompt: &[i64], n: usize, seed: Option<u64>| {
        let (st, v, _) = post(&s, "asample", sample_body(w.clone(), prompt, n, seed));
        assert_eq!(st, 200, "{v}");
        v["request_id"].clone()
    };
    // A seeded request first, held in its batch (started, before its first step) until the
    // next three are queued behind it: an `asample` is queued on the engine before its 200.
    let hold = s.probe.hold();
    let first = ask(&base_a, &[2, 2], 1, Some(5));
    common::policy::wait_for("the seeded batch to start", || s.probe.batches().len() == 1);
    let from_a = ask(&base_a, &[3, 4], 2, None);
    let from_b = ask(&base_b, &[5, 6, 7], 3, None);
    let on_snapshot = ask(&json!({"sampling_session_id": snapshot}), &[3, 4], 1, None);
    drop(hold);
    for (id, rows) in [(&first, 1), (&from_a, 2), (&from_b, 3), (&on_snapshot, 1)] {
        let seqs = sampled(&s, id);
        assert_eq!(seqs.len(), rows);
        // max_tokens 3, or fewer when the scripted draw hits the EOS id.
        assert!(seqs.iter().all(|q| (1..=3).contains(&q.len())), "{seqs:?}");
    }
    assert_eq!(
        *s.calls.lock().unwrap(),
        0,
        "the forward_backward is still held"
    );
    let batches = s.probe.batches();
    let prompts: Vec<Vec<Vec<i64>>> = batches.iter().map(|b| b.prompts.clone()).collect();
    assert_eq!(
        prompts,
        vec![
            vec![vec![2, 2]],
            vec![
                vec![3, 4],
                vec![3, 4],
                vec![5, 6, 7],
                vec![5, 6, 7],
                vec![5, 6, 7]
            ],
            vec![vec![3, 4]],
        ],
        "the seeded request alone, both clients' rows in one batch, the snapshot's apart"
    );
    assert_eq!(batches[1].sampling.weights, None);
    assert_eq!(batches[2].sampling.weights, Some(snapshot));
    s.gate.set(false);
    assert_eq!(result(&s, &held["request_id"]).status(), 200);
}

/// `prefix_` and 32 hex digits: 128 random bits, not a counter another client can walk.
fn is_capability(id: &str, prefix: &str) -> bool {
    id.strip_prefix(prefix)
        .and_then(|h| h.strip_prefix('_'))
        .is_some_and(|h| h.len() == 32 && u128::from_str_radix(h, 16).is_ok())
}

/// Issue 50's audit: every client holds the same key and requests name what they act on by id
/// alone, so ids must be unguessable (a second client walked `model_1, model_2, ...` and read,
/// trained and ended another's); what all clients hold together is bounded: open sessions,
/// full-weight models, checkpoints per model.
#[test]
fn ids_are_capabilities_and_what_all_clients_hold_is_bounded() {
    let s = setup(Duration::from_secs(300));
    let sessions: Vec<String> = (0..MAX_SESSIONS).map(|_| session(&s)).collect();
    for id in &sessions {
        assert!(is_capability(id, "session"), "{id}");
    }
    let (st, e, retry) = post(&s, "create_session", json!({"tags": []}));
    assert_eq!((st, retry.as_deref()), (429, Some("10")), "{e}");
    assert!(e.to_string().contains("--tinker-max-sessions"), "{e}");

    let (st, m) = model(&s, &sessions[0]);
    assert_eq!(st, 200, "{m}");
    let model_id = m["model_id"].as_str().unwrap().to_string();
    assert!(is_capability(&model_id, "model"), "{model_id}");
    // Future ids are random below 2^53 (a counter would be under 10 here).
    let future: u64 = m["request_id"].as_str().unwrap().parse().unwrap();
    assert!(future > 1 << 20, "future id {future}");
    result(&s, &m["request_id"]).into_string().unwrap();

    // One full fine-tuning model over all sessions (the test server's limit); LoRA still fits.
    let full = |session: &str| {
        post(
            &s,
            "create_model",
            json!({"session_id": session, "model_seq_id": 0, "base_model": "scripted"}),
        )
    };
    let (st, v, _) = full(&sessions[1]);
    assert_eq!(st, 200, "{v}");
    let (st, e, _) = full(&sessions[2]);
    assert_eq!((st, e["field"].as_str()), (400, Some("lora_config")), "{e}");
    assert!(e.to_string().contains("--tinker-max-full-models"), "{e}");
    assert_eq!(model(&s, &sessions[2]).0, 200);

    // Three checkpoints per model; saving over one of them adds none.
    let save = |name: &str, overwrite: bool| {
        let (st, v, _) = post(
            &s,
            "save_weights",
            json!({"model_id": model_id, "path": name, "overwrite": overwrite}),
        );
        if st == 200 {
            result(&s, &v["request_id"]).into_string().unwrap();
        }
        (st, v)
    };
    for name in ["a", "b", "c"] {
        assert_eq!(save(name, false).0, 200);
    }
    let (st, e) = save("d", false);
    assert_eq!((st, e["field"].as_str()), (400, Some("path")), "{e}");
    assert_eq!(save("c", true).0, 200);
    let (st, e, _) = post(
        &s,
        "save_weights_for_sampler",
        json!({"model_id": model_id, "path": "e"}),
    );
    assert_eq!((st, e["field"].as_str()), (400, Some("path")), "{e}");

    // An ended session frees its slot.
    let (st, _, _) = post(&s, &format!("sessions/{}/finish", sessions[3]), json!({}));
    assert_eq!(st, 200);
    assert!(is_capability(&session(&s), "session"));
}
