//! `[logging]` and the offline commands' `--tensorboard` / `--mlflow-uri`: TensorBoard event
//! files read back by the `tensorboard` package's own reader, and runs logged to a real
//! `mlflow server` (both from `.venv-tracking`, scripts/tracking_env.sh) read back through
//! MLflow's REST API (<https://mlflow.org/docs/latest/api_reference/rest-api.html>:
//! runs/search, metrics/get-history, artifacts/list, and the artifact proxy's
//! `GET /api/2.0/mlflow-artifacts/artifacts/<path>`). A dataset run's calls are checked on a
//! loopback recorder (no Python needed). An unreachable server warns once and the run
//! completes.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::root;
use common::tiny::{check, run, train_args};
use serde_json::{json, Value};

const SHORT: &[&str] = &[
    "sft.steps=3",
    "rl.steps=2",
    "rl.prompts_per_step=4",
    "rl.num_generations=4",
    "rl.checkpoint_every=0",
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
fn skip(test: &str, why: &str) {
    eprintln!("SKIPPED tracking::{test}: {why}");
    if let Some(dir) = std::env::var_os("REINFORGE_SKIPS_DIR") {
        let path = PathBuf::from(dir).join(format!("tracking_{test}.{}", std::process::id()));
        std::fs::write(&path, format!("tracking::{test}\n{why}")).unwrap();
    }
}

/// `.venv-tracking/bin/<tool>`, or `None` after reporting the skip of `test` (a failure
/// under CI, as scripts/test.sh reads it: CI set and non-empty).
fn venv_tool(tool: &str, test: &str) -> Option<PathBuf> {
    let path = root().join(".venv-tracking/bin").join(tool);
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var_os("CI").is_none_or(|v| v.is_empty()),
        "CI is set but {} is missing: run scripts/tracking_env.sh",
        path.display()
    );
    skip(
        test,
        &format!("no {}: run scripts/tracking_env.sh", path.display()),
    );
    None
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

/// The scalars the `tensorboard` reader finds under `run/tensorboard` (every file named as
/// TensorBoard's writers name them).
fn tensorboard_scalars(python: &Path, run_dir: &Path) -> BTreeMap<String, Vec<(i64, f64)>> {
    let events: Vec<PathBuf> = std::fs::read_dir(run_dir.join("tensorboard"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(!events.is_empty());
    for e in &events {
        let name = e.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("events.out.tfevents."), "{name}");
    }
    let out = Command::new(python)
        .args(["-c", READER, run_dir.join("tensorboard").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn tensorboard_reads_every_scalar() {
    let Some(python) = venv_tool("python", "tensorboard_reads_every_scalar") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut extra = SHORT.to_vec();
    extra.push("logging.tensorboard=true");
    check(&run(&train_args(dir.path(), "tb", &extra)));
    let run_dir = dir.path().join("tb");
    let read = tensorboard_scalars(&python, &run_dir);
    let mut expected = jsonl_scalars(&run_dir, "sft_metrics.jsonl");
    expected.extend(jsonl_scalars(&run_dir, "metrics.jsonl"));
    assert!(expected.len() > 10, "{expected:?}");
    assert!(expected.keys().any(|k| k.starts_with("metrics/")));
    assert_eq!(read, expected, "TensorBoard's reader vs metrics.jsonl");
}

/// Preference pairs with a known rule (the polite answer chosen), as tests/dpo.rs writes.
fn pairs(n: usize) -> String {
    (0..n)
        .map(|k| {
            json!({"prompt": format!("Question {k}: can you help me with task {}?", k * 7 % 13),
                   "chosen": "Sure, I can help with that.", "rejected": "No."})
            .to_string()
                + "\n"
        })
        .collect()
}

/// `train-dpo` on the fixture model for `steps` steps in `dir/name`, with `extra` flags.
fn train_dpo(dir: &Path, name: &str, steps: &str, extra: &[&str]) -> std::process::Output {
    let data = dir.join("pairs.jsonl");
    std::fs::write(&data, pairs(16)).unwrap();
    let model = root().join("fixtures/hf/models/llama");
    let mut args: Vec<String> = vec![
        "train-dpo".into(),
        "--model".into(),
        model.display().to_string(),
        "--data".into(),
        data.display().to_string(),
        "--output".into(),
        dir.join(name).display().to_string(),
        "--steps".into(),
        steps.into(),
        "--batch-size".into(),
        "4".into(),
        "--lr".into(),
        "1e-3".into(),
        "--threads".into(),
        "1".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    run(&args)
}

/// The offline trainers take `--tensorboard` (no config file): `train-dpo`'s event files hold
/// every scalar of its `metrics.jsonl`.
#[test]
fn an_offline_command_writes_tensorboard_too() {
    let Some(python) = venv_tool("python", "an_offline_command_writes_tensorboard_too") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    check(&train_dpo(dir.path(), "dpo", "3", &["--tensorboard"]));
    let run_dir = dir.path().join("dpo");
    let expected = jsonl_scalars(&run_dir, "metrics.jsonl");
    assert!(
        expected.contains_key("metrics/rewards/accuracies"),
        "{expected:?}"
    );
    assert!(expected.values().all(|v| v.len() == 3));
    assert_eq!(
        tensorboard_scalars(&python, &run_dir),
        expected,
        "TensorBoard's reader vs train-dpo's metrics.jsonl"
    );
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

/// A real `mlflow server` on a free loopback port (a SQLite store and proxied artifacts in a
/// temporary directory), killed with its worker processes when dropped, also on a panic.
struct MlflowServer {
    child: Child,
    url: String,
    dir: tempfile::TempDir,
}

impl MlflowServer {
    /// Starts `mlflow` and waits until `/health` answers.
    fn start(mlflow: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
        let store = format!("sqlite:///{}", dir.path().join("mlflow.db").display());
        let artifacts = dir.path().join("artifacts");
        let child = Command::new(mlflow)
            .args(["server", "--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--backend-store-uri", &store, "--serve-artifacts"])
            .arg("--artifacts-destination")
            .arg(&artifacts)
            .args(["--workers", "1"])
            // The server's job runner (a pool of worker processes) serves nothing here.
            .env("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            // Its own process group, so Drop ends uvicorn and any worker with it.
            .process_group(0)
            .spawn()
            .unwrap();
        let mut server = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            dir,
        };
        server.wait_healthy(Duration::from_secs(180));
        server
    }

    fn wait_healthy(&mut self, limit: Duration) {
        let start = Instant::now();
        let health = format!("{}/health", self.url);
        while start.elapsed() < limit {
            if ureq::get(&health).call().is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("mlflow server exited ({status}):\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!(
            "mlflow server did not answer within {limit:?}:\n{}",
            self.log()
        );
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    fn get(&self, route: &str, query: &[(&str, &str)]) -> Value {
        let mut request = ureq::get(&format!("{}/api/2.0/mlflow/{route}", self.url));
        for (k, v) in query {
            request = request.query(k, v);
        }
        request
            .call()
            .unwrap_or_else(|e| panic!("GET {route}: {e}"))
            .into_json()
            .unwrap()
    }

    /// Every run of the experiment `name`, by run name.
    fn runs(&self, name: &str) -> BTreeMap<String, Value> {
        let experiment = self.get("experiments/get-by-name", &[("experiment_name", name)]);
        let id = experiment["experiment"]["experiment_id"].clone();
        let found: Value = ureq::post(&format!("{}/api/2.0/mlflow/runs/search", self.url))
            .send_json(json!({"experiment_ids": [id], "max_results": 100}))
            .unwrap()
            .into_json()
            .unwrap();
        found["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["info"]["run_name"].as_str().unwrap().to_string(),
                    r.clone(),
                )
            })
            .collect()
    }

    /// Every logged value of every metric of `run`, as `key -> [(step, value)]` by step.
    fn metrics(&self, run: &Value) -> BTreeMap<String, Vec<(i64, f64)>> {
        let id = run["info"]["run_id"].as_str().unwrap();
        let keys: Vec<&str> = run["data"]["metrics"]
            .as_array()
            .map(|m| m.iter().map(|m| m["key"].as_str().unwrap()).collect())
            .unwrap_or_default();
        keys.into_iter()
            .map(|key| {
                let history = self.get(
                    "metrics/get-history",
                    &[
                        ("run_id", id),
                        ("metric_key", key),
                        ("max_results", "25000"),
                    ],
                );
                let mut points: Vec<(i64, f64)> = history["metrics"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| (m["step"].as_i64().unwrap(), m["value"].as_f64().unwrap()))
                    .collect();
                points.sort_by_key(|p| p.0);
                (key.to_string(), points)
            })
            .collect()
    }

    /// The run's parameters.
    fn params(run: &Value) -> BTreeMap<String, String> {
        run["data"]["params"]
            .as_array()
            .map(|p| {
                p.iter()
                    .map(|p| {
                        let (k, v) = (p["key"].as_str(), p["value"].as_str());
                        (k.unwrap().to_string(), v.unwrap().to_string())
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The run's artifact files (top level) and the bytes of `name`, through the proxy.
    fn artifacts(&self, run: &Value, name: &str) -> (BTreeSet<String>, Vec<u8>) {
        let id = run["info"]["run_id"].as_str().unwrap();
        let listed = self.get("artifacts/list", &[("run_id", id)]);
        let files = listed["files"]
            .as_array()
            .map(|f| {
                f.iter()
                    .map(|f| f["path"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default();
        let uri = run["info"]["artifact_uri"].as_str().unwrap();
        let path = uri.strip_prefix("mlflow-artifacts:").unwrap();
        let url = format!(
            "{}/api/2.0/mlflow-artifacts/artifacts/{}/{name}",
            self.url,
            path.trim_matches('/')
        );
        let mut bytes = Vec::new();
        ureq::get(&url)
            .call()
            .unwrap_or_else(|e| panic!("GET {url}: {e}"))
            .into_reader()
            .read_to_end(&mut bytes)
            .unwrap();
        (files, bytes)
    }
}

impl Drop for MlflowServer {
    fn drop(&mut self) {
        // The whole group: `mlflow server` starts uvicorn as a child process.
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The largest difference between MLflow's values and `expected`'s, after checking both have
/// the same metrics at the same steps; at most `tol` relative to the value.
fn assert_same_scalars(
    got: &BTreeMap<String, Vec<(i64, f64)>>,
    expected: &BTreeMap<String, Vec<(i64, f64)>>,
    tol: f64,
) -> f64 {
    let keys = |m: &BTreeMap<String, Vec<(i64, f64)>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(got), keys(expected), "metric keys");
    let mut worst: f64 = 0.0;
    for (key, want) in expected {
        let have = &got[key];
        let steps = |v: &[(i64, f64)]| v.iter().map(|p| p.0).collect::<Vec<_>>();
        assert_eq!(steps(have), steps(want), "{key}: steps");
        for ((step, a), (_, b)) in have.iter().zip(want) {
            let diff = (a - b).abs();
            assert!(
                diff <= tol * b.abs().max(1.0),
                "{key} at step {step}: MLflow has {a}, metrics.jsonl {b}"
            );
            worst = worst.max(diff);
        }
    }
    worst
}

/// Doubles go through JSON (shortest round-trip text) into SQLite's 8-byte REAL: exact, so
/// only a last-bit slack.
const MLFLOW_TOL: f64 = 1e-12;

/// A real MLflow server: `reinforge train` (two phases, two runs) and `train-dpo` (its own
/// experiment) are FINISHED runs whose parameters hold the config keys or the command's
/// options, whose metrics are every scalar of the metrics files at every step, and whose
/// artifacts list the config, the metrics file (byte for byte) and the report.
#[test]
fn a_real_mlflow_server_gets_params_every_metric_and_the_report_files() {
    let test = "a_real_mlflow_server_gets_params_every_metric_and_the_report_files";
    let Some(mlflow) = venv_tool("mlflow", test) else {
        return;
    };
    let t0 = Instant::now();
    let server = MlflowServer::start(&mlflow);
    let up = t0.elapsed();
    let dir = tempfile::tempdir().unwrap();
    let mut extra = SHORT.to_vec();
    let uri = format!("logging.mlflow_uri={}", server.url);
    extra.push(&uri);
    let out = run(&train_args(dir.path(), "ml", &extra));
    check(&out);
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("warning: MLflow"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_dir = dir.path().join("ml");
    let runs = server.runs("reinforge");
    assert_eq!(
        runs.keys().collect::<Vec<_>>(),
        ["ml/grpo", "ml/sft"],
        "one MLflow run per phase"
    );
    let mut worst: f64 = 0.0;
    for (name, file) in [
        ("ml/sft", "sft_metrics.jsonl"),
        ("ml/grpo", "metrics.jsonl"),
    ] {
        let r = &runs[name];
        assert_eq!(r["info"]["status"], "FINISHED", "{name}");
        let params = MlflowServer::params(r);
        assert_eq!(params["rl.steps"], "2");
        assert_eq!(params["sft.steps"], "3");
        assert_eq!(params["logging.mlflow_uri"], server.url);
        let expected = jsonl_scalars(&run_dir, file);
        assert!(expected.len() > 3, "{expected:?}");
        worst = worst.max(assert_same_scalars(
            &server.metrics(r),
            &expected,
            MLFLOW_TOL,
        ));
        let (files, bytes) = server.artifacts(r, file);
        assert!(files.contains("config.toml"), "{name}: {files:?}");
        assert!(files.contains(file), "{name}: {files:?}");
        assert_eq!(
            bytes,
            std::fs::read(run_dir.join(file)).unwrap(),
            "{name}: {file}"
        );
    }
    // The report, written after the last step, goes to the last phase's run.
    let (files, report) = server.artifacts(&runs["ml/grpo"], "report.md");
    for f in ["report.md", "summary.json", "reward.png"] {
        assert!(files.contains(f), "{f} not in {files:?}");
    }
    assert_eq!(report, std::fs::read(run_dir.join("report.md")).unwrap());

    // An offline command: its options are the parameters, in the experiment it names.
    let uri = server.url.clone();
    let out = train_dpo(
        dir.path(),
        "dpo",
        "3",
        &[
            "--mlflow-uri",
            &uri,
            "--mlflow-experiment",
            "offline",
            "--beta",
            "0.25",
        ],
    );
    check(&out);
    let runs = server.runs("offline");
    let r = &runs["dpo/dpo"];
    assert_eq!(r["info"]["status"], "FINISHED");
    let params = MlflowServer::params(r);
    for (k, v) in [
        ("beta", "0.25"),
        ("loss-type", "sigmoid"),
        ("steps", "3"),
        ("batch-size", "4"),
        ("mlflow-uri", uri.as_str()),
        ("mlflow-experiment", "offline"),
        ("tensorboard", "false"),
    ] {
        assert_eq!(
            params.get(k).map(String::as_str),
            Some(v),
            "{k}: {params:?}"
        );
    }
    let dpo_dir = dir.path().join("dpo");
    let expected = jsonl_scalars(&dpo_dir, "metrics.jsonl");
    worst = worst.max(assert_same_scalars(
        &server.metrics(r),
        &expected,
        MLFLOW_TOL,
    ));
    let (files, bytes) = server.artifacts(r, "metrics.jsonl");
    assert!(files.contains("metrics.jsonl"), "{files:?}");
    assert_eq!(bytes, std::fs::read(dpo_dir.join("metrics.jsonl")).unwrap());
    eprintln!(
        "mlflow server up in {:.1} s; test {:.1} s; largest |MLflow - metrics.jsonl| {worst:e}",
        up.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
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
        "rl.steps=2".into(),
        "rl.prompts_per_step=4".into(),
        "rl.num_generations=2".into(),
        "rl.max_completion_length=4".into(),
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
