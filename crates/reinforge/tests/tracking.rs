//! `[logging]`: TensorBoard event files read back by the `tensorboard` package's own reader
//! (`.venv-tracking`, scripts/tracking_env.sh), and the MLflow REST calls of a run recorded by
//! a loopback HTTP server in the test and checked against MLflow's REST API
//! (<https://mlflow.org/docs/latest/api_reference/rest-api.html>: experiments/get-by-name,
//! experiments/create, runs/create, runs/log-batch, runs/update; artifacts through the
//! artifact proxy, `PUT /api/2.0/mlflow-artifacts/artifacts/<path>`). An unreachable server
//! warns once and the run completes.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use common::root;
use common::tiny::{check, run, train_args};
use serde_json::{json, Value};

const SHORT: &[&str] = &[
    "sft.steps=3",
    "grpo.steps=2",
    "grpo.prompts_per_step=4",
    "grpo.num_generations=4",
    "grpo.checkpoint_every=0",
    "eval.problems=2",
    "eval.samples=2",
];

/// Every scalar of each line of `<run>/<file>`, as `<stem>/<key>` -> [(step, value)].
fn jsonl_scalars(run: &Path, file: &str) -> BTreeMap<String, Vec<(i64, f64)>> {
    let stem = file.trim_end_matches(".jsonl");
    let mut out: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
    let text = std::fs::read_to_string(run.join(file)).unwrap();
    for (step, line) in text.lines().enumerate() {
        let v: Value = serde_json::from_str(line).unwrap();
        for (k, x) in numbers(&v, "") {
            out.entry(format!("{stem}/{k}"))
                .or_default()
                .push((step as i64, x));
        }
    }
    out
}

/// The numbers of a JSON value, nested keys joined by `/`.
fn numbers(v: &Value, prefix: &str) -> Vec<(String, f64)> {
    match v {
        Value::Object(m) => m
            .iter()
            .flat_map(|(k, v)| {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}/{k}")
                };
                numbers(v, &key)
            })
            .collect(),
        Value::Number(n) => vec![(prefix.to_string(), n.as_f64().unwrap())],
        _ => vec![],
    }
}

/// Reports a skip as the real-model tests do: a SKIPPED line, and a file for scripts/test.sh.
fn skip(why: &str) {
    eprintln!("SKIPPED tracking::tensorboard_reads_every_scalar: {why}");
    if let Some(dir) = std::env::var_os("REINFORGE_SKIPS_DIR") {
        let path = PathBuf::from(dir).join(format!("tracking_tensorboard.{}", std::process::id()));
        std::fs::write(
            &path,
            format!("tracking::tensorboard_reads_every_scalar\n{why}"),
        )
        .unwrap();
    }
}

/// The `tensorboard` package's EventAccumulator over the run's event directory, as JSON
/// `{tag: [[step, value], ...]}`.
const READER: &str = r#"
import json, sys
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.util import tensor_util
acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.TENSORS: 0})
acc.Reload()
out = {}
for tag in acc.Tags()["tensors"]:
    out[tag] = [[e.step, float(tensor_util.make_ndarray(e.tensor_proto))] for e in acc.Tensors(tag)]
print(json.dumps(out))
"#;

#[test]
fn tensorboard_reads_every_scalar() {
    let python = root().join(".venv-tracking/bin/python");
    if !python.exists() {
        // As scripts/test.sh reads it: CI set and non-empty.
        assert!(
            std::env::var_os("CI").is_none_or(|v| v.is_empty()),
            "CI is set but {} is missing: run scripts/tracking_env.sh",
            python.display()
        );
        skip("no .venv-tracking: run scripts/tracking_env.sh");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut extra = SHORT.to_vec();
    extra.push("logging.tensorboard=true");
    check(&run(&train_args(dir.path(), "tb", &extra)));
    let run_dir = dir.path().join("tb");
    let events: Vec<PathBuf> = std::fs::read_dir(run_dir.join("tensorboard"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(!events.is_empty());
    for e in &events {
        let name = e.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("events.out.tfevents."), "{name}");
    }
    let out = Command::new(&python)
        .args(["-c", READER, run_dir.join("tensorboard").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read: BTreeMap<String, Vec<(i64, f64)>> = serde_json::from_slice(&out.stdout).unwrap();
    let mut expected = jsonl_scalars(&run_dir, "sft_metrics.jsonl");
    expected.extend(jsonl_scalars(&run_dir, "metrics.jsonl"));
    assert!(expected.len() > 10, "{expected:?}");
    assert!(expected.keys().any(|k| k.starts_with("metrics/")));
    assert_eq!(read, expected, "TensorBoard's reader vs metrics.jsonl");
}

/// One recorded request: method, path with query, body.
type Calls = Arc<Mutex<Vec<(String, String, Vec<u8>)>>>;

/// A loopback HTTP/1.1 server answering as an MLflow server would (an experiment absent at
/// first, a run with a proxied artifact URI), recording every request.
fn recorder() -> (String, Calls) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let calls: Calls = Arc::default();
    let seen = calls.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let seen = seen.clone();
            std::thread::spawn(move || serve(stream, &seen));
        }
    });
    (url, calls)
}

fn serve(stream: TcpStream, seen: &Calls) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut request = String::new();
        if reader.read_line(&mut request).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = request.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let mut len = 0;
        loop {
            let mut h = String::new();
            reader.read_line(&mut h).unwrap();
            if h.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap();
                }
            }
        }
        let mut body = vec![0; len];
        reader.read_exact(&mut body).unwrap();
        let (status, answer) = if path.starts_with("/api/2.0/mlflow/experiments/get-by-name") {
            (
                "404 Not Found",
                json!({"error_code": "RESOURCE_DOES_NOT_EXIST"}),
            )
        } else if path == "/api/2.0/mlflow/experiments/create" {
            ("200 OK", json!({"experiment_id": "7"}))
        } else if path == "/api/2.0/mlflow/runs/create" {
            let info = json!({"run_id": "r1", "artifact_uri": "mlflow-artifacts:/7/r1/artifacts"});
            ("200 OK", json!({"run": {"info": info}}))
        } else {
            ("200 OK", json!({}))
        };
        seen.lock().unwrap().push((method, path, body));
        let text = answer.to_string();
        let reply = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        );
        if out.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

#[test]
fn mlflow_gets_params_every_metric_and_the_report_files() {
    let (url, calls) = recorder();
    let dir = tempfile::tempdir().unwrap();
    let mut extra = SHORT.to_vec();
    let uri = format!("logging.mlflow_uri={url}");
    extra.push(&uri);
    let out = run(&train_args(dir.path(), "ml", &extra));
    check(&out);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning: MLflow"));
    let calls = calls.lock().unwrap().clone();
    let route =
        |c: &(String, String, Vec<u8>)| format!("{} {}", c.0, c.1.split('?').next().unwrap());
    let json = |c: &(String, String, Vec<u8>)| serde_json::from_slice::<Value>(&c.2).unwrap();
    // Per phase (SFT, then RL): experiment by name, created, run created, params, metrics...
    let routes: Vec<String> = calls.iter().map(route).collect();
    assert_eq!(routes[0], "GET /api/2.0/mlflow/experiments/get-by-name");
    assert!(
        calls[0].1.contains("experiment_name=reinforge"),
        "{}",
        calls[0].1
    );
    assert_eq!(routes[1], "POST /api/2.0/mlflow/experiments/create");
    assert_eq!(json(&calls[1])["name"], "reinforge");
    assert_eq!(routes[2], "POST /api/2.0/mlflow/runs/create");
    assert_eq!(json(&calls[2])["experiment_id"], "7");
    assert_eq!(json(&calls[2])["run_name"], "ml/sft");
    let creates = routes.iter().filter(|r| r.ends_with("runs/create")).count();
    let updates: Vec<Value> = calls
        .iter()
        .filter(|c| route(c).ends_with("runs/update"))
        .map(json)
        .collect();
    assert_eq!((creates, updates.len()), (2, 2), "{routes:?}");
    assert!(updates
        .iter()
        .all(|u| u["status"] == "FINISHED" && u["run_id"] == "r1"));

    // Parameters: the resolved config, flattened.
    let batches: Vec<Value> = calls
        .iter()
        .filter(|c| route(c) == "POST /api/2.0/mlflow/runs/log-batch")
        .map(json)
        .collect();
    let params: BTreeMap<String, String> = batches
        .iter()
        .flat_map(|b| b["params"].as_array().cloned().unwrap_or_default())
        .map(|p| {
            (
                p["key"].as_str().unwrap().into(),
                p["value"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(params["grpo.steps"], "2");
    assert_eq!(params["logging.mlflow_uri"], url);
    // Metrics: every scalar of both metrics files at its step.
    let mut got: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
    for m in batches
        .iter()
        .flat_map(|b| b["metrics"].as_array().cloned().unwrap_or_default())
    {
        got.entry(m["key"].as_str().unwrap().into())
            .or_default()
            .push((m["step"].as_i64().unwrap(), m["value"].as_f64().unwrap()));
        assert!(m["timestamp"].as_i64().unwrap() > 0);
    }
    let run_dir = dir.path().join("ml");
    let mut expected = jsonl_scalars(&run_dir, "sft_metrics.jsonl");
    expected.extend(jsonl_scalars(&run_dir, "metrics.jsonl"));
    assert_eq!(got, expected);
    // Artifacts: the phase's metrics file, byte for byte, through the artifact proxy.
    let put = calls
        .iter()
        .find(|c| {
            c.0 == "PUT"
                && c.1 == "/api/2.0/mlflow-artifacts/artifacts/7/r1/artifacts/metrics.jsonl"
        })
        .unwrap_or_else(|| panic!("no metrics.jsonl upload in {routes:?}"));
    assert_eq!(put.2, std::fs::read(run_dir.join("metrics.jsonl")).unwrap());
    assert!(routes
        .iter()
        .any(|r| r.ends_with("/artifacts/7/r1/artifacts/config.toml")));
}

#[test]
fn an_unreachable_mlflow_server_warns_once_and_the_run_completes() {
    // A port that was just free: nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let mut extra = SHORT.to_vec();
    let uri = format!("logging.mlflow_uri=http://127.0.0.1:{port}");
    extra.push(&uri);
    let out = run(&train_args(dir.path(), "down", &extra));
    check(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    // One warning for the run (both phases tried), none per step.
    assert_eq!(
        err.matches("warning: MLflow tracking stopped").count(),
        1,
        "{err}"
    );
    assert!(dir.path().join("down/metrics.jsonl").exists());
}

#[test]
fn a_non_http_mlflow_uri_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut extra = SHORT.to_vec();
    extra.push("logging.mlflow_uri=localhost:5000");
    let out = run(&train_args(dir.path(), "bad", &extra));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("logging.mlflow_uri"));
}

/// A run on a Hugging Face checkpoint (`train --model --data`) goes through the same loop,
/// so MLflow gets every scalar of its `metrics.jsonl` too.
#[test]
fn a_dataset_run_is_tracked_too() {
    let (url, calls) = recorder();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data.jsonl");
    let rows: String = (0..8)
        .map(|i| format!("{{\"prompt\": \"{i}+1=\", \"answer\": \"{}\"}}\n", i + 1))
        .collect();
    std::fs::write(&data, rows).unwrap();
    let model = root().join("fixtures/hf/models/qwen2");
    let mut args: Vec<String> = ["train", "--model", model.to_str().unwrap(), "--data"]
        .map(String::from)
        .to_vec();
    args.push(data.to_str().unwrap().into());
    for kv in [
        format!("runs_dir={}", dir.path().display()),
        "name=data".into(),
        "grpo.steps=2".into(),
        "grpo.prompts_per_step=4".into(),
        "grpo.num_generations=2".into(),
        "grpo.max_completion_length=4".into(),
        format!("logging.mlflow_uri={url}"),
    ] {
        args.push("--set".into());
        args.push(kv);
    }
    check(&run(&args));
    let calls = calls.lock().unwrap().clone();
    let mut got: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
    for c in calls
        .iter()
        .filter(|c| c.1 == "/api/2.0/mlflow/runs/log-batch")
    {
        let b: Value = serde_json::from_slice(&c.2).unwrap();
        for m in b["metrics"].as_array().cloned().unwrap_or_default() {
            got.entry(m["key"].as_str().unwrap().into())
                .or_default()
                .push((m["step"].as_i64().unwrap(), m["value"].as_f64().unwrap()));
        }
    }
    let expected = jsonl_scalars(&dir.path().join("data"), "metrics.jsonl");
    assert!(!expected.is_empty());
    assert_eq!(got, expected);
}
